package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/caddymodule/stateapi"
	"github.com/llmroute/caddy-llmroute/internal/testrig/caddyproc"
	"github.com/llmroute/caddy-llmroute/internal/testrig/fakereplica"
	"github.com/llmroute/caddy-llmroute/internal/testrig/netx"
	"github.com/llmroute/caddy-llmroute/simengine"
	"github.com/llmroute/caddy-llmroute/simreplica"
)

// The gateway cases: several models on separate pools of simulated
// replicas, the gateway's own /v1/models, sessions, stateful responses.

// startSim runs a simulated replica serving model on a loopback port.
func startSim(t *testing.T, name, model string) string {
	t.Helper()
	cfg := simreplica.Config{Name: name, Model: model, OutputTokens: 4, RestartDown: -1}
	cfg.Engine = simengine.DefaultConfig()
	cfg.Engine.Speed = 50
	s, err := simreplica.New(cfg)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() { _ = s.Close() })
	return ln.Addr().String()
}

// gateway is caddy running a Caddyfile of the test's own.
type gateway struct {
	t      *testing.T
	caddy  *caddyproc.Caddy
	url    string
	admin  string
	listen string
	client *http.Client
	// site is the site it was started with, where a test keeps it.
	site string
}

// gatewayConfig renders a Caddyfile around site, on the gateway's
// addresses.
func (g *gateway) config(site string) string {
	return fmt.Sprintf(`{
	admin %s
	auto_https off
	persist_config off
	grace_period 2s
	log {
		output stderr
		level WARN
	}
}

http://%s {
	bind 127.0.0.1
%s
}
`, g.admin, g.listen, site)
}

// startGateway runs caddy with site.
func startGateway(t *testing.T, site string) *gateway {
	t.Helper()
	g := &gateway{t: t}
	var err error
	g.admin, err = netx.FreeAddr()
	require.NoError(t, err)
	g.listen, err = netx.FreeAddr()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g.caddy, err = caddyproc.StartCaddy(ctx, caddyBin, t.TempDir(), g.config(site), g.admin, g.listen)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("caddy log tail:\n%s", g.caddy.LogTail(6000))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		st, err := g.caddy.WaitIdle(ctx, 10*time.Second)
		assert.NoError(t, err, "reservations left after the case: %+v", st)
		g.caddy.Stop()
	})
	g.url = "http://" + g.listen
	tr := &http.Transport{Proxy: nil, DisableCompression: true}
	g.client = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	return g
}

// reload replaces the site.
func (g *gateway) reload(site string) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	require.NoError(g.t, g.caddy.Load(ctx, g.config(site)))
	g.client.Transport.(*http.Transport).CloseIdleConnections()
}

// answer is what a client saw of one request.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// do sends one request; hdr may set any header.
func (g *gateway) do(method, path, body string, hdr map[string]string) answer {
	g.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, g.url+path, rd)
	require.NoError(g.t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := g.client.Do(req)
	if err != nil {
		// A connection the last reload closed before any answer (EOF):
		// retry once, as clients do (the OpenAI SDKs retry connection
		// errors); nothing of an answer reached this client.
		g.t.Logf("%s %s: %v; retrying once", method, path, err)
		if body != "" {
			req.Body = io.NopCloser(strings.NewReader(body))
		}
		resp, err = g.client.Do(req)
	}
	require.NoError(g.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(g.t, err)
	return answer{status: resp.StatusCode, header: resp.Header, body: b}
}

// models returns the ids GET /v1/models lists.
func (g *gateway) models() []string {
	a := g.do(http.MethodGet, "/v1/models", "", nil)
	require.Equal(g.t, http.StatusOK, a.status, "%s", a.body)
	var l struct {
		Object string `json:"object"`
		Data   []struct {
			ID     string `json:"id"`
			Object string `json:"object"`
		} `json:"data"`
	}
	require.NoError(g.t, json.Unmarshal(a.body, &l))
	require.Equal(g.t, "list", l.Object)
	var ids []string
	for _, m := range l.Data {
		ids = append(ids, m.ID)
	}
	return ids
}

func chatFor(model, prompt string) string {
	b, _ := json.Marshal(map[string]any{"model": model, "messages": []map[string]string{{"role": "user", "content": prompt}}})
	return string(b)
}

// twoPools is a site with one pool per model.
func twoPools(llama, qwen []string) string {
	return fmt.Sprintf(`	llm_route {
		replica_header X-LLMRoute-Replica
	}
	@llama llm_model llama-3.1-8b*
	reverse_proxy @llama %s {
		lb_policy llm
	}
	@qwen llm_model qwen3-*
	reverse_proxy @qwen %s {
		lb_policy llm
	}`, strings.Join(llama, " "), strings.Join(qwen, " "))
}

// TestTwoModelsFourReplicas proves routing by model through the real
// binary: two models on four simulated replicas, every request lands in
// its model's pool, a model no pool serves gets 404 model_not_found,
// /v1/models lists both models from the replicas, and a replica added to
// one pool by a reload appears in the list at once.
func TestTwoModelsFourReplicas(t *testing.T) {
	llama := []string{startSim(t, "llama-a", "llama-3.1-8b-instruct"), startSim(t, "llama-b", "llama-3.1-8b-instruct")}
	qwen := []string{startSim(t, "qwen-a", "qwen3-32b"), startSim(t, "qwen-b", "qwen3-32b")}
	g := startGateway(t, twoPools(llama, qwen))
	pool := map[string]string{}
	for _, a := range llama {
		pool[a] = "llama-3.1-8b-instruct"
	}
	for _, a := range qwen {
		pool[a] = "qwen3-32b"
	}
	seen := map[string]int{}
	for i := range 16 {
		for _, model := range []string{"llama-3.1-8b-instruct", "qwen3-32b"} {
			a := g.do(http.MethodPost, "/v1/chat/completions", chatFor(model, fmt.Sprintf("question %d for %s", i, model)), nil)
			require.Equal(t, http.StatusOK, a.status, "%s", a.body)
			rep := a.header.Get("X-LLMRoute-Replica")
			assert.Equal(t, model, pool[rep], "a %s request landed on %s (%s)", model, rep, a.header.Get("X-Sim-Replica"))
			seen[rep]++
		}
	}
	assert.GreaterOrEqual(t, len(seen), 2, "each pool took requests: %v", seen)

	a := g.do(http.MethodPost, "/v1/chat/completions", chatFor("mistral-7b", "x"), nil)
	assert.Equal(t, http.StatusNotFound, a.status)
	assert.Contains(t, string(a.body), `"code":"model_not_found"`)

	assert.Equal(t, []string{"llama-3.1-8b-instruct", "qwen3-32b"}, g.models())

	coder := startSim(t, "qwen-coder", "qwen3-coder-30b")
	g.reload(twoPools(llama, append(qwen, coder)))
	assert.Equal(t, []string{"llama-3.1-8b-instruct", "qwen3-32b", "qwen3-coder-30b"}, g.models(),
		"a replica added to a pool must appear in /v1/models")
	a = g.do(http.MethodPost, "/v1/chat/completions", chatFor("qwen3-coder-30b", "x"), nil)
	assert.Equal(t, http.StatusOK, a.status, "%s", a.body)
}

// TestSessionStickinessAndSpill proves, through the real binary, that
// requests naming a session stay on one replica across unrelated prompts
// and move when that replica is full, then stay where they moved.
func TestSessionStickinessAndSpill(t *testing.T) {
	cfg := baseConfig() // max_in_flight 4
	cfg.Strategy = "prefix_load"
	e := newEnv(t, 2, nil, cfg)
	sess := func(prompt string, extra map[string]string) *result {
		hdr := map[string]string{"X-Session-Id": "agent-session-7"}
		for k, v := range extra {
			hdr[k] = v
		}
		return e.do(newID(t), chatBody(false, false, prompt), hdr)
	}
	first := sess("the first turn", nil)
	require.Equal(t, http.StatusOK, first.Status, "%s", first.Body)
	home := first.Header.Get(replicaHdr)
	for i := range 6 {
		res := sess(fmt.Sprintf("unrelated prompt number %d", i), nil)
		require.Equal(t, http.StatusOK, res.Status)
		assert.Equal(t, home, res.Header.Get(replicaHdr), "turn %d left the session's replica", i)
	}
	// Fill home with four slow turns of the session: it is at its cap.
	slow := map[string]string{fakereplica.HeaderFault: fakereplica.FaultSlow, fakereplica.HeaderDelay: "150ms", fakereplica.HeaderChunks: "10"}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := sess(fmt.Sprintf("slow turn %d", i), slow)
			assert.Equal(t, http.StatusOK, res.Status)
		}()
	}
	e.waitState(5*time.Second, "home at its cap", func(st stateapi.State) bool {
		r, _ := st.Replica(home)
		return r.InFlight >= 4
	})
	moved := sess("while home is full", nil)
	require.Equal(t, http.StatusOK, moved.Status)
	assert.NotEqual(t, home, moved.Header.Get(replicaHdr), "the session must spill from a full replica")
	wg.Wait()
	again := sess("after the spill", nil)
	assert.Equal(t, moved.Header.Get(replicaHdr), again.Header.Get(replicaHdr), "a moved session stays where it moved")
}

// respID returns the id of a /v1/responses answer (JSON, or the first
// event of a stream).
func respID(t *testing.T, a answer) string {
	t.Helper()
	s := string(a.body)
	i := strings.Index(s, `"id":"resp_`)
	require.GreaterOrEqual(t, i, 0, "no response id in %s", s)
	rest := s[i+len(`"id":"`):]
	return rest[:strings.IndexByte(rest, '"')]
}

// TestResponsesFollowUpFindsItsReplica proves that a /v1/responses
// follow-up naming previous_response_id reaches the replica that made the
// response (for a JSON and a streamed first response), and that when that
// replica has left the pool the client gets a clear 404
// previous_response_not_found, not a replica's own 404, unless its input
// carries the whole conversation, which is then served elsewhere.
func TestResponsesFollowUpFindsItsReplica(t *testing.T) {
	a, b := startSim(t, "resp-a", "m"), startSim(t, "resp-b", "m")
	site := func(ups ...string) string {
		return fmt.Sprintf(`	llm_route {
		replica_header X-LLMRoute-Replica
	}
	reverse_proxy %s {
		lb_policy llm prefix_load
	}`, strings.Join(ups, " "))
	}
	g := startGateway(t, site(a, b))
	for _, stream := range []bool{false, true} {
		first := g.do(http.MethodPost, "/v1/responses", fmt.Sprintf(`{"model":"m","stream":%v,"input":"hello there, stream %v"}`, stream, stream), nil)
		require.Equal(t, http.StatusOK, first.status, "%s", first.body)
		id, home := respID(t, first), first.header.Get("X-LLMRoute-Replica")
		for i := range 5 {
			// Unrelated inputs: only the response id says where to go.
			next := g.do(http.MethodPost, "/v1/responses", fmt.Sprintf(`{"model":"m","previous_response_id":%q,"input":"turn %d about something else %d"}`, id, i, i*7919), nil)
			require.Equal(t, http.StatusOK, next.status, "%s", next.body)
			assert.Equal(t, home, next.header.Get("X-LLMRoute-Replica"), "a follow-up left the replica holding its response")
		}
	}
	first := g.do(http.MethodPost, "/v1/responses", `{"model":"m","input":"the one that will be gone"}`, nil)
	require.Equal(t, http.StatusOK, first.status)
	id, home := respID(t, first), first.header.Get("X-LLMRoute-Replica")
	other := a
	if home == a {
		other = b
	}
	g.reload(site(other))
	gone := g.do(http.MethodPost, "/v1/responses", fmt.Sprintf(`{"model":"m","previous_response_id":%q,"input":"and then?"}`, id), nil)
	assert.Equal(t, http.StatusNotFound, gone.status)
	assert.Contains(t, string(gone.body), `"code":"previous_response_not_found"`)
	assert.Contains(t, string(gone.body), `"param":"previous_response_id"`)
	full := g.do(http.MethodPost, "/v1/responses", fmt.Sprintf(`{"model":"m","previous_response_id":%q,"input":[{"role":"user","content":"the one that will be gone"},{"role":"assistant","content":"ok"},{"role":"user","content":"and then?"}]}`, id), nil)
	assert.Equal(t, http.StatusOK, full.status, "a follow-up carrying its whole conversation must be served elsewhere: %s", full.body)
	assert.Equal(t, other, full.header.Get("X-LLMRoute-Replica"))
}
