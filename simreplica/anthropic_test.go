package simreplica

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// namedEvent is one SSE event of Anthropic's or the Responses API's
// streams: its event name and decoded data.
type namedEvent struct {
	name string
	data map[string]any
}

// readNamedSSE parses an SSE body of named events until EOF or an error
// (err is nil at a clean EOF).
func readNamedSSE(t *testing.T, body io.Reader) ([]namedEvent, error) {
	t.Helper()
	var out []namedEvent
	br := bufio.NewReader(body)
	name := ""
	for range 100_000 {
		line, err := br.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) && line == "" {
				return out, nil
			}
			return out, err
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &m), line)
			require.Equal(t, name, m["type"], "event name and data type agree")
			out = append(out, namedEvent{name, m})
			name = ""
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	t.Fatal("stream too long")
	return nil, nil
}

// names lists the events' names.
func names(evs []namedEvent) []string {
	var n []string
	for _, e := range evs {
		n = append(n, e.name)
	}
	return n
}

// num reads a number at a path of nested objects.
func num(m map[string]any, path ...string) int {
	var v any = m
	for _, p := range path {
		o, _ := v.(map[string]any)
		v = o[p]
	}
	f, _ := v.(float64)
	return int(f)
}

// messagesBody builds an Anthropic request.
func messagesBody(user string, stream bool, extra map[string]any) map[string]any {
	b := map[string]any{
		"model":      "m",
		"max_tokens": 64,
		"system":     []map[string]any{{"type": "text", "text": "You are terse.", "cache_control": map[string]string{"type": "ephemeral"}}},
		"messages":   []map[string]any{{"role": "user", "content": user}},
		"stream":     stream,
	}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

// anthropicMsg is the JSON answer's shape.
type anthropicMsg struct {
	ID         string `json:"id"`
	Type       string `json:"type"`
	Role       string `json:"role"`
	Model      string `json:"model"`
	StopReason string `json:"stop_reason"`
	Content    []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	Usage anthropicUsage `json:"usage"`
}

func decodeMsg(t *testing.T, resp *http.Response) anthropicMsg {
	t.Helper()
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var m anthropicMsg
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
	return m
}

func TestMessagesNonStreaming(t *testing.T) {
	r := startReplica(t, Config{Name: "alpha", Personality: LlamaCpp})
	long := longText(1, 200)
	resp, err := r.post(t, context.Background(), pathMessages, messagesBody(long, false, nil))
	require.NoError(t, err)
	assert.Equal(t, "alpha", resp.Header.Get(HeaderReplica))
	m := decodeMsg(t, resp)
	assert.True(t, strings.HasPrefix(m.ID, "msg_"), m.ID)
	assert.Equal(t, "message", m.Type)
	assert.Equal(t, "assistant", m.Role)
	assert.Equal(t, "m", m.Model)
	assert.Equal(t, "end_turn", m.StopReason)
	require.Len(t, m.Content, 1)
	assert.Equal(t, "text", m.Content[0].Type)
	assert.Len(t, strings.Fields(m.Content[0].Text), 5)
	assert.Equal(t, 5, m.Usage.OutputTokens)
	assert.Zero(t, cacheRead(m.Usage), "cold cache")
	prompt := m.Usage.InputTokens
	assert.Greater(t, prompt, 200)

	resp, err = r.post(t, context.Background(), pathMessages, messagesBody(long, false, map[string]any{"max_tokens": 3}))
	require.NoError(t, err)
	m2 := decodeMsg(t, resp)
	assert.Equal(t, "max_tokens", m2.StopReason)
	assert.Equal(t, 3, m2.Usage.OutputTokens)
	assert.Positive(t, cacheRead(m2.Usage), "the same prompt again is served from the cache")
	assert.Equal(t, prompt, m2.Usage.InputTokens+cacheRead(m2.Usage), "input_tokens counts only what was not cached")
	assert.Zero(t, m2.Usage.CacheCreationInputTokens)
}

func TestMessagesStreaming(t *testing.T) {
	r := startReplica(t, Config{Personality: LlamaCpp})
	long := longText(2, 200)
	var cold int
	for i := range 2 {
		resp, err := r.post(t, context.Background(), pathMessages, messagesBody(long, true, nil))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
		evs, err := readNamedSSE(t, resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		want := []string{"message_start", "content_block_start", "ping"}
		for range 5 {
			want = append(want, "content_block_delta")
		}
		want = append(want, "content_block_stop", "message_delta", "message_stop")
		require.Equal(t, want, names(evs))
		start := evs[0].data["message"].(map[string]any)
		assert.True(t, strings.HasPrefix(start["id"].(string), "msg_"))
		in, read := num(start, "usage", "input_tokens"), num(start, "usage", "cache_read_input_tokens")
		var text strings.Builder
		for _, e := range evs[3:8] {
			assert.Equal(t, "text_delta", e.data["delta"].(map[string]any)["type"])
			text.WriteString(e.data["delta"].(map[string]any)["text"].(string))
		}
		assert.Len(t, strings.Fields(text.String()), 5)
		delta := evs[9].data
		assert.Equal(t, "end_turn", delta["delta"].(map[string]any)["stop_reason"])
		assert.Equal(t, 5, num(delta, "usage", "output_tokens"))
		assert.Equal(t, in+read, num(delta, "usage", "input_tokens")+num(delta, "usage", "cache_read_input_tokens"))
		if i == 0 {
			cold = in + read
			assert.Zero(t, read)
		} else {
			assert.Positive(t, read, "second time: cache read")
			assert.Equal(t, cold, in+read)
		}
	}
}

// TestMessagesShareTheChatCache proves one conversation renders alike as
// chat and as messages: a messages request after the chat one is cached as
// a chat repeat would be.
func TestMessagesShareTheChatCache(t *testing.T) {
	r := startReplica(t, Config{Personality: LlamaCpp})
	user := longText(3, 300)
	chat := map[string]any{"model": "m", "messages": []map[string]any{
		{"role": "system", "content": "You are terse."}, {"role": "user", "content": user},
		{"role": "assistant", "content": "ok"}, {"role": "tool", "tool_call_id": "t1", "content": "42"},
		{"role": "user", "content": "and then?"}}}
	msgs := map[string]any{"model": "m", "max_tokens": 50, "system": "You are terse.", "messages": []map[string]any{
		{"role": "user", "content": []map[string]any{{"type": "text", "text": user}}},
		{"role": "assistant", "content": []map[string]any{{"type": "text", "text": "ok"}, {"type": "tool_use", "id": "t1", "name": "f", "input": map[string]any{}}}},
		{"role": "user", "content": []map[string]any{{"type": "tool_result", "tool_use_id": "t1", "content": "42"}, {"type": "text", "text": "and then?"}}}}}
	resp, err := r.post(t, context.Background(), pathChat, chat)
	require.NoError(t, err)
	c := decodeCompletion(t, resp)
	resp, err = r.post(t, context.Background(), pathMessages, msgs)
	require.NoError(t, err)
	m := decodeMsg(t, resp)
	assert.Equal(t, c.Usage.PromptTokens, m.Usage.InputTokens+cacheRead(m.Usage), "same rendering, same length")
	bs := r.s.Config().Engine.BlockSize
	assert.Equal(t, (c.Usage.PromptTokens-1)/bs*bs, cacheRead(m.Usage), "every full block but the last cached, as for a repeat")

	resp, err = r.post(t, context.Background(), pathCountTokens, msgs)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var count struct {
		InputTokens int `json:"input_tokens"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&count))
	assert.Equal(t, c.Usage.PromptTokens, count.InputTokens)
}

// requireAnthropicError checks an Anthropic-shaped error answer.
func requireAnthropicError(t *testing.T, resp *http.Response, status int, typ string) {
	t.Helper()
	defer resp.Body.Close()
	require.Equal(t, status, resp.StatusCode)
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var raw map[string]json.RawMessage
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&raw))
	assert.Len(t, raw, 2, "only type and error")
	assert.Equal(t, `"error"`, string(raw["type"]))
	var e struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}
	require.NoError(t, json.Unmarshal(raw["error"], &e))
	assert.Equal(t, typ, e.Type)
	assert.NotEmpty(t, e.Message)
}

func TestMessagesErrorsAndFaults(t *testing.T) {
	r := startReplica(t, Config{RetryAfter: 7})
	ctx := context.Background()
	for _, c := range []struct {
		path, body string
		status     int
		typ        string
	}{
		{pathMessages, `{"model":"m",`, 400, "invalid_request_error"},
		{pathMessages, `{"messages":[{"role":"user","content":"x"}]}`, 400, "invalid_request_error"},
		{pathMessages, `{"model":"m"}`, 400, "invalid_request_error"},
		{pathMessages, `{"model":"m","messages":[{"role":"user","content":5}]}`, 400, "invalid_request_error"},
		{pathMessages, `{"model":"m","messages":[{"role":"user","content":[{"text":"x"}]}]}`, 400, "invalid_request_error"},
		{pathMessages, `{"model":"m","system":7,"messages":[{"role":"user","content":"x"}]}`, 400, "invalid_request_error"},
		{pathCountTokens, `{"model":"m"}`, 400, "invalid_request_error"},
	} {
		resp, err := r.post(t, ctx, c.path, c.body)
		require.NoError(t, err)
		requireAnthropicError(t, resp, c.status, c.typ)
	}
	resp, err := r.client.Get(r.url + pathMessages)
	require.NoError(t, err)
	assert.Equal(t, "POST", resp.Header.Get("Allow"))
	requireAnthropicError(t, resp, 405, "invalid_request_error")

	for fault, want := range map[string]struct {
		status int
		typ    string
	}{"429": {429, "rate_limit_error"}, "503": {503, "overloaded_error"}, "500": {500, "api_error"}} {
		for _, path := range []string{pathMessages, pathCountTokens} {
			resp, err := r.post(t, ctx, path, messagesBody("x", true, nil), HeaderFault, fault)
			require.NoError(t, err)
			if want.status != 500 {
				assert.Equal(t, "7", resp.Header.Get("Retry-After"))
			}
			requireAnthropicError(t, resp, want.status, want.typ)
		}
	}

	// A stream cut midway: begun, two deltas, then no clean end.
	resp, err = r.post(t, ctx, pathMessages, messagesBody("cut me", true, nil), HeaderFault, "cut-after=2")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	evs, err := readNamedSSE(t, resp.Body)
	resp.Body.Close()
	require.Error(t, err, "a cut stream must not end cleanly")
	assert.Equal(t, []string{"message_start", "content_block_start", "ping", "content_block_delta", "content_block_delta"}, names(evs))

	// A JSON answer cut midway.
	resp, err = r.post(t, ctx, pathMessages, messagesBody("cut me", false, nil), HeaderFault, "cut-after=1")
	require.NoError(t, err)
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Error(t, err)

	// Restart's down time: 503 in Anthropic's shape.
	r.s.Restart(5 * time.Second)
	resp, err = r.post(t, ctx, pathMessages, messagesBody("x", false, nil))
	require.NoError(t, err)
	requireAnthropicError(t, resp, 503, "overloaded_error")
	assert.Equal(t, "7", resp.Header.Get("Retry-After"))
}

func TestParseMessagesRendersTemplate(t *testing.T) {
	g, err := parseMessages([]byte(`{"model":"m","max_tokens":9,"stream":true,
		"system":[{"type":"text","text":"Be "},{"type":"text","text":"brief."}],
		"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"u"}},{"type":"text","text":"what?"}]},
		{"role":"assistant","content":[{"type":"text","text":"a cat"},{"type":"tool_use","id":"t","name":"f","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"r1"}]},{"type":"tool_result","tool_use_id":"u","content":"r2"}]}]}`))
	require.NoError(t, err)
	assert.Equal(t, apiMessages, g.kind)
	assert.True(t, g.stream)
	assert.False(t, g.includeUsage)
	assert.Equal(t, 9, g.maxTokens)
	assert.Equal(t, "<|system|>\nBe brief.\n<|user|>\n<|image_url|>what?\n<|assistant|>\na cat\n<|tool|>\nr1\n<|tool|>\nr2\n<|assistant|>\n", g.prompt)
}

// cacheRead is usage's cache_read_input_tokens, 0 when absent.
func cacheRead(u anthropicUsage) int {
	if u.CacheReadInputTokens == nil {
		return 0
	}
	return *u.CacheReadInputTokens
}
