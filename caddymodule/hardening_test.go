package caddymodule

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// send makes one request with the given method, headers and body.
func send(t *testing.T, method, url string, hdr map[string]string, body io.Reader) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	require.NoError(t, err)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	return resp
}

// TestBearerToken proves the Bearer scheme is read case-insensitively,
// with spaces or tabs after it, and that other schemes are not Bearer.
func TestBearerToken(t *testing.T) {
	for _, tt := range []struct {
		in, tok string
		ok      bool
	}{
		{"Bearer sk-1", "sk-1", true},
		{"bearer sk-1", "sk-1", true},
		{"BEARER sk-1", "sk-1", true},
		{"Bearer\tsk-1", "sk-1", true},
		{"Bearer  sk-1 ", "sk-1", true},
		{" Bearer sk-1", "sk-1", true},
		{"Basic c2stMQ==", "", false},
		{"Bearersk-1", "", false},
		{"Bearer", "", false},
		{"", "", false},
	} {
		tok, ok := bearerToken(tt.in)
		assert.Equal(t, tt.ok, ok, "%q", tt.in)
		assert.Equal(t, tt.tok, tok, "%q", tt.in)
	}
}

// TestAuthSchemeThroughRouter proves that clients spelling the scheme
// differently are let in, and that the key never reaches the replica.
func TestAuthSchemeThroughRouter(t *testing.T) {
	f := newFake(t)
	r := startRouter(t, fmt.Sprintf(`
	llm_route {
		api_keys sk-hard-1
	}
	reverse_proxy %s {
		lb_policy llm
	}`, f.addr))
	for _, auth := range []string{"bearer sk-hard-1", "BEARER sk-hard-1", "Bearer\tsk-hard-1"} {
		resp := send(t, http.MethodPost, r.url("/v1/chat/completions"),
			map[string]string{"Authorization": auth, "Content-Type": "application/json"}, strings.NewReader(chatBody("s", "x", false)))
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, "%q", auth)
		_, hdr, _ := f.last()
		assert.Empty(t, hdr.Get("Authorization"), "the client's key reached the replica")
	}
	resp := send(t, http.MethodPost, r.url("/v1/chat/completions"),
		map[string]string{"Authorization": "Basic sk-hard-1", "Content-Type": "application/json"}, strings.NewReader(chatBody("s", "x", false)))
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	_, code := apiErr(t, resp)
	assert.Equal(t, "invalid_api_key", code)
}

// TestOnlyTheInferenceAPIPasses proves that only the inference endpoints,
// with their methods, and the paths of allow_paths reach the replicas:
// everything else gets an OpenAI-shaped 404, a known endpoint with the
// wrong method 405 with Allow, and the replica never sees them.
func TestOnlyTheInferenceAPIPasses(t *testing.T) {
	f := newFake(t)
	r := startRouter(t, fmt.Sprintf(`
	llm_route {
		allow_paths /health /v1/audio/*
	}
	reverse_proxy %s {
		lb_policy llm
	}`, f.addr))
	json := map[string]string{"Content-Type": "application/json"}
	for _, tt := range []struct {
		method, path string
		status       int
		code         string
	}{
		{http.MethodPost, "/v1/chat/completions", 200, ""},
		{http.MethodPost, "/v1/completions", 200, ""},
		{http.MethodPost, "/v1/embeddings", 200, ""},
		{http.MethodPost, "/v1/messages", 200, ""},
		{http.MethodPost, "/tokenize", 200, ""},
		{http.MethodGet, "/v1/models", 200, ""},
		{http.MethodGet, "/health", 200, ""},
		{http.MethodPost, "/v1/audio/transcriptions", 200, ""},
		{http.MethodGet, "/metrics", 404, "unknown_url"},
		{http.MethodPost, "/sim/fault", 404, "unknown_url"},
		{http.MethodPost, "/reset_prefix_cache", 404, "unknown_url"},
		{http.MethodPost, "/sleep", 404, "unknown_url"},
		{http.MethodPost, "/flush_cache", 404, "unknown_url"},
		{http.MethodPost, "/update_weights_from_disk", 404, "unknown_url"},
		{http.MethodPost, "/v1//chat/completions", 404, "unknown_url"},
		{http.MethodPost, "/v1/chat/completions/", 404, "unknown_url"},
		{http.MethodPost, "/v1/audio/../../sleep", 404, "unknown_url"},
		{http.MethodGet, "/v1/chat/completions", 405, "method_not_allowed"},
		{http.MethodDelete, "/v1/models", 405, "method_not_allowed"},
	} {
		before := f.total.Load()
		var body io.Reader
		if tt.method == http.MethodPost {
			body = strings.NewReader(chatBody("s", "x", false))
		}
		resp := send(t, tt.method, r.url(tt.path), json, body)
		assert.Equal(t, tt.status, resp.StatusCode, "%s %s", tt.method, tt.path)
		if tt.code == "" {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			assert.Equal(t, before+1, f.total.Load(), "%s %s must reach the replica", tt.method, tt.path)
			continue
		}
		assert.Equal(t, before, f.total.Load(), "%s %s reached the replica", tt.method, tt.path)
		if tt.status == 405 {
			assert.NotEmpty(t, resp.Header.Get("Allow"))
		}
		_, code := apiErr(t, resp)
		assert.Equal(t, tt.code, code, "%s %s", tt.method, tt.path)
	}
	r.requireDrained(f.addr)
}

// TestBodyChecksForEveryMethod proves that max_body_bytes and the
// Content-Type check hold for every request with a body, not only POST,
// chunked or not, and that the replica never sees a refused body.
func TestBodyChecksForEveryMethod(t *testing.T) {
	f := newFake(t)
	r := startRouter(t, fmt.Sprintf(`
	llm_route {
		max_body_bytes 1KiB
		allow_paths /v1/files/*
	}
	reverse_proxy %s {
		lb_policy llm
	}`, f.addr))
	big := `{"model":"m","pad":"` + strings.Repeat("x", 2048) + `"}`
	for _, tt := range []struct {
		name    string
		method  string
		ctype   string
		body    io.Reader
		status  int
		chunked bool
	}{
		{"PATCH over the limit", http.MethodPatch, "application/json", strings.NewReader(big), 413, false},
		{"PUT chunked over the limit", http.MethodPut, "application/json", io.MultiReader(strings.NewReader(big)), 413, true},
		{"PATCH not JSON", http.MethodPatch, "text/plain", strings.NewReader(`{"model":"m"}`), 415, false},
		{"POST over the limit", http.MethodPost, "application/json", strings.NewReader(big), 413, false},
		{"PATCH within the limit", http.MethodPatch, "application/json", strings.NewReader(`{"model":"m"}`), 200, false},
	} {
		before := f.total.Load()
		resp := send(t, tt.method, r.url("/v1/files/abc"), map[string]string{"Content-Type": tt.ctype}, tt.body)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		assert.Equal(t, tt.status, resp.StatusCode, tt.name)
		if tt.status != 200 {
			assert.Equal(t, before, f.total.Load(), "%s: the replica saw a refused body", tt.name)
		}
	}
	r.requireDrained(f.addr)
}

// TestContentEncoding proves that gzip, deflate and zstd bodies are
// decoded within max_body_bytes and forwarded decoded, and that a body
// that does not decode, a bomb and an unknown encoding are refused
// before any replica sees them.
func TestContentEncoding(t *testing.T) {
	f := newFake(t)
	r := startRouter(t, fmt.Sprintf(`
	llm_route {
		max_body_bytes 64KiB
	}
	reverse_proxy %s {
		lb_policy llm
	}`, f.addr))
	plain := chatBody("You are terse.", "encoded", false)
	enc := map[string]func([]byte) []byte{
		"gzip": func(b []byte) []byte {
			var out bytes.Buffer
			w := gzip.NewWriter(&out)
			_, _ = w.Write(b)
			_ = w.Close()
			return out.Bytes()
		},
		"deflate": func(b []byte) []byte {
			var out bytes.Buffer
			w := zlib.NewWriter(&out)
			_, _ = w.Write(b)
			_ = w.Close()
			return out.Bytes()
		},
		"zstd": func(b []byte) []byte {
			w, _ := zstd.NewWriter(nil)
			defer w.Close()
			return w.EncodeAll(b, nil)
		},
	}
	for name, fn := range enc {
		resp := send(t, http.MethodPost, r.url("/v1/chat/completions"),
			map[string]string{"Content-Type": "application/json", "Content-Encoding": name}, bytes.NewReader(fn([]byte(plain))))
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, name)
		_, hdr, body := f.last()
		assert.Equal(t, plain, body, "%s: the replica must get the decoded body", name)
		assert.Empty(t, hdr.Get("Content-Encoding"), "%s: the label must go with the encoding", name)
	}
	bomb := enc["gzip"](bytes.Repeat([]byte(" "), 8<<20)) // 8 MiB of spaces: ~8 KiB compressed
	require.Less(t, len(bomb), 64<<10)
	for _, tt := range []struct {
		name, encoding string
		body           []byte
		status         int
		code           string
	}{
		{"plain JSON labelled gzip", "gzip", []byte(plain), 400, "body_decode_error"},
		{"a decompression bomb", "gzip", bomb, 413, "request_too_large"},
		{"brotli", "br", []byte(plain), 415, "unsupported_content_encoding"},
		{"two encodings", "gzip, gzip", enc["gzip"](enc["gzip"]([]byte(plain))), 415, "unsupported_content_encoding"},
	} {
		before := f.total.Load()
		resp := send(t, http.MethodPost, r.url("/v1/chat/completions"),
			map[string]string{"Content-Type": "application/json", "Content-Encoding": tt.encoding}, bytes.NewReader(tt.body))
		assert.Equal(t, tt.status, resp.StatusCode, tt.name)
		_, code := apiErr(t, resp)
		assert.Equal(t, tt.code, code, tt.name)
		assert.Equal(t, before, f.total.Load(), "%s reached the replica", tt.name)
	}
	r.requireDrained(f.addr)
}

// TestQueryCredentialsAreStripped proves that keys sent in the query
// string never reach the replica, while other parameters do.
func TestQueryCredentialsAreStripped(t *testing.T) {
	f := newFake(t)
	r := startRouter(t, fmt.Sprintf(`
	llm_route {
		api_keys sk-hard-2
	}
	reverse_proxy %s {
		lb_policy llm
	}`, f.addr))
	resp := send(t, http.MethodPost, r.url("/v1/chat/completions?api_key=SECRET-A&x=1&KEY=SECRET-B&api-key=SECRET-C&access_token=SECRET-D"),
		map[string]string{"Authorization": "Bearer sk-hard-2", "Content-Type": "application/json", "Api-Key": "SECRET-E"},
		strings.NewReader(chatBody("s", "x", false)))
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	uri, hdr, _ := f.last()
	assert.NotContains(t, uri, "SECRET")
	assert.Contains(t, uri, "x=1", "other parameters must pass")
	for k, v := range hdr {
		assert.NotContains(t, strings.Join(v, ","), "SECRET", "header %s", k)
		assert.NotContains(t, strings.Join(v, ","), "sk-hard-2", "header %s", k)
	}
}

// TestPoisonedRequestsDoNotCoolReplicas proves the fail_status rule
// through Caddy: requests the engine answers 500 to reach their client as
// 500, but do not take replicas out unless distinct requests fail in a
// row, the same poisoned input sent again counts once, and even when
// every replica has cooled that way an innocent request is still served.
func TestPoisonedRequestsDoNotCoolReplicas(t *testing.T) {
	a, b := newFake(t), newFake(t)
	r := startRouter(t, fmt.Sprintf(`
	llm_route
	reverse_proxy %s %s {
		lb_policy llm round_robin {
			cooldown 30s
		}
	}`, a.addr, b.addr))
	do := func(fault, user string) int {
		resp := post(t, r.url("/v1/chat/completions"), "", "", fault, chatBody("s", user, false))
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	// One poisoned request on each replica: the denial of service.
	assert.Equal(t, 500, do("500", "poison 1"))
	assert.Equal(t, 500, do("500", "poison 2"))
	for i := range 4 {
		assert.Equal(t, 200, do("", fmt.Sprint("innocent ", i)), "innocent traffic must be served")
	}
	assert.False(t, r.replica(a.addr).Cooling)
	assert.False(t, r.replica(b.addr).Cooling)

	// The same poisoned input, again and again: counted once per replica.
	for range 6 {
		assert.Equal(t, 500, do("500", "the same poison"))
	}
	assert.False(t, r.replica(a.addr).Cooling, "one input repeated must not cool a replica")
	assert.False(t, r.replica(b.addr).Cooling, "one input repeated must not cool a replica")

	// Three distinct failures in a row on each (round robin alternates):
	// both cool, yet the least recently failed stays routable.
	for i := range 6 {
		do("500", fmt.Sprint("distinct poison ", i))
	}
	coolA, coolB := r.replica(a.addr).CoolReason, r.replica(b.addr).CoolReason
	require.Equal(t, []string{"5xx", "5xx"}, []string{coolA, coolB}, "three distinct failures in a row must cool each replica")
	overrides := counterValue(t, metricStatusOverrides.WithLabelValues(a.addr)) + counterValue(t, metricStatusOverrides.WithLabelValues(b.addr))
	assert.Equal(t, 200, do("", "innocent after the storm"), "status failures alone must never take every replica out")
	after := counterValue(t, metricStatusOverrides.WithLabelValues(a.addr)) + counterValue(t, metricStatusOverrides.WithLabelValues(b.addr))
	assert.Equal(t, overrides+1, after, "one cooldown ended early")
	r.requireDrained(a.addr, b.addr)
}

// TestEveryReplica429IsRateLimit proves that when every replica answers
// 429 the client gets 429 rate_limit_exceeded with a Retry-After, as an
// OpenAI SDK expects (RateLimitError), not 503.
func TestEveryReplica429IsRateLimit(t *testing.T) {
	a, b := newFake(t), newFake(t)
	a.setFault("429")
	b.setFault("429")
	r := startRouter(t, fmt.Sprintf(`
	llm_route
	reverse_proxy %s %s {
		lb_policy llm round_robin
		lb_retries 2
		lb_retry_match {
			expression `+"`{rp.status_code} in [429, 503]`"+`
		}
	}`, a.addr, b.addr))
	for i := range 2 {
		resp := post(t, r.url("/v1/chat/completions"), "", fmt.Sprint("rl-", i), "", chatBody("s", fmt.Sprint("x", i), false))
		assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
		assert.NotEmpty(t, resp.Header.Get("Retry-After"))
		typ, code := apiErr(t, resp)
		assert.Equal(t, "rate_limit_error", typ)
		assert.Equal(t, "rate_limit_exceeded", code)
	}
	assert.Equal(t, 1, a.count("rl-0")+b.count("rl-0")-1, "the first request tried both replicas")
	assert.Zero(t, a.count("rl-1")+b.count("rl-1"), "rate-limited replicas must not be asked again during their cooldown")
	r.requireDrained(a.addr, b.addr)
}
