package policies

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestIndex(t *testing.T) {
	type op struct {
		insert   []uint64
		match    []uint64 // Match(match) must return want
		want     int
		purge    bool
		capacity int // SetCapacity when > 0
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
		{name: "match is the held leading run", cap: 10, ops: []op{
			{insert: []uint64{1, 2, 3, 4, 5}}, {insert: []uint64{1, 2, 6}},
			{match: []uint64{1, 2, 3, 4, 5}, want: 5}, {match: []uint64{1, 2, 3, 4, 5, 7, 8}, want: 5},
			{match: []uint64{1, 2, 7}, want: 2}, {match: []uint64{1, 2, 6, 8}, want: 3},
			// Chains are matched from their head: 3 is held, but no chain
			// inserted began with it.
			{match: []uint64{3, 4, 5}, want: 0},
			{match: nil, want: 0},
		}, len: 6},
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

// TestIndexReach proves MatchInsertReach against an exact LRU's distance:
// random chains of 1-40 blocks, half of the sends a chain sent before,
// into an index whose capacity they overflow several times. Each held
// chain's reach is the blocks used since its last block was, as an exact
// LRU of the same sends counts them, to within 1/8 of the capacity (and
// the chain): the generation it leaves out holds at most 1/16, and a
// chain sent again within recentGens generations keeps its older stamp
// (blockLRU.AddChain), as many again. It counts the chains compared.
func TestIndexReach(t *testing.T) {
	const capBlocks = 2048
	ix := NewIndex(capBlocks)
	rng := rand.New(rand.NewPCG(7, 7))
	var exact []uint64 // most recent last
	touch := func(k uint64) {
		if i := slices.Index(exact, k); i >= 0 {
			exact = slices.Delete(exact, i, i+1)
		}
		exact = append(exact, k)
	}
	var sent [][]uint64
	compared, lo, hi := 0, 0, 0
	for range 4000 {
		var c []uint64
		if len(sent) > 0 && rng.IntN(2) == 0 {
			c = sent[rng.IntN(len(sent))]
		} else {
			c = chainOf(rng.Uint64()>>8<<8, 1+rng.IntN(40))
			sent = append(sent, c)
		}
		held, reach := ix.MatchInsertReach(c)
		if held > 0 {
			at := slices.Index(exact, c[held-1])
			require.GreaterOrEqual(t, at, 0, "held by the index, so used")
			want := len(exact) - 1 - at
			assert.InDelta(t, want, reach, float64(capBlocks/8+len(c)))
			lo, hi = min(lo, reach-want), max(hi, reach-want)
			compared++
		}
		for i := len(c) - 1; i >= 0; i-- {
			touch(c[i])
		}
	}
	t.Logf("compared %d, reach - exact in [%d, %d]", compared, lo, hi)
	assert.Greater(t, compared, 300)
}

func TestIndexDefaultsAndNil(t *testing.T) {
	assert.Equal(t, DefaultIndexCapacity, NewIndex(0).Capacity())
	ix := NewIndex(5)
	ix.SetCapacity(-1)
	assert.Equal(t, DefaultIndexCapacity, ix.Capacity())

	var none *Index
	none.Insert([]uint64{1})
	assert.Zero(t, none.MatchInsert([]uint64{1}))
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
					ix.MatchInsert(chain[:2])
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
	// Chains of 100: every block weighs one entry of the capacity.
	chain := make([]uint64, 100)
	for c := range n / len(chain) {
		for i := range chain {
			chain[i] = mix64(uint64(c*len(chain) + i))
		}
		ix.Insert(chain)
	}
	chain = nil
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("index: %.1f bytes per entry (%d entries)", per, ix.Len())
	assert.Equal(t, n, ix.Len())
	assert.Less(t, per, 64.0)
	runtime.KeepAlive(ix)
}

// TestIndexHeadFilter proves that the lock-free head filter never hides a
// held chain: over random inserts, re-placements, purges and resizes, Match
// equals a plain walk of the LRU for chains starting at a head, and the
// filter answered alone for heads never inserted.
func TestIndexHeadFilter(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	ix := NewIndex(64)
	chains := make([][]uint64, 0, 200)
	short, looked := 0, 0
	for op := range 20000 {
		switch k := r.IntN(100); {
		case k < 30:
			c := make([]uint64, 1+r.IntN(6))
			for i := range c {
				c[i] = r.Uint64()
			}
			chains = append(chains, c)
			ix.Insert(c)
		case k < 35 && len(chains) > 0:
			ix.MatchInsert(chains[r.IntN(len(chains))])
		case k == 35 && r.IntN(20) == 0:
			ix.Purge()
		case k == 36:
			ix.SetCapacity(16 + r.IntN(96))
		default:
			var c []uint64
			if len(chains) > 0 && r.IntN(4) > 0 {
				c = chains[max(0, len(chains)-1-r.IntN(40))] // mostly still held
			} else {
				c = []uint64{r.Uint64(), r.Uint64()}
			}
			ix.mu.Lock()
			want := 0
			for _, b := range c {
				if !ix.lru.Contains(b) {
					break
				}
				want++
			}
			ix.mu.Unlock()
			if ix.mayHold(c[0]) {
				looked++
			} else {
				short++
			}
			if got := ix.Match(c); got != want {
				t.Fatalf("op %d: Match = %d, the LRU holds %d", op, got, want)
			}
		}
	}
	t.Logf("filter answered alone %d times, looked under the lock %d times", short, looked)
	if short < 1000 || looked < 1000 {
		t.Fatalf("filter answered alone %d times, looked %d times: too few of either", short, looked)
	}
}

// TestIndexLeadingRun proves the bisection of Match: over chains that
// share prefixes as prompts do (each block's key stands for its whole
// prefix), placed, re-placed and evicted under a small, changing capacity,
// what the index holds of any chain is a leading run, and Match equals a
// walk of every block. The counts show that every kind of answer was met:
// nothing held, part of a chain, all of it; at the larger capacity, whose
// generations hold many keys, placements whose held run was stamped lately
// (left as it is, the new blocks joining its generation) were met too.
func TestIndexLeadingRun(t *testing.T) {
	for _, tc := range []struct {
		cap, grow int // capacity, most new blocks a prompt adds
	}{{cap: 48, grow: 12}, {cap: 3000, grow: 120}} {
		t.Run(fmt.Sprintf("cap=%d", tc.cap), func(t *testing.T) {
			leadingRun(t, tc.cap, tc.grow)
		})
	}
}

func leadingRun(t *testing.T, capacity, most int) {
	r := rand.New(rand.NewPCG(5, 6))
	ix := NewIndex(capacity)
	var chains [][]uint64
	next := uint64(1)
	grow := func(base []uint64, n int) []uint64 {
		c := append([]uint64(nil), base...)
		for range n {
			c = append(c, mix64(next))
			next++
		}
		return c
	}
	var none, partial, whole, lately int
	place := func(c []uint64) {
		l := ix.lru
		if n := ix.Match(c); n > 0 {
			if g, ok := l.stampOf(c[n-1]); ok && l.cur-g < recentGens && 2*(g-l.oldest) >= l.cur-l.oldest {
				lately++
			}
		}
		ix.MatchInsert(c)
	}
	for op := range 30000 {
		switch k := r.IntN(100); {
		case k < 15 || len(chains) == 0:
			// A new prompt: a prefix of an earlier one (a shared system
			// prompt, an earlier turn) and blocks of its own.
			var base []uint64
			if len(chains) > 0 && r.IntN(3) > 0 {
				b := chains[r.IntN(len(chains))]
				base = b[:1+r.IntN(len(b))]
			}
			c := grow(base, 1+r.IntN(most))
			chains = append(chains, c)
			place(c)
		case k < 45:
			place(chains[r.IntN(len(chains))])
		case k == 45:
			ix.SetCapacity(capacity/6 + r.IntN(capacity*10/3))
		case k == 46 && r.IntN(50) == 0:
			ix.Purge()
		default:
			c := chains[max(0, len(chains)-1-r.IntN(24))] // mostly recent ones
			if r.IntN(4) == 0 {
				c = grow(c[:1+r.IntN(len(c))], 1+r.IntN(4)) // a follow-up never sent
			}
			ix.mu.Lock()
			want, run := 0, true
			for i, b := range c {
				held := ix.lru.Contains(b)
				if held && !run {
					ix.mu.Unlock()
					t.Fatalf("op %d: block %d of a chain held after a gap", op, i)
				}
				if held {
					want++
				} else {
					run = false
				}
			}
			ix.mu.Unlock()
			if got := ix.Match(c); got != want {
				t.Fatalf("op %d: Match = %d, a walk of the chain finds %d", op, got, want)
			}
			switch want {
			case 0:
				none++
			case len(c):
				whole++
			default:
				partial++
			}
		}
	}
	t.Logf("matches: %d none, %d partial, %d whole; %d placements of a lately stamped run", none, partial, whole, lately)
	assert.Greater(t, none, 500)
	assert.Greater(t, partial, 500)
	assert.Greater(t, whole, 500)
	if capacity > genSlots {
		assert.Greater(t, lately, 500)
	}
}

// BenchmarkIndexGC measures what the residency indexes of a large pool
// cost the garbage collector: one full collection (runtime.GC) with 64
// replicas' indexes full at DefaultIndexCapacity (1M block hashes) live.
func BenchmarkIndexGC(b *testing.B) {
	ixs := make([]*Index, 64)
	chain := make([]uint64, 256)
	for i := range ixs {
		ixs[i] = NewIndex(DefaultIndexCapacity)
		for c := 0; c < DefaultIndexCapacity/len(chain); c++ {
			for j := range chain {
				chain[j] = mix64(uint64(i)<<40 | uint64(c)<<16 | uint64(j))
			}
			ixs[i].Insert(chain)
		}
	}
	runtime.GC()
	b.ResetTimer()
	for b.Loop() {
		runtime.GC()
	}
	b.StopTimer()
	for _, ix := range ixs {
		if ix.Len() != DefaultIndexCapacity {
			b.Fatalf("index holds %d, want %d", ix.Len(), DefaultIndexCapacity)
		}
	}
}

// BenchmarkIndexPlace measures placing a prompt on a replica
// (MatchInsert) the way shared system prompts arrive: 8 groups whose
// chains share their first shared blocks, each request with 4 blocks of
// its own after them, in an index at DefaultIndexCapacity; shared is the
// length of the group's prefix in blocks (32: a 4 KiB system prompt; 252:
// the chain's cap nearly all shared, as with a 64 KiB prompt).
func BenchmarkIndexPlace(b *testing.B) {
	for _, shared := range []int{28, 252} {
		b.Run(fmt.Sprintf("shared=%d", shared), func(b *testing.B) {
			ix := NewIndex(DefaultIndexCapacity)
			chains := make([][]uint64, 64)
			for i := range chains {
				c := make([]uint64, shared+4)
				for j := range c {
					if j < shared {
						c[j] = mix64(uint64(i%8)<<32 | uint64(j))
					} else {
						c[j] = mix64(uint64(i)<<40 | uint64(j))
					}
				}
				chains[i] = c
				ix.Insert(c)
			}
			n := 0
			for b.Loop() {
				if ix.MatchInsert(chains[n%len(chains)]) != shared+4 {
					b.Fatal("a placed chain is not held whole")
				}
				n++
			}
		})
	}
	// A conversation's turns (benchTurns).
	b.Run("turns", func(b *testing.B) { benchTurns(b, (*Index).MatchInsert) })
	// New prompts into a full index: 20 shared blocks, then 300 of their
	// own, each evicting an old block (a long agent history, or the
	// bench's distinct bodies).
	b.Run("fresh=300", func(b *testing.B) {
		ix := NewIndex(4096)
		chain := make([]uint64, 320)
		n := uint64(0)
		for b.Loop() {
			for j := range chain {
				if j < 20 {
					chain[j] = mix64(uint64(j))
				} else {
					n++
					chain[j] = mix64(n<<16 | uint64(j))
				}
			}
			if ix.MatchInsert(chain) > 20 {
				b.Fatal("fresh blocks matched")
			}
		}
	})
	// The proxy bench's 64 KiB prompts on 4 replicas: 8 tenants' 32 KiB
	// system prompts (the 256 dense blocks), then 32 KiB of each request's
	// own (96 sparse blocks weighing 256), placed in turn on 4 full
	// indexes at DefaultIndexCapacity: every placement evicts as much as
	// it adds, from tables that no longer fit a core's cache.
	for _, replicas := range []int{4, 64} {
		b.Run(fmt.Sprintf("fresh=96/replicas=%d", replicas), func(b *testing.B) { benchFresh96(b, replicas) })
	}
}

// benchFresh96 places the proxy bench's 64 KiB prompts in turn on that
// many replicas' full indexes. With 64 the tables (0.5 MiB each) are
// colder than a core's caches, as every table is in a proxy that moves
// the requests' bodies through the same caches.
func benchFresh96(b *testing.B, replicas int) {
	ixs := make([]*Index, replicas)
	for i := range ixs {
		ixs[i] = NewIndex(DefaultIndexCapacity)
	}
	chain := make([]uint64, 352)
	n := uint64(0)
	place := func(r int) int {
		for j := range chain {
			if j < 256 {
				chain[j] = mix64(uint64(r/replicas%8)<<32 | uint64(j))
			} else {
				n++
				chain[j] = mix64(n<<16 | uint64(j))
			}
		}
		return ixs[r%len(ixs)].MatchInsert(chain)
	}
	for r := range replicas * DefaultIndexCapacity / 256 {
		place(r)
	}
	r := 0
	for b.Loop() {
		if place(r) > 256 {
			b.Fatal("fresh blocks matched")
		}
		r++
	}
}

// BenchmarkIndexReach is the turns case of BenchmarkIndexPlace placed
// with MatchInsert and with MatchInsertReach, which walks the generations
// newer than the held run's last block: what measuring the reach costs a
// placement on an engine that reports no cache size.
func BenchmarkIndexReach(b *testing.B) {
	b.Run("reach=false", func(b *testing.B) { benchTurns(b, (*Index).MatchInsert) })
	b.Run("reach=true", func(b *testing.B) {
		benchTurns(b, func(ix *Index, c []uint64) int {
			held, _ := ix.MatchInsertReach(c)
			return held
		})
	})
}

// benchTurns places a conversation's turns with place: each prompt is the
// one before it and 8 blocks more (an agent's next tool result), 16
// conversations in turn on one replica, up to the chain's cap.
func benchTurns(b *testing.B, place func(*Index, []uint64) int) {
	ix := NewIndex(DefaultIndexCapacity)
	convs := make([][]uint64, 16)
	n := uint64(0)
	for b.Loop() {
		i := int(n % uint64(len(convs)))
		c := convs[i]
		if len(c)+8 > DefaultMaxBlocks {
			c = c[:0]
		}
		for range 8 {
			n++
			c = append(c, mix64(uint64(i)<<48|n))
		}
		convs[i] = c
		if place(ix, c) > len(c)-8 {
			b.Fatal("a turn's new blocks matched")
		}
	}
}
