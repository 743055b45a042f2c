package caddymodule

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// Samples written from each engine's documented metric names.
const (
	vllmSample = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 7.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.42
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 12000.0
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 9000.0
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",num_gpu_blocks="4096"} 1.0
`
	vllmOldSample = `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 2
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 1
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.9
`
	sglangSample = `# HELP sglang:num_queue_reqs The number of requests in the waiting queue
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m"} 5.0
# HELP sglang:num_running_reqs The number of running requests
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m"} 12.0
# HELP sglang:token_usage The token usage
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="m"} 0.3
`
	sglangNewSample = `# TYPE sglang_num_queue_reqs gauge
sglang_num_queue_reqs{model_name="m"} 4
# TYPE sglang_num_running_reqs gauge
sglang_num_running_reqs{model_name="m"} 6
`
	llamacppSample = `# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 1
`
)

// TestParseEngineSamples proves each engine's names are understood.
func TestParseEngineSamples(t *testing.T) {
	cases := []struct {
		name, text, engine string
		waiting, running   float64
		kv                 float64
		blocks, blockSize  int
	}{
		{"vllm", vllmSample, "vllm", 7, 3, 0.42, 4096, 16},
		{"vllm old names", vllmOldSample, "vllm", 2, 1, 0.9, 0, 0},
		{"sglang", sglangSample, "sglang", 5, 12, 0.3, 0, 0},
		{"sglang underscore", sglangNewSample, "sglang", 4, 6, -1, 0, 0},
		{"llama.cpp", llamacppSample, "llamacpp", 1, 2, -1, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := parseEngineSample(strings.NewReader(c.text))
			require.NoError(t, err)
			assert.True(t, s.hasLoad)
			assert.Equal(t, c.engine, s.engine)
			assert.Equal(t, c.waiting, s.waiting)
			assert.Equal(t, c.running, s.running)
			assert.InDelta(t, c.kv, s.kvUsage, 1e-9)
			assert.Equal(t, c.blocks, s.numBlocks)
			assert.Equal(t, c.blockSize, s.blockSize)
		})
	}
	s, err := parseEngineSample(strings.NewReader("# TYPE other gauge\nother 1\n"))
	require.NoError(t, err)
	assert.False(t, s.hasLoad, "metrics without load names are not load")
	_, err = parseEngineSample(strings.NewReader("not prometheus {{{"))
	assert.Error(t, err)
}

// TestEngineViewStaleIsUnknown proves that missing or stale metrics read
// as unknown (-1), never as idle, and that the engine's cache size sizes
// the index.
func TestEngineViewStaleIsUnknown(t *testing.T) {
	st := testReplica("test-stale", 100000)
	now := time.Now()
	w, r, kv := st.engineView(now)
	assert.Equal(t, []any{-1, -1, -1.0}, []any{w, r, kv}, "never scraped")

	smp, err := parseEngineSample(strings.NewReader(vllmSample))
	require.NoError(t, err)
	st.apply(now, smp, time.Second)
	w, r, kv = st.engineView(now.Add(500 * time.Millisecond))
	assert.Equal(t, []any{7, 3, 0.42}, []any{w, r, kv})
	w, _, _ = st.engineView(now.Add(2 * time.Second))
	assert.Equal(t, -1, w, "stale metrics must be unknown")
	// 4096 blocks x 16 tokens x ~4 bytes / 128-byte router blocks.
	assert.Equal(t, 2048, st.belief.Index().Capacity())

	smp2, _ := parseEngineSample(strings.NewReader("# TYPE other gauge\nother 1\n"))
	st.apply(now, smp2, time.Second)
	w, _, _ = st.engineView(now)
	assert.Equal(t, -1, w, "a scrape without load figures must not read as idle")
}

// TestEngineSampleKeepsInFlight proves that a scrape records what the
// router had in flight on the replica when it arrived, which the selection
// view hands on (InFlightSinceSample) for the engine's counts to be judged
// against, and that a stale scrape hands on nothing.
func TestEngineSampleKeepsInFlight(t *testing.T) {
	clk := clockwork.NewFakeClock()
	st := newReplicaState("test-sample-inflight", clk)
	t.Cleanup(func() { _ = st.Destruct() })
	rules := &attemptRules{}
	now := clk.Now()
	var held []*attempt
	hold := func(n int) {
		for range n {
			a, ok := st.reserve(now, 0, rules)
			require.True(t, ok)
			held = append(held, a)
		}
	}
	hold(3)
	st.apply(now, engineSample{engine: "vllm", running: 3, hasLoad: true}, time.Second)
	hold(2)
	v := st.snapshot(now, 0, 0)
	assert.Equal(t, []int{5, 3, 3}, []int{v.inFlight, v.sampledInFlight, v.running}, "in flight now, at the sample; the engine's count")
	for _, a := range held {
		a.end(outcome{kind: outcomeSuccess})
	}
	v = st.snapshot(now, 0, 0)
	assert.Equal(t, []int{0, 3}, []int{v.inFlight, v.sampledInFlight}, "ended since the sample")
	v = st.snapshot(now.Add(2*time.Second), 0, 0)
	assert.Equal(t, []int{-1, 0}, []int{v.running, v.sampledInFlight}, "stale: nothing to judge")
}

// TestCountersBackwardsPurge proves a restart seen in the engine's
// counters purges the replica's index.
func TestCountersBackwardsPurge(t *testing.T) {
	st := testReplica("test-restart", 1000)
	st.belief.Index().Insert([]uint64{1, 2, 3})
	smp, _ := parseEngineSample(strings.NewReader(vllmSample))
	st.apply(time.Now(), smp, time.Second)
	require.Equal(t, 3, st.belief.Index().Len())
	after := strings.ReplaceAll(vllmSample, "} 12000.0", "} 50.0")
	smp, _ = parseEngineSample(strings.NewReader(after))
	st.apply(time.Now(), smp, time.Second)
	assert.Equal(t, 0, st.belief.Index().Len())
	assert.Equal(t, "counters_reset", st.belief.Stats().LastPurge)
}

// TestScraperPollsReplica proves the scraper fetches /metrics on its
// interval and stops cleanly.
func TestScraperPollsReplica(t *testing.T) {
	hits := make(chan struct{}, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		select {
		case hits <- struct{}{}:
		default:
		}
		fmt.Fprint(w, llamacppSample)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	st := testReplica(addr, 10)
	sc := newScraper(EngineMetricsConfig{Interval: 50 * 1e6}, zap.NewNop())
	sc.watch(st)
	for range 2 {
		select {
		case <-hits:
		case <-time.After(3 * time.Second):
			t.Fatal("no scrape")
		}
	}
	sc.stop()
	require.Eventually(t, func() bool { w, _, _ := st.engineView(time.Now()); return w == 1 }, 2*time.Second, 10*time.Millisecond)
	assert.Equal(t, "llamacpp", st.engine.engine)
}
