package integration

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/internal/soak"
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
