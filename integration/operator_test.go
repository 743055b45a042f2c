package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/caddymodule/stateapi"
	"github.com/llmroute/caddy-llmroute/internal/testrig/netx"
	"github.com/llmroute/caddy-llmroute/internal/testrig/proc"
	"github.com/llmroute/caddy-llmroute/simengine"
	"github.com/llmroute/caddy-llmroute/simreplica"
)

// The operator's view through the real binary: `caddy llm status`, and the
// Grafana dashboard's queries against a real Prometheus scraping caddy.

const operatorModel = "llama-3.1-8b-instruct"

// operatorSite is a demo-like site: one pool of replicas with a small cap
// (so that requests queue), engine metrics, usage on streams, and
// tenants, one with roomy budgets and one allowed a request a minute.
func operatorSite(replicas []string) string {
	return fmt.Sprintf(`	llm_route {
		api_keys sk-operator-default
		request_usage
		replica_header X-LLMRoute-Replica
		tenant alice {
			keys sk-operator-alice
			requests_per_minute 100000
			tokens_per_minute 100000000
		}
		tenant tight {
			keys sk-operator-tight
			requests_per_minute 1
		}
	}
	@llama llm_model %s
	reverse_proxy @llama %s {
		lb_policy llm {
			max_in_flight 2
			engine_metrics {
				interval 200ms
			}
		}
	}`, operatorModel, strings.Join(replicas, " "))
}

// startSimTokens runs a simulated replica of model answering outputTokens
// tokens.
func startSimTokens(t *testing.T, name, model string, outputTokens int) string {
	t.Helper()
	cfg := simreplica.Config{Name: name, Model: model, OutputTokens: outputTokens, RestartDown: -1}
	cfg.Engine = simengine.DefaultConfig()
	cfg.Engine.Speed = 20
	s, err := simreplica.New(cfg)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() { _ = s.Close() })
	return ln.Addr().String()
}

// operatorTraffic sends demo-like traffic for d: workers streaming chats
// of a few shared system prompts in sessions, as alice and the default
// tenant; plus, once each, what makes the error and refusal series: a
// model no pool serves (404), a second request of the tight tenant (429
// requests_per_minute) and a replica's 503 (a cooldown). It returns how
// many requests got 200.
func operatorTraffic(t *testing.T, g *gateway, d time.Duration) int {
	t.Helper()
	stream := func(model, key, session, system, user string, hdr map[string]string) int {
		b, _ := json.Marshal(map[string]any{"model": model, "stream": true, "messages": []map[string]string{
			{"role": "system", "content": system}, {"role": "user", "content": user}}})
		req, err := http.NewRequest(http.MethodPost, g.url+"/v1/chat/completions", bytes.NewReader(b))
		if err != nil {
			return 0
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		if session != "" {
			req.Header.Set("X-Session-Id", session)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := g.client.Do(req)
		if err != nil {
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	systems := []string{
		strings.Repeat("You are a terse assistant for a travel agency. ", 40),
		strings.Repeat("You review Go code and answer with a list of findings. ", 40),
		strings.Repeat("You translate English to French, formally. ", 40),
	}
	assert.Equal(t, http.StatusNotFound, stream("no-such-model", "sk-operator-default", "", "s", "u", nil))
	assert.Equal(t, http.StatusOK, stream(operatorModel, "sk-operator-tight", "", systems[0], "first", nil))
	assert.Equal(t, http.StatusTooManyRequests, stream(operatorModel, "sk-operator-tight", "", systems[0], "second", nil))
	assert.Equal(t, http.StatusServiceUnavailable, stream(operatorModel, "sk-operator-default", "", systems[1], "fault",
		map[string]string{simreplica.HeaderFault: "503"}))

	var mu sync.Mutex
	ok := 0
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := []string{"sk-operator-alice", "sk-operator-default"}[w%2]
			for i := 0; i < 1000 && time.Now().Before(deadline); i++ {
				sys := systems[(w+i)%len(systems)]
				if stream(operatorModel, key, fmt.Sprintf("session-%d", w), sys, fmt.Sprintf("question %d of worker %d", i, w), nil) == http.StatusOK {
					mu.Lock()
					ok++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return ok + 1 // the tight tenant's first
}

// TestLLMStatusCommand runs `./caddy llm status` against a running caddy
// after some traffic: the table lists the pool with both replicas under
// it and the tenants; --json decodes as the state, with the pool's
// replicas and the sessions bound to them; --watch redraws.
func TestLLMStatusCommand(t *testing.T) {
	reps := []string{startSimTokens(t, "status-a", operatorModel, 8), startSimTokens(t, "status-b", operatorModel, 8)}
	g := startGateway(t, operatorSite(reps))
	require.Positive(t, operatorTraffic(t, g, time.Second))

	run := func(timeout time.Duration, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, caddyBin, append([]string{"llm", "status", "--address", g.admin}, args...)...)
		cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		if err != nil && ctx.Err() == nil {
			t.Logf("stderr: %s", errOut.String())
		}
		return out.String(), err
	}
	table, err := run(10 * time.Second)
	require.NoError(t, err)
	t.Logf("caddy llm status:\n%s", table)
	require.Contains(t, table, "POOL 1")
	pool := table[strings.Index(table, "POOL 1"):]
	for _, a := range reps {
		assert.Regexp(t, regexp.MustCompile(regexp.QuoteMeta(a)+`\s+\d+/2\s`), pool, "each replica under its pool, in flight against the cap 2")
	}
	assert.Regexp(t, `(?m)^alice\s`, table)
	assert.Regexp(t, `(?m)^tight\s+0\s+0\s+standard\s+-?\d+/1\s`, table, "the tight tenant's budget spent")

	js, err := run(10*time.Second, "--json")
	require.NoError(t, err)
	var st stateapi.State
	require.NoError(t, json.Unmarshal([]byte(js), &st))
	require.Len(t, st.Policies, 1)
	assert.ElementsMatch(t, reps, st.Policies[0].Replicas)
	sessions := 0
	for _, r := range st.Replicas {
		sessions += r.Sessions
	}
	assert.Equal(t, 6, sessions, "six workers, six sessions")

	watched, err := run(3*time.Second, "--watch", "--interval", "200ms")
	require.Error(t, err, "--watch runs until stopped")
	assert.GreaterOrEqual(t, strings.Count(watched, "POOL 1"), 3, "redrawn every 200ms")

	_, err = run(10*time.Second, "--address", "127.0.0.1:1")
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "an unreachable admin API fails: %v", err)
}

// dashboardQueries returns every query of the Grafana dashboard, with its
// panel's title.
func dashboardQueries(t *testing.T) [][2]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "docs", "grafana", "llmroute.json"))
	require.NoError(t, err)
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(b, &d))
	var out [][2]string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out = append(out, [2]string{p.Title, tg.Expr})
		}
	}
	return out
}

// grafanaVars stands in for the dashboard's variables as Grafana would
// fill them: every model, a rate window that covers the test's traffic.
var grafanaVars = strings.NewReplacer("$__rate_interval", "30s", "$model", ".*")

// promResult is what Prometheus's /api/v1/query answers.
type promResult struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	Data   struct {
		Result []json.RawMessage `json:"result"`
	} `json:"data"`
}

// promQuery evaluates q now through Prometheus's HTTP API.
func promQuery(client *http.Client, base, q string) (promResult, error) {
	var r promResult
	resp, err := client.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(&r)
	if err == nil && r.Status != "success" {
		err = fmt.Errorf("%s: %s", r.Status, r.Error)
	}
	return r, err
}

// TestDashboardQueriesReturnSeries starts a real Prometheus (Debian's
// prometheus package; the test skips without it) scraping caddy's admin
// /metrics every second while demo-like traffic runs against simulated
// replicas, then evaluates every query of docs/grafana/llmroute.json
// through Prometheus's HTTP API: each must be valid and return series.
func TestDashboardQueriesReturnSeries(t *testing.T) {
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus is not installed (apt-get install prometheus; .ci/run installs it): the dashboard's queries are not checked")
	}
	queries := dashboardQueries(t)
	require.GreaterOrEqual(t, len(queries), 20)

	reps := []string{startSimTokens(t, "dash-a", operatorModel, 8), startSimTokens(t, "dash-b", operatorModel, 8)}
	g := startGateway(t, operatorSite(reps))

	dir := t.TempDir()
	promAddr, err := netx.FreeAddr()
	require.NoError(t, err)
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: llmroute\n    static_configs:\n      - targets: ['%s']\n", g.admin)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600))
	cmd := exec.Command(promBin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+promAddr)
	p, err := proc.Start(cmd, filepath.Join(dir, "prometheus.log"))
	require.NoError(t, err)
	t.Cleanup(func() {
		p.Stop(5 * time.Second)
		if t.Failed() {
			t.Logf("prometheus log tail:\n%s", p.LogTail(3000))
		}
	})
	base := "http://" + promAddr
	client := &http.Client{Timeout: 5 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, netx.WaitHTTP(ctx, client, base+"/-/ready", p.Done()))

	// Prometheus hands its first targets to the scrapers some seconds after
	// it is ready (its discovery updates are throttled): traffic starts
	// once caddy was scraped.
	waitScraped := func(what, q string) {
		t.Helper()
		for i := 0; ; i++ {
			r, err := promQuery(client, base, q)
			require.NoError(t, err)
			if len(r.Data.Result) > 0 {
				return
			}
			require.Less(t, i, 60, "prometheus did not scrape %s within 15 s", what)
			time.Sleep(250 * time.Millisecond)
		}
	}
	waitScraped("caddy", `up{job="llmroute"} == 1`)
	ok := operatorTraffic(t, g, 4*time.Second)
	require.Greater(t, ok, 20)
	// And once more after it, so that the last requests are in.
	waitScraped("the end of the traffic", fmt.Sprintf(`timestamp(up{job="llmroute"}) > %d`, time.Now().Unix()+1))

	// Prometheus has the last of the traffic one scrape later; each query
	// is read until it returns series, for at most 15 s in all.
	deadline := time.Now().Add(15 * time.Second)
	returned := 0
	for _, tq := range queries {
		q := grafanaVars.Replace(tq[1])
		var r promResult
		for {
			r, err = promQuery(client, base, q)
			require.NoError(t, err, "panel %q: %s", tq[0], q)
			if len(r.Data.Result) > 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		if assert.NotEmpty(t, r.Data.Result, "panel %q returned no series: %s", tq[0], q) {
			returned++
			t.Logf("%-45s %d series, first %s", tq[0], len(r.Data.Result), r.Data.Result[0])
		}
	}
	t.Logf("%d of %d dashboard queries returned series (%d requests answered 200)", returned, len(queries), ok)
	assert.Equal(t, len(queries), returned)
}
