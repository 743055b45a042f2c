package integration

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/internal/testrig/fakereplica"
)

// TestNonStreamingSuccess proves that a plain (non-streamed) chat
// completion passes through whole: 200, the replica's JSON with usage, the
// replica header naming the replica that answered, one receipt at that
// replica, the client's API key not forwarded, and no reservation left.
func TestNonStreamingSuccess(t *testing.T) {
	e := newEnv(t, 2, nil, baseConfig())
	id := newID(t)
	res := e.do(id, chatBody(false, false, "say hi"), nil)

	require.NoError(t, res.Err)
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	require.NoError(t, res.ReadErr)
	assert.Contains(t, res.Header.Get("Content-Type"), "application/json")
	var body struct {
		Object  string `json:"object"`
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
			Details      struct {
				CachedTokens *int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	require.NoError(t, json.Unmarshal(res.Body, &body), "body: %s", res.Body)
	assert.Equal(t, "chat.completion", body.Object)
	require.Len(t, body.Choices, 1)
	assert.Equal(t, "stop", body.Choices[0].FinishReason)
	assert.NotEmpty(t, body.Choices[0].Message.Content)
	assert.Positive(t, body.Usage.PromptTokens)
	assert.NotNil(t, body.Usage.Details.CachedTokens)

	receipts, ok := e.tracker.WaitEnded(id, 5*time.Second)
	require.True(t, ok)
	require.Len(t, receipts, 1)
	assert.Equal(t, receipts[0].Replica, res.Header.Get(replicaHdr), "replica header must name the replica that answered")
	assert.Empty(t, receipts[0].Authorization, "the client's API key must not reach the replica")
	assert.Equal(t, fakereplica.OutcomeDone, receipts[0].Outcome)
}

// TestStreamingSuccessWithUsage proves that a streamed answer arrives
// whole and in order, ending with data: [DONE]; that a client asking for
// usage gets the usage chunk with prompt_tokens_details.cached_tokens;
// and that with request_usage on, a client that did not ask for usage
// still gets a clean stream without the usage chunk, while the replica was
// asked for it (include_usage injected).
func TestStreamingSuccessWithUsage(t *testing.T) {
	e := newEnv(t, 2, nil, baseConfig())

	// The client asks for usage.
	id := newID(t)
	res := e.do(id, chatBody(true, true, "stream with usage please"), map[string]string{fakereplica.HeaderChunks: "6"})
	requireStreamComplete(t, res)
	var content strings.Builder
	var usage *struct {
		PromptTokens int `json:"prompt_tokens"`
		Details      struct {
			CachedTokens *int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	}
	for _, ev := range res.Events[:len(res.Events)-1] {
		var c struct {
			Object  string `json:"object"`
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage json.RawMessage `json:"usage"`
		}
		require.NoError(t, json.Unmarshal([]byte(ev), &c), "event %q", ev)
		assert.Equal(t, "chat.completion.chunk", c.Object)
		for _, ch := range c.Choices {
			content.WriteString(ch.Delta.Content)
		}
		if len(c.Usage) > 0 && string(c.Usage) != "null" {
			require.NoError(t, json.Unmarshal(c.Usage, &usage))
		}
	}
	assert.Equal(t, "tok0 tok1 tok2 tok3 tok4 tok5 ", content.String(), "chunks in order, none lost")
	require.NotNil(t, usage, "the client asked for usage: the usage chunk must reach it")
	assert.Positive(t, usage.PromptTokens)
	require.NotNil(t, usage.Details.CachedTokens, "usage.prompt_tokens_details.cached_tokens must be passed on")
	receipts := e.tracker.Receipts(id)
	require.Len(t, receipts, 1)
	assert.Equal(t, receipts[0].Replica, res.Header.Get(replicaHdr))
	assert.True(t, receipts[0].IncludeUsage)

	// The client does not ask for usage; request_usage asks the replica.
	id2 := newID(t)
	res2 := e.do(id2, chatBody(true, false, "stream without usage"), nil)
	requireStreamComplete(t, res2)
	for _, ev := range res2.Events {
		assert.NotContains(t, ev, `"usage":{`, "a usage chunk the client did not ask for must be stripped")
	}
	receipts2 := e.tracker.Receipts(id2)
	require.Len(t, receipts2, 1)
	assert.True(t, receipts2[0].IncludeUsage, "request_usage must ask the replica for usage")
}
