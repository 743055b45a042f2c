package caddymodule

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/caddyserver/caddy/v2"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/llmroute/caddy-llmroute/simengine"
	"github.com/llmroute/caddy-llmroute/simreplica"
)

func parseFixture(t *testing.T, name string) engineSample {
	t.Helper()
	f, err := os.Open("testdata/engines/" + name)
	require.NoError(t, err)
	defer f.Close()
	s, err := parseEngineSample(f)
	require.NoError(t, err)
	return s
}

// TestEngineMetricsAsExported reads the engines' metrics as they export
// them: vLLM's data-parallel engines add up their requests and caches and
// average their KV usage (a sum read two half-full engines as one full
// cache); SGLang's tensor and pipeline ranks are one engine, not four.
func TestEngineMetricsAsExported(t *testing.T) {
	v := parseFixture(t, "vllm_dp2.metrics")
	assert.Equal(t, "vllm", v.engine)
	assert.Equal(t, 2, v.engines)
	assert.Equal(t, 8.0, v.running, "3 + 5")
	assert.Equal(t, 3.0, v.waiting, "1 + 2")
	assert.Equal(t, 0.5, v.kvUsage, "the mean of 0.5 and 0.5, not 1.0")
	assert.Equal(t, 4096, v.numBlocks, "2 x 2048 blocks")
	assert.Equal(t, 16, v.blockSize)
	assert.Equal(t, 4000.0, v.queries)
	assert.False(t, v.asleep)

	s := parseFixture(t, "sglang_tp2_pp2.metrics")
	assert.Equal(t, "sglang", s.engine)
	assert.Equal(t, 1, s.engines, "four ranks of one engine")
	assert.Equal(t, 4.0, s.running, "not 16")
	assert.Equal(t, 2.0, s.waiting)
	assert.InDelta(t, 0.4, s.kvUsage, 1e-9)
	assert.Equal(t, 65536, s.numBlocks, "max_total_num_tokens, in tokens")
	assert.Equal(t, 1, s.blockSize)
	assert.Equal(t, 9000.0, s.queries, "prompt tokens: restart detection")
	assert.Equal(t, 5000.0, s.hits, "cached tokens")
	assert.True(t, s.hasLoad)
}

// TestEngineMetricsDataParallel proves KV usage is the engines' mean and
// counts their sum at 1, 2 and 4 engines.
func TestEngineMetricsDataParallel(t *testing.T) {
	for _, dp := range []int{1, 2, 4} {
		var b strings.Builder
		b.WriteString("# TYPE vllm:num_requests_running gauge\n")
		for e := range dp {
			fmt.Fprintf(&b, "vllm:num_requests_running{engine=\"%d\",model_name=\"m\"} 2\n", e)
		}
		b.WriteString("# TYPE vllm:kv_cache_usage_perc gauge\n")
		for e := range dp {
			fmt.Fprintf(&b, "vllm:kv_cache_usage_perc{engine=\"%d\",model_name=\"m\"} %g\n", e, 0.2*float64(e+1))
		}
		s, err := parseEngineSample(strings.NewReader(b.String()))
		require.NoError(t, err)
		want := 0.0
		for e := range dp {
			want += 0.2 * float64(e+1)
		}
		assert.Equal(t, float64(2*dp), s.running, "dp %d", dp)
		assert.InDelta(t, want/float64(dp), s.kvUsage, 1e-9, "dp %d: the mean", dp)
		assert.Less(t, s.kvUsage, kvFullForTest, "dp %d: never read full", dp)
	}
}

// kvFullForTest is the "full" line a sum of engines' usage crossed.
const kvFullForTest = 0.95

// TestEngineMetricsSleepAndIdleLag proves vLLM's sleep mode takes the
// replica out, and SGLang's zeros (gauges written every 30 s when idle)
// count as unknown, never as idle.
func TestEngineMetricsSleepAndIdleLag(t *testing.T) {
	asleepText := strings.ReplaceAll(mustRead(t, "testdata/engines/vllm_dp2.metrics"),
		`sleep_state="awake"} 1.0`, `sleep_state="awake"} 0.0`)
	s, err := parseEngineSample(strings.NewReader(asleepText))
	require.NoError(t, err)
	assert.True(t, s.asleep, "no engine awake")
	one := strings.Replace(mustRead(t, "testdata/engines/vllm_dp2.metrics"), `engine="1",model_name="qwen",sleep_state="awake"} 1.0`, `engine="1",model_name="qwen",sleep_state="awake"} 0.0`, 1)
	s, err = parseEngineSample(strings.NewReader(one))
	require.NoError(t, err)
	assert.False(t, s.asleep, "one engine awake serves")
	s, err = parseEngineSample(strings.NewReader("# TYPE vllm:engine_sleep_state gauge\nvllm:engine_sleep_state{engine=\"0\"} 1\n# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\"} 0\n"))
	require.NoError(t, err)
	assert.True(t, s.asleep, "without the label, 1 is asleep")

	st := testReplica("test-asleep", 64)
	now := time.Now()
	st.apply(now, engineSample{engine: "vllm", hasLoad: true, asleep: true, kvUsage: -1}, 3*time.Second)
	v := st.snapshot(now, 8, 0)
	assert.Equal(t, availCooling, v.avail, "a sleeping engine is out")
	assert.Equal(t, reasonAsleep, v.coolReason)
	assert.Equal(t, 3*time.Second, v.coolLeft)
	v = st.snapshot(now.Add(4*time.Second), 8, 0)
	assert.NotEqual(t, availCooling, v.avail, "a stale sample keeps nobody out")

	idle := "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{tp_rank=\"0\"} 0\n# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{tp_rank=\"0\"} 0\n"
	s, err = parseEngineSample(strings.NewReader(idle))
	require.NoError(t, err)
	assert.False(t, s.hasLoad, "SGLang's zeros may be 30 s old: unknown")
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// TestScrapeSendsKey proves the scraper sends engine_metrics' api_key, as
// llama.cpp's server started with --api-key requires on /metrics.
func TestScrapeSendsKey(t *testing.T) {
	t.Setenv("LLAMA_KEY", "sk-llama")
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case got <- r.Header.Get("Authorization"):
		default:
		}
		if r.Header.Get("Authorization") != "Bearer sk-llama" {
			http.Error(w, `{"error":{"code":401}}`, http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 1\n# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred 0\n")
	}))
	defer srv.Close()
	cfg := EngineMetricsConfig{APIKey: "{env.LLAMA_KEY}"}
	cfg.defaults()
	require.NoError(t, cfg.resolve(caddy.NewReplacer()))
	sc := newScraper(cfg, zap.NewNop())
	defer sc.stop()
	st := testReplica(strings.TrimPrefix(srv.URL, "http://"), 64)
	sc.scrapeOne(t.Context(), st)
	assert.Equal(t, "Bearer sk-llama", <-got)
	st.mu.Lock()
	e := st.engine
	st.mu.Unlock()
	assert.Empty(t, e.lastErr)
	assert.Equal(t, "llamacpp", e.engine)
	assert.Equal(t, 1.0, e.running)
}

// familiesOf returns each metric family's label names in Prometheus text.
func familiesOf(t *testing.T, text string) map[string][]string {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	require.NoError(t, err)
	out := map[string][]string{}
	for name, f := range fams {
		var labels []string
		if ms := f.GetMetric(); len(ms) > 0 {
			for _, l := range ms[0].GetLabel() {
				labels = append(labels, l.GetName())
			}
		}
		out[name] = labels
	}
	return out
}

// TestSimreplicaMatchesEngineFixtures scrapes simreplica in each
// personality and fails when it writes a family, or a label, that the
// engine's fixture does not have: a simulated engine must look like the
// engine it stands for. It then reads each as the router does.
func TestSimreplicaMatchesEngineFixtures(t *testing.T) {
	for _, c := range []struct {
		p       simreplica.Personality
		fixture string
		dp      int
		engines int
		key     string
	}{
		{simreplica.VLLM, "vllm_dp2.metrics", 2, 2, ""},
		{simreplica.SGLang, "sglang_tp2_pp2.metrics", 0, 1, ""},
		{simreplica.LlamaCpp, "llamacpp/metrics.txt", 0, 1, "sk-llama"},
	} {
		t.Run(string(c.p), func(t *testing.T) {
			s, err := simreplica.New(simreplica.Config{Personality: c.p, DataParallel: c.dp, APIKey: c.key, Engine: simengine.DefaultConfig()})
			require.NoError(t, err)
			srv := httptest.NewServer(s)
			defer srv.Close()
			defer s.Close()
			get := func(key string) (int, string) {
				req, _ := http.NewRequest(http.MethodGet, srv.URL+"/metrics", nil)
				if key != "" {
					req.Header.Set("Authorization", "Bearer "+key)
				}
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			if c.key != "" {
				code, _ := get("")
				assert.Equal(t, http.StatusUnauthorized, code, "llama.cpp keeps /metrics behind its key")
			}
			code, text := get(c.key)
			require.Equal(t, http.StatusOK, code)
			want := familiesOf(t, mustRead(t, "testdata/engines/"+c.fixture))
			n := 0
			for name, labels := range familiesOf(t, text) {
				if strings.HasPrefix(name, "sim_") {
					continue // the simulator's own
				}
				wl, ok := want[name]
				if assert.True(t, ok, "%s: family %s is not the engine's", c.p, name) {
					assert.ElementsMatch(t, wl, labels, "%s: labels of %s", c.p, name)
					n++
				}
			}
			assert.GreaterOrEqual(t, n, 4, "families compared")
			smp, err := parseEngineSample(strings.NewReader(text))
			require.NoError(t, err)
			assert.Equal(t, string(c.p), smp.engine)
			assert.Equal(t, c.engines, smp.engines)
		})
	}
}

// vllmFamilies are the families vLLM's PrometheusStatLogger defines in its
// default configuration with LoRA on (testdata/engines/README.md names the
// source and its commit): 7 gauges, 12 counters and 15 histograms, the
// counters and histograms as prometheus_client exposes them, with their
// _created gauges.
var vllmFamilies = struct{ gauges, counters, histograms []string }{
	gauges: []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:num_requests_waiting_by_reason",
		"vllm:engine_sleep_state", "vllm:kv_cache_usage_perc", "vllm:lora_requests_info", "vllm:cache_config_info"},
	counters: []string{"vllm:prefix_cache_queries", "vllm:prefix_cache_hits", "vllm:external_prefix_cache_queries",
		"vllm:external_prefix_cache_hits", "vllm:mm_cache_queries", "vllm:mm_cache_hits", "vllm:num_preemptions",
		"vllm:prompt_tokens", "vllm:prompt_tokens_by_source", "vllm:prompt_tokens_cached",
		"vllm:generation_tokens", "vllm:request_success"},
	histograms: []string{"vllm:request_prompt_tokens", "vllm:request_generation_tokens", "vllm:iteration_tokens_total",
		"vllm:request_max_num_generation_tokens", "vllm:request_params_n", "vllm:request_params_max_tokens",
		"vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
		"vllm:request_time_per_output_token_seconds", "vllm:e2e_request_latency_seconds",
		"vllm:request_queue_time_seconds", "vllm:request_inference_time_seconds", "vllm:request_prefill_time_seconds",
		"vllm:request_decode_time_seconds", "vllm:request_prefill_kv_computed_tokens"},
}

// TestVLLMFixtureHasEveryFamily keeps the vLLM fixture whole: every family
// the logger defines, of its type, with a series per engine, counters and
// histograms with their _created gauge, histograms ending at +Inf with a
// count equal to it, and nothing the logger does not define.
func TestVLLMFixtureHasEveryFamily(t *testing.T) {
	fams, got := parsedFixture(t, "testdata/engines/vllm_dp2.metrics")
	want := familyTypes(vllmFamilies.gauges, vllmFamilies.counters, vllmFamilies.histograms, "_total", true)
	require.Len(t, want, 34+12+15, "34 families and the 27 _created gauges of their counters and histograms")
	assert.Equal(t, want, got, "the logger's families, each of its type")
	for name, f := range fams {
		engines := map[string]bool{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "engine" {
					engines[l.GetValue()] = true
				}
			}
			if h := m.GetHistogram(); h != nil {
				b := h.GetBucket()
				require.NotEmpty(t, b, name)
				// The text parser drops the +Inf bucket into the count.
				assert.LessOrEqual(t, b[len(b)-1].GetCumulativeCount(), h.GetSampleCount(), name)
			}
		}
		if name == "vllm:lora_requests_info" {
			assert.Empty(t, engines, "vLLM writes no engine label on lora_requests_info")
			continue
		}
		assert.Len(t, engines, 2, "%s: one series per data-parallel engine", name)
	}
}

// parsedFixture parses an engine fixture as the scraper does and returns
// its families and the type of each.
func parsedFixture(t *testing.T, path string) (map[string]*dto.MetricFamily, map[string]dto.MetricType) {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(mustRead(t, path)))
	require.NoError(t, err)
	types := make(map[string]dto.MetricType, len(fams))
	for name, f := range fams {
		types[name] = f.GetType()
	}
	return fams, types
}

// familyTypes is the type each family of an engine's definitions must
// have: counters named with counterSuffix, and with created the _created
// gauge prometheus_client writes beside each counter and histogram.
func familyTypes(gauges, counters, histograms []string, counterSuffix string, created bool) map[string]dto.MetricType {
	want := map[string]dto.MetricType{}
	for _, n := range gauges {
		want[n] = dto.MetricType_GAUGE
	}
	for _, n := range counters {
		want[n+counterSuffix] = dto.MetricType_COUNTER
		if created {
			want[n+"_created"] = dto.MetricType_GAUGE
		}
	}
	for _, n := range histograms {
		want[n] = dto.MetricType_HISTOGRAM
		if created {
			want[n+"_created"] = dto.MetricType_GAUGE
		}
	}
	return want
}
