package simengine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// synth returns n distinct-looking token ids derived from seed.
func synth(seed uint64, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(mix64(seed*1_000_003 + uint64(i)))
	}
	return out
}

// concat joins token slices into a new one.
func concat(parts ...[]uint32) []uint32 {
	var out []uint32
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// testConfig is a small engine with simple, exact step costs:
// 1 ms per step, 1 us per prefill token, 10 us per sequence.
func testConfig(blocks int) Config {
	return Config{
		NumBlocks:           blocks,
		BlockSize:           16,
		MaxNumSeqs:          8,
		MaxNumBatchedTokens: 256,
		StepFixed:           time.Millisecond,
		PrefillTokenCost:    time.Microsecond,
		SeqCost:             10 * time.Microsecond,
	}
}

func newEngine(t *testing.T, cfg Config) *Engine {
	t.Helper()
	e, err := New(cfg)
	require.NoError(t, err)
	return e
}

// record is what the virtual-time driver saw of one request.
type record struct {
	firstAt, doneAt time.Duration
	cached          int
	tokens          []uint32
	fin             Event
}

// drive runs e on a virtual clock until it is idle (at most maxSteps
// steps), calling check after every step, and returns what each request
// saw and the final time.
func drive(t *testing.T, e *Engine, now time.Duration, maxSteps int, check func(dt time.Duration, evs []Event)) (map[uint64]*record, time.Duration) {
	t.Helper()
	recs := map[uint64]*record{}
	get := func(id uint64) *record {
		r, ok := recs[id]
		if !ok {
			r = &record{}
			recs[id] = r
		}
		return r
	}
	for step := 0; !e.Idle(); step++ {
		require.Less(t, step, maxSteps, "engine did not go idle")
		dt, evs := e.Step()
		require.Positive(t, dt)
		now += dt
		for _, ev := range evs {
			r := get(ev.ID)
			switch ev.Kind {
			case EventFirstToken:
				r.firstAt, r.cached = now, ev.CachedTokens
				r.tokens = append(r.tokens, ev.Token)
			case EventToken:
				r.tokens = append(r.tokens, ev.Token)
			case EventFinished:
				r.doneAt, r.fin = now, ev
			}
		}
		if check != nil {
			check(dt, evs)
		}
	}
	return recs, now
}

// runOne submits one request and drives the engine until idle.
func runOne(t *testing.T, e *Engine, r Request) *record {
	t.Helper()
	require.NoError(t, e.Submit(r))
	recs, _ := drive(t, e, 0, 10_000, nil)
	return recs[r.ID]
}
