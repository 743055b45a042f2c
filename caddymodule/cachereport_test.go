package caddymodule

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/policies"
	"github.com/llmroute/caddy-llmroute/simreplica"
)

// TestCachedOf proves the reporting rule: a figure is taken and marks the
// replica as reporting for that endpoint kind; silence then means 0 there
// and only there; always trusts silence from the start, never nothing.
func TestCachedOf(t *testing.T) {
	silent := &usageSniffer{promptTokens: 40}
	figure := &usageSniffer{found: true, cached: 32, promptTokens: 40}
	none := &usageSniffer{}
	for _, c := range []struct {
		name   string
		mode   string
		seq    []*usageSniffer
		kinds  []policies.Endpoint
		cached []int
		ok     []bool
	}{
		{"auto: silence before any figure says nothing", "", []*usageSniffer{silent}, []policies.Endpoint{policies.EndpointChat}, []int{0}, []bool{false}},
		{"auto: after a figure, silence is 0", cacheReportAuto, []*usageSniffer{figure, silent, silent}, []policies.Endpoint{policies.EndpointChat, policies.EndpointChat, policies.EndpointChat}, []int{32, 0, 0}, []bool{true, true, true}},
		{"auto: per endpoint kind", "", []*usageSniffer{figure, silent}, []policies.Endpoint{policies.EndpointChat, policies.EndpointMessages}, []int{32, 0}, []bool{true, false}},
		{"auto: no usage at all says nothing", "", []*usageSniffer{figure, none}, []policies.Endpoint{policies.EndpointChat, policies.EndpointChat}, []int{32, 0}, []bool{true, false}},
		{"always: silence is 0 from the first", cacheReportAlways, []*usageSniffer{silent, none}, []policies.Endpoint{policies.EndpointMessages, policies.EndpointMessages}, []int{0, 0}, []bool{true, false}},
		{"never: nothing is taken", cacheReportNever, []*usageSniffer{figure, silent}, []policies.Endpoint{policies.EndpointChat, policies.EndpointChat}, []int{0, 0}, []bool{false, false}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var r reportKinds
			for i, sn := range c.seq {
				got, ok := r.cachedOf(c.kinds[i], c.mode, sn)
				assert.Equal(t, c.ok[i], ok, "answer %d", i)
				assert.Equal(t, c.cached[i], got, "answer %d", i)
			}
		})
	}
	var r reportKinds
	r.cachedOf(policies.EndpointResponses, "", figure)
	assert.Equal(t, []string{"responses"}, r.kinds())
}

// TestVLLMSilenceCountsMisses sends chat requests through the router to a
// replica that answers as vLLM does: prompt_tokens_details only when
// something was cached. Its first answer reports 32 cached tokens; the
// repeated prompt is then predicted cached, and the replica's silence
// (nothing cached: its cache was wiped) must count as misses, shrink the
// index and lower the precision, where reading silence as "does not
// report" counted none of them.
func TestVLLMSilenceCountsMisses(t *testing.T) {
	var answers atomic.Int64
	vllm := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		usage := `"usage":{"prompt_tokens":40,"completion_tokens":1,"total_tokens":41}`
		if answers.Add(1) == 1 {
			usage = `"usage":{"prompt_tokens":40,"completion_tokens":1,"total_tokens":41,"prompt_tokens_details":{"cached_tokens":32}}`
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],%s}`, usage)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: vllm}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := ln.Addr().String()

	r := startRouter(t, fmt.Sprintf(`
	llm_route
	reverse_proxy %s {
		lb_policy llm
	}`, addr))
	body := chatBody(strings.Repeat("You are a careful assistant. ", 40), "hello", false)
	const n = 6
	for i := range n {
		resp := post(t, r.url("/v1/chat/completions"), "", fmt.Sprintf("req-%d", i), "", body)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	rep := r.replica(addr)
	t.Logf("checks %d, hits %d, misses %d, cold %d, precision %.2f", rep.Feedback.Checks, rep.Feedback.Hits, rep.Feedback.Misses, rep.Feedback.Cold, rep.Feedback.Precision)
	assert.Equal(t, []string{"chat"}, rep.ReportsCached)
	assert.Equal(t, n, rep.Feedback.Checks, "every answer checked, the silent ones too")
	assert.GreaterOrEqual(t, rep.Feedback.Misses, n-2, "silence after a report counts as a miss")
	assert.Less(t, rep.Feedback.Precision, 0.5, "precision is honest about the misses")
}

// TestVLLMMessagesSilenceIsUnknown proves that vLLM's /v1/messages
// answers, which never carry cache_read_input_tokens (input_tokens is the
// whole prompt), are not read as misses: the replica reported cached
// tokens on chat, not on messages, so its silence there says nothing.
func TestVLLMMessagesSilenceIsUnknown(t *testing.T) {
	_, addr := startSimAs(t, "sim-vllm", 4, 50, simreplica.VLLM)
	r := startRouter(t, fmt.Sprintf(`
	llm_route {
		request_usage
	}
	reverse_proxy %s {
		lb_policy llm
	}`, addr))
	sys := strings.Repeat("You are a careful assistant. ", 40)
	for i := range 3 {
		resp := post(t, r.url("/v1/chat/completions"), "", "", "", chatBody(sys, fmt.Sprintf("q%d", i), false))
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		body := fmt.Sprintf(`{"model":"m","max_tokens":8,"system":%q,"messages":[{"role":"user","content":"q%d"}]}`, sys, i)
		resp = postMessages(t, r.url("/v1/messages"), "", "application/json", body)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	waitFor(t, "the chat answers checked", func() bool { return r.replica(addr).Feedback.Checks >= 2 })
	rep := r.replica(addr)
	assert.Equal(t, []string{"chat"}, rep.ReportsCached)
	assert.Zero(t, rep.Feedback.Misses, "no message answer read as a miss")
	assert.LessOrEqual(t, rep.Feedback.Checks, 3, "only chat answers are checked")
}
