package integration

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/internal/sse"
	"github.com/llmroute/caddy-llmroute/internal/testrig/caddyproc"
	"github.com/llmroute/caddy-llmroute/internal/testrig/fakereplica"
	"github.com/llmroute/caddy-llmroute/simengine"
	"github.com/llmroute/caddy-llmroute/simreplica"
)

// newSimEnv starts n simulated replicas (simreplica, in this process) and
// the caddy binary in front of them with cfg; the after-case checks (no
// reservation left) run when the test ends.
func newSimEnv(t *testing.T, n int, cfg caddyproc.SiteConfig) (*env, []*simreplica.Server) {
	t.Helper()
	return newSimEnvAs(t, n, cfg, simreplica.VLLM)
}

// newSimEnvAs is newSimEnv with replicas answering as engine p.
func newSimEnvAs(t *testing.T, n int, cfg caddyproc.SiteConfig, p simreplica.Personality) (*env, []*simreplica.Server) {
	t.Helper()
	return newSimEnvWith(t, n, cfg, func(sc *simreplica.Config) { sc.Personality = p })
}

// newSimEnvWith is newSimEnv with each replica's config changed by set.
func newSimEnvWith(t *testing.T, n int, cfg caddyproc.SiteConfig, set func(*simreplica.Config)) (*env, []*simreplica.Server) {
	t.Helper()
	var sims []*simreplica.Server
	for i := range n {
		sc := simreplica.Config{Name: "sim-" + string(rune('a'+i)), OutputTokens: 8, RestartDown: -1}
		set(&sc)
		sc.Engine = simengine.DefaultConfig()
		sc.Engine.Speed = 50
		s, err := simreplica.New(sc)
		require.NoError(t, err)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		go func() { _ = s.Serve(ln) }()
		t.Cleanup(func() { _ = s.Close() })
		sims = append(sims, s)
		cfg.Upstreams = append(cfg.Upstreams, ln.Addr().String())
	}
	e := &env{t: t, tracker: fakereplica.NewTracker(), results: map[string]*result{}}
	e.start(cfg)
	t.Cleanup(e.afterCase)
	return e, sims
}

// postMessages sends an Anthropic request as Anthropic clients do
// (x-api-key, anthropic-version) with extra headers.
func (e *env) postMessages(ctx context.Context, path, body string, hdr map[string]string) *http.Response {
	e.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url+path, strings.NewReader(body))
	require.NoError(e.t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-api-key", apiKey)
	req.Header.Set("anthropic-version", "2023-06-01")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := e.httpClient().Do(req)
	require.NoError(e.t, err)
	return resp
}

// anthropicEvents reads an Anthropic stream's event types (from the data
// payloads); err is nil only at a clean end of the body.
func anthropicEvents(t *testing.T, body io.Reader) (types []string, err error) {
	t.Helper()
	r := sse.NewReader(body)
	for range 10_000 {
		p, err := r.Next()
		if errors.Is(err, io.EOF) {
			return types, nil
		}
		if err != nil {
			return types, err
		}
		var ev struct {
			Type string `json:"type"`
		}
		require.NoError(t, json.Unmarshal(p, &ev), string(p))
		types = append(types, ev.Type)
	}
	t.Fatal("stream too long")
	return nil, nil
}

// messagesRequest is a /v1/messages body.
func messagesRequest(stream bool, user string) string {
	b, _ := json.Marshal(map[string]any{
		"model":      "test-model",
		"max_tokens": 64,
		"stream":     stream,
		"system":     []map[string]any{{"type": "text", "text": "You are a terse assistant used by the llmroute integration tests.", "cache_control": map[string]string{"type": "ephemeral"}}},
		"messages":   []map[string]any{{"role": "user", "content": user}},
	})
	return string(b)
}

// TestMessagesStreamWholeAndCut drives /v1/messages through the real
// binary: a stream reaches the client whole (message_start ...
// message_stop, clean end), a stream the replica cuts midway reaches it as
// an error (never a clean end, never a message_stop it was not sent), a
// JSON answer cut midway fails to read, and count_tokens is answered.
func TestMessagesStreamWholeAndCut(t *testing.T) {
	cfg := baseConfig()
	cfg.Strategy = "prefix_load"
	e, _ := newSimEnv(t, 2, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	resp := e.postMessages(ctx, "/v1/messages", messagesRequest(true, "hello"), nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, resp.Header.Get("Content-Type"), "text/event-stream")
	assert.NotEmpty(t, resp.Header.Get(replicaHdr))
	types, err := anthropicEvents(t, resp.Body)
	resp.Body.Close()
	require.NoError(t, err, "a whole stream ends cleanly")
	want := []string{"message_start", "content_block_start", "ping"}
	for range 8 {
		want = append(want, "content_block_delta")
	}
	want = append(want, "content_block_stop", "message_delta", "message_stop")
	assert.Equal(t, want, types)

	resp = e.postMessages(ctx, "/v1/messages/count_tokens", messagesRequest(false, "count me"), nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var count struct {
		InputTokens int `json:"input_tokens"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&count))
	resp.Body.Close()
	assert.Positive(t, count.InputTokens)

	// The gateway's own errors on these paths are Anthropic's.
	resp = e.postMessages(ctx, "/v1/messages", `{"model":`, nil)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	var bad struct {
		Type  string `json:"type"`
		Error struct {
			Type string `json:"type"`
		} `json:"error"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&bad))
	resp.Body.Close()
	assert.Equal(t, "error", bad.Type)
	assert.Equal(t, "invalid_request_error", bad.Error.Type)

	// A stream the replica cuts after three tokens (that replica then
	// cools, so the cuts come last).
	resp = e.postMessages(ctx, "/v1/messages", messagesRequest(true, "cut me"), map[string]string{simreplica.HeaderFault: "cut-after=3"})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	types, err = anthropicEvents(t, resp.Body)
	resp.Body.Close()
	require.Error(t, err, "a stream cut midway must reach the client as an error")
	assert.NotContains(t, types, "message_stop", "a cut stream must not show message_stop")
	assert.Equal(t, []string{"message_start", "content_block_start", "ping", "content_block_delta", "content_block_delta", "content_block_delta"}, types)

	resp = e.postMessages(ctx, "/v1/messages", messagesRequest(false, "json cut"), map[string]string{simreplica.HeaderFault: "cut-after=1"})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Error(t, err, "a JSON answer cut midway must not read as whole")
}
