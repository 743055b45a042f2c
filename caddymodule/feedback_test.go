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
	st := testReplica("test-feedback", 1024)
	for i := range 1024 {
		st.belief.Index().Insert([]uint64{uint64(i + 1)})
	}
	assert.Equal(t, policies.CheckMiss, st.check(policies.Check{PredictedBlocks: 2, PromptBytes: 1000, CachedTokens: 0, PromptTokens: 250, Concurrent: false}))
	assert.Equal(t, 896, st.belief.Index().Capacity(), "a miss shrinks the index by 1/8")
	assert.Equal(t, 896, st.belief.Index().Len())
	assert.Equal(t, policies.CheckHit, st.check(policies.Check{PredictedBlocks: 2, PromptBytes: 1000, CachedTokens: 64, PromptTokens: 250, Concurrent: false}))
	assert.Equal(t, 910, st.belief.Index().Capacity(), "a hit grows it by capacity/64")
	assert.Equal(t, policies.CheckCold, st.check(policies.Check{PredictedBlocks: 0, PromptBytes: 1000, CachedTokens: 0, PromptTokens: 250, Concurrent: false}))

	// Three misses in a row on predictions of >= 4 blocks: cache was wiped.
	for range 3 {
		st.check(policies.Check{PredictedBlocks: 8, PromptBytes: 1000, CachedTokens: 0, PromptTokens: 250, Concurrent: false})
	}
	assert.Equal(t, 0, st.belief.Index().Len())
	fs := feedbackStatus(st.belief.Stats())
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
	st := testReplica("test-feedback-concurrent", 1024)
	for i := range 512 {
		st.belief.Index().Insert([]uint64{uint64(i + 1)})
	}
	for range 5 {
		assert.Equal(t, policies.CheckConcurrent, st.check(policies.Check{PredictedBlocks: 8, PromptBytes: 1000, CachedTokens: 0, PromptTokens: 250, Concurrent: true}))
	}
	assert.Equal(t, 1024, st.belief.Index().Capacity())
	assert.Equal(t, 512, st.belief.Index().Len(), "concurrent misses purged or shrank the index")
	fs := feedbackStatus(st.belief.Stats())
	assert.Equal(t, 5, fs.Concurrent)
	assert.Zero(t, fs.Misses)
	assert.Zero(t, fs.Purges)
	// A hit while concurrent is a hit (the engine shared what it had); so
	// little of the prediction that it would be partial is concurrent too.
	assert.Equal(t, policies.CheckHit, st.check(policies.Check{PredictedBlocks: 8, PromptBytes: 1000, CachedTokens: 200, PromptTokens: 250, Concurrent: true}))
	assert.Equal(t, policies.CheckConcurrent, st.check(policies.Check{PredictedBlocks: 8, PromptBytes: 1000, CachedTokens: 64, PromptTokens: 250, Concurrent: true}))
	assert.Equal(t, 1024, st.belief.Index().Capacity(), "a concurrent partial left the index alone")
}

// TestPendingPrefixMarksConcurrent proves that a request sent to a replica
// while another with the same first block awaits its first byte there is
// marked concurrent, and that the mark ends with that first byte or the
// release, so nothing is left counted.
func TestPendingPrefixMarksConcurrent(t *testing.T) {
	st := testReplica("test-pending", 64)
	now := time.Now()
	reserve := func(head uint64) *attempt {
		a, ok := st.reserve(now, 0, &attemptRules{})
		require.True(t, ok)
		a.placeKeys(policies.Keys{Blocks: []uint64{head}}, policies.ReasonLoad)
		return a
	}
	concurrent := func(a *attempt) bool {
		pl, why := a.prediction()
		require.Equal(t, policies.ReasonLoad, why, "the rule is kept for the feedback")
		return pl.Concurrent
	}
	first := reserve(7)
	assert.False(t, concurrent(first))
	second := reserve(7)
	assert.True(t, concurrent(second), "sent while the first was prefilling the same prefix")
	other := reserve(9)
	assert.False(t, concurrent(other), "another prefix")
	first.firstByte()
	second.end(succeeded)
	third := reserve(7)
	assert.False(t, concurrent(third), "nothing of that prefix is pending any more")
	third.end(succeeded)
	other.end(neutralEnd)
	first.end(succeeded)
	assert.False(t, st.belief.Place(policies.Keys{Blocks: []uint64{7}}).Concurrent, "pending prefixes leaked")
	assert.False(t, st.belief.Place(policies.Keys{Blocks: []uint64{9}}).Concurrent, "pending prefixes leaked")
	st.mu.Lock()
	defer st.mu.Unlock()
	assert.Zero(t, st.prefilling)
	assert.Zero(t, st.inFlight)
}

// recordingObserver keeps the checks a strategy is shown.
type recordingObserver struct {
	checks  []policies.Check
	results []policies.CheckResult
}

func (o *recordingObserver) Observe(c policies.Check, r policies.CheckResult) {
	o.checks = append(o.checks, c)
	o.results = append(o.results, r)
}

// TestFeedbackReachesStrategy proves that the engine's report reaches the
// strategy that learns from it (prefix_load's run of requests that found
// nothing seen before ends when a prefix it believed cold was cached):
// setup hands prefix_load to the attempts' rules as their observer, a
// strategy that learns nothing is not one, and feedback passes the check
// and its verdict on.
func TestFeedbackReachesStrategy(t *testing.T) {
	var p LLMSelection
	require.NoError(t, p.setup())
	require.NotNil(t, p.rules.observer, "prefix_load observes the checks")
	assert.Same(t, p.strategy, p.rules.observer.(policies.Strategy))
	rr := LLMSelection{Strategy: "round_robin"}
	require.NoError(t, rr.setup())
	assert.Nil(t, rr.rules.observer, "round_robin learns nothing")

	obs := &recordingObserver{}
	rules := p.rules
	rules.observer = obs
	a := &attempt{rep: testReplica("test-feedback-observer", 1024), rules: &rules}
	rc := &routeCtx{req: &policies.Request{PromptBytes: 1000}}
	var h LLMRoute
	h.feedback(rc, a, &usageSniffer{found: true, cached: 200, promptTokens: 250})
	h.feedback(rc, a, &usageSniffer{found: false})
	require.Len(t, obs.checks, 1, "only an answer that carried usage is checked")
	assert.Equal(t, policies.Check{CachedTokens: 200, PromptTokens: 250, PromptBytes: 1000}, obs.checks[0])
	assert.Equal(t, policies.CheckCold, obs.results[0])
}
