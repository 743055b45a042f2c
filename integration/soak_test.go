package integration

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/internal/testrig/soak"
)

// TestSoakShort proves, over 20 s of open-loop traffic at 40 requests/s
// with random faults from the matrix (429, 503, 500, stalls, cut streams,
// slow streams, clients leaving), the invariants that must hold however
// long caddy runs: no reservation leaks, no request resent after its first
// byte reached the client, no cut answer shown as complete, no truncated
// request body at a replica, no replica above its cap, every error in
// OpenAI's shape, and caddy's goroutines and memory back near their start.
// (-short runs it for 5 s.)
func TestSoakShort(t *testing.T) {
	d := 20 * time.Second
	if testing.Short() {
		d = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), d+90*time.Second)
	defer cancel()
	cfg := soak.Config{
		Caddy:    caddyBin,
		Duration: d,
		Rate:     40,
		Seed:     uint64(time.Now().UnixNano()),
		Dir:      t.TempDir(),
	}
	if testing.Verbose() {
		cfg.Progress = os.Stderr
	}
	res, err := soak.Run(ctx, cfg)
	require.NoError(t, err)
	t.Logf("seed %d\n%s", cfg.Seed, res.Summary())

	assert.Positive(t, res.Requests)
	assert.Positive(t, res.Successes)
	assert.Zero(t, res.LeakedReservations, "leaked reservations")
	assert.Zero(t, res.LeftQueued, "requests left queued")
	assert.Zero(t, res.DuplicateSends, "requests resent after their first byte reached the client")
	assert.Zero(t, res.TruncatedShownComplete, "cut answers shown as complete")
	assert.Zero(t, res.TruncatedRequestBodies, "requests that reached a replica with a truncated body")
	assert.Zero(t, res.CapViolations, "replicas above their cap")
	assert.Zero(t, res.BadErrorBodies, "errors not in OpenAI's shape")
	assert.Empty(t, res.UnexpectedFailures, "fault-free requests that failed")
	assert.LessOrEqual(t, res.End.Goroutines, res.Start.Goroutines+40, "goroutines back near their start")
	assert.LessOrEqual(t, res.End.RSSBytes, res.Start.RSSBytes+96<<20, "RSS back near its start")
	assert.True(t, res.Pass, "failures: %v", res.Failures)
}

// TestSoakPoisonKeepsHealthyTraffic proves that key holders sending
// poisoned inputs (every replica answers them 500) and asking for the
// engines' administrative endpoints do not take replicas out for everyone
// else: over two soaks with the same seed, one with 10% poisoned and 5%
// forbidden requests and one without, the fault-free requests' success
// rate stays within 2 points, the poisoned ones get their 500, the
// forbidden ones a 404 without reaching any replica, and every invariant
// holds in both.
func TestSoakPoisonKeepsHealthyTraffic(t *testing.T) {
	d := 10 * time.Second
	if testing.Short() {
		d = 4 * time.Second
	}
	seed := uint64(time.Now().UnixNano())
	run := func(mix map[string]float64) *soak.Result {
		ctx, cancel := context.WithTimeout(context.Background(), d+90*time.Second)
		defer cancel()
		res, err := soak.Run(ctx, soak.Config{Caddy: caddyBin, Duration: d, Rate: 40, Seed: seed, Mix: mix, Dir: t.TempDir()})
		require.NoError(t, err)
		t.Logf("mix %v, seed %d\n%s", mix, seed, res.Summary())
		assert.True(t, res.Pass, "failures: %v", res.Failures)
		return res
	}
	poisoned := run(map[string]float64{soak.KindOK: 85, soak.KindPoison: 10, soak.KindForbidden: 5})
	clean := run(map[string]float64{soak.KindOK: 100})
	require.Positive(t, poisoned.Faults[soak.KindPoison], "no poisoned request was sent")
	require.Positive(t, poisoned.Faults[soak.KindForbidden], "no forbidden request was sent")
	assert.Zero(t, poisoned.ForbiddenPassed)
	assert.Zero(t, poisoned.PoisonNot500)
	assert.Positive(t, poisoned.Errors["http_500_fake_500"], "poisoned requests must reach their client as the engine's 500")
	assert.InDelta(t, clean.HealthySuccessRate, poisoned.HealthySuccessRate, 0.02,
		"poisoned traffic lowered the healthy success rate: %.3f vs %.3f", poisoned.HealthySuccessRate, clean.HealthySuccessRate)
}
