package caddymodule

import (
	"fmt"
	"io"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// engineSample is one parsed scrape of a replica's own metrics.
type engineSample struct {
	engine           string
	waiting, running float64
	kvUsage          float64
	numBlocks        int
	blockSize        int
	queries, hits    float64
	hasLoad          bool
}

// metricNames maps each engine's metric names (old and new spellings) to
// what they mean.
var (
	waitingNames = []string{"vllm:num_requests_waiting", "sglang:num_queue_reqs", "sglang_num_queue_reqs", "llamacpp:requests_deferred"}
	runningNames = []string{"vllm:num_requests_running", "sglang:num_running_reqs", "sglang_num_running_reqs", "llamacpp:requests_processing"}
	kvNames      = []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage", "sglang_token_usage"}
	queryNames   = []string{"vllm:prefix_cache_queries", "vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries", "vllm:gpu_prefix_cache_queries_total"}
	hitNames     = []string{"vllm:prefix_cache_hits", "vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits", "vllm:gpu_prefix_cache_hits_total"}
)

// parseEngineSample reads Prometheus text exposition with the Prometheus
// text parser and picks out the load signals of vLLM, SGLang or llama.cpp.
func parseEngineSample(r io.Reader) (engineSample, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return engineSample{}, err
	}
	s := engineSample{kvUsage: -1, queries: -1, hits: -1}
	sum := func(names []string) (float64, string, bool) {
		for _, n := range names {
			if f, ok := fams[n]; ok {
				total := 0.0
				for _, m := range f.GetMetric() {
					total += value(m)
				}
				return total, n, true
			}
		}
		return 0, "", false
	}
	if v, n, ok := sum(waitingNames); ok {
		s.waiting, s.hasLoad, s.engine = v, true, engineOf(n)
	}
	if v, n, ok := sum(runningNames); ok {
		s.running, s.hasLoad = v, true
		if s.engine == "" {
			s.engine = engineOf(n)
		}
	}
	if v, _, ok := sum(kvNames); ok {
		s.kvUsage = v
	}
	if v, _, ok := sum(queryNames); ok {
		s.queries = v
	}
	if v, _, ok := sum(hitNames); ok {
		s.hits = v
	}
	if f, ok := fams["vllm:cache_config_info"]; ok {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "num_gpu_blocks":
					fmt.Sscan(l.GetValue(), &s.numBlocks)
				case "block_size":
					fmt.Sscan(l.GetValue(), &s.blockSize)
				}
			}
		}
	}
	return s, nil
}

func engineOf(name string) string {
	switch {
	case strings.HasPrefix(name, "vllm"):
		return "vllm"
	case strings.HasPrefix(name, "sglang"):
		return "sglang"
	case strings.HasPrefix(name, "llamacpp"):
		return "llamacpp"
	}
	return ""
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}
