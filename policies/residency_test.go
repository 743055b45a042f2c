package policies

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chainOf returns a chain of n distinct blocks starting at base.
func chainOf(base uint64, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = base + uint64(i)
	}
	return out
}

// TestBeliefCheckVerdicts proves each verdict and what it does to the
// index: a miss or a partial shrinks it by 1/8 (a partial to its reach
// when that is less, by at most half), a hit grows it by 1/64 up to the
// configured maximum, cold and concurrent leave it alone. The
// partial cases predict 8 blocks (1 KiB) of a 2 KiB prompt of 512 tokens:
// 256 tokens believed cached.
func TestBeliefCheckVerdicts(t *testing.T) {
	for _, tt := range []struct {
		name    string
		check   Check
		startAt int // index capacity before the check (configured 1024)
		want    CheckResult
		wantCap int
	}{
		{"hit grows by 1/64", Check{PredictedBlocks: 3, CachedTokens: 10}, 512, CheckHit, 520},
		{"hit at the maximum stays", Check{PredictedBlocks: 3, CachedTokens: 10}, 1024, CheckHit, 1024},
		{"hit grows by at least one", Check{PredictedBlocks: 3, CachedTokens: 10}, 64, CheckHit, 65},
		{"miss shrinks by 1/8", Check{PredictedBlocks: 3}, 1024, CheckMiss, 896},
		{"miss never below the floor", Check{PredictedBlocks: 3}, 70, CheckMiss, MinIndexBlocks},
		{"concurrent is no miss", Check{PredictedBlocks: 3, Concurrent: true}, 1024, CheckConcurrent, 1024},
		{"concurrent with cached tokens is a hit", Check{PredictedBlocks: 3, Concurrent: true, CachedTokens: 5}, 512, CheckHit, 520},
		{"cold", Check{CachedTokens: 10}, 1024, CheckCold, 1024},
		{"under half cached is partial", Check{PredictedBlocks: 8, CachedTokens: 127, PromptTokens: 512, PromptBytes: 2048}, 1024, CheckPartial, 896},
		{"partial never below the floor", Check{PredictedBlocks: 8, CachedTokens: 10, PromptTokens: 512, PromptBytes: 2048}, 70, CheckPartial, MinIndexBlocks},
		{"half cached is a hit", Check{PredictedBlocks: 8, CachedTokens: 128, PromptTokens: 512, PromptBytes: 2048}, 512, CheckHit, 520},
		{"partial while concurrent says nothing", Check{PredictedBlocks: 8, Concurrent: true, CachedTokens: 10, PromptTokens: 512, PromptBytes: 2048}, 1024, CheckConcurrent, 1024},
		{"a short prediction is never partial", Check{PredictedBlocks: partialMinBlocks - 1, CachedTokens: 1, PromptTokens: 512, PromptBytes: 2048}, 512, CheckHit, 520},
		{"no prompt size: no partial", Check{PredictedBlocks: 8, CachedTokens: 1}, 512, CheckHit, 520},
		{"a partial within a short reach shrinks to it", Check{PredictedBlocks: 8, CachedTokens: 10, PromptTokens: 512, PromptBytes: 2048, Reach: 700}, 1024, CheckPartial, 700},
		{"by at most half", Check{PredictedBlocks: 8, CachedTokens: 10, PromptTokens: 512, PromptBytes: 2048, Reach: 100}, 1024, CheckPartial, 512},
		{"a reach past 7/8 shrinks by 1/8", Check{PredictedBlocks: 8, CachedTokens: 10, PromptTokens: 512, PromptBytes: 2048, Reach: 1000}, 1024, CheckPartial, 896},
		{"reach never below the floor", Check{PredictedBlocks: 8, CachedTokens: 10, PromptTokens: 512, PromptBytes: 2048, Reach: 10}, 100, CheckPartial, MinIndexBlocks},
		{"a miss shrinks by 1/8 whatever its reach", Check{PredictedBlocks: 3, Reach: 100}, 1024, CheckMiss, 896},
		{"a hit ignores its reach", Check{PredictedBlocks: 3, CachedTokens: 10, Reach: 100}, 512, CheckHit, 520},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBelief(1024)
			b.Index().SetCapacity(tt.startAt)
			got := b.Check(tt.check)
			assert.Equal(t, tt.want, got.Result)
			assert.False(t, got.Purged)
			assert.Equal(t, tt.wantCap, b.Index().Capacity())
			s := b.Stats()
			assert.Equal(t, 1, s.Checks)
			assert.Equal(t, 1, s.Hits+s.Misses+s.Partials+s.Cold+s.Concurrent, "one verdict counted")
		})
	}
}

// TestBeliefPartialOnceSized proves that once the engine reported its
// cache size a partial no longer shrinks the index (it is capped at that
// size; the rest of the cache went to other clients' prompts), while a
// miss still does.
func TestBeliefPartialOnceSized(t *testing.T) {
	b := NewBelief(DefaultIndexCapacity)
	b.Engine(EngineCache{NumBlocks: 1024, BlockTokens: 16, PrefixQueries: -1}) // 512 blocks of 128 bytes
	require.Equal(t, 512, b.Index().Capacity())
	partial := Check{PredictedBlocks: 8, CachedTokens: 10, PromptTokens: 512, PromptBytes: 2048}
	got := b.Check(partial)
	assert.Equal(t, CheckPartial, got.Result)
	assert.Equal(t, 512, b.Index().Capacity(), "sized by the engine: a partial leaves the index")
	assert.Equal(t, 1, b.Stats().Partials)
	b.Check(Check{PredictedBlocks: 8, PromptTokens: 512, PromptBytes: 2048})
	assert.Equal(t, 448, b.Index().Capacity(), "a miss still shrinks it")
	b.Check(Check{PredictedBlocks: 8, PromptTokens: 512, PromptBytes: 2048, Reach: 300})
	assert.Equal(t, 392, b.Index().Capacity(), "by 1/8 whatever its reach: the engine said its size")
}

// TestBeliefReachBounds proves that a hit's reach bounds the shrink of a
// later miss or partial: one within the farthest hit's reach contradicts
// it and shrinks by 1/8, one beyond it shrinks to its reach; a shrink
// below the hit's reach lowers it, and a purge forgets it.
func TestBeliefReachBounds(t *testing.T) {
	b := NewBelief(1024)
	partial := func(reach int) Check {
		return Check{PredictedBlocks: 8, CachedTokens: 10, PromptTokens: 512, PromptBytes: 2048, Reach: reach}
	}
	b.Check(Check{PredictedBlocks: 8, CachedTokens: 500, PromptTokens: 512, PromptBytes: 2048, Reach: 300})
	require.Equal(t, 1024, b.Index().Capacity())
	for _, step := range []struct {
		reach, want int
		why         string
	}{
		{200, 896, "within the hit's reach: by 1/8"},
		{500, 500, "beyond it: to its reach"},
		{280, 437, "within it again"},
		{280, 382, ""}, {280, 334, ""}, {280, 292, "below the hit's reach: it falls to 292"},
		{250, 255, "so 250 is within it: by 1/8"},
	} {
		b.Check(partial(step.reach))
		require.Equal(t, step.want, b.Index().Capacity(), step.why)
	}
	b.Purge(PurgeRemoved)
	b.Check(partial(100))
	assert.Equal(t, 127, b.Index().Capacity(), "the purge forgot the hit: to its reach, by at most half")
}

// TestBeliefPlaceReach proves that Place measures a prediction's reach
// only while the engine's cache size is unknown: the blocks placed since
// the predicted run's last block was, to within a generation (1/256 of
// the capacity in new blocks: 4 here), and none for a cold prompt.
func TestBeliefPlaceReach(t *testing.T) {
	b := NewBelief(1024)
	conv := Keys{Blocks: chainOf(1<<40, 8)}
	assert.Zero(t, b.Place(conv).Reach, "nothing held: no reach")
	b.Place(Keys{Blocks: chainOf(2<<40, 200)})
	p := b.Place(conv)
	assert.Equal(t, 8, p.Predicted)
	assert.InDelta(t, 200, p.Reach, 8, "the 200 blocks placed since")
	p = b.Place(conv)
	assert.InDelta(t, 0, p.Reach, 8, "placed again at once")

	b.Engine(EngineCache{NumBlocks: 4096, BlockTokens: 16, PrefixQueries: -1})
	b.Place(Keys{Blocks: chainOf(3<<40, 300)})
	p = b.Place(conv)
	assert.Equal(t, 8, p.Predicted)
	assert.Zero(t, p.Reach, "sized by the engine: not measured")
}

// TestBeliefPurgesAfterMissRun proves that purgeMissRun misses in a row on
// long predictions purge the index, that short predictions and a hit in
// between do not add up, and that a purge restarts the run.
func TestBeliefPurgesAfterMissRun(t *testing.T) {
	long := Check{PredictedBlocks: purgeMinBlocks}
	short := Check{PredictedBlocks: purgeMinBlocks - 1}
	hit := Check{PredictedBlocks: purgeMinBlocks, CachedTokens: 1}
	partial := Check{PredictedBlocks: purgeMinBlocks, CachedTokens: 1, PromptTokens: 1024, PromptBytes: 1024}
	for _, tt := range []struct {
		name   string
		checks []Check
		purged int // index (in checks) of the check that purges, -1 none
	}{
		{"three long misses", []Check{long, long, long}, 2},
		{"two are not enough", []Check{long, long}, -1},
		{"short misses do not count", []Check{short, short, short, short}, -1},
		{"a hit ends the run", []Check{long, long, hit, long, long}, -1},
		{"a partial ends the run", []Check{long, long, partial, long, long}, -1},
		{"a short miss neither counts nor ends it", []Check{long, short, long, long}, 3},
		{"a purge restarts the run", []Check{long, long, long, long, long}, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBelief(1024)
			b.Index().Insert(chainOf(1, 8))
			got := -1
			for i, c := range tt.checks {
				if b.Check(c).Purged {
					require.Equal(t, -1, got, "purged twice")
					got = i
				}
			}
			assert.Equal(t, tt.purged, got)
			s := b.Stats()
			if tt.purged >= 0 {
				assert.Equal(t, 1, s.Purges)
				assert.Equal(t, PurgeHitsCollapsed, s.LastPurge)
				assert.Zero(t, b.Index().Len())
			} else {
				assert.Zero(t, s.Purges)
				assert.Equal(t, 8, b.Index().Len())
			}
		})
	}
}

// TestBeliefPlaceAndPending proves Place returns the prediction made
// before the chain is added, inserts the chain, and reports a request as
// concurrent while another with the same first block is pending.
func TestBeliefPlaceAndPending(t *testing.T) {
	b := NewBelief(1024)
	keys := Keys{Leading: 9, Blocks: chainOf(100, 4), BlockBytes: DefaultBlockSize}
	p1 := b.Place(keys)
	assert.Equal(t, Placement{Predicted: 0, Head: 100}, p1)
	p2 := b.Place(keys)
	assert.Equal(t, Placement{Predicted: 4, Concurrent: true, Head: 100}, p2)
	other := b.Place(Keys{Blocks: chainOf(200, 2), BlockBytes: DefaultBlockSize})
	assert.False(t, other.Concurrent, "another prefix is not concurrent")
	b.EndPending(p1.Head)
	p3 := b.Place(keys)
	assert.True(t, p3.Concurrent, "p2 still pending")
	b.EndPending(p2.Head)
	b.EndPending(p3.Head)
	assert.False(t, b.Place(keys).Concurrent, "nothing pending any more")
	assert.Equal(t, Placement{}, b.Place(Keys{}), "no blocks: nothing predicted, nothing pending")
	b.EndPending(0) // no-op
}

// TestBeliefEngineSizesInRequestBlocks proves the engine-derived capacity
// is counted in the requests' own block size: with 64-byte blocks the
// index holds twice as many blocks as with 128, whichever comes first, the
// engine's sample or the first request.
func TestBeliefEngineSizesInRequestBlocks(t *testing.T) {
	// 4096 engine blocks of 16 tokens, ~4 bytes a token: 256 KiB of text.
	eng := EngineCache{NumBlocks: 4096, BlockTokens: 16, PrefixQueries: -1}
	const cacheBytes = 4096 * 16 * BytesPerToken
	for _, tt := range []struct {
		name         string
		blockBytes   int
		requestFirst bool
	}{
		{"128-byte blocks", 128, false},
		{"64-byte blocks, engine first", 64, false},
		{"64-byte blocks, request first", 64, true},
		{"32-byte blocks, engine first", 32, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBelief(DefaultIndexCapacity) // 2 MiB configured: above the engine's cache
			keys := Keys{Blocks: chainOf(1, 2), BlockBytes: tt.blockBytes}
			if tt.requestFirst {
				b.Place(keys)
				assert.Equal(t, DefaultIndexCapacity*DefaultBlockSize/tt.blockBytes, b.Index().Capacity(),
					"the configured capacity covers as many bytes in smaller blocks")
				b.Engine(eng)
			} else {
				b.Engine(eng)
				b.Place(keys)
			}
			want := cacheBytes / tt.blockBytes
			assert.Equal(t, want, b.Index().Capacity())
			s := b.Stats()
			assert.True(t, s.FromEngine)
			assert.Equal(t, want, s.MaxCapacity)
			// Hits grow back to that maximum, not beyond.
			b.Index().SetCapacity(want - 1)
			b.Check(Check{PredictedBlocks: 1, CachedTokens: 1})
			assert.Equal(t, want, b.Index().Capacity())
		})
	}
}

// TestBeliefEngineCounters proves a prefix-cache counter going backwards
// purges the index, and that an engine without the counter never does.
func TestBeliefEngineCounters(t *testing.T) {
	for _, tt := range []struct {
		name    string
		queries []float64
		purgeAt int
	}{
		{"monotonic", []float64{10, 20, 20, 30}, -1},
		{"reset", []float64{10, 20, 5}, 2},
		{"reset to zero", []float64{10, 0}, 1},
		{"no counter", []float64{-1, -1, -1}, -1},
		{"counter appears", []float64{-1, 5, 3}, 2},
		{"counter absent after a restart", []float64{10, 20, -1, 5}, 3},
		{"first sample zero", []float64{0, 0}, -1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBelief(1024)
			b.Index().Insert(chainOf(1, 5))
			got := -1
			for i, q := range tt.queries {
				if b.Engine(EngineCache{PrefixQueries: q}) {
					got = i
				}
			}
			assert.Equal(t, tt.purgeAt, got)
			if got >= 0 {
				assert.Zero(t, b.Index().Len())
				assert.Equal(t, PurgeCountersReset, b.Stats().LastPurge)
			} else {
				assert.Equal(t, 5, b.Index().Len())
				assert.False(t, b.Stats().FromEngine, "no cache size reported")
				assert.Equal(t, 1024, b.Index().Capacity())
			}
		})
	}
}

// TestBeliefSmallEngineFloor proves a tiny engine cache still leaves
// MinIndexBlocks, and that Configure does not override an engine size.
func TestBeliefSmallEngineFloor(t *testing.T) {
	b := NewBelief(1024)
	b.Engine(EngineCache{NumBlocks: 2, BlockTokens: 16, PrefixQueries: -1})
	assert.Equal(t, MinIndexBlocks, b.Index().Capacity())
	b.Configure(4096)
	assert.Equal(t, MinIndexBlocks, b.Index().Capacity(), "the engine's size wins over the configured one")
	c := NewBelief(1024)
	c.Configure(300)
	assert.Equal(t, 300, c.Index().Capacity(), "without engine metrics the configured size applies at once")
}

// TestBeliefPredictedTokens proves the prediction is turned into tokens
// with the engine's own bytes per token on the prompt, capped at the
// prompt.
func TestBeliefPredictedTokens(t *testing.T) {
	b := NewBelief(1024)
	b.Place(Keys{Blocks: chainOf(1, 1), BlockBytes: 128})
	got := b.Check(Check{PredictedBlocks: 2, CachedTokens: 1, PromptTokens: 100, PromptBytes: 512})
	assert.Equal(t, 50, got.PredictedTokens, "256 of 512 bytes believed: half the prompt's tokens")
	got = b.Check(Check{PredictedBlocks: 8, CachedTokens: 60, PromptTokens: 100, PromptBytes: 512})
	assert.Equal(t, 100, got.PredictedTokens, "capped at the prompt")
	got = b.Check(Check{PredictedBlocks: 8, CachedTokens: 1})
	assert.Zero(t, got.PredictedTokens, "no prompt size reported")
	assert.InDelta(t, 1.0, b.Stats().Precision(), 1e-9)
	got = b.Check(Check{PredictedBlocks: 8, CachedTokens: 1, PromptTokens: 100, PromptBytes: 512})
	assert.Equal(t, CheckPartial, got.Result)
	assert.InDelta(t, 0.75, b.Stats().Precision(), 1e-9, "a partial counts against the precision")
}
