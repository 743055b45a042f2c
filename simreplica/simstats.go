package simreplica

import (
	"maps"
	"sync"
	"time"

	"github.com/llmroute/caddy-llmroute/simengine"
)

// Stats is what GET /sim/stats returns: the server's request counters and
// the engine's state. Integration tests use it to count what a replica
// received, retries included.
type Stats struct {
	// Name is the replica name.
	Name string `json:"name"`
	// Received counts inference requests (chat and completions) received.
	Received uint64 `json:"received"`
	// Completed counts responses delivered in full ([DONE] or full JSON).
	Completed uint64 `json:"completed"`
	// Aborted counts requests whose client went away (or that a restart or
	// shutdown ended) before completion.
	Aborted uint64 `json:"aborted"`
	// Cut counts connections closed on purpose (cut-after, refuse).
	Cut uint64 `json:"cut"`
	// Faulted counts requests answered with an injected or restart status.
	Faulted uint64 `json:"faulted"`
	// Rejected counts requests answered with 400 (bad request).
	Rejected uint64 `json:"rejected"`
	// ByRequestID counts received inference requests per X-Request-Id
	// header (requests without one are not listed).
	ByRequestID map[string]uint64 `json:"by_request_id"`
	// DroppedRequestIDs counts ids not tracked once the map was full.
	DroppedRequestIDs uint64 `json:"dropped_request_ids,omitempty"`
	// Fault is the current global fault spec ("" for none).
	Fault string `json:"fault"`
	// Down is true during a restart's down time.
	Down bool `json:"down"`
	// Engine is the engine's state and counters.
	Engine EngineStats `json:"engine"`
}

// EngineStats is the JSON form of engine.Stats; every field has the
// meaning of the engine.Stats field of the same name (BusySeconds is
// BusyTime in seconds).
type EngineStats struct {
	Waiting            int     `json:"waiting"`
	Running            int     `json:"running"`
	NumBlocks          int     `json:"num_blocks"`
	BlockSize          int     `json:"block_size"`
	UsedBlocks         int     `json:"used_blocks"`
	CachedBlocks       int     `json:"cached_blocks"`
	KVUsage            float64 `json:"kv_usage"`
	PrefixCacheQueries uint64  `json:"prefix_cache_queries"`
	PrefixCacheHits    uint64  `json:"prefix_cache_hits"`
	Evictions          uint64  `json:"evictions"`
	PromptTokens       uint64  `json:"prompt_tokens"`
	GenerationTokens   uint64  `json:"generation_tokens"`
	Preemptions        uint64  `json:"preemptions"`
	Submitted          uint64  `json:"submitted"`
	Finished           uint64  `json:"finished"`
	Cancelled          uint64  `json:"cancelled"`
	BusySeconds        float64 `json:"busy_seconds"`
}

func toEngineStats(s simengine.Stats) EngineStats {
	return EngineStats{
		Waiting:            s.Waiting,
		Running:            s.Running,
		NumBlocks:          s.NumBlocks,
		BlockSize:          s.BlockSize,
		UsedBlocks:         s.UsedBlocks,
		CachedBlocks:       s.CachedBlocks,
		KVUsage:            s.KVUsage,
		PrefixCacheQueries: s.PrefixCacheQueries,
		PrefixCacheHits:    s.PrefixCacheHits,
		Evictions:          s.Evictions,
		PromptTokens:       s.PromptTokens,
		GenerationTokens:   s.GenerationTokens,
		Preemptions:        s.Preemptions,
		Submitted:          s.Submitted,
		Finished:           s.Finished,
		Cancelled:          s.Cancelled,
		BusySeconds:        s.BusyTime.Seconds(),
	}
}

// requestCounters are the server-side counters behind Stats.
type requestCounters struct {
	mu                                              sync.Mutex
	received, completed, aborted, cut, faulted, bad uint64
	byID                                            map[string]uint64
	droppedIDs                                      uint64
}

func newRequestCounters() *requestCounters {
	return &requestCounters{byID: make(map[string]uint64)}
}

// counter names one of the outcome counters.
type counter int

const (
	cntCompleted counter = iota
	cntAborted
	cntCut
	cntFaulted
	cntRejected
)

func (c *requestCounters) receive(requestID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.received++
	if requestID == "" {
		return
	}
	if _, ok := c.byID[requestID]; !ok && len(c.byID) >= maxTrackedRequestIDs {
		c.droppedIDs++
		return
	}
	c.byID[requestID]++
}

func (c *requestCounters) inc(which counter) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch which {
	case cntCompleted:
		c.completed++
	case cntAborted:
		c.aborted++
	case cntCut:
		c.cut++
	case cntFaulted:
		c.faulted++
	case cntRejected:
		c.bad++
	}
}

func (c *requestCounters) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.received, c.completed, c.aborted, c.cut, c.faulted, c.bad, c.droppedIDs = 0, 0, 0, 0, 0, 0, 0
	clear(c.byID)
}

// Stats returns a snapshot of the server's counters and engine state.
func (s *Server) Stats() Stats {
	c := s.counts
	c.mu.Lock()
	st := Stats{
		Name:              s.cfg.Name,
		Received:          c.received,
		Completed:         c.completed,
		Aborted:           c.aborted,
		Cut:               c.cut,
		Faulted:           c.faulted,
		Rejected:          c.bad,
		ByRequestID:       maps.Clone(c.byID),
		DroppedRequestIDs: c.droppedIDs,
	}
	c.mu.Unlock()
	st.Fault = s.currentFault().String()
	st.Down = s.isDown(time.Now())
	st.Engine = toEngineStats(s.drv.stats())
	return st
}
