package caddymodule

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/policies"
)

// TestUsageBound is a table of request bodies and reported usages and the
// charge each comes to; it counts the cases accepted.
func TestUsageBound(t *testing.T) {
	body := `{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`
	n := float64(len(body)) + promptSlack
	image := `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x/a.png"}}]}]}`
	doc := `{"model":"m","messages":[{"role":"user","content":[{"type":"document","source":{"type":"url","url":"http://x/a.pdf"}}]}]}`
	prose := `{"model":"m","messages":[{"role":"user","content":"an image, audio or video file: a document"}]}`
	cases := []struct {
		name   string
		body   string
		used   float64
		answer int64
		want   float64
		why    string
	}{
		{"a true report is kept", body, 150, 400, 150, ""},
		{"2^62 is clamped to the body, the limit and slack", body, 1 << 62, 400, n + 100, clampBound},
		{"negative is zero", body, -5, 400, 0, clampNegative},
		{"n choices multiply the limit", strings.Replace(body, `"max_tokens":100`, `"max_tokens":100,"n":4`, 1), 1e9, 0, n + 6 + 400, clampBound},
		{"max_completion_tokens counts", `{"model":"m","max_completion_tokens":7}`, 1e9, 0, 39 + promptSlack + 7, clampBound},
		{"max_output_tokens counts", `{"model":"m","max_output_tokens":9}`, 1e9, 0, 35 + promptSlack + 9, clampBound},
		{"without a limit, the answer bounds the output", `{"model":"m"}`, 1e12, 1000, 13 + promptSlack + 1000 + outputSlack, clampBound},
		{"a limit that is not a count is no limit", `{"model":"m","max_tokens":"x"}`, 1e12, 10, 30 + promptSlack + 10 + outputSlack, clampBound},
		{"a media part allows for its tokens", image, 1e12, 10, float64(len(image)) + promptSlack + mediaSlack + 10 + outputSlack, clampBound},
		{"an image's true report is kept", image, 3000, 10, 3000, ""},
		{"a document by URL allows for its tokens", doc, 1e12, 10, float64(len(doc)) + promptSlack + mediaSlack + 10 + outputSlack, clampBound},
		{"media named in the prompt's text is no part", prose, 1e12, 10, float64(len(prose)) + promptSlack + 10 + outputSlack, clampBound},
	}
	accepted := 0
	for _, c := range cases {
		req, err := policies.Parse("/v1/chat/completions", []byte(c.body), policies.ParseConfig{})
		require.NoError(t, err, c.name)
		got, why := boundOf([]byte(c.body), req.OutputLimit).clamp(c.used, c.answer)
		if assert.Equal(t, c.want, got, c.name) && assert.Equal(t, c.why, why, c.name) {
			accepted++
		}
	}
	assert.Equal(t, len(cases), accepted)

	prompt, counts, neg := nonNegative(-3, tokenCounts{CompletionTokens: 5, TotalTokens: -1})
	assert.True(t, neg)
	assert.Equal(t, 0, prompt)
	assert.Equal(t, tokenCounts{CompletionTokens: 5}, counts)
}

// usageReplica answers every chat request with the usage its X-Usage
// header names (total_tokens, and prompt/completion as given).
func usageReplica(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		usage := r.Header.Get("X-Usage")
		if usage == "" {
			usage = `"prompt_tokens":10,"completion_tokens":2,"total_tokens":12`
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{%s}}`, usage)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String()
}

// TestAbsurdUsageIsClamped proves a replica reporting total_tokens 2^62
// (or a negative count) cannot sink its tenant: the tenant's budget and
// virtual time take what the request could have used, its next request
// is served, and the clamps are counted by reason. Then an operator's
// reset (POST /llm_route/tenants/<name>/reset) clears a debt a true but
// large report left: the budget is full again.
func TestAbsurdUsageIsClamped(t *testing.T) {
	addr := usageReplica(t)
	r := startRouter(t, fmt.Sprintf(`
	llm_route {
		tenant ua {
			keys sk-ua
			tokens_per_minute 100000
		}
	}
	reverse_proxy %s {
		lb_policy llm
	}`, addr))
	send := func(usage string) int {
		req, err := http.NewRequest(http.MethodPost, r.url("/v1/chat/completions"), strings.NewReader(chatBody("s", "hi", false)))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer sk-ua")
		req.Header.Set("Content-Type", "application/json")
		if usage != "" {
			req.Header.Set("X-Usage", usage)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	overBefore, negBefore := counterValue(t, metricUsageClamped.WithLabelValues(clampBound)), counterValue(t, metricUsageClamped.WithLabelValues(clampNegative))
	require.Equal(t, 200, send(`"prompt_tokens":10,"completion_tokens":4611686018427387894,"total_tokens":4611686018427387904`))
	ts := r.tenantState("ua")
	t.Logf("after a report of 2^62: tokens left %.0f, virtual tokens %.0f, charged %.0f", ts.TokensLeft, ts.VirtualTokens, ts.TokensCharged)
	assert.Greater(t, ts.TokensLeft, 100000.0-promptSlack-outputSlack-1000, "the tenant took the absurd report")
	assert.Less(t, ts.VirtualTokens, float64(promptSlack+outputSlack+1000))
	assert.Zero(t, ts.EstimatedExcess, "a clamped report teaches nothing")
	assert.Equal(t, 200, send(""), "the tenant's next request")
	require.Equal(t, 200, send(`"prompt_tokens":-100000,"completion_tokens":5`))
	assert.Equal(t, overBefore+1, counterValue(t, metricUsageClamped.WithLabelValues(clampBound)))
	assert.Equal(t, negBefore+1, counterValue(t, metricUsageClamped.WithLabelValues(clampNegative)))

	// Reports within the bound but past the budget: 429 until reset.
	for range 40 {
		if send(`"prompt_tokens":10,"completion_tokens":4000,"total_tokens":4010`) != 200 {
			break
		}
	}
	require.Equal(t, http.StatusTooManyRequests, send(""), "the budget is spent")
	resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/llm_route/tenants/ua/reset", r.admin), "application/json", nil)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	ts = r.tenantState("ua")
	assert.InDelta(t, 100000.0, ts.TokensLeft, 1000, "the reset filled the budget")
	assert.Zero(t, ts.VirtualTokens, "nobody waits: the virtual time starts at zero")
	assert.Equal(t, 200, send(""))
	for _, p := range []string{"/llm_route/tenants/nobody/reset", "/llm_route/tenants/ua/other", "/llm_route/tenants/ua/reset/x"} {
		resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d%s", r.admin, p), "application/json", nil)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusNotFound, resp.StatusCode, p)
	}
	resp, err = http.Get(fmt.Sprintf("http://127.0.0.1:%d/llm_route/tenants/ua/reset", r.admin))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
}
