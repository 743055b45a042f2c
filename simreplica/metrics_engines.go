package simreplica

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmroute/caddy-llmroute/simengine"
)

// The metrics of the personalities other than vLLM's single engine, as
// each engine exports them (../shared/notes/engine-facts.md):
//
//   - vLLM with data parallelism (Config.DataParallel): one series per
//     engine, the engine label 0..N-1; the one simulated engine's figures
//     are split over them so that counts sum and KV usage averages to it;
//   - SGLang (--enable-metrics): sglang:* names; the scheduler's gauges
//     labelled {engine_type, model_name, moe_ep_rank, pp_rank, tp_rank} and
//     lagging: written at a prefill (a new prompt since the last write) and
//     otherwise only every sglangIdleWrite, so a scrape may read figures
//     that old; the token counters are the tokenizer's, labelled
//     {model_name} only (collector.py: TokenizerMetricsCollector);
//   - llama.cpp (--metrics): llamacpp:* names, no labels, and /metrics
//     behind Config.APIKey when one is set (server.go).

// sglangIdleWrite is how often SGLang writes its gauges when no prefill
// batch ran (scheduler_metrics_mixin.py: every 30 s idle).
const sglangIdleWrite = 30 * time.Second

// engineSplit returns v's share of engine e of n: counts split with the
// remainder to the first engines.
func engineSplit(v, e, n int) int {
	s := v / n
	if e < v%n {
		s++
	}
	return s
}

// sglangSchedulerLabels are the labels of SGLang's scheduler metrics
// (scheduler_metrics_mixin.py) without data parallelism.
var sglangSchedulerLabels = []string{"engine_type", "model_name", "moe_ep_rank", "pp_rank", "tp_rank"}

// sglangCollector writes SGLang's metrics.
type sglangCollector struct {
	s   *Server
	now func() time.Time

	mu      sync.Mutex
	written simengine.Stats // the gauges as last written
	at      time.Time
	prompts uint64 // PromptTokens at that write

	running, queue, usage, maxTokens, promptTok, cachedTok, genTok *prometheus.Desc
}

func newSGLangCollector(s *Server) *sglangCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, sglangSchedulerLabels, nil)
	}
	t := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"model_name"}, nil)
	}
	return &sglangCollector{s: s, now: time.Now,
		running:   d("sglang:num_running_reqs", "The number of running requests."),
		queue:     d("sglang:num_queue_reqs", "The number of requests in the waiting queue."),
		usage:     d("sglang:token_usage", "The token usage."),
		maxTokens: d("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool."),
		promptTok: t("sglang:prompt_tokens_total", "Number of prefill tokens processed."),
		cachedTok: t("sglang:cached_tokens_total", "Number of cached prompt tokens."),
		genTok:    t("sglang:generation_tokens_total", "Number of generation tokens processed."),
	}
}

// Describe implements prometheus.Collector.
func (c *sglangCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.running, c.queue, c.usage, c.maxTokens, c.promptTok, c.cachedTok, c.genTok} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: counters live, gauges as last
// written.
func (c *sglangCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.drv.stats()
	now := c.now()
	c.mu.Lock()
	switch {
	case st.PromptTokens != c.prompts:
		// SGLang wrote at the prefill batch of the prompts that came since
		// the last write, which were running then: a burst that has ended
		// reads busy until the next write, as on the engine.
		c.written, c.at, c.prompts = st, now, st.PromptTokens
		c.written.Running = max(st.Running, 1)
	case c.at.IsZero() || now.Sub(c.at) >= sglangIdleWrite:
		c.written, c.at = st, now
	}
	w := c.written
	c.mu.Unlock()
	labels := []string{"unified", c.s.cfg.Model, "0", "0", "0"}
	g := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	cnt := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, c.s.cfg.Model)
	}
	g(c.running, float64(w.Running))
	g(c.queue, float64(w.Waiting))
	g(c.usage, w.KVUsage)
	g(c.maxTokens, float64(st.NumBlocks*st.BlockSize))
	// SGLang's tokenizer creates a counter's series at its first increment
	// (multiprocess mode exports nothing before), and adds cached tokens
	// only when a request had some.
	if st.PromptTokens > 0 {
		cnt(c.promptTok, float64(st.PromptTokens))
		cnt(c.genTok, float64(st.GenerationTokens))
	}
	if st.PrefixCacheHits > 0 {
		cnt(c.cachedTok, float64(st.PrefixCacheHits))
	}
}

// llamaCollector writes llama.cpp's server metrics.
type llamaCollector struct {
	s                                          *Server
	processing, deferred, promptTok, predicted *prometheus.Desc
}

func newLlamaCollector(s *Server) *llamaCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &llamaCollector{s: s,
		processing: d("llamacpp:requests_processing", "Number of requests processing."),
		deferred:   d("llamacpp:requests_deferred", "Number of requests deferred."),
		promptTok:  d("llamacpp:prompt_tokens_total", "Number of prompt tokens processed."),
		predicted:  d("llamacpp:tokens_predicted_total", "Number of generation tokens processed."),
	}
}

// Describe implements prometheus.Collector.
func (c *llamaCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.processing, c.deferred, c.promptTok, c.predicted} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *llamaCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.drv.stats()
	ch <- prometheus.MustNewConstMetric(c.processing, prometheus.GaugeValue, float64(st.Running))
	ch <- prometheus.MustNewConstMetric(c.deferred, prometheus.GaugeValue, float64(st.Waiting))
	ch <- prometheus.MustNewConstMetric(c.promptTok, prometheus.CounterValue, float64(st.PromptTokens))
	ch <- prometheus.MustNewConstMetric(c.predicted, prometheus.CounterValue, float64(st.GenerationTokens))
}

// collectorFor returns the engine collector of the personality.
func collectorFor(s *Server) prometheus.Collector {
	switch s.cfg.Personality {
	case SGLang:
		return newSGLangCollector(s)
	case LlamaCpp:
		return newLlamaCollector(s)
	}
	return newEngineCollector(s)
}

// engineLabel is vLLM's engine label of engine e.
func engineLabel(e int) string { return strconv.Itoa(e) }
