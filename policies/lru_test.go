package policies

import (
	"math/rand/v2"
	"testing"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/stretchr/testify/require"
)

// TestBlockLRUMatchesSimpleLRU is a differential test of the index's store
// against golang-lru's simplelru, whose semantics it keeps: random adds of
// held and new keys, resizes (shrinking evicts) and purges, after each of
// which both hold the same keys in the same recency order. The counts show
// that evictions, re-adds and resizes all happened.
func TestBlockLRUMatchesSimpleLRU(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	ref, err := simplelru.NewLRU[uint64, struct{}](32, nil)
	require.NoError(t, err)
	got := newBlockLRU(32)
	var adds, readds, evictions, resizes, purges int
	for op := range 40000 {
		switch k := r.IntN(1000); {
		case k < 900:
			key := uint64(r.IntN(120))
			if ref.Contains(key) {
				readds++
			} else if ref.Len() == got.size {
				evictions++
			}
			ref.Add(key, struct{}{})
			got.Add(key, 0)
			adds++
		case k < 990:
			n := 1 + r.IntN(64)
			if n < ref.Len() {
				evictions += ref.Len() - n
			}
			ref.Resize(n)
			got.Resize(n)
			resizes++
		default:
			ref.Purge()
			got.Purge()
			purges++
		}
		require.Equal(t, ref.Len(), got.Len(), "op %d", op)
		want := ref.Keys() // oldest first
		require.Equal(t, want, keysOldestFirst(got), "op %d", op)
		for key := uint64(0); key < 120; key += 7 {
			require.Equal(t, ref.Contains(key), got.Contains(key), "op %d key %d", op, key)
		}
	}
	t.Logf("%d adds (%d of held keys), %d evictions, %d resizes, %d purges", adds, readds, evictions, resizes, purges)
	require.Greater(t, readds, 5000)
	require.Greater(t, evictions, 5000)
	require.Greater(t, resizes, 1000)
	require.Greater(t, purges, 20)
}

// keysOldestFirst walks l's recency list from the least recent key.
func keysOldestFirst(l *blockLRU) []uint64 {
	keys := make([]uint64, 0, l.len)
	for i := l.slots[0].prev; i != 0; i = l.slots[i].prev {
		keys = append(keys, l.slots[i].key)
	}
	return keys
}

// TestAddChainMatchesAdds is a differential test of AddChain against Add
// of each key from the last to the first (what Index.Insert did before
// it): random chains that share prefixes of random lengths with earlier
// ones (groups with a system prompt and their own questions, and
// conversations that extend an earlier chain), inserted into stores of
// random, changing capacity, after each of which both hold the same keys
// in the same recency order. The counts show that the one-splice path,
// the fallback after the run's oldest key was evicted, and chains with no
// held head all ran.
func TestAddChainMatchesAdds(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	want, got := newBlockLRU(256), newBlockLRU(256)
	var chains [][]uint64
	next := uint64(1)
	fresh := func(n int) []uint64 {
		c := make([]uint64, n)
		for i := range c {
			c[i], next = next, next+1
		}
		return c
	}
	var spliced, fallback, cold, splicedKeys, told int
	for op := range 20000 {
		var chain []uint64
		switch k := r.IntN(100); {
		case k < 10 || len(chains) == 0:
			chain = fresh(1 + r.IntN(40))
		case k < 97:
			// An earlier chain's prefix, and keys of its own.
			base := chains[r.IntN(len(chains))]
			chain = append(append([]uint64(nil), base[:1+r.IntN(len(base))]...), fresh(r.IntN(24))...)
		case k < 99:
			n := 16 + r.IntN(300)
			want.Resize(n)
			got.Resize(n)
			continue
		default:
			want.Purge()
			got.Purge()
			continue
		}
		if len(chains) < 400 {
			chains = append(chains, chain)
		} else {
			chains[r.IntN(len(chains))] = chain
		}
		headHeld := got.Contains(chain[0])
		// Half the time the caller says which keys are not held: those
		// past the last held one.
		absent := len(chain)
		if r.IntN(2) == 0 {
			absent = 0
			for i := range chain {
				if got.Contains(chain[i]) {
					absent = i + 1
				}
			}
			if absent < len(chain) {
				told++
			}
		}
		for i := len(chain) - 1; i >= 0; i-- {
			want.Add(chain[i], 0)
		}
		switch m := got.AddChain(chain, absent); {
		case m > 0:
			spliced++
			splicedKeys += m
		case headHeld:
			fallback++
		default:
			cold++
		}
		require.Equal(t, want.Len(), got.Len(), "op %d", op)
		require.Equal(t, keysOldestFirst(want), keysOldestFirst(got), "op %d", op)
	}
	t.Logf("%d chains spliced (%d keys), %d fell back with the head held, %d with a cold head; %d told their absent keys", spliced, splicedKeys, fallback, cold, told)
	require.Greater(t, spliced, 3000)
	require.Greater(t, told, 5000)
	require.Greater(t, fallback, 200)
	require.Greater(t, cold, 1000)
}

// TestAddNewHeldKey: a key addNew is wrongly told is new (what only a
// collision of block hashes could do) still leaves one slot for it, the
// weights and the map consistent.
func TestAddNewHeldKey(t *testing.T) {
	l := newBlockLRU(16)
	for k := uint64(1); k <= 5; k++ {
		l.Add(k, 0)
	}
	l.addNew(3, 1) // held with weight 1; now weight 2
	require.Equal(t, []uint64{1, 2, 4, 5, 3}, keysOldestFirst(l))
	require.Equal(t, 6, l.Len())
	require.Equal(t, 5, l.at.len())
	for range 20 { // the freed slot is reused, nothing leaks
		l.removeOldest()
	}
	require.Equal(t, 0, l.Len())
	require.Zero(t, l.at.len())
	l.Add(9, 0)
	require.Equal(t, []uint64{9}, keysOldestFirst(l))
}

// TestLRUWeights plays chains of up to 500 blocks, whose deep blocks weigh
// more (blockWeight), into a small store and holds it to a plain model: a
// recency-ordered slice evicted from its end while the weight held passes
// the capacity.
func TestLRUWeights(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	const size = 900
	got := newBlockLRU(size)
	type entry struct {
		key uint64
		w   int
	}
	var model []entry // most recent first
	add := func(key uint64, w int) {
		for i, e := range model {
			if e.key == key {
				model = append(append([]entry{e}, model[:i]...), model[i+1:]...)
				return
			}
		}
		held := 0
		for _, e := range model {
			held += e.w
		}
		for len(model) > 0 && held+w > size {
			held -= model[len(model)-1].w
			model = model[:len(model)-1]
		}
		model = append([]entry{{key, w}}, model...)
	}
	heavy := 0
	for trial := range 300 {
		n := 1 + r.IntN(500)
		base := uint64(r.IntN(4)) << 32 // a few chains share their blocks
		chain := make([]uint64, n)
		for i := range chain {
			chain[i] = base | uint64(i)
		}
		got.AddChain(chain, len(chain))
		for i := n - 1; i >= 0; i-- {
			add(chain[i], blockWeight(i))
		}
		if n > denseBlocks {
			heavy++
		}
		held := 0
		for _, e := range model {
			held += e.w
			require.True(t, got.Contains(e.key), "trial %d: key %x", trial, e.key)
		}
		require.Equal(t, held, got.Len(), "trial %d", trial)
		require.Equal(t, len(model), got.at.len(), "trial %d", trial)
		require.LessOrEqual(t, got.Len(), size)
	}
	require.Greater(t, heavy, 100, "chains reaching the weighted blocks")
}
