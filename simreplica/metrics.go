package simreplica

import (
	"github.com/prometheus/client_golang/prometheus"
)

// The metric names and labels follow vLLM's V1 Prometheus exposition, so a
// router that scrapes vLLM scrapes the simulated replica unchanged. vLLM
// is instrumented with the Python client, which appends _total to counter
// names; client_golang does not, so counters are named here with _total as
// vLLM exposes them.
const (
	metricRunning      = "vllm:num_requests_running"
	metricWaiting      = "vllm:num_requests_waiting"
	metricKVUsage      = "vllm:kv_cache_usage_perc"
	metricPCQueries    = "vllm:prefix_cache_queries_total"
	metricPCHits       = "vllm:prefix_cache_hits_total"
	metricPromptTokens = "vllm:prompt_tokens_total"
	metricGenTokens    = "vllm:generation_tokens_total"
	metricPreemptions  = "vllm:num_preemptions_total"
	metricCacheConfig  = "vllm:cache_config_info"
	metricCachedBlocks = "sim_kv_cached_blocks"
	metricEvictions    = "sim_kv_evictions_total"
	metricBusy         = "sim_engine_busy_seconds_total"
	metricRequests     = "sim_requests_total"
)

// engineCollector reads the engine's stats at scrape time.
type engineCollector struct {
	s *Server
	// dp is the number of data-parallel engines written (Config.DataParallel).
	dp int

	running, waiting, kvUsage, queries, hits, promptTok, genTok,
	preempt, cacheConfig, cachedBlocks, evictions, busy *prometheus.Desc
}

func newEngineCollector(s *Server) *engineCollector {
	vl := []string{"engine", "model_name"}
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, vl, nil) }
	return &engineCollector{
		s:         s,
		dp:        max(s.cfg.DataParallel, 1),
		running:   d(metricRunning, "Number of requests in model execution batches."),
		waiting:   d(metricWaiting, "Number of requests waiting to be processed."),
		kvUsage:   d(metricKVUsage, "KV-cache usage. 1 means 100 percent usage."),
		queries:   d(metricPCQueries, "Prefix cache queries, in terms of number of queried tokens."),
		hits:      d(metricPCHits, "Prefix cache hits, in terms of number of cached tokens."),
		promptTok: d(metricPromptTokens, "Number of prefill tokens processed."),
		genTok:    d(metricGenTokens, "Number of generation tokens processed."),
		preempt:   d(metricPreemptions, "Cumulative number of preemption from the engine."),
		// CacheConfig.metrics_info(): every field of the config, as vLLM labels them.
		cacheConfig:  prometheus.NewDesc(metricCacheConfig, "Information of the LLMEngine CacheConfig", cacheConfigLabels(), nil),
		cachedBlocks: d(metricCachedBlocks, "KV blocks holding reusable prefix content (simulator only)."),
		evictions:    d(metricEvictions, "Cached KV blocks evicted (simulator only)."),
		busy:         d(metricBusy, "Modelled engine step time, summed (simulator only)."),
	}
}

// Describe implements prometheus.Collector.
func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.running, c.waiting, c.kvUsage, c.queries, c.hits, c.promptTok,
		c.genTok, c.preempt, c.cacheConfig, c.cachedBlocks, c.evictions, c.busy} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: one series per engine, the
// engine's figures split over them (counts sum, KV usage averages to the
// engine's own).
func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.drv.stats()
	for e := range c.dp {
		labels := []string{engineLabel(e), c.s.cfg.Model}
		g := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
		}
		cnt := func(d *prometheus.Desc, v int) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(engineSplit(v, e, c.dp)), labels...)
		}
		g(c.running, float64(engineSplit(st.Running, e, c.dp)))
		g(c.waiting, float64(engineSplit(st.Waiting, e, c.dp)))
		g(c.kvUsage, st.KVUsage)
		cnt(c.queries, int(st.PrefixCacheQueries))
		cnt(c.hits, int(st.PrefixCacheHits))
		cnt(c.promptTok, int(st.PromptTokens))
		cnt(c.genTok, int(st.GenerationTokens))
		cnt(c.preempt, int(st.Preemptions))
		ch <- prometheus.MustNewConstMetric(c.cacheConfig, prometheus.GaugeValue, 1,
			cacheConfigValues(st.BlockSize, engineSplit(st.NumBlocks, e, c.dp), e)...)
		g(c.cachedBlocks, float64(engineSplit(st.CachedBlocks, e, c.dp)))
		cnt(c.evictions, int(st.Evictions))
		g(c.busy, st.BusyTime.Seconds()/float64(c.dp))
	}
}

// pathLabel maps a request path to the bounded set of sim_requests_total
// path label values.
func pathLabel(p string) string {
	switch p {
	case pathChat, pathCompletions, pathMessages, pathCountTokens, pathResponses, pathModels, pathHealth, pathMetrics,
		pathSimStats, pathSimStatsReset, pathSimRestart, pathSimFault, pathSimCached:
		return p
	}
	return "other"
}
