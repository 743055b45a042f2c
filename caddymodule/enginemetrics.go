package caddymodule

import (
	"fmt"
	"io"
	"slices"
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
	// engines is how many engines (data-parallel ranks) the series name.
	engines int
	// asleep: vLLM's sleep mode (vllm:engine_sleep_state 1) holds no
	// weights; the engine serves nothing until woken.
	asleep bool
	// adapters are the LoRA adapters the engine runs requests of now
	// (vllm:lora_requests_info's running_lora_adapters).
	adapters []string
}

// metricNames maps each engine's metric names (old and new spellings) to
// what they mean.
var (
	waitingNames = []string{"vllm:num_requests_waiting", "sglang:num_queue_reqs", "sglang_num_queue_reqs", "llamacpp:requests_deferred"}
	runningNames = []string{"vllm:num_requests_running", "sglang:num_running_reqs", "sglang_num_running_reqs", "llamacpp:requests_processing"}
	kvNames      = []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage", "sglang_token_usage"}
	queryNames   = []string{"vllm:prefix_cache_queries", "vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries", "vllm:gpu_prefix_cache_queries_total", "sglang:prompt_tokens_total", "sglang:prompt_tokens", "llamacpp:prompt_tokens_total"}
	hitNames     = []string{"vllm:prefix_cache_hits", "vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits", "vllm:gpu_prefix_cache_hits_total", "sglang:cached_tokens_total", "sglang:cached_tokens", "llamacpp:prompt_tokens_cached_total"}
	// tokenCapacityNames are KV capacities counted in tokens.
	tokenCapacityNames = []string{"sglang:max_total_num_tokens", "sglang_max_total_num_tokens"}
)

// rankLabels name a series' tensor, pipeline and expert rank: SGLang writes
// one scheduler's figures once per rank, duplicates of one engine, while its
// dp_rank and vLLM's engine label name engines of their own.
var rankLabels = map[string]bool{"tp_rank": true, "pp_rank": true, "moe_ep_rank": true}

// engineKey names the engine a series belongs to: its labels but the
// ranks and skip, in the exposition's (sorted) order.
func engineKey(m *dto.Metric, skip string) string {
	var key strings.Builder
	for _, l := range m.GetLabel() {
		if n := l.GetName(); !rankLabels[n] && n != skip {
			key.WriteString(n)
			key.WriteByte('=')
			key.WriteString(l.GetValue())
			key.WriteByte(',')
		}
	}
	return key.String()
}

// perEngine returns a family's value per engine: series that differ only
// in their ranks are one engine's (the largest of their values, since
// pipeline stages may each count their part).
func perEngine(f *dto.MetricFamily) map[string]float64 {
	out := make(map[string]float64, len(f.GetMetric()))
	for _, m := range f.GetMetric() {
		k, v := engineKey(m, ""), value(m)
		if old, ok := out[k]; !ok || v > old {
			out[k] = v
		}
	}
	return out
}

// parseEngineSample reads Prometheus text exposition with the Prometheus
// text parser and picks out the load signals of vLLM, SGLang or llama.cpp.
// With several engines behind one address (data parallelism: vLLM's
// engine label, SGLang's dp_rank), request counts and cache sizes add up
// over the engines, and KV usage is their mean (what vLLM's own log line
// prints): a sum would read two half-full engines as one full cache.
func parseEngineSample(r io.Reader) (engineSample, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return engineSample{}, err
	}
	s := engineSample{kvUsage: -1, queries: -1, hits: -1}
	find := func(names []string) (map[string]float64, string, bool) {
		for _, n := range names {
			if f, ok := fams[n]; ok && len(f.GetMetric()) > 0 {
				return perEngine(f), n, true
			}
		}
		return nil, "", false
	}
	sum := func(names []string) (float64, string, bool) {
		vs, n, ok := find(names)
		total := 0.0
		for _, v := range vs {
			total += v
		}
		if len(vs) > s.engines {
			s.engines = len(vs)
		}
		return total, n, ok
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
	if vs, _, ok := find(kvNames); ok {
		total := 0.0
		for _, v := range vs {
			total += v
		}
		s.kvUsage = total / float64(len(vs))
	}
	if v, _, ok := sum(queryNames); ok {
		s.queries = v
	}
	if v, _, ok := sum(hitNames); ok {
		s.hits = v
	}
	if f, ok := fams["vllm:cache_config_info"]; ok {
		for _, m := range f.GetMetric() {
			blocks := 0
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "num_gpu_blocks":
					fmt.Sscan(l.GetValue(), &blocks)
				case "block_size":
					fmt.Sscan(l.GetValue(), &s.blockSize)
				}
			}
			s.numBlocks += blocks // one series per engine
		}
	} else if v, _, ok := sum(tokenCapacityNames); ok && v > 0 {
		s.numBlocks, s.blockSize = int(v), 1
	}
	if f, ok := fams["vllm:engine_sleep_state"]; ok {
		s.asleep = asleep(f)
	}
	if f, ok := fams["vllm:lora_requests_info"]; ok {
		s.adapters = runningAdapters(f)
	}
	if s.engine == "sglang" && s.waiting == 0 && s.running == 0 {
		// SGLang writes its gauges at prefill batches, every 40 decode
		// batches and every 30 s when idle: zeros may be that old, so
		// they say nothing of idleness. Unknown, never idle.
		s.hasLoad = false
	}
	return s, nil
}

// asleep reads vllm:engine_sleep_state: with its sleep_state label, an
// engine is awake while its "awake" series is 1 and no sleep level's is;
// without the label, 1 means asleep. The replica sleeps when none of its
// engines is awake.
func asleep(f *dto.MetricFamily) bool {
	sleeping := map[string]bool{}
	for _, m := range f.GetMetric() {
		state := ""
		for _, l := range m.GetLabel() {
			if l.GetName() == "sleep_state" {
				state = l.GetValue()
			}
		}
		v, k := value(m), engineKey(m, "sleep_state")
		switch state {
		case "awake":
			sleeping[k] = sleeping[k] || v == 0
		default:
			sleeping[k] = sleeping[k] || v >= 1
		}
	}
	for _, s := range sleeping {
		if !s {
			return false
		}
	}
	return len(sleeping) > 0
}

// runningAdapters reads vllm:lora_requests_info: one series per state of
// the adapters, its value the time it was written, never removed. vLLM
// writes no engine label on it (the data-parallel engines share its
// series), so the newest series names the adapters running now
// (comma-separated running_lora_adapters); where an engine label is
// present, each engine's newest does.
func runningAdapters(f *dto.MetricFamily) []string {
	newest := map[string]*dto.Metric{}
	for _, m := range f.GetMetric() {
		k := ""
		for _, l := range m.GetLabel() {
			if l.GetName() == "engine" {
				k = l.GetValue()
			}
		}
		if o, ok := newest[k]; !ok || value(m) > value(o) {
			newest[k] = m
		}
	}
	var out []string
	for _, m := range newest {
		for _, l := range m.GetLabel() {
			if l.GetName() != "running_lora_adapters" {
				continue
			}
			for _, a := range strings.Split(l.GetValue(), ",") {
				if a = strings.TrimSpace(a); a != "" && !slices.Contains(out, a) {
					out = append(out, a)
				}
			}
		}
	}
	return out
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
