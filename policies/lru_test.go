package policies

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/stretchr/testify/require"
)

// TestBlockLRUApproximatesLRU is a differential test of the index's store
// against golang-lru's simplelru, an exact LRU: random adds of held and new
// keys, resizes (shrinking evicts) and purges. After each, what the store
// holds is a recency-ordered tail of what the exact LRU holds (the most
// recent keys, none it lacks), its length is what it holds, never past the
// capacity; and over the run it holds nearly as much as the exact one. At
// the smaller size a generation is one fresh key, at the larger ten. The
// counts show that evictions, re-adds and resizes all happened.
func TestBlockLRUApproximatesLRU(t *testing.T) {
	for _, tc := range []struct {
		size, keys int
		fill       float64 // least mean share of the exact LRU's keys held
	}{
		{size: 32, keys: 120, fill: 0.85},
		{size: 640, keys: 1600, fill: 0.95},
	} {
		t.Run(fmt.Sprintf("size=%d", tc.size), func(t *testing.T) {
			r := rand.New(rand.NewPCG(9, 10))
			ref, err := simplelru.NewLRU[uint64, struct{}](tc.size, nil)
			require.NoError(t, err)
			got := newBlockLRU(tc.size)
			var adds, readds, evictions, resizes, purges int
			var heldSum, refSum float64
			for op := range 40000 {
				switch k := r.IntN(1000); {
				case k < 990:
					key := uint64(r.IntN(tc.keys))
					if ref.Contains(key) {
						readds++
					} else if ref.Len() == got.size {
						evictions++
					}
					ref.Add(key, struct{}{})
					got.Add(key, 0)
					adds++
				case k < 999:
					n := 1 + r.IntN(2*tc.size)
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
				held := 0
				for i, key := range ref.Keys() { // oldest first
					if got.Contains(key) {
						held++
					} else if held > 0 {
						t.Fatalf("op %d: key %d (%d of %d, oldest first) not held after older ones", op, key, i, ref.Len())
					}
				}
				require.Equal(t, held, got.Len(), "op %d", op)
				require.LessOrEqual(t, got.Len(), got.size, "op %d", op)
				for key := uint64(tc.keys); key < uint64(tc.keys)+8; key++ {
					require.False(t, got.Contains(key), "op %d: never added", op)
				}
				heldSum += float64(held)
				refSum += float64(ref.Len())
			}
			fill := heldSum / refSum
			t.Logf("%d adds (%d of held keys), %d evictions, %d resizes, %d purges; held %.3f of the exact LRU's keys", adds, readds, evictions, resizes, purges, fill)
			require.Greater(t, readds, 5000)
			require.Greater(t, evictions, 5000)
			require.Greater(t, resizes, 100)
			require.Greater(t, purges, 10)
			require.GreaterOrEqual(t, fill, tc.fill)
		})
	}
}

// TestLRUWeights plays chains of up to 500 blocks, whose deep blocks weigh
// more (blockWeight), into a small store and holds it to a plain model: a
// recency-ordered slice evicted from its end while the weight held passes
// the capacity. The store holds a recency-ordered tail of the model, with
// the weights it holds as its length, never past the capacity, and nearly
// all of the model's weight.
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
	var heldSum, modelSum float64
	for trial := range 300 {
		n := 1 + r.IntN(500)
		base := uint64(r.IntN(4)) << 32 // a few chains share their blocks
		chain := make([]uint64, n)
		for i := range chain {
			chain[i] = base | uint64(i)
		}
		got.AddChain(chain, 0)
		for i := n - 1; i >= 0; i-- {
			add(chain[i], blockWeight(i))
		}
		if n > denseBlocks {
			heavy++
		}
		held, modelHeld, gap := 0, 0, false
		for _, e := range model {
			modelHeld += e.w
			switch {
			case got.Contains(e.key) && gap:
				t.Fatalf("trial %d: key %x held after a more recent one was evicted", trial, e.key)
			case got.Contains(e.key):
				held += e.w
			default:
				gap = true
			}
		}
		require.Equal(t, held, got.Len(), "trial %d", trial)
		require.LessOrEqual(t, got.Len(), size)
		heldSum += float64(held)
		modelSum += float64(modelHeld)
	}
	t.Logf("held %.3f of the model's weight", heldSum/modelSum)
	require.Greater(t, heavy, 100, "chains reaching the weighted blocks")
	require.GreaterOrEqual(t, heldSum/modelSum, 0.9)
}

// TestBlockLRUChurn runs a million new keys through a store of 1,024: the
// sweep keeps expired entries from filling the table (it never grows past
// what the capacity needs), the most recent keys are all held and keys of
// long ago none, and key 0, which marks empty entries inside, is held like
// any other.
func TestBlockLRUChurn(t *testing.T) {
	const size = 1024
	l := newBlockLRU(size)
	l.Add(0, 0)
	require.True(t, l.Contains(0))
	maxTab, sweeps := 0, 0
	for k := uint64(1); k <= 1_000_000; k++ {
		before := l.used
		l.Add(mix64(k), 0)
		if l.used < before {
			sweeps++
		}
		maxTab = max(maxTab, len(l.tab))
		require.LessOrEqual(t, 4*l.used, 3*len(l.tab))
	}
	require.False(t, l.Contains(0))
	require.LessOrEqual(t, maxTab, 4*size, "the table grew past what %d keys need", size)
	for k := uint64(1_000_000); k > 1_000_000-size*9/10; k-- {
		require.True(t, l.Contains(mix64(k)), "recent key %d", k)
	}
	for k := uint64(1); k <= 10_000; k++ {
		require.False(t, l.Contains(mix64(k)), "old key %d", k)
	}
	require.LessOrEqual(t, l.Len(), size)
	require.Greater(t, l.Len(), size*9/10)
	require.Greater(t, sweeps, 100_000, "the sweep cleared entries")
	l.Purge()
	require.Zero(t, l.Len())
	require.False(t, l.Contains(mix64(1_000_000)))
}

// TestBlockLRUSeedFree: the table's seed moves where keys lie, never what
// is held. Two stores with different seeds play the same chains, resizes
// and purges and hold the same keys with the same length after each.
func TestBlockLRUSeedFree(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	a, b := newBlockLRU(700), newBlockLRU(700)
	b.seed = a.seed ^ 0x5555
	var chains [][]uint64
	next := uint64(1)
	checked := 0
	for op := range 20000 {
		switch k := r.IntN(100); {
		case k < 60 || len(chains) == 0:
			var c []uint64
			if len(chains) > 0 && r.IntN(2) == 0 {
				base := chains[r.IntN(len(chains))]
				c = append(c, base[:1+r.IntN(len(base))]...)
			}
			for range 1 + r.IntN(40) {
				c = append(c, mix64(next))
				next++
			}
			chains = append(chains, c)
			held := 0
			for held < len(c) && a.Contains(c[held]) {
				held++
			}
			a.AddChain(c, held)
			b.AddChain(c, held)
		case k < 95:
			c := chains[r.IntN(len(chains))]
			a.AddChain(c, 0)
			b.AddChain(c, 0)
		case k < 99:
			n := 100 + r.IntN(1200)
			a.Resize(n)
			b.Resize(n)
		default:
			a.Purge()
			b.Purge()
		}
		require.Equal(t, a.Len(), b.Len(), "op %d", op)
		if op%50 == 0 {
			for _, c := range chains[max(0, len(chains)-40):] {
				for _, key := range c {
					require.Equal(t, a.Contains(key), b.Contains(key), "op %d", op)
					checked++
				}
			}
		}
	}
	t.Logf("%d keys compared", checked)
	require.Greater(t, checked, 100000)
}
