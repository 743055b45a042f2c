package caddymodule

import (
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sglangFamilies are the families SGLang's SchedulerMetricsCollector and
// TokenizerMetricsCollector define and a unified (not disaggregated) server
// writes (testdata/engines/README.md names the source, its commit and the
// families left out): 34 gauges, 15 counters and 11 histograms. SGLang
// serves them in prometheus_client's multiprocess mode, which writes no
// _created series.
var sglangFamilies = struct{ gauges, counters, histograms, tokenizer []string }{
	gauges: []string{"sglang:num_running_reqs", "sglang:num_used_tokens", "sglang:token_usage",
		"sglang:pending_prealloc_token_usage", "sglang:swa_token_usage", "sglang:mamba_usage",
		"sglang:decode_sum_seq_lens", "sglang:gen_throughput", "sglang:num_queue_reqs", "sglang:num_grammar_queue_reqs",
		"sglang:num_running_reqs_offline_batch", "sglang:cache_hit_rate", "sglang:max_total_num_tokens",
		"sglang:spec_accept_length", "sglang:spec_accept_rate", "sglang:num_retracted_reqs", "sglang:num_paused_reqs",
		"sglang:num_prefill_prealloc_queue_reqs", "sglang:num_prefill_inflight_queue_reqs",
		"sglang:num_decode_prealloc_queue_reqs", "sglang:num_decode_transfer_queue_reqs", "sglang:kv_transfer_speed_gb_s",
		"sglang:kv_transfer_latency_ms", "sglang:kv_transfer_bootstrap_ms", "sglang:kv_transfer_alloc_ms",
		"sglang:kv_transfer_total_mb", "sglang:utilization", "sglang:engine_startup_time",
		"sglang:engine_load_weights_time", "sglang:is_cuda_graph", "sglang:num_unique_running_routing_keys",
		"sglang:routing_key_running_req_count", "sglang:routing_key_all_req_count", "sglang:new_token_ratio"},
	counters: []string{"sglang:num_retracted_requests_total", "sglang:num_retracted_input_tokens_total",
		"sglang:num_retracted_output_tokens_total", "sglang:num_grammar_cache_hit_total", "sglang:num_grammar_aborted_total",
		"sglang:num_grammar_timeout_total", "sglang:num_grammar_total", "sglang:cuda_graph_passes_total",
		"sglang:realtime_tokens_total", "sglang:prompt_tokens_total", "sglang:generation_tokens_total",
		"sglang:cached_tokens_total", "sglang:num_requests_total", "sglang:num_so_requests_total",
		"sglang:num_aborted_requests_total"},
	histograms: []string{"sglang:queue_time_seconds", "sglang:grammar_compilation_time_seconds",
		"sglang:grammar_schema_count", "sglang:grammar_ebnf_size", "sglang:grammar_tree_traversal_time_avg",
		"sglang:grammar_tree_traversal_time_max", "sglang:per_stage_req_latency_seconds",
		"sglang:time_to_first_token_seconds", "sglang:inter_token_latency_seconds",
		"sglang:e2e_request_latency_seconds", "sglang:num_retractions"},
	tokenizer: []string{"sglang:prompt_tokens_total", "sglang:generation_tokens_total", "sglang:cached_tokens_total",
		"sglang:num_requests_total", "sglang:num_so_requests_total", "sglang:num_aborted_requests_total",
		"sglang:time_to_first_token_seconds", "sglang:inter_token_latency_seconds",
		"sglang:e2e_request_latency_seconds", "sglang:num_retractions"},
}

// TestSGLangFixtureHasEveryFamily keeps the SGLang fixture whole: every
// family of its type, none the collectors do not define, no _created
// series, the scheduler's once per tensor and pipeline rank (four) and the
// tokenizer's once, labelled by model only.
func TestSGLangFixtureHasEveryFamily(t *testing.T) {
	fams, got := parsedFixture(t, "testdata/engines/sglang_tp2_pp2.metrics")
	want := familyTypes(sglangFamilies.gauges, sglangFamilies.counters, sglangFamilies.histograms, "", false)
	require.Len(t, want, 34+15+11)
	assert.Equal(t, want, got, "the collectors' families, each of its type")

	tokenizer := map[string]bool{}
	for _, n := range sglangFamilies.tokenizer {
		tokenizer[n] = true
	}
	checked := 0
	for name, f := range fams {
		ranks := map[string]bool{}
		for _, m := range f.GetMetric() {
			var names []string
			tp, pp := "", ""
			for _, l := range m.GetLabel() {
				names = append(names, l.GetName())
				switch l.GetName() {
				case "tp_rank":
					tp = l.GetValue()
				case "pp_rank":
					pp = l.GetValue()
				}
			}
			if tokenizer[name] {
				assert.Equal(t, []string{"model_name"}, names, "%s is the tokenizer's", name)
				continue
			}
			sort.Strings(names)
			for _, l := range []string{"engine_type", "model_name", "moe_ep_rank", "pp_rank", "tp_rank"} {
				assert.Contains(t, names, l, "%s: the scheduler's labels", name)
			}
			ranks[tp+"/"+pp] = true
		}
		if tokenizer[name] {
			assert.Len(t, f.GetMetric(), 1, "%s: one tokenizer", name)
		} else {
			assert.Len(t, ranks, 4, "%s: one series per rank of tp 2 x pp 2", name)
		}
		checked++
	}
	assert.Equal(t, 60, checked, "families checked")
}

// TestSGLangExpertRanksAreOneEngine proves SGLang's moe_ep_rank is read as
// a rank of one engine, as tp_rank and pp_rank are: with expert
// parallelism 2 the two tensor ranks report different expert ranks, and
// their series are still one engine's.
func TestSGLangExpertRanksAreOneEngine(t *testing.T) {
	text := mustRead(t, "testdata/engines/sglang_tp2_pp2.metrics")
	text = strings.ReplaceAll(text, `moe_ep_rank="0",pp_rank="0",tp_rank="1"`, `moe_ep_rank="1",pp_rank="0",tp_rank="1"`)
	text = strings.ReplaceAll(text, `moe_ep_rank="0",pp_rank="1",tp_rank="1"`, `moe_ep_rank="1",pp_rank="1",tp_rank="1"`)
	require.Contains(t, text, `moe_ep_rank="1"`)
	s, err := parseEngineSample(strings.NewReader(text))
	require.NoError(t, err)
	assert.Equal(t, 1, s.engines, "expert ranks of one engine")
	assert.Equal(t, 4.0, s.running, "not 8")
	assert.Equal(t, 2.0, s.waiting)
	assert.Equal(t, 65536, s.numBlocks)
}
