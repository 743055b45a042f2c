package caddymodule

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAuthAndBadInput proves that llm_route answers bad credentials and bad
// bodies itself, in OpenAI's error shape, without reaching a replica, and
// that the client's key is never forwarded while the upstream key is.
func TestAuthAndBadInput(t *testing.T) {
	f := newFake(t)
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	require.NoError(t, os.WriteFile(keyFile, []byte("sk-file\n"), 0o600))
	t.Setenv("LLMROUTE_TEST_KEY", "sk-env")
	r := startRouter(t, fmt.Sprintf(`
	llm_route {
		api_keys {env.LLMROUTE_TEST_KEY} {file.%s}
		upstream_api_key sk-upstream
		max_body_bytes 4KiB
	}
	reverse_proxy %s {
		lb_policy llm
	}`, keyFile, f.addr))
	url := r.url("/v1/chat/completions")
	good := chatBody("You are terse.", "hi", false)

	cases := []struct {
		name, key, ctype, body string
		status                 int
		code                   string
	}{
		{"missing key", "", "application/json", good, 401, "invalid_api_key"},
		{"wrong key", "sk-wrong", "application/json", good, 401, "invalid_api_key"},
		{"prefix of a key", "sk-en", "application/json", good, 401, "invalid_api_key"},
		{"malformed json", "sk-env", "application/json", `{"model":"m",`, 400, "invalid_json"},
		{"not an object", "sk-env", "application/json", `[1,2]`, 400, "invalid_json"},
		{"missing model", "sk-env", "application/json", `{"messages":[]}`, 400, "missing_model"},
		{"wrong content type", "sk-env", "text/plain", good, 415, "unsupported_media_type"},
		{"too large", "sk-env", "application/json", `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`, 413, "request_too_large"},
	}
	before := f.total.Load()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(c.body))
			req.Header.Set("Content-Type", c.ctype)
			if c.key != "" {
				req.Header.Set("Authorization", "Bearer "+c.key)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			assert.Equal(t, c.status, resp.StatusCode)
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			_, code := apiErr(t, resp)
			assert.Equal(t, c.code, code)
		})
	}
	assert.Equal(t, before, f.total.Load(), "a refused request reached the replica")

	for _, key := range []string{"sk-env", "sk-file"} {
		resp := post(t, url, key, "", "", good)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode, string(body))
		assert.Contains(t, string(body), "chat.completion")
		f.mu.Lock()
		assert.Equal(t, "Bearer sk-upstream", f.lastAuth, "client key forwarded or upstream key missing")
		f.mu.Unlock()
	}
	r.requireDrained(f.addr)
}

// TestUsageRequestedAndStripped proves that with request_usage the engine is
// asked for usage on streams, the client that did not ask never sees the
// usage chunk, the stream still ends with [DONE], and the prediction check
// is recorded in the router state.
func TestUsageRequestedAndStripped(t *testing.T) {
	f := newFake(t)
	r := startRouter(t, fmt.Sprintf(`
	llm_route {
		request_usage
	}
	reverse_proxy %s {
		lb_policy llm
	}`, f.addr))
	url := r.url("/v1/chat/completions")
	sys := strings.Repeat("You are a careful assistant. ", 40)
	for i := 0; i < 2; i++ {
		resp := post(t, url, "", "", "", chatBody(sys, "hi", true))
		lines, done, err := readSSE(resp)
		require.NoError(t, err)
		assert.True(t, done)
		for _, l := range lines {
			assert.NotContains(t, l, `"usage"`, "usage chunk leaked to a client that did not ask")
		}
	}
	f.mu.Lock()
	assert.Contains(t, f.lastBody, `"include_usage":true`)
	f.mu.Unlock()
	// Checked as each request ends, possibly just after the client's read.
	waitFor(t, "two predictions checked", func() bool { return r.replica(f.addr).Feedback.Checks == 2 })
	st := r.replica(f.addr)
	assert.Equal(t, 2, st.Feedback.Checks)
	assert.Equal(t, 1, st.Feedback.Hits, "second request was predicted and the engine reported cached tokens")
	assert.Equal(t, 1, st.Feedback.Cold)

	// A client that asks for usage gets it.
	b := strings.Replace(chatBody(sys, "again", true), `"stream":true`, `"stream":true,"stream_options":{"include_usage":true}`, 1)
	lines, done, err := readSSE(post(t, url, "", "", "", b))
	require.NoError(t, err)
	assert.True(t, done)
	assert.Contains(t, strings.Join(lines, "\n"), `"cached_tokens":32`)
	r.requireDrained(f.addr)
}
