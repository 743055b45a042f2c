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
			got.Add(key)
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
