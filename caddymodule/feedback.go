package caddymodule

import (
	"slices"

	"github.com/llmroute/caddy-llmroute/caddymodule/stateapi"
	"github.com/llmroute/caddy-llmroute/policies"
)

// Feedback: when an answer carries the engine's cached-token count (or,
// from an engine that reports, says nothing: none cached; cachereport.go),
// the prediction made for it is held against that count. The rules (hit, miss,
// partial, concurrent, cold; shrink, grow, purge) are the replica's belief's
// (policies.Belief.Check), which the simulator runs too; this file passes
// them the figures and counts the verdicts in metrics.

// feedback checks the prediction of attempt a against the usage the engine
// reported (read by sn as the answer streamed).
func (h *LLMRoute) feedback(rc *routeCtx, a *attempt, sn *usageSniffer) {
	if a == nil || rc.req == nil {
		return
	}
	cached, ok := a.rep.reports.cachedOf(rc.req.Endpoint, a.rules.cacheReport, sn)
	if !ok {
		return
	}
	pl, why := a.prediction()
	c := policies.Check{PredictedBlocks: pl.Predicted, Concurrent: pl.Concurrent, Reach: pl.Reach,
		CachedTokens: cached, PromptTokens: sn.promptTokens, PromptBytes: rc.req.PromptBytes, Reason: why}
	res := a.rep.check(c)
	if o := a.rules.observer; o != nil {
		o.Observe(c, res)
	}
}

// check holds one prediction on the replica against the engine's report
// and records the verdict; it returns it.
func (s *replicaState) check(c policies.Check) policies.CheckResult {
	got := s.belief.Check(c)
	m := &s.metrics
	if c.PromptTokens > 0 && c.PromptBytes > 0 {
		m.predicted.get(metricPredictedTokens, s.addr).Add(float64(got.PredictedTokens))
	}
	m.reported.get(metricReportedTokens, s.addr).Add(float64(c.CachedTokens))
	m.prompt.get(metricPromptTokens, s.addr).Add(float64(c.PromptTokens))
	if i := slices.Index(checkResults, got.Result); i >= 0 {
		m.results[i].get(metricPredictions, s.addr, string(got.Result)).Inc()
	} else {
		metricPredictions.WithLabelValues(s.addr, string(got.Result)).Inc()
	}
	if got.Purged {
		metricIndexPurges.WithLabelValues(s.addr, policies.PurgeHitsCollapsed).Inc()
	}
	return got.Result
}

// checkResults are the verdicts whose counters replicaCounters caches.
var checkResults = []policies.CheckResult{policies.CheckHit, policies.CheckMiss, policies.CheckPartial, policies.CheckConcurrent, policies.CheckCold}

// replicaCounters holds a replica's children of the feedback metrics.
type replicaCounters struct {
	predicted, reported, prompt counterSlot
	results                     [5]counterSlot // by checkResults
}

// purge forgets everything believed resident on the replica.
func (s *replicaState) purge(reason string) {
	s.belief.Purge(reason)
	metricIndexPurges.WithLabelValues(s.addr, reason).Inc()
}

// feedbackStatus is the belief's record as /llm_route/state shows it.
func feedbackStatus(b policies.BeliefStats) stateapi.Feedback {
	return stateapi.Feedback{Checks: b.Checks, Hits: b.Hits, Misses: b.Misses, Partials: b.Partials, Cold: b.Cold,
		Concurrent: b.Concurrent, Precision: b.Precision(), Purges: b.Purges, LastPurge: b.LastPurge,
		MaxIndex: b.MaxCapacity, FromEngine: b.FromEngine}
}
