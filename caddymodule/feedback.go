package caddymodule

import "strconv"

// feedbackState checks the residency index against what the engine
// reports. Guarded by replicaState.mu.
//
// A prediction is checked when the engine's answer carries cached tokens:
// hit (the index believed a prefix resident and the engine had some of it),
// miss (believed, not there), concurrent (believed and not there, but sent
// while another request of that prefix was still before its first byte on
// the replica, so the engine was computing it) or cold (nothing believed). A miss means the
// index believes more than the engine keeps, so it shrinks (the oldest
// beliefs go first); a hit lets it grow back slowly towards its maximum
// (additive increase, multiplicative decrease). Several misses in a row on
// large predicted prefixes mean the engine lost its cache (restart or
// reset): the replica's index is purged.
type feedbackState struct {
	engineSized bool // maxCapacity came from the engine's num_gpu_blocks
	maxCapacity int  // 0 = the configured index_blocks

	checks, hits, misses, cold int
	// concurrent counts predictions that found nothing cached while
	// another request of the same prefix was still before its first byte
	// on the replica: the engine had not finished computing it. They are
	// neither hits nor misses and do not shrink the index.
	concurrent      int
	missRun         int
	purges          int
	lastPurgeReason string
}

// FeedbackStatus is feedbackState as /llm_route/state shows it.
type FeedbackStatus struct {
	Checks     int     `json:"checks"`
	Hits       int     `json:"hits"`
	Misses     int     `json:"misses"`
	Cold       int     `json:"cold"`
	Concurrent int     `json:"concurrent"`
	Precision  float64 `json:"precision"`
	Purges     int     `json:"purges"`
	LastPurge  string  `json:"last_purge_reason,omitempty"`
	MaxIndex   int     `json:"max_index_capacity,omitempty"`
	FromEngine bool    `json:"capacity_from_engine"`
}

func (f *feedbackState) status() FeedbackStatus {
	s := FeedbackStatus{Checks: f.checks, Hits: f.hits, Misses: f.misses, Cold: f.cold, Concurrent: f.concurrent,
		Purges: f.purges, LastPurge: f.lastPurgeReason, MaxIndex: f.maxCapacity, FromEngine: f.engineSized}
	if f.hits+f.misses > 0 {
		s.Precision = float64(f.hits) / float64(f.hits+f.misses)
	}
	return s
}

// purgeMissRun is how many consecutive misses on believed prefixes of at
// least purgeMinBlocks mean the engine's cache was wiped.
const (
	purgeMissRun   = 3
	purgeMinBlocks = 4
	minIndexBlocks = 64
)

// purge forgets everything believed resident on the replica.
func (s *replicaState) purge(reason string) {
	s.index.Purge()
	s.mu.Lock()
	s.feedback.purges++
	s.feedback.lastPurgeReason = reason
	s.feedback.missRun = 0
	s.mu.Unlock()
	metricIndexPurges.WithLabelValues(s.addr, reason).Inc()
}

// observe records one checked prediction. predictedBlocks is what the index
// believed when the replica was chosen; cachedTokens and promptTokens are
// what the engine reported; promptBytes is the size of the canonical prompt
// the blocks were cut from. It returns the result label.
func (s *replicaState) observe(predictedBlocks, blockBytes, promptBytes, cachedTokens, promptTokens, configuredMax int, concurrent bool) string {
	result := "cold"
	switch {
	case predictedBlocks > 0 && cachedTokens > 0:
		result = "hit"
	case predictedBlocks > 0 && concurrent:
		result = "concurrent"
	case predictedBlocks > 0:
		result = "miss"
	}
	// Tokens the index predicted: its believed bytes, scaled by the
	// engine's own bytes-per-token on this prompt.
	if promptTokens > 0 && promptBytes > 0 {
		predTok := predictedBlocks * blockBytes * promptTokens / promptBytes
		metricPredictedTokens.WithLabelValues(s.addr).Add(float64(min(predTok, promptTokens)))
	}
	metricReportedTokens.WithLabelValues(s.addr).Add(float64(cachedTokens))
	metricPromptTokens.WithLabelValues(s.addr).Add(float64(promptTokens))
	metricPredictions.WithLabelValues(s.addr, result).Inc()

	s.mu.Lock()
	f := &s.feedback
	f.checks++
	maxCap := configuredMax
	if f.maxCapacity > 0 {
		maxCap = f.maxCapacity
	}
	purge := false
	switch result {
	case "hit":
		f.hits++
		f.missRun = 0
	case "miss":
		f.misses++
		if predictedBlocks >= purgeMinBlocks {
			f.missRun++
			purge = f.missRun >= purgeMissRun
		}
	case "concurrent":
		f.concurrent++
	default:
		f.cold++
	}
	s.mu.Unlock()

	if purge {
		s.purge("hits_collapsed")
		return result
	}
	capNow := s.index.Capacity()
	switch result {
	case "miss":
		s.index.SetCapacity(max(capNow*7/8, minIndexBlocks))
	case "hit":
		if capNow < maxCap {
			s.index.SetCapacity(min(capNow+max(capNow/64, 1), maxCap))
		}
	}
	return result
}

// feedback checks the prediction made for this request against the usage
// the engine reported.
func (h *LLMRoute) feedback(rc *routeCtx, st *replicaState, sn *usageSniffer) {
	if st == nil || !sn.found || rc.req == nil {
		return
	}
	bs := h.BlockSize
	if bs == 0 {
		bs = 128
	}
	st.observe(rc.predicted, bs, rc.req.PromptBytes, sn.cached, sn.promptTokens, rc.indexMax, rc.concurrent)
}

// String helps tests print a state.
func (f FeedbackStatus) String() string {
	return "checks=" + strconv.Itoa(f.Checks) + " hits=" + strconv.Itoa(f.Hits) + " misses=" + strconv.Itoa(f.Misses)
}
