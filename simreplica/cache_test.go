package simreplica

import (
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/llmroute/caddy-llmroute/simengine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// streamTTFT streams a completion and returns the time to its first
// content chunk and the usage's cached tokens.
func streamTTFT(t *testing.T, r *replica, prompt string, headers ...string) (time.Duration, int) {
	t.Helper()
	b, err := json.Marshal(map[string]any{"model": "m", "prompt": prompt, "max_tokens": 2, "stream": true,
		"stream_options": map[string]any{"include_usage": true}})
	require.NoError(t, err)
	body := string(b)
	start := time.Now()
	resp, err := r.post(t, context.Background(), pathCompletions, body, headers...)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	var ttft time.Duration
	st := readSSE(t, resp.Body, func(m map[string]any) {
		if _, ok := contentOf(m); ok && ttft == 0 {
			ttft = time.Since(start)
		}
	})
	require.NoError(t, st.err)
	require.True(t, st.done)
	// The callers compare these times: a stream without a content chunk
	// would leave ttft zero and make any "cold > k*hit" hold.
	require.Positive(t, ttft, "no content chunk in the stream")
	u := st.chunks[len(st.chunks)-1]["usage"].(map[string]any)
	details, ok := u["prompt_tokens_details"].(map[string]any)
	if !ok {
		return ttft, 0 // vLLM writes no details when nothing was cached
	}
	return ttft, int(details["cached_tokens"].(float64))
}

func TestRepeatedPromptHitsCacheAndIsFaster(t *testing.T) {
	// Speed 2: an 8k-token cold prefill is 4 steps of ~133 ms / 2 = ~266 ms;
	// a hit computes one 16-token block in ~5.5 ms. The best of a few runs
	// of each keeps scheduler noise (race detector, busy CI) out.
	r := startReplica(t, Config{Engine: simengine.Config{Speed: 2}})
	prompt := longText(3, 8000)
	nTok := len(simengine.Tokenize(prompt))
	require.Greater(t, nTok, 6000)

	cold, cached := streamTTFT(t, r, prompt)
	assert.Zero(t, cached)
	cold2, cached := streamTTFT(t, r, prompt, HeaderFault, "restart")
	assert.Zero(t, cached, "the restart fault makes it cold again")
	cold = min(cold, cold2)
	hit := time.Hour
	for range 3 {
		ttft, cached := streamTTFT(t, r, prompt)
		assert.Equal(t, (nTok-1)/16*16, cached, "every full block but the last token's")
		hit = min(hit, ttft)
	}
	assert.Greater(t, cold, 3*hit, "cold TTFT %v vs hit TTFT %v", cold, hit)

	// Another prompt with the same first half hits that half.
	other := prompt[:len(prompt)/2] + longText(4, 4000)
	_, cached = streamTTFT(t, r, other)
	assert.Greater(t, cached, nTok/3)
	assert.Less(t, cached, nTok)
}

// The answer of turn 1, sent back in turn 2's messages, is in the cache
// too: the generated words tokenize back to the generated tokens.
func TestMultiTurnHitsOnPreviousAnswer(t *testing.T) {
	r := startReplica(t, Config{OutputTokens: 40})
	system := longText(5, 300)
	msgs := []map[string]any{{"role": "system", "content": system}, {"role": "user", "content": "first question"}}
	resp, err := r.post(t, context.Background(), pathChat, map[string]any{"model": "m", "messages": msgs})
	require.NoError(t, err)
	c1 := decodeCompletion(t, resp)
	turn1 := c1.Usage.PromptTokens + c1.Usage.CompletionTokens

	msgs = append(msgs,
		map[string]any{"role": "assistant", "content": c1.Choices[0].Message.Content},
		map[string]any{"role": "user", "content": "second question"})
	body := map[string]any{"model": "m", "messages": msgs}

	// The oracle endpoint sees it before the request is sent.
	resp, err = r.post(t, context.Background(), pathSimCached, body)
	require.NoError(t, err)
	var probe struct {
		PromptTokens int `json:"prompt_tokens"`
		CachedTokens int `json:"cached_tokens"`
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, json.Unmarshal(b, &probe), string(b))

	resp, err = r.post(t, context.Background(), pathChat, body)
	require.NoError(t, err)
	c2 := decodeCompletion(t, resp)
	cached := c2.Usage.PromptTokensDetails.CachedTokens
	assert.Equal(t, probe.CachedTokens, cached)
	assert.Equal(t, c2.Usage.PromptTokens, probe.PromptTokens)
	// Everything up to the last full block of turn 1's tokens (the final
	// generated token is never computed, so at most turn1-1 tokens).
	assert.Equal(t, (turn1-1)/16*16, cached)
}

func TestRestartFaultWipesCache(t *testing.T) {
	r := startReplica(t, Config{})
	prompt := longText(6, 400)
	_, cached := streamTTFT(t, r, prompt)
	assert.Zero(t, cached)
	_, cached = streamTTFT(t, r, prompt)
	assert.Positive(t, cached)
	_, cached = streamTTFT(t, r, prompt, HeaderFault, "restart")
	assert.Zero(t, cached, "the cache was wiped before serving")
	_, cached = streamTTFT(t, r, prompt)
	assert.Positive(t, cached, "and refilled by the request")
}
