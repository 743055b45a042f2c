package caddymodule

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/simreplica"
)

// anthropicStream is an Anthropic SSE answer with 64 tokens read from the
// cache, 8 computed and 4 written to it.
const anthropicStream = "event: message_start\n" +
	`data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m","stop_reason":null,"usage":{"input_tokens":8,"cache_creation_input_tokens":4,"cache_read_input_tokens":64,"output_tokens":0}}}` + "\n\n" +
	"event: content_block_start\n" + `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}` + "\n\n" +
	"event: ping\n" + `data: {"type":"ping"}` + "\n\n" +
	"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}` + "\n\n" +
	"event: content_block_stop\n" + `data: {"type":"content_block_stop","index":0}` + "\n\n" +
	"event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":5}}` + "\n\n" +
	"event: message_stop\n" + `data: {"type":"message_stop"}` + "\n\n"

// TestUsageSnifferAnthropic proves Anthropic usage is read from a stream
// split anywhere (message_start's message, then message_delta), that no
// Anthropic event is ever stripped, and that only message_stop makes the
// stream finished.
func TestUsageSnifferAnthropic(t *testing.T) {
	for _, strip := range []bool{false, true} {
		for split := 1; split < len(anthropicStream); split += 11 {
			s := &usageSniffer{strip: strip}
			s.start("text/event-stream")
			var out strings.Builder
			for i := 0; i < len(anthropicStream); i += split {
				out.Write(s.observe([]byte(anthropicStream[i:min(i+split, len(anthropicStream))])))
			}
			assert.Equal(t, anthropicStream, out.String(), "every byte relayed")
			assert.True(t, s.found)
			assert.Equal(t, 64, s.cached)
			assert.Equal(t, 76, s.promptTokens, "input + cache read + cache creation")
			assert.True(t, s.finished)
		}
	}

	// Cut before message_stop: the usage is read, the stream is not
	// finished (message_delta's stop_reason is not the end).
	cut := anthropicStream[:strings.Index(anthropicStream, "event: message_stop")]
	s := &usageSniffer{}
	s.start("text/event-stream")
	s.observe([]byte(cut))
	assert.True(t, s.found)
	assert.False(t, s.finished)

	// A message_delta with the cumulative usage (as newer servers send)
	// updates the figures.
	s = &usageSniffer{}
	s.start("text/event-stream")
	s.observe([]byte(strings.Replace(anthropicStream, `"usage":{"output_tokens":5}`,
		`"usage":{"input_tokens":10,"cache_creation_input_tokens":0,"cache_read_input_tokens":96,"output_tokens":5}`, 1)))
	assert.Equal(t, 96, s.cached)
	assert.Equal(t, 106, s.promptTokens)
}

// TestUsageSnifferAnthropicJSON proves a whole Anthropic answer's usage is
// read, and that one without cache figures reports nothing.
func TestUsageSnifferAnthropicJSON(t *testing.T) {
	for _, c := range []struct {
		body           string
		found          bool
		cached, prompt int
	}{
		{`{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"cache_creation_input_tokens":0,"cache_read_input_tokens":128,"output_tokens":2}}`, true, 128, 131},
		// vLLM and SGLang: no cache figure; the prompt is known, and whether
		// silence means none cached is the replica's record (cachereport.go).
		{`{"type":"message","content":[],"usage":{"input_tokens":3,"output_tokens":2}}`, false, 0, 3},
	} {
		s := &usageSniffer{}
		s.start("application/json")
		assert.Equal(t, c.body, string(s.observe([]byte(c.body))))
		s.finish()
		assert.Equal(t, c.found, s.found, c.body)
		assert.Equal(t, c.cached, s.cached, c.body)
		assert.Equal(t, c.prompt, s.promptTokens, c.body)
	}
}

// TestAnthropicErrorShape proves every error llm_route writes comes in
// Anthropic's shape on /v1/messages paths, with the status and headers of
// the OpenAI paths, even when written through the handler's own wrapper,
// and that the OpenAI paths keep their shape.
func TestAnthropicErrorShape(t *testing.T) {
	cases := []struct {
		e   apiError
		typ string
	}{
		{errMalformed, "invalid_request_error"},
		{errNoModel, "invalid_request_error"},
		{errMethod, "invalid_request_error"},
		{errContentType, "invalid_request_error"},
		{errEncoding, "invalid_request_error"},
		{errUnauthorized, "authentication_error"},
		{apiError{status: http.StatusForbidden, typ: "invalid_request_error", message: "no"}, "permission_error"},
		{errNotFound, "not_found_error"},
		{errTooLarge, "request_too_large"},
		{rejectError(rejectQueueFull, 3*time.Second), "rate_limit_error"},
		{rejectError(rejectQueueWait, time.Second), "rate_limit_error"},
		{rejectError(rejectRateLimited, 4*time.Second), "rate_limit_error"},
		{rejectError(rejectNoHealthy, 2*time.Second), "overloaded_error"},
		{upstreamError(http.StatusServiceUnavailable, 0), "overloaded_error"},
		{upstreamError(http.StatusBadGateway, 0), "api_error"},
		{upstreamError(http.StatusGatewayTimeout, 0), "api_error"},
		{upstreamError(http.StatusInternalServerError, 0), "api_error"},
	}
	write := func(path string, e apiError, wrapped bool) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		w := withErrorShape(httptest.NewRequest(http.MethodPost, path, nil), rec)
		if wrapped {
			// As the handler's later errors go: through its routeWriter.
			w = &routeWriter{ResponseWriterWrapper: &caddyhttp.ResponseWriterWrapper{ResponseWriter: w},
				rc: newRouteCtx(time.Now(), nil, nil)}
		}
		writeAPIError(w, e)
		return rec
	}
	for _, c := range cases {
		for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens", "/v1/messages/"} {
			for _, wrapped := range []bool{false, true} {
				name := fmt.Sprintf("%d %s %s wrapped=%v", c.e.status, c.e.code, path, wrapped)
				got := write(path, c.e, wrapped)
				openai := write("/v1/chat/completions", c.e, wrapped)
				assert.Equal(t, c.e.status, got.Code, name)
				assert.Equal(t, openai.Header(), got.Header(), name+": same headers as OpenAI's")
				var raw map[string]json.RawMessage
				require.NoError(t, json.Unmarshal(got.Body.Bytes(), &raw), name)
				assert.Len(t, raw, 2, name)
				assert.JSONEq(t, `"error"`, string(raw["type"]), name)
				var e map[string]string
				require.NoError(t, json.Unmarshal(raw["error"], &e), name)
				assert.Equal(t, map[string]string{"type": c.typ, "message": c.e.message}, e, name)

				var o map[string]map[string]any
				require.NoError(t, json.Unmarshal(openai.Body.Bytes(), &o))
				assert.Equal(t, c.e.typ, o["error"]["type"], "OpenAI paths keep OpenAI's shape")
				assert.Contains(t, o["error"], "code")
			}
		}
	}
}

// postMessages sends an Anthropic request with an Anthropic client's
// headers (x-api-key, anthropic-version) to path.
func postMessages(t *testing.T, url, key, ctype, body string) *http.Response {
	t.Helper()
	resp, err := http.DefaultClient.Do(messagesRequest(t, url, key, ctype, body))
	require.NoError(t, err)
	return resp
}

// messagesRequest is postMessages's request.
func messagesRequest(t *testing.T, url, key, ctype, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("anthropic-beta", "prompt-caching-2024-07-31")
	if key != "" {
		req.Header.Set("x-api-key", key)
	}
	return req
}

// anthropicErr decodes an Anthropic error body and returns its type.
func anthropicErr(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	var b struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&b))
	require.Equal(t, "error", b.Type)
	require.NotEmpty(t, b.Error.Message)
	return b.Error.Type
}

// TestAnthropicClientThroughHandler proves, through Caddy, that an
// Anthropic client's headers work (x-api-key accepted, never forwarded;
// anthropic-version passed on), that its body reaches the replica as sent
// even with request_usage, and that every answer llm_route gives itself on
// /v1/messages paths is in Anthropic's shape.
func TestAnthropicClientThroughHandler(t *testing.T) {
	f := newFake(t)
	r := startRouter(t, fmt.Sprintf(`
	llm_route {
		api_keys sk-anthropic
		max_body_bytes 1KiB
		request_usage
	}
	reverse_proxy %s {
		lb_policy llm
	}`, f.addr))
	url := r.url("/v1/messages")
	good := `{"model":"m","max_tokens":16,"stream":true,"system":"S","messages":[{"role":"user","content":"hi"}]}`

	resp := postMessages(t, url, "sk-anthropic", "application/json", good)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_, hdr, body := f.last()
	assert.Empty(t, hdr.Get("X-Api-Key"), "the client's key must not be forwarded")
	assert.Empty(t, hdr.Get("Authorization"))
	assert.Equal(t, "2023-06-01", hdr.Get("Anthropic-Version"))
	assert.Equal(t, "prompt-caching-2024-07-31", hdr.Get("Anthropic-Beta"))
	assert.Equal(t, good, body, "an Anthropic body is not rewritten (no stream_options)")

	before := f.total.Load()
	cases := []struct {
		name, path, key, ctype, body string
		status                       int
		typ                          string
	}{
		{"no key", "/v1/messages", "", "application/json", good, 401, "authentication_error"},
		{"wrong key", "/v1/messages", "sk-other", "application/json", good, 401, "authentication_error"},
		{"malformed", "/v1/messages", "sk-anthropic", "application/json", `{"model":`, 400, "invalid_request_error"},
		{"no model", "/v1/messages", "sk-anthropic", "application/json", `{"messages":[]}`, 400, "invalid_request_error"},
		{"not JSON", "/v1/messages", "sk-anthropic", "text/plain", good, 415, "invalid_request_error"},
		{"too large", "/v1/messages", "sk-anthropic", "application/json", `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 2000) + `"}]}`, 413, "request_too_large"},
		{"count_tokens malformed", "/v1/messages/count_tokens", "sk-anthropic", "application/json", `[]`, 400, "invalid_request_error"},
		{"count_tokens no key", "/v1/messages/count_tokens", "", "application/json", good, 401, "authentication_error"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp := postMessages(t, r.url(c.path), c.key, c.ctype, c.body)
			assert.Equal(t, c.status, resp.StatusCode)
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			assert.Equal(t, c.typ, anthropicErr(t, resp))
		})
	}
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("x-api-key", "sk-anthropic")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	assert.Equal(t, http.MethodPost, resp.Header.Get("Allow"))
	assert.Equal(t, "invalid_request_error", anthropicErr(t, resp))
	assert.Equal(t, before, f.total.Load(), "a refused request reached the replica")

	// The same bad body on the chat path keeps OpenAI's shape.
	resp = postMessages(t, r.url("/v1/chat/completions"), "sk-anthropic", "application/json", `{"model":`)
	typ, code := apiErr(t, resp)
	assert.Equal(t, "invalid_request_error", typ)
	assert.Equal(t, "invalid_json", code)

	// A replica that refuses: the gateway's own 502 in Anthropic's shape.
	r.load(fmt.Sprintf(`
	llm_route {
		api_keys sk-anthropic
	}
	reverse_proxy 127.0.0.1:%d {
		lb_policy llm
	}`, freePort(t)))
	resp = doAfterReload(t, func() *http.Request { return messagesRequest(t, url, "sk-anthropic", "application/json", good) })
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode)
	assert.Equal(t, "api_error", anthropicErr(t, resp))

	// A replica cooling after its 503: the gateway's own 503, with
	// Retry-After, in Anthropic's shape.
	r.load(fmt.Sprintf(`
	llm_route {
		api_keys sk-anthropic
	}
	reverse_proxy %s {
		lb_policy llm {
			cooldown 5s 10s
		}
	}`, f.addr))
	f.setFault("503")
	before = f.total.Load()
	resp = doAfterReload(t, func() *http.Request { return messagesRequest(t, url, "sk-anthropic", "application/json", good) })
	assert.Equal(t, before+1, f.total.Load(), "one request, sent once, reached the replica")
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "the replica's own 503 is relayed")
	resp = postMessages(t, url, "sk-anthropic", "application/json", good)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))
	assert.Equal(t, "overloaded_error", anthropicErr(t, resp))
	f.setFault("")
}

// readAnthropicSSE reads an Anthropic stream's event names; err is the read
// error (nil at a clean end).
func readAnthropicSSE(resp *http.Response) (events []string, err error) {
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if ev, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			events = append(events, ev)
		}
	}
	return events, sc.Err()
}

// TestMessagesKeepAffinityAndFeedback proves, against simulated replicas,
// that a conversation switching from chat to messages stays on its
// replica (one prefix key across APIs), that the replica's
// cache_read_input_tokens checks the prediction as a hit (streamed and
// not), and that the Anthropic stream reaches the client whole.
func TestMessagesKeepAffinityAndFeedback(t *testing.T) {
	// llama.cpp's server writes Anthropic's cache_read_input_tokens (vLLM
	// and SGLang do not: TestVLLMMessagesSilenceIsUnknown).
	_, a1 := startSimAs(t, "sim-1", 4, 50, simreplica.LlamaCpp)
	_, a2 := startSimAs(t, "sim-2", 4, 50, simreplica.LlamaCpp)
	r := startRouter(t, fmt.Sprintf(`
	llm_route {
		request_usage
		replica_header X-LLMRoute-Replica
	}
	reverse_proxy %s %s {
		lb_policy llm prefix_load
	}`, a1, a2))
	// Homes are rendezvous homes of random ports (no engine metrics: peers
	// assumed): 16 prompts all on one of two replicas has odds 2^-15.
	const prompts = 16
	homes := map[string]bool{}
	for i := range prompts {
		sys := fmt.Sprintf("You are assistant number %d. ", i) + strings.Repeat("Answer in short, exact sentences. ", 20)
		user := fmt.Sprintf("question %d", i)
		resp := post(t, r.url("/v1/chat/completions"), "", "", "", chatBody(sys, user, true))
		home := resp.Header.Get("X-LLMRoute-Replica")
		homes[home] = true
		_, done, err := readSSE(resp)
		require.NoError(t, err)
		require.True(t, done)

		body, _ := json.Marshal(map[string]any{"model": "m", "max_tokens": 16, "stream": i%2 == 0,
			"system":   []map[string]any{{"type": "text", "text": sys, "cache_control": map[string]string{"type": "ephemeral"}}},
			"messages": []map[string]any{{"role": "user", "content": []map[string]any{{"type": "text", "text": user}}}}})
		resp = postMessages(t, r.url("/v1/messages"), "", "application/json", string(body))
		require.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, home, resp.Header.Get("X-LLMRoute-Replica"), "prompt %d: the messages form goes where the chat form went", i)
		if i%2 == 0 {
			events, err := readAnthropicSSE(resp)
			require.NoError(t, err)
			require.NotEmpty(t, events)
			assert.Equal(t, "message_start", events[0])
			assert.Contains(t, events, "message_delta")
			assert.Equal(t, "message_stop", events[len(events)-1])
		} else {
			var m struct {
				Type  string `json:"type"`
				Usage struct {
					CacheRead int `json:"cache_read_input_tokens"`
				} `json:"usage"`
			}
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
			resp.Body.Close()
			assert.Equal(t, "message", m.Type)
			assert.Positive(t, m.Usage.CacheRead)
		}
	}
	assert.Len(t, homes, 2, "the prompts spread over both replicas, so staying is not by default")
	checks := func() (n, hits, cold int) {
		for _, a := range []string{a1, a2} {
			fb := r.replica(a).Feedback
			n, hits, cold = n+fb.Checks, hits+fb.Hits, cold+fb.Cold
		}
		return
	}
	waitFor(t, "every prediction checked", func() bool { n, _, _ := checks(); return n == 2*prompts })
	_, hits, cold := checks()
	assert.Equal(t, prompts, cold, "each chat request is a cold prefix")
	assert.Equal(t, prompts, hits, "each messages request is a predicted hit the engine confirms")
	r.requireDrained(a1, a2)
}
