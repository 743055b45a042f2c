package policies

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// flakyDir is a Directory over a store that other routers claim in too
// (store), answering Home from what its claims learnt (t), as
// StoreDirectory does; every k-th claim fails, deterministically.
type flakyDir struct {
	t, store *HomeTable
	k, n     int
}

func (d *flakyDir) Home(key uint64) (string, bool) { return d.t.Home(key) }
func (d *flakyDir) Claim(key uint64, addr string) (string, bool) {
	d.n++
	if d.k > 0 && d.n%d.k == 0 {
		return "", false
	}
	home, ok := d.store.Claim(key, addr)
	d.t.Learn(key, home)
	return home, ok
}

// TestPrefixLoadRulesMatchReference runs the named rules against the
// single function they replaced over random views and sequences, and
// counts the picks of each rule so that every path is exercised.
func TestPrefixLoadRulesMatchReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	reasons := map[Reason]int{}
	picks := 0
	chains := make([][]uint64, 12)
	for i := range chains {
		n := 1 + rng.IntN(8)
		lead := uint64(1 + i%4)
		c := []uint64{lead * 1000}
		for j := 1; j < n; j++ {
			c = append(c, uint64(i*100+j))
		}
		chains[i] = c
	}
	for trial := 0; trial < 600; trial++ {
		n := 1 + rng.IntN(7)
		rs := replicas(n)
		opts := Options{Seed: uint64(trial), Peers: PeerMode(rng.IntN(3))}
		switch rng.IntN(4) {
		case 0:
			opts.DetourSlack = -1
		case 1:
			opts.ColdSlack = 2
		case 2:
			opts.UniqueRun = 3
		}
		var dirA, dirB Directory
		if rng.IntN(3) == 0 {
			k := rng.IntN(4)
			dirA = &flakyDir{t: NewHomeTable(6), store: NewHomeTable(6), k: k}
			dirB = &flakyDir{t: NewHomeTable(6), store: NewHomeTable(6), k: k}
		}
		oa, ob := opts, opts
		oa.Directory, ob.Directory = dirA, dirB
		oa, err := oa.WithDefaults()
		require.NoError(t, err)
		ob, err = ob.WithDefaults()
		require.NoError(t, err)
		got, want := newPrefixLoad(oa), newRefPrefixLoad(ob, nil)
		for step := 0; step < 40; step++ {
			for i := range rs {
				r := &rs[i]
				switch rng.IntN(6) {
				case 0:
					r.InFlight = rng.IntN(12)
				case 1:
					r.PendingPrefill = rng.IntN(4000)
				case 2:
					r.EngineWaiting, r.EngineRunning = rng.IntN(3)-1, rng.IntN(20)
				case 3:
					r.KVUsage = rng.Float64()
				case 4:
					r.Unavailable = rng.IntN(5) == 0
					r.Cap = rng.IntN(3) * 6
				case 5:
					r.Prefilling = rng.IntN(3)
				}
				if rng.IntN(4) == 0 {
					c := chains[rng.IntN(len(chains))]
					r.Index.(*Index).Insert(c[:1+rng.IntN(len(c))])
				}
			}
			var keys Keys
			if rng.IntN(10) > 0 {
				c := chains[rng.IntN(len(chains))]
				if rng.IntN(3) == 0 { // a new prefix
					c = []uint64{uint64(trial*1000 + step + 5000000)}
				}
				keys = Keys{Leading: c[0] + 1, Blocks: c, LeadingBlocks: rng.IntN(2), Bytes: 128 * len(c), BlockBytes: 128}
				if dirA != nil && rng.IntN(4) == 0 { // another router claimed it first
					hk, addr := HomeKey(keys), rs[rng.IntN(n)].Addr
					dirA.(*flakyDir).store.Claim(hk, addr)
					dirB.(*flakyDir).store.Claim(hk, addr)
				}
			}
			i, why := got.PickReason(keys, rs)
			j := want.Pick(keys, rs)
			require.Equal(t, j, i, "trial %d step %d (%s)", trial, step, why)
			if i >= 0 {
				reasons[why]++
				picks++
				rs[i].InFlight++
			}
		}
	}
	t.Logf("picks %d by rule %v", picks, reasons)
	assert.Greater(t, picks, 20000)
	for _, r := range []Reason{ReasonLeastLoad, ReasonHistory, ReasonHot, ReasonLeading, ReasonHome, ReasonDetour, ReasonLoad, ReasonRendezvous, ReasonClaimed} {
		assert.Greater(t, reasons[r], 20, fmt.Sprintf("rule %s exercised", r))
	}
}
