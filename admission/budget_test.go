package admission

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestBucketHoldsTheLimit is the request budget: a full minute's worth at
// once, then the rate, and the wait until the next one fits.
func TestBucketHoldsTheLimit(t *testing.T) {
	b := NewBucket(6, t0) // 6 per minute: one every 10 s
	for i := range 6 {
		ok, _ := b.Reserve(1, t0)
		require.True(t, ok, "request %d", i)
		b.Settle(1, 1, t0)
	}
	ok, wait := b.Reserve(1, t0)
	assert.False(t, ok, "the seventh in the same instant")
	assert.Equal(t, 10*time.Second, wait)
	ok, wait = b.Reserve(1, t0.Add(9*time.Second))
	assert.False(t, ok)
	assert.Equal(t, time.Second, wait.Round(time.Millisecond))
	ok, _ = b.Reserve(1, t0.Add(10*time.Second))
	assert.True(t, ok)
	assert.Equal(t, 1, mustReservations(b))
	b.Settle(1, 1, t0.Add(10*time.Second))
	assert.Equal(t, 0, mustReservations(b))
}

func mustReservations(b *Bucket) int {
	n, _ := b.Reservations()
	return n
}

// TestBucketTable covers reservation and settlement as a table: what a
// sequence of requests gets and what is left.
func TestBucketTable(t *testing.T) {
	type step struct {
		at       time.Duration
		estimate float64
		used     float64 // settled right away; -1 leaves it reserved
		ok       bool
	}
	cases := []struct {
		name  string
		limit float64
		steps []step
		left  float64 // at the last step's time
	}{
		{"refund: a refused request uses nothing", 100, []step{{0, 60, 0, true}, {0, 60, 0, true}}, 100},
		{"estimate fits, use beyond it goes into debt", 100, []step{{0, 90, 130, true}, {0, 1, -1, false}}, -30},
		{"the debt is waited out", 60, []step{{0, 60, 90, true}, {30 * time.Second, 1, -1, false}, {31 * time.Second, 1, -1, true}}, 0},
		{"a request larger than the whole budget runs from a full bucket", 100, []step{{0, 250, 250, true}, {0, 1, -1, false}}, -150},
		{"concurrent reservations each need their own room", 100, []step{{0, 40, -1, true}, {0, 40, -1, true}, {0, 40, -1, false}}, 20},
		{"no limit admits everything", 0, []step{{0, 1e9, -1, true}, {0, 1e9, -1, true}}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBucket(tc.limit, t0)
			var at time.Time
			for i, s := range tc.steps {
				at = t0.Add(s.at)
				ok, _ := b.Reserve(s.estimate, at)
				require.Equal(t, s.ok, ok, "step %d", i)
				if ok && s.used >= 0 {
					b.Settle(s.estimate, s.used, at)
				}
			}
			assert.InDelta(t, tc.left, b.Available(at), 1e-6)
		})
	}
}

// TestBucketOverrunBoundedByExcess runs many requests, some of them at
// once, against a token budget and checks that what was admitted in the
// first minute never exceeds the budget plus the largest excess of one
// request over its estimate.
func TestBucketOverrunBoundedByExcess(t *testing.T) {
	const limit = 10_000.0
	b := NewBucket(limit, t0)
	var e Estimate
	spent, maxExcess, lateExcess := 0.0, 0.0, 0.0
	at := t0
	type held struct {
		prompt    int
		est, used float64
	}
	var inFlight []held
	for i := range 400 {
		at = t0.Add(time.Duration(i) * 100 * time.Millisecond) // 40 s
		prompt := 400 + (i%7)*40                               // bytes
		used := PromptTokens(prompt) + float64(80+(i%5)*10)    // output 80-120
		est := e.Tokens(prompt)
		if ok, _ := b.Reserve(est, at); !ok {
			continue
		}
		inFlight = append(inFlight, held{prompt, est, used})
		// Four at a time: each settles when the fourth after it starts.
		if len(inFlight) == 4 {
			h := inFlight[0]
			inFlight = inFlight[1:]
			b.Settle(h.est, h.used, at)
			e.Observe(h.prompt, h.used)
			spent += h.used
			maxExcess = max(maxExcess, h.used-h.est)
			if i >= 40 {
				lateExcess = max(lateExcess, h.used-h.est)
			}
		}
	}
	for _, h := range inFlight {
		b.Settle(h.est, h.used, at)
		spent += h.used
		maxExcess = max(maxExcess, h.used-h.est)
	}
	budget := limit * (1 + at.Sub(t0).Minutes())
	assert.LessOrEqual(t, spent, budget+4*maxExcess, "spent %v of %v (max excess %v)", spent, budget, maxExcess)
	assert.Greater(t, spent, 0.9*limit, "the budget was used, not starved")
	assert.Greater(t, maxExcess, 100.0, "the first requests reserve their prompt only")
	assert.Less(t, lateExcess, 40.0, "then the estimate learned the output")
}

// TestSetLimitKeepsWhatWasSpent covers a limit changed by a reload.
func TestSetLimitKeepsWhatWasSpent(t *testing.T) {
	b := NewBucket(100, t0)
	ok, _ := b.Reserve(70, t0)
	require.True(t, ok)
	b.Settle(70, 70, t0)
	b.SetLimit(150, t0)
	assert.InDelta(t, 80, b.Available(t0), 1e-9)
	b.SetLimit(50, t0)
	assert.InDelta(t, -20, b.Available(t0), 1e-9)
	b.SetLimit(0, t0)
	ok, _ = b.Reserve(1e6, t0)
	assert.True(t, ok, "no limit")
	b.Settle(1e6, 1e6, t0)
	b.SetLimit(10, t0)
	assert.InDelta(t, 10, b.Available(t0), 1e-9, "a new limit starts full")
}

// TestEstimateLearnsTheOutput covers the prompt estimate (the one
// bytes-per-token rule) and the learned excess.
func TestEstimateLearnsTheOutput(t *testing.T) {
	assert.Equal(t, 0.0, PromptTokens(0))
	assert.Equal(t, 1.0, PromptTokens(1))
	assert.Equal(t, 25.0, PromptTokens(100))
	assert.Equal(t, 26.0, PromptTokens(101))
	var e Estimate
	assert.Equal(t, 25.0, e.Tokens(100), "nothing learned: the prompt alone")
	e.Observe(100, 125)
	assert.Equal(t, 100.0, e.Excess(), "the first request sets it")
	e.Observe(100, 25+180)
	assert.Equal(t, 110.0, e.Excess(), "then an eighth of each difference")
	e.Observe(100, 0)
	assert.InDelta(t, 110+(-25-110)/8.0, e.Excess(), 1e-9, "use below the prompt estimate pulls it down")
	var low Estimate
	low.Observe(400, 60) // a prompt estimated at 100 tokens used 60
	assert.Equal(t, -40.0, low.Excess())
	assert.Equal(t, 60.0, low.Tokens(400))
	assert.Equal(t, 0.0, low.Tokens(40), "never below zero")
}

// TestSheddableAllowed is the share rule.
func TestSheddableAllowed(t *testing.T) {
	for _, tc := range []struct {
		used, caps int
		share      float64
		want       bool
	}{
		{0, 10, 0.8, true}, {7, 10, 0.8, true}, {8, 10, 0.8, false}, {9, 10, 0.8, false},
		{0, 1, 0.8, false}, {0, 1, 1, true}, {0, 0, 0.5, true}, {2, 4, 0.5, false}, {1, 4, 0.5, true},
	} {
		assert.Equal(t, tc.want, SheddableAllowed(tc.used, tc.caps, tc.share), "%+v", tc)
	}
}
