package simengine

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSubmitValidation(t *testing.T) {
	e := newEngine(t, testConfig(4)) // 64 tokens
	assert.ErrorIs(t, e.Submit(Request{ID: 1, MaxTokens: 1}), ErrEmptyPrompt)
	assert.ErrorIs(t, e.Submit(Request{ID: 1, Prompt: synth(1, 4)}), ErrMaxTokens)
	assert.ErrorIs(t, e.Submit(Request{ID: 1, Prompt: synth(1, 60), MaxTokens: 5}), ErrTooLong)
	require.NoError(t, e.Submit(Request{ID: 1, Prompt: synth(1, 60), MaxTokens: 4}))
	assert.ErrorIs(t, e.Submit(Request{ID: 1, Prompt: synth(1, 4), MaxTokens: 1}), ErrDuplicateID)
	assert.False(t, e.Idle())
}

func TestConfigNormalize(t *testing.T) {
	c, err := Config{}.Normalize()
	require.NoError(t, err)
	assert.Equal(t, DefaultConfig(), c)

	c, err = Config{NumBlocks: 10, MaxModelLen: 1000}.Normalize()
	require.NoError(t, err)
	assert.Equal(t, 160, c.MaxModelLen, "clamped to the cache size")

	_, err = Config{NumBlocks: -1}.Normalize()
	assert.ErrorIs(t, err, ErrConfig)
	_, err = New(Config{Speed: -2})
	assert.True(t, errors.Is(err, ErrConfig))
}

func TestStepTimeAndSpeed(t *testing.T) {
	c := DefaultConfig()
	// A decode step at a batch of 32 is about 13 ms; prefill ~16.7k tok/s.
	assert.Equal(t, 13200*time.Microsecond, c.StepTime(0, 32))
	assert.Equal(t, 10*time.Millisecond+2048*60*time.Microsecond+100*time.Microsecond, c.StepTime(2048, 1))
	c.Speed = 10
	assert.Equal(t, 1320*time.Microsecond, c.StepTime(0, 32))
	assert.Equal(t, time.Duration(1), Config{Speed: 1}.StepTime(0, 0), "never zero")
}

func TestStopAndLength(t *testing.T) {
	e := newEngine(t, testConfig(64))
	r := runOne(t, e, Request{ID: 1, Prompt: synth(1, 20), MaxTokens: 10, OutputTokens: 3})
	assert.Equal(t, FinishStop, r.fin.Reason)
	assert.Equal(t, 3, r.fin.Usage.CompletionTokens)
	assert.Len(t, r.tokens, 3)

	r = runOne(t, e, Request{ID: 2, Prompt: synth(2, 20), MaxTokens: 3, OutputTokens: 10})
	assert.Equal(t, FinishLength, r.fin.Reason)
	assert.Equal(t, "length", r.fin.Reason.String())
	assert.Len(t, r.tokens, 3)

	r = runOne(t, e, Request{ID: 3, Prompt: synth(3, 20), MaxTokens: 1})
	assert.Equal(t, FinishLength, r.fin.Reason)
	assert.Len(t, r.tokens, 1)
	for _, tok := range r.tokens {
		_, ok := TokenText(tok)
		assert.True(t, ok, "generated tokens have text")
	}
}

func TestSamePromptSameAnswer(t *testing.T) {
	e := newEngine(t, testConfig(64))
	a := runOne(t, e, Request{ID: 1, Prompt: synth(1, 40), MaxTokens: 12})
	b := runOne(t, e, Request{ID: 2, Prompt: synth(1, 40), MaxTokens: 12})
	c := runOne(t, e, Request{ID: 3, Prompt: synth(2, 40), MaxTokens: 12})
	assert.Equal(t, a.tokens, b.tokens)
	assert.NotEqual(t, a.tokens, c.tokens)
}

func TestPrefixCacheHitsAndAccounting(t *testing.T) {
	e := newEngine(t, testConfig(64))
	p := synth(1, 100)

	assert.Zero(t, e.CachedPrefixTokens(p))
	r := runOne(t, e, Request{ID: 1, Prompt: p, MaxTokens: 5})
	assert.Zero(t, r.cached)
	assert.Equal(t, Usage{PromptTokens: 100, CachedTokens: 0, CompletionTokens: 5}, r.fin.Usage)

	// 6 full blocks (96 tokens) are cached; the 4-token tail is not.
	assert.Equal(t, 96, e.CachedPrefixTokens(p))
	r = runOne(t, e, Request{ID: 2, Prompt: p, MaxTokens: 5})
	assert.Equal(t, 96, r.cached)
	assert.Equal(t, 96, r.fin.Usage.CachedTokens)

	// A prompt sharing 50 tokens shares 3 full blocks.
	q := concat(p[:50], synth(2, 50))
	assert.Equal(t, 48, e.CachedPrefixTokens(q))
	r = runOne(t, e, Request{ID: 3, Prompt: q, MaxTokens: 2})
	assert.Equal(t, 48, r.cached)

	// A prompt of exactly 4 blocks, repeated, recomputes its last block so
	// that one token is left to compute.
	x := synth(3, 64)
	runOne(t, e, Request{ID: 4, Prompt: x, MaxTokens: 1})
	assert.Equal(t, 48, e.CachedPrefixTokens(x))
	assert.Equal(t, 48, runOne(t, e, Request{ID: 5, Prompt: x, MaxTokens: 1}).cached)
	// Its extension still hits all 4 blocks.
	assert.Equal(t, 64, e.CachedPrefixTokens(concat(x, synth(4, 3))))

	st := e.Stats()
	assert.EqualValues(t, 100+100+100+64+64, st.PrefixCacheQueries)
	assert.EqualValues(t, 0+96+48+0+48, st.PrefixCacheHits)
	assert.EqualValues(t, 100+100+100+64+64, st.PromptTokens)
	assert.EqualValues(t, 5+5+2+1+1, st.GenerationTokens)
	assert.EqualValues(t, 5, st.Submitted)
	assert.EqualValues(t, 5, st.Finished)
	assert.Zero(t, st.Waiting)
	assert.Zero(t, st.Running)
	assert.Zero(t, st.UsedBlocks)
	assert.Zero(t, st.KVUsage)
	assert.Zero(t, st.Evictions)
	assert.Equal(t, 64, st.NumBlocks)
	assert.Equal(t, 16, st.BlockSize)
	assert.Positive(t, st.CachedBlocks)
}

// Requests of 33 tokens use 3 blocks and leave 2 cached. With 8 blocks the
// eviction order can be followed exactly.
func TestLRUEvictionOrder(t *testing.T) {
	e := newEngine(t, testConfig(8))
	A, B, C, D, E := synth(1, 33), synth(2, 33), synth(3, 33), synth(4, 33), synth(5, 33)
	for i, p := range [][]uint32{A, B, C} {
		runOne(t, e, Request{ID: uint64(i + 1), Prompt: p, MaxTokens: 1})
	}
	for _, p := range [][]uint32{A, B, C} {
		assert.Equal(t, 32, e.CachedPrefixTokens(p))
	}
	assert.Zero(t, e.Stats().Evictions)

	// Using B again makes it the most recently used; looking A up through
	// CachedPrefixTokens must not refresh it.
	assert.Equal(t, 32, runOne(t, e, Request{ID: 4, Prompt: B, MaxTokens: 1}).cached)
	for range 3 {
		e.CachedPrefixTokens(A)
	}

	// D takes the 2 empty blocks and evicts A's last block.
	runOne(t, e, Request{ID: 5, Prompt: D, MaxTokens: 1})
	assert.EqualValues(t, 1, e.Stats().Evictions)
	assert.Equal(t, 16, e.CachedPrefixTokens(A))
	assert.Equal(t, 32, e.CachedPrefixTokens(B))
	assert.Equal(t, 32, e.CachedPrefixTokens(C))

	// E takes D's empty block, then A's first block and C's last block;
	// B (used recently) and D survive.
	runOne(t, e, Request{ID: 6, Prompt: E, MaxTokens: 1})
	assert.EqualValues(t, 3, e.Stats().Evictions)
	assert.Equal(t, 0, e.CachedPrefixTokens(A))
	assert.Equal(t, 16, e.CachedPrefixTokens(C))
	assert.Equal(t, 32, e.CachedPrefixTokens(B))
	assert.Equal(t, 32, e.CachedPrefixTokens(D))
	assert.Equal(t, 32, e.CachedPrefixTokens(E))
}

func TestPinnedBlocksAreNotEvicted(t *testing.T) {
	e := newEngine(t, testConfig(8))
	x := synth(100, 32)
	xHashes := BlockHashes(x, 16)
	require.NoError(t, e.Submit(Request{ID: 100, Prompt: x, MaxTokens: 20}))
	for i := range 6 {
		require.NoError(t, e.Submit(Request{ID: uint64(i + 1), Prompt: synth(uint64(i+1), 33), MaxTokens: 1}))
	}
	xDone, xChecked := false, 0
	drive(t, e, 0, 1000, func(_ time.Duration, evs []Event) {
		for _, ev := range evs {
			if ev.ID == 100 && ev.Kind == EventFinished {
				xDone = true
				assert.Zero(t, ev.Usage.Preemptions, "the oldest sequence is never preempted")
			}
		}
		if !xDone {
			assert.Equal(t, 2, e.kv.matchLen(xHashes), "running sequence's prompt blocks stay cached")
			xChecked++
		}
		st := e.Stats()
		assert.LessOrEqual(t, st.UsedBlocks, st.NumBlocks)
	})
	assert.True(t, xDone)
	// x takes at least 20 steps (one token each); its blocks were checked
	// after every one but the step it finished on.
	assert.GreaterOrEqual(t, xChecked, 19, "steps checked while x ran")
	assert.Positive(t, e.Stats().Evictions, "the churn did evict other blocks")
}

func TestTTFTGrowsWithUncachedTokensAndFallsOnHit(t *testing.T) {
	cfg := DefaultConfig()
	var prev time.Duration
	for i, n := range []int{256, 2048, 8192} {
		e := newEngine(t, cfg)
		r := runOne(t, e, Request{ID: 1, Prompt: synth(uint64(i), n), MaxTokens: 1})
		assert.Greater(t, r.firstAt, prev, "TTFT for %d tokens", n)
		prev = r.firstAt
	}

	e := newEngine(t, cfg)
	p := synth(9, 8192)
	cold := runOne(t, e, Request{ID: 1, Prompt: p, MaxTokens: 1})
	// 8192 tokens in 4 chunks of 2048.
	assert.Equal(t, 4*cfg.StepTime(2048, 1), cold.firstAt)
	hit := runOne(t, e, Request{ID: 2, Prompt: p, MaxTokens: 1})
	assert.Equal(t, 8176, hit.cached)
	assert.Equal(t, cfg.StepTime(16, 1), hit.firstAt)
	assert.Greater(t, cold.firstAt, 10*hit.firstAt)

	// Half the prompt cached: TTFT in between.
	half := runOne(t, e, Request{ID: 3, Prompt: concat(p[:4096], synth(10, 4096)), MaxTokens: 1})
	assert.Equal(t, 4096, half.cached)
	assert.Greater(t, half.firstAt, hit.firstAt)
	assert.Less(t, half.firstAt, cold.firstAt)
}

func TestBatchingLimits(t *testing.T) {
	cfg := testConfig(256)
	cfg.MaxNumSeqs = 3
	cfg.MaxNumBatchedTokens = 40
	e := newEngine(t, cfg)
	for i := range 10 {
		require.NoError(t, e.Submit(Request{ID: uint64(i), Prompt: synth(uint64(i), 50), MaxTokens: 5}))
	}
	sawChunk, sawMixed := false, false
	recs, _ := drive(t, e, 0, 1000, func(dt time.Duration, _ []Event) {
		st := e.Stats()
		ls := st.LastStep
		assert.LessOrEqual(t, st.Running, 3)
		assert.LessOrEqual(t, ls.Seqs, 3)
		assert.LessOrEqual(t, ls.PrefillTokens+ls.DecodeTokens, 40)
		assert.Equal(t, cfg.StepTime(ls.PrefillTokens, ls.Seqs), dt)
		assert.Equal(t, dt, ls.Duration)
		if ls.PrefillTokens == 40 && ls.Seqs == 1 {
			sawChunk = true
		}
		if ls.PrefillTokens > 0 && ls.DecodeTokens > 0 {
			sawMixed = true
		}
	})
	assert.True(t, sawChunk, "a 50-token prompt was split into chunks")
	assert.True(t, sawMixed, "prefill chunks ran beside decodes")
	require.Len(t, recs, 10)
	for i := range uint64(10) {
		assert.Len(t, recs[i].tokens, 5)
		if i > 0 {
			assert.GreaterOrEqual(t, recs[i].firstAt, recs[i-1].firstAt, "FCFS")
		}
	}
}

func TestPreemptionWhenBlocksRunOut(t *testing.T) {
	// 10 blocks = 160 tokens; each request grows to 149 tokens (10 blocks).
	cfg := testConfig(10)
	solo := map[uint64][]uint32{}
	for id := uint64(1); id <= 2; id++ {
		e := newEngine(t, cfg)
		solo[id] = runOne(t, e, Request{ID: id, Prompt: synth(id, 60), MaxTokens: 90}).tokens
	}

	e := newEngine(t, cfg)
	require.NoError(t, e.Submit(Request{ID: 1, Prompt: synth(1, 60), MaxTokens: 90}))
	require.NoError(t, e.Submit(Request{ID: 2, Prompt: synth(2, 60), MaxTokens: 90}))
	maxRunning := 0
	recs, _ := drive(t, e, 0, 2000, func(time.Duration, []Event) {
		maxRunning = max(maxRunning, e.Stats().Running)
		assert.LessOrEqual(t, e.Stats().UsedBlocks, 10)
	})
	assert.Equal(t, 2, maxRunning, "both ran together before the cache filled up")
	st := e.Stats()
	assert.Positive(t, st.Preemptions)
	assert.Zero(t, recs[1].fin.Usage.Preemptions, "the oldest keeps running")
	assert.Positive(t, recs[2].fin.Usage.Preemptions, "the youngest is preempted")
	for id := uint64(1); id <= 2; id++ {
		assert.Equal(t, FinishLength, recs[id].fin.Reason)
		assert.Equal(t, 90, recs[id].fin.Usage.CompletionTokens)
		assert.Equal(t, solo[id], recs[id].tokens, "recompute gives the same answer")
	}
	assert.Greater(t, recs[2].doneAt, recs[1].doneAt)
	assert.Zero(t, st.UsedBlocks)
	assert.EqualValues(t, 180, st.GenerationTokens)
	assert.EqualValues(t, 120, st.PrefixCacheQueries, "queries are counted once per request")
}

func TestPreemptedRequestWaitsAtTheHead(t *testing.T) {
	cfg := testConfig(10)
	e := newEngine(t, cfg)
	require.NoError(t, e.Submit(Request{ID: 1, Prompt: synth(1, 60), MaxTokens: 90}))
	require.NoError(t, e.Submit(Request{ID: 2, Prompt: synth(2, 60), MaxTokens: 90}))
	for step := 0; e.Stats().Preemptions == 0; step++ {
		require.Less(t, step, 500)
		e.Step()
	}
	// A later arrival queues behind the preempted request.
	require.NoError(t, e.Submit(Request{ID: 3, Prompt: synth(3, 20), MaxTokens: 1}))
	st := e.Stats()
	assert.Equal(t, 1, st.Running)
	assert.Equal(t, 2, st.Waiting)
	require.Len(t, e.waiting, 2)
	assert.EqualValues(t, 2, e.waiting[0].req.ID)
	assert.EqualValues(t, 3, e.waiting[1].req.ID)
	recs, _ := drive(t, e, 0, 2000, nil)
	assert.Len(t, recs, 3)
	assert.Equal(t, 1, recs[3].fin.Usage.CompletionTokens)
}

func TestCancel(t *testing.T) {
	e := newEngine(t, testConfig(64))
	p := synth(1, 200)
	require.NoError(t, e.Submit(Request{ID: 1, Prompt: p, MaxTokens: 50}))
	require.NoError(t, e.Submit(Request{ID: 2, Prompt: synth(2, 10), MaxTokens: 5}))
	e.Step() // 200 tokens of 1 but budget 256: prefill done + 2 admitted
	e.Step()
	assert.Equal(t, 2, e.Stats().Running)
	assert.True(t, e.Cancel(1))
	assert.False(t, e.Cancel(1))
	assert.False(t, e.Cancel(99))
	assert.Equal(t, 1, e.Stats().Running)
	// What request 1 computed stays cached.
	assert.Equal(t, 192, e.CachedPrefixTokens(p))

	require.NoError(t, e.Submit(Request{ID: 3, Prompt: synth(3, 10), MaxTokens: 5}))
	assert.True(t, e.Cancel(3), "cancel a waiting request")
	recs, _ := drive(t, e, 0, 100, nil)
	assert.NotContains(t, recs, uint64(1))
	assert.NotContains(t, recs, uint64(3))
	st := e.Stats()
	assert.EqualValues(t, 2, st.Cancelled)
	assert.EqualValues(t, 1, st.Finished)
	assert.Zero(t, st.UsedBlocks)
	assert.True(t, e.Idle())
}

func TestRestartWipesEverything(t *testing.T) {
	e := newEngine(t, testConfig(64))
	p := synth(1, 100)
	runOne(t, e, Request{ID: 1, Prompt: p, MaxTokens: 3})
	require.Equal(t, 96, e.CachedPrefixTokens(p))
	require.NoError(t, e.Submit(Request{ID: 2, Prompt: p, MaxTokens: 3}))
	require.NoError(t, e.Submit(Request{ID: 3, Prompt: p, MaxTokens: 3}))
	e.Step()
	require.NoError(t, e.Submit(Request{ID: 4, Prompt: p, MaxTokens: 3}))

	assert.Equal(t, []uint64{2, 3, 4}, e.Restart())
	assert.True(t, e.Idle())
	assert.Zero(t, e.CachedPrefixTokens(p))
	st := e.Stats()
	assert.Equal(t, Stats{NumBlocks: 64, BlockSize: 16}, st)

	r := runOne(t, e, Request{ID: 2, Prompt: p, MaxTokens: 3})
	assert.Zero(t, r.cached)
}

func TestResetPrefixCache(t *testing.T) {
	e := newEngine(t, testConfig(64))
	p := synth(1, 100)
	runOne(t, e, Request{ID: 1, Prompt: p, MaxTokens: 3})
	assert.Equal(t, 6, e.ResetPrefixCache())
	assert.Zero(t, e.CachedPrefixTokens(p))
	assert.EqualValues(t, 1, e.Stats().Finished, "counters survive")
	assert.Zero(t, runOne(t, e, Request{ID: 2, Prompt: p, MaxTokens: 3}).cached)
	assert.Equal(t, 96, e.CachedPrefixTokens(p))
}

// A mixed workload with shared prefixes, arrivals during the run and small
// caches: the counters must add up exactly to what the requests saw.
func TestAccountingIsExact(t *testing.T) {
	cfg := testConfig(40)
	cfg.MaxNumSeqs = 4
	cfg.MaxNumBatchedTokens = 64
	e := newEngine(t, cfg)
	prefixes := [][]uint32{synth(1, 80), synth(2, 40), synth(3, 130)}
	var sumPrompt, nextID int
	submit := func() {
		i := nextID
		nextID++
		p := concat(prefixes[i%3], synth(uint64(1000+i%5), 5+i%23))
		sumPrompt += len(p)
		require.NoError(t, e.Submit(Request{ID: uint64(i), Prompt: p, MaxTokens: 1 + i%17, OutputTokens: 12}))
	}
	for range 10 {
		submit()
	}
	recs, _ := drive(t, e, 0, 5000, func(time.Duration, []Event) {
		if nextID < 40 {
			submit()
		}
		st := e.Stats()
		assert.LessOrEqual(t, st.UsedBlocks, st.NumBlocks)
		assert.LessOrEqual(t, st.CachedBlocks, st.NumBlocks)
		assert.LessOrEqual(t, st.Running, 4)
	})
	require.Len(t, recs, 40)
	var sumCached, sumCompletion, hits int
	for id, r := range recs {
		u := r.fin.Usage
		assert.Equal(t, r.cached, u.CachedTokens)
		assert.Zero(t, u.CachedTokens%16)
		assert.Less(t, u.CachedTokens, u.PromptTokens)
		assert.Len(t, r.tokens, u.CompletionTokens)
		assert.Equal(t, min(1+int(id)%17, 12), u.CompletionTokens)
		sumCached += u.CachedTokens
		sumCompletion += u.CompletionTokens
		if u.CachedTokens > 0 {
			hits++
		}
	}
	st := e.Stats()
	assert.EqualValues(t, sumPrompt, st.PrefixCacheQueries)
	assert.EqualValues(t, sumPrompt, st.PromptTokens)
	assert.EqualValues(t, sumCached, st.PrefixCacheHits)
	assert.EqualValues(t, sumCompletion, st.GenerationTokens)
	assert.EqualValues(t, 40, st.Finished)
	assert.Positive(t, hits, "shared prefixes hit")
	assert.Positive(t, st.Evictions, "a 40-block cache had to evict")
	assert.Zero(t, st.UsedBlocks)
}
