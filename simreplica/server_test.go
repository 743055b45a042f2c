package simreplica

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/llmroute/caddy-llmroute/simengine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// completion is the non-streaming response shape.
type completion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message *struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		TotalTokens         int `json:"total_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

func decodeCompletion(t *testing.T, resp *http.Response) completion {
	t.Helper()
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var c completion
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&c))
	return c
}

func TestChatNonStreaming(t *testing.T) {
	r := startReplica(t, Config{Name: "alpha"})
	resp, err := r.post(t, context.Background(), pathChat, chatBody("hello", false, nil))
	require.NoError(t, err)
	assert.Equal(t, "alpha", resp.Header.Get(HeaderReplica))
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	c := decodeCompletion(t, resp)
	assert.True(t, strings.HasPrefix(c.ID, "chatcmpl-"), c.ID)
	assert.Equal(t, "chat.completion", c.Object)
	assert.Equal(t, "m", c.Model)
	assert.Positive(t, c.Created)
	require.Len(t, c.Choices, 1)
	require.NotNil(t, c.Choices[0].Message)
	assert.Equal(t, "assistant", c.Choices[0].Message.Role)
	assert.Len(t, strings.Fields(c.Choices[0].Message.Content), 5, "five one-word tokens")
	require.NotNil(t, c.Choices[0].FinishReason)
	assert.Equal(t, "stop", *c.Choices[0].FinishReason, "the natural length came first")
	require.NotNil(t, c.Usage)
	assert.Equal(t, 5, c.Usage.CompletionTokens)
	assert.Positive(t, c.Usage.PromptTokens)
	assert.Equal(t, c.Usage.PromptTokens+5, c.Usage.TotalTokens)
	assert.Zero(t, c.Usage.PromptTokensDetails.CachedTokens)

	resp, err = r.post(t, context.Background(), pathChat, chatBody("hello", false, map[string]any{"max_tokens": 3}))
	require.NoError(t, err)
	c2 := decodeCompletion(t, resp)
	assert.Equal(t, "length", *c2.Choices[0].FinishReason)
	assert.Equal(t, 3, c2.Usage.CompletionTokens)
	assert.True(t, strings.HasPrefix(c.Choices[0].Message.Content, c2.Choices[0].Message.Content), "same prompt, same answer")

	resp, err = r.post(t, context.Background(), pathChat, chatBody("hello", false, nil), HeaderOutputTokens, "2")
	require.NoError(t, err)
	assert.Equal(t, 2, decodeCompletion(t, resp).Usage.CompletionTokens)
}

func TestChatStreaming(t *testing.T) {
	r := startReplica(t, Config{})
	resp, err := r.post(t, context.Background(), pathChat, chatBody("hello", true, nil))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	assert.Equal(t, "r1", resp.Header.Get(HeaderReplica))
	st := readSSE(t, resp.Body, nil)
	require.NoError(t, st.err)
	assert.True(t, st.done)
	require.Len(t, st.chunks, 6, "role chunk + 5 content chunks, no usage chunk")

	id := st.chunks[0]["id"]
	var text strings.Builder
	for i, ch := range st.chunks {
		assert.Equal(t, "chat.completion.chunk", ch["object"])
		assert.Equal(t, id, ch["id"], "one id per stream")
		assert.Equal(t, "m", ch["model"])
		assert.NotContains(t, ch, "usage")
		delta := ch["choices"].([]any)[0].(map[string]any)["delta"].(map[string]any)
		if i == 0 {
			assert.Equal(t, "assistant", delta["role"])
			assert.Equal(t, "", delta["content"])
		}
		s, _ := contentOf(ch)
		text.WriteString(s)
		if i == len(st.chunks)-1 {
			assert.Equal(t, "stop", finishOf(ch), "finish_reason on the last content chunk")
		} else {
			assert.Equal(t, "", finishOf(ch))
			assert.Nil(t, ch["choices"].([]any)[0].(map[string]any)["finish_reason"])
		}
	}

	// The streamed text equals the non-streamed answer.
	resp2, err := r.post(t, context.Background(), pathChat, chatBody("hello", false, nil))
	require.NoError(t, err)
	assert.Equal(t, decodeCompletion(t, resp2).Choices[0].Message.Content, text.String())
}

func TestStreamIncludeUsage(t *testing.T) {
	for _, p := range []Personality{VLLM, SGLang, LlamaCpp} {
		t.Run(string(p), func(t *testing.T) { streamIncludeUsage(t, p) })
	}
}

// streamIncludeUsage checks the usage chunk of a cold prompt: llama.cpp
// writes cached_tokens 0, vLLM and SGLang no details at all.
func streamIncludeUsage(t *testing.T, p Personality) {
	r := startReplica(t, Config{Personality: p})
	body := chatBody("usage please", true, map[string]any{"stream_options": map[string]any{"include_usage": true}, "max_tokens": 2})
	resp, err := r.post(t, context.Background(), pathChat, body)
	require.NoError(t, err)
	defer resp.Body.Close()
	st := readSSE(t, resp.Body, nil)
	require.NoError(t, st.err)
	require.True(t, st.done)
	require.Len(t, st.chunks, 4, "role, 2 content, usage")
	assert.Equal(t, "length", finishOf(st.chunks[2]))
	last := st.chunks[3]
	assert.Equal(t, []any{}, last["choices"], "usage chunk has empty choices")
	u := last["usage"].(map[string]any)
	assert.EqualValues(t, 2, u["completion_tokens"])
	assert.EqualValues(t, u["prompt_tokens"].(float64)+2, u["total_tokens"])
	if p == LlamaCpp {
		assert.Equal(t, map[string]any{"cached_tokens": 0.0}, u["prompt_tokens_details"])
	} else {
		assert.NotContains(t, u, "prompt_tokens_details", "silence when nothing was cached")
	}
	for _, ch := range st.chunks[:3] {
		assert.NotContains(t, ch, "usage")
	}
}

func TestCompletions(t *testing.T) {
	r := startReplica(t, Config{OutputTokens: 100})
	resp, err := r.post(t, context.Background(), pathCompletions, map[string]any{"model": "m", "prompt": "Once upon a time"})
	require.NoError(t, err)
	c := decodeCompletion(t, resp)
	assert.Equal(t, "text_completion", c.Object)
	assert.True(t, strings.HasPrefix(c.ID, "cmpl-"))
	assert.Equal(t, 16, c.Usage.CompletionTokens, "default max_tokens for completions")
	assert.Equal(t, "length", *c.Choices[0].FinishReason)
	assert.Len(t, strings.Fields(c.Choices[0].Text), 16)

	resp, err = r.post(t, context.Background(), pathCompletions,
		map[string]any{"model": "m", "prompt": []int{1, 2, 3}, "max_tokens": 3, "stream": true,
			"stream_options": map[string]any{"include_usage": true}})
	require.NoError(t, err)
	defer resp.Body.Close()
	st := readSSE(t, resp.Body, nil)
	require.True(t, st.done)
	require.Len(t, st.chunks, 4, "3 text chunks and usage")
	for i, ch := range st.chunks[:3] {
		assert.Equal(t, "text_completion", ch["object"])
		s, ok := contentOf(ch)
		assert.True(t, ok)
		assert.NotEmpty(t, s)
		if i == 2 {
			assert.Equal(t, "length", finishOf(ch))
		}
	}
	assert.EqualValues(t, 3, st.chunks[3]["usage"].(map[string]any)["prompt_tokens"])
}

func TestModelsHealthAndNotFound(t *testing.T) {
	r := startReplica(t, Config{Model: "my-model"})
	code, h, body := r.get(t, pathModels)
	assert.Equal(t, 200, code)
	assert.Equal(t, "r1", h.Get(HeaderReplica))
	var models struct {
		Object string `json:"object"`
		Data   []struct {
			ID     string `json:"id"`
			Object string `json:"object"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &models))
	assert.Equal(t, "list", models.Object)
	require.Len(t, models.Data, 1)
	assert.Equal(t, "my-model", models.Data[0].ID)

	code, h, body = r.get(t, pathHealth)
	assert.Equal(t, 200, code)
	assert.Equal(t, "ok", body)
	assert.Equal(t, "r1", h.Get(HeaderReplica))

	code, h, body = r.get(t, "/v1/nope")
	assert.Equal(t, 404, code)
	assert.Equal(t, "r1", h.Get(HeaderReplica))
	assertOpenAIError(t, body, "invalid_request_error")

	code, h, body = r.get(t, pathChat)
	assert.Equal(t, 405, code)
	assert.Equal(t, "POST", h.Get("Allow"))
	assertOpenAIError(t, body, "invalid_request_error")
}

// assertOpenAIError checks the OpenAI error envelope.
func assertOpenAIError(t *testing.T, body, typ string) map[string]any {
	t.Helper()
	var env map[string]map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &env), body)
	e, ok := env["error"]
	require.True(t, ok, body)
	assert.NotEmpty(t, e["message"])
	assert.Equal(t, typ, e["type"])
	assert.Contains(t, e, "param")
	assert.Contains(t, e, "code")
	return e
}

func TestBadRequests(t *testing.T) {
	r := startReplica(t, Config{Engine: engineWithLen(512)})
	long := longText(1, 800)
	for name, c := range map[string]struct {
		path, body string
		param      any
	}{
		"malformed":        {pathChat, `{"model":`, nil},
		"missing model":    {pathChat, `{"messages":[{"role":"user","content":"x"}]}`, "model"},
		"missing messages": {pathChat, `{"model":"m"}`, "messages"},
		"missing prompt":   {pathCompletions, `{"model":"m"}`, "prompt"},
		"empty prompt":     {pathCompletions, `{"model":"m","prompt":""}`, "prompt"},
		"too long":         {pathCompletions, `{"model":"m","prompt":"` + strings.ReplaceAll(long, "\n", " ") + `"}`, "prompt"},
		"bad max_tokens":   {pathCompletions, `{"model":"m","prompt":"x","max_tokens":-3}`, "max_tokens"},
	} {
		resp, err := r.post(t, context.Background(), c.path, c.body)
		require.NoError(t, err, name)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, 400, resp.StatusCode, name)
		assert.Equal(t, "r1", resp.Header.Get(HeaderReplica))
		e := assertOpenAIError(t, string(b), "invalid_request_error")
		assert.Equal(t, c.param, e["param"], name)
		assert.Nil(t, e["code"], name)
	}
	st := r.s.Stats()
	assert.EqualValues(t, 7, st.Received)
	assert.EqualValues(t, 7, st.Rejected)
	assert.Zero(t, st.Engine.Submitted)
}

// engineWithLen is the test engine with a max model length.
func engineWithLen(n int) simengine.Config {
	c := testEngine()
	c.MaxModelLen = n
	return c
}

func TestSimStatsCountsRequestIDs(t *testing.T) {
	r := startReplica(t, Config{})
	for i := range 3 {
		fault := "503"
		if i == 2 {
			fault = "none"
		}
		resp, err := r.post(t, context.Background(), pathChat, chatBody("x", false, nil), "X-Request-Id", "req-A", HeaderFault, fault)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		assert.Equal(t, "req-A", resp.Header.Get("X-Request-Id"))
	}
	resp, err := r.post(t, context.Background(), pathChat, chatBody("y", false, nil))
	require.NoError(t, err)
	resp.Body.Close()

	code, _, body := r.get(t, pathSimStats)
	require.Equal(t, 200, code)
	var st Stats
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	assert.Equal(t, "r1", st.Name)
	assert.EqualValues(t, 4, st.Received)
	assert.EqualValues(t, 2, st.Completed)
	assert.EqualValues(t, 2, st.Faulted)
	assert.Equal(t, map[string]uint64{"req-A": 3}, st.ByRequestID)
	assert.EqualValues(t, 2, st.Engine.Finished)

	resp, err = r.post(t, context.Background(), pathSimStatsReset, "")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Zero(t, r.s.Stats().Received)
	assert.Empty(t, r.s.Stats().ByRequestID)
}

func TestWorksUnderHTTPTest(t *testing.T) {
	s, err := New(Config{Engine: testEngine(), OutputTokens: 3, Name: "ht"})
	require.NoError(t, err)
	defer s.Close()
	ts := httptest.NewServer(s)
	defer ts.Close()
	defer ts.Client().CloseIdleConnections()
	resp, err := ts.Client().Post(ts.URL+pathCompletions, "application/json", strings.NewReader(`{"model":"m","prompt":"hi","stream":true}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, "ht", resp.Header.Get(HeaderReplica))
	st := readSSE(t, resp.Body, nil)
	assert.True(t, st.done)
	assert.Len(t, st.chunks, 3)
}
