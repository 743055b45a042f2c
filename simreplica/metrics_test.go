package simreplica

import (
	"context"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scrape fetches /metrics and parses it with the text parser.
func scrape(t *testing.T, r *replica) map[string]*dto.MetricFamily {
	t.Helper()
	code, h, body := r.get(t, pathMetrics)
	require.Equal(t, 200, code)
	assert.True(t, strings.HasPrefix(h.Get("Content-Type"), "text/plain"), h.Get("Content-Type"))
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	require.NoError(t, err, body)
	return fams
}

// value returns the single sample of a family whose labels include want.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, typ dto.MetricType, want map[string]string) float64 {
	t.Helper()
	f, ok := fams[name]
	require.True(t, ok, "missing %s", name)
	assert.Equal(t, typ, f.GetType(), name)
	var found []float64
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			if labels[k] != v {
				match = false
			}
		}
		if !match {
			continue
		}
		switch typ {
		case dto.MetricType_COUNTER:
			found = append(found, m.GetCounter().GetValue())
		default:
			found = append(found, m.GetGauge().GetValue())
		}
	}
	require.Len(t, found, 1, "%s%v", name, want)
	return found[0]
}

func TestMetricsExposition(t *testing.T) {
	r := startReplica(t, Config{Model: "mm", Engine: engineWithBlocks(300)})
	fams := scrape(t, r)
	assert.Zero(t, value(t, fams, "vllm:num_requests_waiting", dto.MetricType_GAUGE, nil))
	assert.Zero(t, value(t, fams, "vllm:num_requests_running", dto.MetricType_GAUGE, nil))
	assert.Zero(t, value(t, fams, "vllm:kv_cache_usage_perc", dto.MetricType_GAUGE, nil))
	assert.Equal(t, 1.0, value(t, fams, "vllm:cache_config_info", dto.MetricType_GAUGE,
		map[string]string{"block_size": "16", "num_gpu_blocks": "300"}))

	prompt := longText(7, 300)
	var promptTokens, cachedTokens int
	for range 3 {
		resp, err := r.post(t, context.Background(), pathCompletions, map[string]any{"model": "m", "prompt": prompt, "max_tokens": 4})
		require.NoError(t, err)
		c := decodeCompletion(t, resp)
		promptTokens += c.Usage.PromptTokens
		cachedTokens += c.Usage.PromptTokensDetails.CachedTokens
	}
	require.Positive(t, cachedTokens)

	fams = scrape(t, r)
	labels := map[string]string{"model_name": "mm", "engine": "0"}
	assert.EqualValues(t, promptTokens, value(t, fams, "vllm:prefix_cache_queries_total", dto.MetricType_COUNTER, labels))
	assert.EqualValues(t, cachedTokens, value(t, fams, "vllm:prefix_cache_hits_total", dto.MetricType_COUNTER, labels))
	assert.EqualValues(t, promptTokens, value(t, fams, "vllm:prompt_tokens_total", dto.MetricType_COUNTER, labels))
	assert.EqualValues(t, 12, value(t, fams, "vllm:generation_tokens_total", dto.MetricType_COUNTER, labels))
	assert.EqualValues(t, 3, value(t, fams, "sim_requests_total", dto.MetricType_COUNTER, map[string]string{"path": pathCompletions}))
	assert.EqualValues(t, 2, value(t, fams, "sim_requests_total", dto.MetricType_COUNTER, map[string]string{"path": pathMetrics}),
		"both scrapes, this one included")
	assert.Positive(t, value(t, fams, "sim_kv_cached_blocks", dto.MetricType_GAUGE, nil))
	assert.Zero(t, value(t, fams, "vllm:num_preemptions_total", dto.MetricType_COUNTER, nil))
	assert.Zero(t, value(t, fams, "vllm:kv_cache_usage_perc", dto.MetricType_GAUGE, nil), "nothing running")

	r.get(t, "/unknown")
	fams = scrape(t, r)
	assert.EqualValues(t, 1, value(t, fams, "sim_requests_total", dto.MetricType_COUNTER, map[string]string{"path": "other"}))
}

func engineWithBlocks(n int) engineConfig {
	c := testEngine()
	c.NumBlocks = n
	return c
}

// TestSGLangTokenizerCounters proves the SGLang personality writes the
// tokenizer's token counters as SGLang does: one series labelled by model
// only, absent until first written, cached tokens only once a request had
// some.
func TestSGLangTokenizerCounters(t *testing.T) {
	r := startReplica(t, Config{Model: "mm", Personality: SGLang, Engine: engineWithBlocks(300)})
	fams := scrape(t, r)
	assert.NotContains(t, fams, "sglang:prompt_tokens_total", "no request yet")
	assert.NotContains(t, fams, "sglang:cached_tokens_total", "no request yet")
	assert.Contains(t, fams, "sglang:num_running_reqs")

	prompt := longText(7, 300)
	var promptTokens, cachedTokens int
	post := func() {
		resp, err := r.post(t, context.Background(), pathCompletions, map[string]any{"model": "m", "prompt": prompt, "max_tokens": 4})
		require.NoError(t, err)
		c := decodeCompletion(t, resp)
		promptTokens += c.Usage.PromptTokens
		cachedTokens += c.Usage.PromptTokensDetails.CachedTokens
	}
	post()
	require.Zero(t, cachedTokens, "a cold prompt")
	fams = scrape(t, r)
	model := map[string]string{"model_name": "mm"}
	assert.EqualValues(t, promptTokens, value(t, fams, "sglang:prompt_tokens_total", dto.MetricType_COUNTER, model))
	assert.NotContains(t, fams, "sglang:cached_tokens_total", "nothing cached yet")
	for _, m := range fams["sglang:prompt_tokens_total"].GetMetric() {
		assert.Len(t, m.GetLabel(), 1, "the tokenizer labels by model only")
	}

	post()
	require.Positive(t, cachedTokens)
	fams = scrape(t, r)
	assert.EqualValues(t, cachedTokens, value(t, fams, "sglang:cached_tokens_total", dto.MetricType_COUNTER, model))
	assert.EqualValues(t, 8, value(t, fams, "sglang:generation_tokens_total", dto.MetricType_COUNTER, model))
}

// TestSGLangGaugesReadBusyAfterABurst proves the SGLang personality's
// gauges lag as SGLang's do: written at the prefill of a new prompt, when
// that prompt was running, they read one running request after it ended,
// until the next write; an idle start reads zero.
func TestSGLangGaugesReadBusyAfterABurst(t *testing.T) {
	r := startReplica(t, Config{Model: "mm", Personality: SGLang, Engine: engineWithBlocks(300)})
	labels := map[string]string{"model_name": "mm"}
	fams := scrape(t, r)
	assert.Zero(t, value(t, fams, "sglang:num_running_reqs", dto.MetricType_GAUGE, labels), "idle before any prompt")
	resp, err := r.post(t, context.Background(), pathCompletions, map[string]any{"model": "m", "prompt": longText(3, 200), "max_tokens": 2})
	require.NoError(t, err)
	decodeCompletion(t, resp) // the answer has ended: the engine runs nothing now
	for range 2 {
		fams = scrape(t, r)
		assert.EqualValues(t, 1, value(t, fams, "sglang:num_running_reqs", dto.MetricType_GAUGE, labels),
			"written at the prompt's prefill, while it ran")
	}
}
