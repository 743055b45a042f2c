package caddymodule

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/policies"
)

// TestFeedbackCorrectsBelief proves that a believed prefix the engine did
// not have shrinks the index (the oldest beliefs go), that hits let it grow
// back, and that a run of misses on large predictions purges it.
func TestFeedbackCorrectsBelief(t *testing.T) {
	st := &replicaState{addr: "test-feedback", index: policies.NewIndex(1024)}
	for i := range 1024 {
		st.index.Insert([]uint64{uint64(i + 1)})
	}
	assert.Equal(t, "miss", st.observe(2, 128, 1000, 0, 250, 1024, false))
	assert.Equal(t, 896, st.index.Capacity(), "a miss shrinks the index by 1/8")
	assert.Equal(t, 896, st.index.Len())
	assert.Equal(t, "hit", st.observe(2, 128, 1000, 64, 250, 1024, false))
	assert.Equal(t, 910, st.index.Capacity(), "a hit grows it by capacity/64")
	assert.Equal(t, "cold", st.observe(0, 128, 1000, 0, 250, 1024, false))

	// Three misses in a row on predictions of >= 4 blocks: cache was wiped.
	for range 3 {
		st.observe(8, 128, 1000, 0, 250, 1024, false)
	}
	assert.Equal(t, 0, st.index.Len())
	fs := st.feedback.status()
	assert.Equal(t, "hits_collapsed", fs.LastPurge)
	assert.Equal(t, 1, fs.Hits)
	assert.Equal(t, 4, fs.Misses)
	assert.InDelta(t, 0.2, fs.Precision, 1e-9)
}

// TestConcurrentMissIsNotAMiss proves that a prediction that found nothing
// cached because the same prefix was still being prefilled for another
// request is counted apart: it neither shrinks the index nor counts
// towards the purge, however many come in a row.
func TestConcurrentMissIsNotAMiss(t *testing.T) {
	st := &replicaState{addr: "test-feedback-concurrent", index: policies.NewIndex(1024)}
	for i := range 512 {
		st.index.Insert([]uint64{uint64(i + 1)})
	}
	for range 5 {
		assert.Equal(t, "concurrent", st.observe(8, 128, 1000, 0, 250, 1024, true))
	}
	assert.Equal(t, 1024, st.index.Capacity())
	assert.Equal(t, 512, st.index.Len(), "concurrent misses purged or shrank the index")
	fs := st.feedback.status()
	assert.Equal(t, 5, fs.Concurrent)
	assert.Zero(t, fs.Misses)
	assert.Zero(t, fs.Purges)
	// A hit while concurrent is a hit (the engine shared what it had).
	assert.Equal(t, "hit", st.observe(8, 128, 1000, 64, 250, 1024, true))
}

// TestPendingPrefixMarksConcurrent proves that a request sent to a replica
// while another with the same first block awaits its first byte there is
// marked concurrent, and that the mark ends with that first byte or the
// release, so nothing is left counted.
func TestPendingPrefixMarksConcurrent(t *testing.T) {
	st := &replicaState{addr: "test-pending", index: policies.NewIndex(64)}
	now := time.Now()
	reserve := func(head uint64) *reservation {
		r, ok := st.tryReserve(now, 0)
		require.True(t, ok)
		r.markPending(head)
		return r
	}
	first := reserve(7)
	assert.False(t, first.concurrent)
	second := reserve(7)
	assert.True(t, second.concurrent, "sent while the first was prefilling the same prefix")
	other := reserve(9)
	assert.False(t, other.concurrent, "another prefix")
	first.firstByte()
	second.release(outcomeSuccess, "", 0, cooldownConfig{})
	third := reserve(7)
	assert.False(t, third.concurrent, "nothing of that prefix is pending any more")
	third.release(outcomeSuccess, "", 0, cooldownConfig{})
	other.release(outcomeNeutral, "", 0, cooldownConfig{})
	first.release(outcomeSuccess, "", 0, cooldownConfig{})
	st.mu.Lock()
	defer st.mu.Unlock()
	assert.Empty(t, st.pending, "pending prefixes leaked")
	assert.Zero(t, st.prefilling)
	assert.Zero(t, st.inFlight)
}
