package simengine

import "time"

// counters are the engine's cumulative counts since New or Restart.
type counters struct {
	submitted, finished, cancelled uint64
	queries, hits                  uint64
	promptTokens, generationTokens uint64
	preemptions, steps             uint64
	busy                           time.Duration
}

// Stats is a snapshot of an engine's state and cumulative counters (since
// New or the last Restart). Token counters follow vLLM's definitions.
type Stats struct {
	// Waiting is the number of requests in the waiting queue
	// (vllm:num_requests_waiting), preempted ones included.
	Waiting int
	// Running is the number of running sequences (vllm:num_requests_running).
	Running int
	// NumBlocks is the number of KV blocks (num_gpu_blocks).
	NumBlocks int
	// BlockSize is the number of tokens per block.
	BlockSize int
	// UsedBlocks is the number of blocks referenced by running sequences.
	UsedBlocks int
	// CachedBlocks is the number of blocks holding reusable prefix content,
	// pinned or not.
	CachedBlocks int
	// KVUsage is UsedBlocks/NumBlocks in [0,1] (vllm:kv_cache_usage_perc);
	// cached but unreferenced blocks count as free, as in vLLM.
	KVUsage float64
	// PrefixCacheQueries is the prompt tokens looked up in the prefix
	// cache, once per request at its first admission
	// (vllm:prefix_cache_queries).
	PrefixCacheQueries uint64
	// PrefixCacheHits is the prompt tokens found in the prefix cache at
	// those lookups (vllm:prefix_cache_hits).
	PrefixCacheHits uint64
	// Evictions counts cached blocks whose content was dropped to make
	// room for new tokens.
	Evictions uint64
	// PromptTokens counts the prompt tokens of requests whose prefill
	// completed (vllm:prompt_tokens).
	PromptTokens uint64
	// GenerationTokens counts generated tokens (vllm:generation_tokens).
	GenerationTokens uint64
	// Preemptions counts preemptions (vllm:num_preemptions).
	Preemptions uint64
	// Submitted, Finished and Cancelled count requests.
	Submitted, Finished, Cancelled uint64
	// Steps counts steps that scheduled work.
	Steps uint64
	// BusyTime is the sum of the durations of those steps.
	BusyTime time.Duration
	// LastStep describes the most recent step that scheduled work.
	LastStep StepSummary
}

// StepSummary describes what one step computed.
type StepSummary struct {
	// Seqs is the number of sequences scheduled.
	Seqs int
	// PrefillTokens is the prompt (or recompute) tokens computed.
	PrefillTokens int
	// DecodeTokens is the single decode tokens computed, one per decoding
	// sequence.
	DecodeTokens int
	// Duration is the step's modelled duration (after Speed).
	Duration time.Duration
}

// Stats returns a snapshot of the engine's state and counters.
func (e *Engine) Stats() Stats {
	used := e.kv.used()
	return Stats{
		Waiting:            len(e.waiting),
		Running:            len(e.running),
		NumBlocks:          e.cfg.NumBlocks,
		BlockSize:          e.cfg.BlockSize,
		UsedBlocks:         used,
		CachedBlocks:       e.kv.numCache,
		KVUsage:            float64(used) / float64(e.cfg.NumBlocks),
		PrefixCacheQueries: e.stats.queries,
		PrefixCacheHits:    e.stats.hits,
		Evictions:          e.kv.evicted,
		PromptTokens:       e.stats.promptTokens,
		GenerationTokens:   e.stats.generationTokens,
		Preemptions:        e.stats.preemptions,
		Submitted:          e.stats.submitted,
		Finished:           e.stats.finished,
		Cancelled:          e.stats.cancelled,
		Steps:              e.stats.steps,
		BusyTime:           e.stats.busy,
		LastStep:           e.last,
	}
}
