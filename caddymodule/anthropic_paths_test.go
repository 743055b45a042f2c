package caddymodule

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAnthropicShapeUnderMessages proves every refusal under /v1/messages
// is in Anthropic's shape, whatever the path below it or however it is
// spelled (doubled slashes, dot segments), and that other paths keep
// OpenAI's: it counts the paths checked of each kind.
func TestAnthropicShapeUnderMessages(t *testing.T) {
	f := newFake(t)
	r := startRouter(t, fmt.Sprintf(`
	llm_route {
		api_keys sk-shape
	}
	reverse_proxy %s {
		lb_policy llm
	}`, f.addr))
	body := `{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`
	cases := []struct {
		method, path, key string
		status            int
		typ               string
	}{
		{http.MethodPost, "/v1/messages/batches", "sk-shape", 404, "not_found_error"},
		{http.MethodGet, "/v1/messages/batches/msgbatch_1", "sk-shape", 404, "not_found_error"},
		{http.MethodPost, "//v1/messages", "sk-shape", 404, "not_found_error"},
		{http.MethodPost, "/v1//messages", "sk-shape", 404, "not_found_error"},
		{http.MethodPost, "/v1/./messages", "sk-shape", 404, "not_found_error"},
		{http.MethodPost, "/v1/messages/unknown", "", 401, "authentication_error"},
		{http.MethodGet, "/v1/messages", "sk-shape", 405, "invalid_request_error"},
		{http.MethodPost, "/v1/messages/count_tokens/", "sk-shape", 404, "not_found_error"},
	}
	anthropic := 0
	for _, c := range cases {
		req := messagesRequest(t, r.url(c.path), c.key, "application/json", body)
		req.Method = c.method
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		assert.Equal(t, c.status, resp.StatusCode, "%s %s", c.method, c.path)
		assert.Equal(t, c.typ, anthropicErr(t, resp), "%s %s", c.method, c.path)
		assert.Zero(t, f.total.Load(), "%s %s reached the replica", c.method, c.path)
		anthropic++
	}
	assert.Equal(t, len(cases), anthropic)
	for _, p := range []string{"/v1/chat/completions/batches", "//v1/chat/completions", "/v1/messagesx"} {
		resp := post(t, r.url(p), "sk-shape", "", "", chatBody("s", "u", false))
		assert.Equal(t, http.StatusNotFound, resp.StatusCode, p)
		typ, code := apiErr(t, resp)
		assert.Equal(t, "invalid_request_error", typ, p)
		assert.Equal(t, "unknown_url", code, p)
	}
	assert.Zero(t, f.total.Load(), "no refused request reached the replica")
}
