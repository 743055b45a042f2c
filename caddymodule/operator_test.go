package caddymodule

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/policies"
)

// histogramOf returns a histogram child's sample count and sum.
func histogramOf(t *testing.T, o prometheus.Observer) (uint64, float64) {
	t.Helper()
	var m dto.Metric
	require.NoError(t, o.(prometheus.Metric).Write(&m))
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

func TestOperationName(t *testing.T) {
	for endpoint, want := range map[string]string{
		"chat/completions": "chat", "responses": "chat", "messages": "chat",
		"completions": "text_completion", "embeddings": "embeddings",
		"messages/count_tokens": "messages_count_tokens", "rerank": "rerank", "": "other",
	} {
		assert.Equal(t, want, operationName(endpoint), endpoint)
	}
}

// TestModelLabelsBounded proves that a model is labelled by name only when
// the config names it exactly or a replica lists it, that the set is
// capped, and that a refresh that reads no list keeps the last one.
func TestModelLabelsBounded(t *testing.T) {
	m := &modelSet{}
	assert.Equal(t, otherModel, m.label("llama"), "empty set")
	m.configure([]string{"llama", "qwen3-*", ""})
	assert.Equal(t, "llama", m.label("llama"))
	assert.Equal(t, otherModel, m.label("qwen3-32b"), "a pattern names no model")
	m.listed([]modelEntry{{ID: "qwen3-32b"}, {ID: ""}})
	assert.Equal(t, "qwen3-32b", m.label("qwen3-32b"), "listed by a replica")
	many := make([]string, 0, 2*maxModelLabels)
	for i := range 2 * maxModelLabels {
		many = append(many, fmt.Sprintf("m%d", i))
	}
	m.configure(many)
	named := 0
	for _, n := range append(many, "llama", "qwen3-32b") {
		if m.label(n) != otherModel {
			named++
		}
	}
	assert.Equal(t, maxModelLabels, named, "at most maxModelLabels names")
}

// TestObserveGenAI proves the per-model figures of one ended stream:
// duration, time to first token, time per output token after the first
// ((1 s - 0.2 s) / 4 tokens), tokens by type and the status counter; and
// that a non-streamed answer observes no time to first token.
func TestObserveGenAI(t *testing.T) {
	model := "observe-model"
	s := genAISeriesOf(genAIKey{model, "chat", "alice"})
	status := func(code, errType string) float64 {
		return testutil.ToFloat64(metricGenAIRequests.WithLabelValues(model, "chat", "alice", code, errType))
	}
	observeGenAI(genAIObservation{model: model, operation: "chat", tenant: "alice", status: 200,
		duration: time.Second, ttft: 200 * time.Millisecond, stream: true,
		usage: usageFigures{prompt: 100, cached: 64, output: 5, reported: true}})
	n, sum := histogramOf(t, s.ttft)
	assert.Equal(t, uint64(1), n)
	assert.InDelta(t, 0.2, sum, 1e-9)
	n, sum = histogramOf(t, s.tpot)
	assert.Equal(t, uint64(1), n)
	assert.InDelta(t, 0.2, sum, 1e-9)
	n, sum = histogramOf(t, s.duration)
	assert.Equal(t, uint64(1), n)
	assert.InDelta(t, 1.0, sum, 1e-9)
	assert.Equal(t, 100.0, testutil.ToFloat64(s.input))
	assert.Equal(t, 64.0, testutil.ToFloat64(s.cached))
	assert.Equal(t, 5.0, testutil.ToFloat64(s.output))
	assert.Equal(t, 1.0, status("200", ""))

	observeGenAI(genAIObservation{model: model, operation: "chat", tenant: "alice", status: 429,
		errType: "upstream_429", duration: 10 * time.Millisecond})
	n, _ = histogramOf(t, s.ttft)
	assert.Equal(t, uint64(1), n, "no first token observed for an error")
	n, _ = histogramOf(t, s.duration)
	assert.Equal(t, uint64(2), n)
	assert.Equal(t, 1.0, status("429", "upstream_429"))
	assert.Equal(t, 100.0, testutil.ToFloat64(s.input), "no usage, no tokens")
}

func TestUsageOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		sn   *usageSniffer
		want usageFigures
	}{
		{"none", nil, usageFigures{}},
		{"nothing reported", &usageSniffer{}, usageFigures{}},
		{"openai", &usageSniffer{found: true, cached: 32, promptTokens: 40, usageTokens: 45}, usageFigures{40, 32, 5, true}},
		{"no details", &usageSniffer{promptTokens: 40, usageTokens: 41}, usageFigures{40, 0, 1, true}},
		{"negative counts", &usageSniffer{found: true, cached: -3, promptTokens: -1, usageTokens: 7}, usageFigures{0, 0, 7, true}},
	} {
		assert.Equal(t, tc.want, usageOf(tc.sn), tc.name)
	}
}

// logEntries reads the access log's JSON entries from path.
func logEntries(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e map[string]any
		if json.Unmarshal(sc.Bytes(), &e) == nil && e["msg"] == "handled request" {
			out = append(out, e)
		}
	}
	return out
}

// TestMetricsAndLogFieldsThroughCaddy proves, through Caddy: a streamed
// request of a configured model lands in its model's series (time to
// first token, tokens by type from the engine's usage, status 200); a
// model no config or replica names is labelled "other"; and the access
// log carries the request's model, endpoint, hashed session, replica,
// strategy, the pick's reason (a new session, then its home), tokens and
// time to first token; neither the key, the prompt nor the session's id
// is logged (the session header deleted by a log filter, as in
// Caddyfile.example).
func TestMetricsAndLogFieldsThroughCaddy(t *testing.T) {
	f := newFake(t)
	logPath := filepath.Join(t.TempDir(), "access.log")
	const key = "sk-operator-secret"
	r := startRouter(t, fmt.Sprintf(`
	log {
		output file %s
		format filter {
			wrap json
			request>headers>X-Session-Id delete
		}
	}
	llm_route {
		api_keys %s
		request_usage
	}
	@known llm_model m unlisted-*
	reverse_proxy @known %s {
		lb_policy llm
	}`, logPath, key, f.addr))

	series := genAISeriesOf(genAIKey{"m", "chat", "default"})
	ttft0, _ := histogramOf(t, series.ttft)
	cached0 := testutil.ToFloat64(series.cached)
	ok0 := testutil.ToFloat64(metricGenAIRequests.WithLabelValues("m", "chat", "default", "200", ""))
	other := genAISeriesOf(genAIKey{otherModel, "chat", "default"})
	other0, _ := histogramOf(t, other.duration)

	// A session of this run only: the session table outlives a config,
	// and a run repeated in one process (-count) would find the last
	// run's home gone and log session_moved.
	session, prompt := fmt.Sprintf("session-operator-%d", time.Now().UnixNano()), "the secret prompt text"
	for range 2 {
		req, err := http.NewRequest(http.MethodPost, r.url("/v1/chat/completions"), strings.NewReader(chatBody(prompt, "hi", true)))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("X-Session-Id", session)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		lines, done, err := readSSE(resp)
		require.NoError(t, err)
		require.True(t, done, "status %d: %q", resp.StatusCode, lines)
	}
	body := strings.Replace(chatBody("p", "q", false), `"model":"m"`, `"model":"unlisted-9"`, 1)
	resp := post(t, r.url("/v1/chat/completions"), key, "", "", body)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	waitFor(t, "three requests observed", func() bool {
		n, _ := histogramOf(t, other.duration)
		return testutil.ToFloat64(metricGenAIRequests.WithLabelValues("m", "chat", "default", "200", "")) == ok0+2 && n == other0+1
	})
	ttft1, _ := histogramOf(t, series.ttft)
	assert.Equal(t, ttft0+2, ttft1, "two streams, two first tokens")
	assert.Equal(t, cached0+64, testutil.ToFloat64(series.cached), "the fake reports 32 cached tokens per stream")

	r.requireDrained(f.addr)
	// Caddy writes an entry after the handlers return, which may be just
	// after the client read the answer's end.
	waitFor(t, "three access log entries", func() bool { return len(logEntries(t, logPath)) >= 3 })
	entries := logEntries(t, logPath)
	require.Len(t, entries, 3)
	raw, err := os.ReadFile(logPath)
	require.NoError(t, err)
	// Caddy logs the request's headers itself: the filter deletes the
	// session header there (as Caddyfile.example does); llm_route's fields
	// hold only the session's hash.
	for _, secret := range []string{key, prompt, session} {
		assert.NotContains(t, string(raw), secret)
	}
	first, second, third := entries[0], entries[1], entries[2]
	assert.Equal(t, "m", first[logModel])
	assert.Equal(t, "chat/completions", first[logEndpoint])
	assert.Equal(t, "chat", first[logOperation])
	assert.Equal(t, f.addr, first[logReplica])
	assert.Equal(t, "prefix_load", first[logStrategy])
	assert.Equal(t, "session_new", first[logReason])
	assert.Equal(t, "session_home", second[logReason])
	assert.Equal(t, fmt.Sprintf("%x", sessionKey("m", session)), first[logSession])
	assert.Equal(t, 40.0, first[logPrompt])
	assert.Equal(t, 32.0, first[logCached])
	assert.Equal(t, 1.0, first[logOutput])
	assert.Equal(t, true, first[logStream])
	assert.Greater(t, first[logTTFT], 0.0)
	assert.Equal(t, 1.0, first[logAttempts])
	assert.Equal(t, "unlisted-9", third[logModel], "the log names the model asked for")
	assert.Equal(t, string(policies.ReasonRendezvous), third[logReason], "prefix_load's rule: a new prefix, peers assumed without engine metrics")
	assert.NotContains(t, third, logTTFT, "not a stream")
	assert.NotContains(t, third, logSession)
}

// listingReplica is a replica that lists models at /v1/models, counting
// those requests, and answers anything else with a chat completion.
func listingReplica(t *testing.T, models ...string) (string, *atomic.Int64) {
	t.Helper()
	var lists atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/models" {
			lists.Add(1)
			l := modelList{Object: "list"}
			for _, m := range models {
				l.Data = append(l.Data, modelEntry{ID: m, Object: "model"})
			}
			_ = json.NewEncoder(w).Encode(l)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[]}`)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), &lists
}

// TestModelLabelFromReplicaList proves that a model a replica lists on
// its /v1/models gets its own label, though the config names it only by a
// pattern, while one no replica lists stays "other". Without
// engine_metrics the gateway asks its replicas nothing of its own accord:
// the lists come from a client's GET /v1/models. With engine_metrics a
// model nobody named makes the gateway read the lists in the background.
func TestModelLabelFromReplicaList(t *testing.T) {
	const listed, unlisted, later = "labels-listed-7b", "labels-unlisted-7b", "labels-later-7b"
	rep, lists := listingReplica(t, listed, later)
	site := `
	llm_route
	@m llm_model labels-*
	reverse_proxy @m %s {
		lb_policy llm %s
	}`
	r := startRouter(t, fmt.Sprintf(site, rep, ""))
	send := func(model string) {
		resp := post(t, r.url("/v1/chat/completions"), "", "", "", strings.Replace(chatBody("s", "u", false), `"model":"m"`, `"model":"`+model+`"`, 1))
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	// Without keys every request is the default tenant's.
	count := func(model string) float64 {
		return testutil.ToFloat64(metricGenAIRequests.WithLabelValues(model, "chat", "default", "200", ""))
	}
	waitCounted := func(model string, want float64) {
		t.Helper()
		waitFor(t, model+" counted", func() bool { return count(model) == want })
	}

	others := count(otherModel)
	send(listed)
	waitCounted(otherModel, others+1)
	assert.Zero(t, lists.Load(), "without engine_metrics nothing asks the replica for its list")
	resp, err := http.Get(r.url("/v1/models"))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, int64(1), lists.Load())
	assert.Equal(t, later, knownModels.label(later), "every listed model is named")
	named := count(listed)
	send(listed)
	send(unlisted)
	waitCounted(listed, named+1)
	waitCounted(otherModel, others+2)

	// With engine_metrics, a model nobody named yet starts a read.
	const fresh = "labels-fresh-7b"
	rep2, lists2 := listingReplica(t, fresh)
	r.load(fmt.Sprintf(site, rep2, "{\n\t\t\tengine_metrics {\n\t\t\t\tinterval 1h\n\t\t\t}\n\t\t}"))
	knownModels.nextRead.Store(0) // the unknown models above held the next read back for 10 s
	send(fresh)
	waitFor(t, "the replica's list read", func() bool { return knownModels.label(fresh) == fresh })
	assert.Equal(t, int64(1), lists2.Load())
	assert.Equal(t, otherModel, knownModels.label(unlisted))
	r.requireDrained(rep2)
}

// TestGenAIMetricsSurviveReload proves that the per-model metrics are in
// Caddy's /metrics and stay there, with their counts, across a reload
// (the new config's registry takes the same collectors; no duplicate
// registration panics).
func TestGenAIMetricsSurviveReload(t *testing.T) {
	f := newFake(t)
	site := fmt.Sprintf(`
	llm_route
	@m llm_model m
	reverse_proxy @m %s {
		lb_policy llm
	}`, f.addr)
	r := startRouter(t, site)
	scrape := func() string {
		t.Helper()
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", r.admin))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(b)
	}
	series := regexp.MustCompile(`(?m)^llmroute_gen_ai_requests_total\{error_type="",gen_ai_operation_name="chat",gen_ai_request_model="m",http_response_status_code="200",tenant="default"\} (\d+)$`)
	value := func(body string) int {
		t.Helper()
		m := series.FindStringSubmatch(body)
		require.NotNil(t, m, "no requests series for model m in /metrics")
		n, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		return n
	}
	send := func() {
		resp := post(t, r.url("/v1/chat/completions"), "", "", "", chatBody("s", "u", false))
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	send()
	waitFor(t, "the request counted", func() bool { return series.MatchString(scrape()) })
	before := value(scrape())
	body := scrape()
	for _, name := range []string{"llmroute_gen_ai_server_request_duration_seconds_bucket", "llmroute_gen_ai_token_usage_total"} {
		assert.Contains(t, body, name)
	}
	r.load(site)
	// The first request on each port after a reload may meet the old
	// server's shutdown (the admin endpoint is replaced too).
	resp := doAfterReload(t, func() *http.Request {
		req, err := http.NewRequest(http.MethodPost, r.url("/v1/chat/completions"), strings.NewReader(chatBody("s", "u", false)))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		return req
	})
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp = doAfterReload(t, func() *http.Request {
		req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", r.admin), nil)
		require.NoError(t, err)
		return req
	})
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	waitFor(t, "the request after the reload counted", func() bool { return value(scrape()) == before+1 })
}

// TestUntrackedPickLogged proves that a request `lb_policy llm` routes
// without llm_route before it says so in the access log (llm_reason
// untracked) and gets none of llm_route's other fields.
func TestUntrackedPickLogged(t *testing.T) {
	f := newFake(t)
	logPath := filepath.Join(t.TempDir(), "access.log")
	r := startRouter(t, fmt.Sprintf(`
	log {
		output file %s
		format json
	}
	reverse_proxy %s {
		lb_policy llm
	}`, logPath, f.addr))
	resp := post(t, r.url("/v1/chat/completions"), "", "", "", chatBody("s", "u", false))
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	waitFor(t, "the access log entry", func() bool { return len(logEntries(t, logPath)) == 1 })
	e := logEntries(t, logPath)[0]
	assert.Equal(t, pickUntracked, e[logReason])
	assert.NotContains(t, e, logModel)
	assert.NotContains(t, e, logReplica)
}

// TestPickReason proves the reasons the policy names itself, and that any
// other pick is the strategy's.
func TestPickReason(t *testing.T) {
	s, err := policies.NewStrategy("least_load", policies.Options{})
	require.NoError(t, err)
	p := &LLMSelection{strategy: s}
	assert.Equal(t, pickPin, p.pickReason(true, "home", ""), "a pin wins over a session")
	assert.Equal(t, "session_home", p.pickReason(false, "home", ""))
	assert.Equal(t, "session_moved", p.pickReason(false, "moved", ""))
	assert.Equal(t, "least_load", p.pickReason(false, "", ""))
	assert.Equal(t, "detour", p.pickReason(false, "", policies.ReasonDetour), "the strategy's rule")

	// prefix_load names its rules: a keyed request to a cold pool is a new
	// prefix placed by load or at its rendezvous home, a keyless one goes
	// to the least loaded.
	pl := LLMSelection{Strategy: "prefix_load", Peers: "none"}
	require.NoError(t, pl.setup())
	view := []policies.Replica{{Addr: "10.0.0.1:8000", EngineWaiting: -1, EngineRunning: -1, KVUsage: -1}, {Addr: "10.0.0.2:8000", EngineWaiting: -1, EngineRunning: -1, KVUsage: -1}}
	_, _, why := pl.pick(&routeCtx{}, policies.Keys{Leading: 7, Blocks: []uint64{8}, LeadingBlocks: 1, Bytes: 128, BlockBytes: 128}, view, -1)
	assert.Equal(t, policies.ReasonLoad, why, "alone, a new prefix is placed by load")
	_, _, why = pl.pick(&routeCtx{}, policies.Keys{}, view, -1)
	assert.Equal(t, policies.ReasonLeastLoad, why)
	rc := &routeCtx{}
	rc.setPick("session_new", true)
	rc.setPick("least_load", false) // a retry's pick, after a queued one
	reason, queued := rc.pickOf()
	assert.Equal(t, "least_load", reason, "the latest attempt's")
	assert.True(t, queued, "the request went through the queue")
}
