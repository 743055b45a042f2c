package policies

import (
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestIndex(t *testing.T) {
	type op struct {
		insert, forget []uint64
		match          []uint64 // Match(match) must return want
		want           int
		purge          bool
		capacity       int // SetCapacity when > 0
	}
	tests := []struct {
		name string
		cap  int
		ops  []op
		len  int
	}{
		{name: "evicts least recently inserted", cap: 3, ops: []op{
			{insert: []uint64{1}}, {insert: []uint64{2}}, {insert: []uint64{3}}, {insert: []uint64{4}},
			{match: []uint64{1}, want: 0}, {match: []uint64{2}, want: 1}, {match: []uint64{4}, want: 1},
		}, len: 3},
		{name: "reinsert refreshes", cap: 3, ops: []op{
			{insert: []uint64{1}}, {insert: []uint64{2}}, {insert: []uint64{3}}, {insert: []uint64{1}}, {insert: []uint64{4}},
			{match: []uint64{1}, want: 1}, {match: []uint64{2}, want: 0},
		}, len: 3},
		{name: "head of a chain survives longest", cap: 3, ops: []op{
			{insert: []uint64{1, 2, 3, 4, 5}},
			{match: []uint64{1, 2, 3, 4, 5}, want: 3}, {match: []uint64{4}, want: 0},
			{insert: []uint64{9}},
			{match: []uint64{1, 2, 3}, want: 2}, // the tail (3) went first
		}, len: 3},
		{name: "match does not touch recency", cap: 2, ops: []op{
			{insert: []uint64{1}}, {insert: []uint64{2}},
			{match: []uint64{1}, want: 1}, {insert: []uint64{3}},
			{match: []uint64{1}, want: 0}, {match: []uint64{2}, want: 1},
		}, len: 2},
		{name: "match stops at the first gap", cap: 10, ops: []op{
			{insert: []uint64{1, 2, 4, 5}},
			{match: []uint64{1, 2, 3, 4, 5}, want: 2}, {match: []uint64{3, 4, 5}, want: 0},
			{match: nil, want: 0},
		}, len: 4},
		{name: "forget", cap: 10, ops: []op{
			{insert: []uint64{1, 2, 3}}, {forget: []uint64{2, 42}},
			{match: []uint64{1, 2, 3}, want: 1}, {match: []uint64{3}, want: 1},
		}, len: 2},
		{name: "purge", cap: 10, ops: []op{
			{insert: []uint64{1, 2, 3}}, {purge: true}, {match: []uint64{1}, want: 0},
			{insert: []uint64{7}}, {match: []uint64{7}, want: 1},
		}, len: 1},
		{name: "shrink evicts least recent", cap: 10, ops: []op{
			{insert: []uint64{1, 2, 3}}, {insert: []uint64{4, 5}}, {capacity: 3},
			{match: []uint64{4, 5}, want: 2}, {match: []uint64{1, 2, 3}, want: 1},
		}, len: 3},
		{name: "grow keeps entries", cap: 2, ops: []op{
			{insert: []uint64{1, 2}}, {capacity: 4}, {insert: []uint64{3, 4}},
			{match: []uint64{1, 2}, want: 2}, {match: []uint64{3, 4}, want: 2},
		}, len: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ix := NewIndex(tt.cap)
			assert.Equal(t, tt.cap, ix.Capacity())
			for i, o := range tt.ops {
				switch {
				case o.insert != nil:
					ix.Insert(o.insert)
				case o.forget != nil:
					ix.Forget(o.forget)
				case o.purge:
					ix.Purge()
				case o.capacity > 0:
					ix.SetCapacity(o.capacity)
					assert.Equal(t, o.capacity, ix.Capacity())
				default:
					assert.Equal(t, o.want, ix.Match(o.match), "op %d", i)
				}
			}
			assert.Equal(t, tt.len, ix.Len())
		})
	}
}

func TestIndexDefaultsAndNil(t *testing.T) {
	assert.Equal(t, DefaultIndexCapacity, NewIndex(0).Capacity())
	ix := NewIndex(5)
	ix.SetCapacity(-1)
	assert.Equal(t, DefaultIndexCapacity, ix.Capacity())

	var none *Index
	none.Insert([]uint64{1})
	none.Forget([]uint64{1})
	none.Purge()
	assert.Zero(t, none.Match([]uint64{1}))
	assert.Zero(t, none.Len())
	assert.Zero(t, none.Capacity())
}

func TestIndexConcurrent(t *testing.T) {
	ix := NewIndex(100)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g uint64) {
			defer wg.Done()
			for i := uint64(0); i < 500; i++ {
				chain := []uint64{g, g*1000 + i, g*1000 + i + 1}
				ix.Insert(chain)
				ix.Match(chain)
				if i%50 == 0 {
					ix.Forget(chain[1:])
				}
				if i%200 == 0 && g == 0 {
					ix.SetCapacity(50 + int(i%100))
				}
			}
		}(uint64(g))
	}
	wg.Wait()
	assert.LessOrEqual(t, ix.Len(), ix.Capacity())
}

// TestIndexBytesPerEntry measures the heap an index holds per block hash;
// Index's doc comment quotes the figure.
func TestIndexBytesPerEntry(t *testing.T) {
	const n = 100_000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ix := NewIndex(n)
	chain := make([]uint64, n)
	for i := range chain {
		chain[i] = mix64(uint64(i))
	}
	ix.Insert(chain)
	chain = nil
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("index: %.1f bytes per entry (%d entries)", per, ix.Len())
	assert.Equal(t, n, ix.Len())
	assert.Less(t, per, 160.0)
	runtime.KeepAlive(ix)
}
