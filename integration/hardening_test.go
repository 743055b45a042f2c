package integration

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/internal/testrig/fakereplica"
)

// The hardening cases: one bad client must not take replicas out, only the
// inference API is exposed, every error is the client's own. After each,
// the shared after-case checks assert that no reservation leaked and no
// request reached a replica twice after its first byte reached the client.

// rawRequest builds an authenticated request with any method, path, body
// and headers, tagged with id.
func (e *env) rawRequest(id, method, path string, body []byte, hdr map[string]string) *http.Request {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	e.t.Cleanup(cancel)
	var rd *bytes.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.url+path, nil)
	require.NoError(e.t, err)
	if rd != nil {
		req, err = http.NewRequestWithContext(ctx, method, e.url+path, rd)
		require.NoError(e.t, err)
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set(fakereplica.HeaderRequestID, id)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return req
}

// TestPoisonedRequestsKeepReplicas proves the denial of service is
// gone: two requests the engine answers 500 (one on each replica) reach
// their clients as 500, once each, and the next innocent requests are
// served; even distinct poisoned requests that cool every replica leave
// the least recently failed one routable.
func TestPoisonedRequestsKeepReplicas(t *testing.T) {
	e := newEnv(t, 2, nil, baseConfig())
	poison := map[string]string{fakereplica.HeaderFault: fakereplica.Fault500}
	for i := range 2 {
		id := newID(t)
		res := e.do(id, chatBody(false, false, fmt.Sprintf("poison %d", i)), poison)
		requireAPIError(t, res, http.StatusInternalServerError, "fake_500")
		require.Len(t, e.tracker.Receipts(id), 1, "a 500 is not retried")
	}
	for i := range 4 {
		res := e.do(newID(t), chatBody(false, false, fmt.Sprintf("innocent %d", i)), nil)
		require.Equal(t, http.StatusOK, res.Status, "innocent traffic after two poisoned requests: %s", res.Body)
	}
	for _, r := range e.reps {
		assert.False(t, e.replicaState(r.Addr()).Cooling, "a poisoned request cooled %s", r.Addr())
	}
	// Six distinct poisoned requests, three on each replica in a row.
	for i := range 6 {
		res := e.do(newID(t), chatBody(false, false, fmt.Sprintf("distinct poison %d", i)), poison)
		require.Equal(t, http.StatusInternalServerError, res.Status)
	}
	for _, r := range e.reps {
		require.Equal(t, "5xx", e.replicaState(r.Addr()).CoolReason, "three distinct failures in a row cool %s", r.Addr())
	}
	res := e.do(newID(t), chatBody(false, false, "innocent after the storm"), nil)
	assert.Equal(t, http.StatusOK, res.Status, "status failures alone must never take every replica out: %s", res.Body)
}

// TestEveryReplicaRateLimiting proves that when every replica answers 429
// the client gets 429 rate_limit_exceeded with the replicas' Retry-After
// (an OpenAI SDK's RateLimitError), and that a replica that is down, not
// busy, still gives 503.
func TestEveryReplicaRateLimiting(t *testing.T) {
	e := newEnv(t, 2, nil, baseConfig())
	for _, r := range e.reps {
		r.SetFault(fakereplica.Fault429)
	}
	id := newID(t)
	res := e.do(id, chatBody(false, false, "everyone is busy"), map[string]string{fakereplica.HeaderRetryAfter: "3"})
	b := requireAPIError(t, res, http.StatusTooManyRequests, "rate_limit_exceeded")
	assert.Equal(t, "rate_limit_error", b.Error.Type)
	assert.GreaterOrEqual(t, retryAfter(res), 2, "the replicas' Retry-After (3s) must reach the client")
	assert.LessOrEqual(t, retryAfter(res), 3)
	assert.Len(t, e.tracker.Receipts(id), 2, "each replica tried once")

	// One replica down (connection refused) and one rate limiting: not
	// every replica is busy, so 503 tells the client the pool is unwell.
	e2 := newEnv(t, 1, []string{closedAddr(t)}, baseConfig())
	e2.rep(0).SetFault(fakereplica.Fault429)
	res = e2.do(newID(t), chatBody(false, false, "busy and down"), nil)
	requireAPIError(t, res, http.StatusServiceUnavailable, "no_healthy_replica")
}

// TestAdministrativePathsHidden proves that only the inference API reaches
// the replicas: the engines' own /metrics, /reset_prefix_cache, /sleep,
// /flush_cache, /update_weights_from_disk and the simulator's /sim/fault
// get 404, a known endpoint with the wrong method 405, both in OpenAI's
// shape, and no replica sees them; a path listed in allow_paths passes.
func TestAdministrativePathsHidden(t *testing.T) {
	cfg := baseConfig()
	cfg.AllowPaths = []string{"/health"}
	e := newEnv(t, 2, nil, cfg)
	body := []byte(chatBody(false, false, "admin"))
	for _, tt := range []struct {
		method, path string
		status       int
		code         string
	}{
		{http.MethodGet, "/metrics", 404, "unknown_url"},
		{http.MethodPost, "/reset_prefix_cache", 404, "unknown_url"},
		{http.MethodPost, "/sleep", 404, "unknown_url"},
		{http.MethodPost, "/flush_cache", 404, "unknown_url"},
		{http.MethodPost, "/update_weights_from_disk", 404, "unknown_url"},
		{http.MethodPost, "/sim/fault", 404, "unknown_url"},
		{http.MethodPut, "/v1/chat/completions", 405, "method_not_allowed"},
		{http.MethodGet, "/health", 200, ""},
		{http.MethodPost, "/v1/chat/completions", 200, ""},
	} {
		id := newID(t)
		var b []byte
		if tt.method != http.MethodGet {
			b = body
		}
		res := e.doReq(e.rawRequest(id, tt.method, tt.path, b, nil))
		if tt.code == "" {
			// The fake replica answers a GET 200 without a receipt: the
			// 200 itself shows it passed (llm_route refuses with 404/405).
			require.Equal(t, tt.status, res.Status, "%s %s: %s", tt.method, tt.path, res.Body)
			if tt.method != http.MethodGet {
				require.Len(t, e.tracker.Receipts(id), 1, "%s %s must reach one replica", tt.method, tt.path)
			}
			continue
		}
		requireAPIError(t, res, tt.status, tt.code)
		assert.Empty(t, e.tracker.Receipts(id), "%s %s reached a replica", tt.method, tt.path)
	}
}

// TestBodyLimitEveryMethod proves that max_body_bytes and the Content-Type
// check hold for a PATCH as for a POST: the replica never sees the body.
func TestBodyLimitEveryMethod(t *testing.T) {
	cfg := baseConfig() // max_body_bytes 64KiB
	cfg.AllowPaths = []string{"/v1/files/*"}
	e := newEnv(t, 1, nil, cfg)
	big := []byte(`{"model":"m","pad":"` + strings.Repeat("x", 100<<10) + `"}`)
	id := newID(t)
	res := e.doReq(e.rawRequest(id, http.MethodPatch, "/v1/files/f1", big, nil))
	requireAPIError(t, res, http.StatusRequestEntityTooLarge, "request_too_large")
	assert.Empty(t, e.tracker.Receipts(id))
	id = newID(t)
	res = e.doReq(e.rawRequest(id, http.MethodPatch, "/v1/files/f1", []byte(`{"model":"m"}`), map[string]string{"Content-Type": "text/plain"}))
	requireAPIError(t, res, http.StatusUnsupportedMediaType, "unsupported_media_type")
	assert.Empty(t, e.tracker.Receipts(id))
}

// TestClientCredentialsNeverLeave proves that the Bearer scheme is read
// case-insensitively, and that a key sent in the query string beside the
// header reaches neither the replica nor caddy's access log (with the
// credential filter of Caddyfile.example).
func TestClientCredentialsNeverLeave(t *testing.T) {
	cfg := baseConfig()
	cfg.AccessLog = true
	cfg.LogLevel = "INFO"
	e := newEnv(t, 1, nil, cfg)
	for _, scheme := range []string{"bearer", "BEARER", "Bearer\t"} {
		req := e.newRequest(context.Background(), newID(t), chatBody(false, false, "scheme"), nil)
		req.Header.Set("Authorization", scheme+" "+apiKey)
		res := e.doReq(req)
		require.Equal(t, http.StatusOK, res.Status, "scheme %q: %s", scheme, res.Body)
	}
	id := newID(t)
	req := e.rawRequest(id, http.MethodPost, "/v1/chat/completions?api_key=QUERY-SECRET-1&key=QUERY-SECRET-2&keep=1",
		[]byte(chatBody(false, false, "query key")), nil)
	res := e.doReq(req)
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	rcs := e.tracker.Receipts(id)
	require.Len(t, rcs, 1)
	assert.NotContains(t, rcs[0].URI, "QUERY-SECRET")
	assert.Contains(t, rcs[0].URI, "keep=1")
	assert.Empty(t, rcs[0].Authorization, "the client's key reached the replica")
	var log string
	require.Eventually(t, func() bool {
		log = e.caddy.LogTail(1 << 20)
		return strings.Contains(log, "keep=1")
	}, 5*time.Second, 50*time.Millisecond, "the access log must show the request")
	assert.NotContains(t, log, "QUERY-SECRET")
	assert.NotContains(t, log, apiKey)
}

// TestCompressedBody proves that a gzip body is decoded within
// max_body_bytes and forwarded decoded, that plain JSON labelled gzip is
// refused as undecodable, and that a decompression bomb gets 413: a body
// llm_route could not read never reaches a replica.
func TestCompressedBody(t *testing.T) {
	e := newEnv(t, 1, nil, baseConfig()) // max_body_bytes 64KiB
	gz := func(b []byte) []byte {
		var out bytes.Buffer
		w := gzip.NewWriter(&out)
		_, _ = w.Write(b)
		_ = w.Close()
		return out.Bytes()
	}
	plain := []byte(chatBody(true, false, "compressed"))
	id := newID(t)
	res := e.doReq(e.rawRequest(id, http.MethodPost, "/v1/chat/completions", gz(plain), map[string]string{"Content-Encoding": "gzip"}))
	requireStreamComplete(t, res)
	rcs := e.tracker.Receipts(id)
	require.Len(t, rcs, 1)
	assert.Empty(t, rcs[0].Header.Get("Content-Encoding"))
	assert.True(t, rcs[0].Stream, "the replica must read the decoded body")
	for _, tt := range []struct {
		name   string
		body   []byte
		status int
		code   string
	}{
		{"plain JSON labelled gzip", plain, 400, "body_decode_error"},
		{"a decompression bomb", gz(bytes.Repeat([]byte(" "), 16<<20)), 413, "request_too_large"},
	} {
		id := newID(t)
		res := e.doReq(e.rawRequest(id, http.MethodPost, "/v1/chat/completions", tt.body, map[string]string{"Content-Encoding": "gzip"}))
		requireAPIError(t, res, tt.status, tt.code)
		assert.Empty(t, e.tracker.Receipts(id), tt.name)
	}
}
