package caddymodule

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/policies"
)

// answerChatBody renders a chat request of alternating user and assistant
// messages after a system prompt.
func answerChatBody(t *testing.T, sys string, turns ...string) []byte {
	t.Helper()
	msgs := []map[string]string{{"role": "system", "content": sys}}
	for i, c := range turns {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]string{"role": role, "content": c})
	}
	b, err := json.Marshal(map[string]any{"model": "m", "stream": true, "messages": msgs})
	require.NoError(t, err)
	return b
}

// sseAnswer is an OpenAI chat stream that says answer in pieces of n bytes,
// then extra chunk lines (tool calls, a second choice) before the finish.
func sseAnswer(answer string, n int, extra ...string) string {
	var b strings.Builder
	for i := 0; i < len(answer); i += n {
		piece, _ := json.Marshal(answer[i:min(i+n, len(answer))])
		fmt.Fprintf(&b, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%s},\"finish_reason\":null}]}\n\n", piece)
	}
	for _, e := range extra {
		b.WriteString("data: " + e + "\n\n")
	}
	b.WriteString("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n")
	b.WriteString("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\n")
	b.WriteString("data: [DONE]\n\n")
	return b.String()
}

// TestAnswerIndexing streams answers through the usage sniffer with an
// answer capture, as the route writer sets it up, and checks what the
// replica's index believes about the conversation's next turn: all of it
// up to the end of the answer when the answer streamed whole as content,
// only the prompt otherwise.
func TestAnswerIndexing(t *testing.T) {
	sys, q, ans := strings.Repeat("system prompt ", 20), strings.Repeat("question ", 30), strings.Repeat("the answer goes on ", 40)
	cfg := policies.ParseConfig{BlockSize: 32}
	turn1, err := policies.Parse("/v1/chat/completions", answerChatBody(t, sys, q), cfg)
	require.NoError(t, err)
	turn2, err := policies.Parse("/v1/chat/completions", answerChatBody(t, sys, q, ans, "and then?"), cfg)
	require.NoError(t, err)
	answerBlocks := (len(ans) + 40) / 32 // about what the answer adds
	quoted := string(mustMarshal(t, ans))
	require.Greater(t, len(turn2.Keys.Blocks), len(turn1.Keys.Blocks)+answerBlocks-2)

	tests := []struct {
		name   string
		stream string
		ct     string
		finish bool // the sniffer reached the end of the answer
		whole  bool // the next turn is believed up to the end of the answer
	}{
		{"streamed whole", sseAnswer(ans, 7), "text/event-stream", true, true},
		{"streamed in one piece", sseAnswer(ans, len(ans)), "text/event-stream", true, true},
		{"cut before the end", sseAnswer(ans, 7)[:200], "text/event-stream", false, false},
		{"tool calls", sseAnswer(ans, 7, `{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{}"}}]}}]}`), "text/event-stream", true, false},
		{"several choices", sseAnswer(ans, 7, `{"choices":[{"index":1,"delta":{"content":"other"}}]}`), "text/event-stream", true, false},
		{"not streamed", `{"choices":[{"index":0,"message":{"role":"assistant","content":` + quoted + `},"finish_reason":"stop"}],"usage":{"prompt_tokens":100}}`, "application/json", true, true},
	}
	accepted := 0
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := testReplica("test-answers-"+tt.name, 4096)
			st.belief.Place(turn1.Keys)
			s := &usageSniffer{}
			s.start(tt.ct)
			s.answer = &answerCapture{ans: policies.NewAnswer(turn1.Keys), belief: st.belief}
			for i := 0; i < len(tt.stream); i += 13 {
				s.observe([]byte(tt.stream[i:min(i+13, len(tt.stream))]))
			}
			s.finish()
			assert.Equal(t, tt.finish, s.finished)
			got := st.belief.Index().Match(turn2.Keys.Blocks)
			if tt.whole {
				assert.GreaterOrEqual(t, got, len(turn1.Keys.Blocks)+answerBlocks-2, "the answer was not indexed")
				accepted++
			} else {
				assert.Equal(t, len(turn1.Keys.Blocks), got, "only the prompt is believed")
			}
		})
	}
	assert.Equal(t, 3, accepted)
}

// TestStartAnswerNeedsThePolicy proves the capture starts only for a
// success status, a request with extendable keys and a policy that
// indexes answers.
func TestStartAnswerNeedsThePolicy(t *testing.T) {
	req, err := policies.Parse("/v1/chat/completions", answerChatBody(t, strings.Repeat("s", 300), strings.Repeat("q", 300)), policies.ParseConfig{})
	require.NoError(t, err)
	for _, tt := range []struct {
		name   string
		status int
		on     bool
		req    *policies.Request
		want   bool
	}{
		{"indexing on", 200, true, req, true},
		{"indexing off", 200, false, req, false},
		{"error status", 500, true, req, false},
		{"no parsed request", 200, true, nil, false},
		{"no keys", 200, true, &policies.Request{}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := testReplica("test-start-answer-"+tt.name, 64)
			a, ok := st.reserve(time.Now(), 0, &attemptRules{indexAnswers: tt.on})
			require.True(t, ok)
			defer a.end(succeeded)
			rc := newRouteCtx(time.Now(), tt.req, nil)
			require.True(t, rc.begin(a))
			w := &routeWriter{rc: rc, sniff: &usageSniffer{}}
			w.startAnswer(tt.status)
			assert.Equal(t, tt.want, w.sniff.answer != nil)
		})
	}
}

// TestPendingPrefill proves a replica's pending prefill counts what its
// attempts left to prefill, believed-cached blocks excepted, until their
// first byte or their end.
func TestPendingPrefill(t *testing.T) {
	st := testReplica("test-pending-prefill", 1024)
	now := time.Now()
	keys := policies.Keys{Leading: 1, Blocks: []uint64{1, 2, 3, 4}, BlockBytes: 128, Bytes: 600}
	reserve := func() *attempt {
		a, ok := st.reserve(now, 0, &attemptRules{})
		require.True(t, ok)
		a.placeKeys(keys, "")
		return a
	}
	assert.Zero(t, pendingPrefill(st))
	first := reserve()
	assert.Equal(t, 600, pendingPrefill(st), "nothing believed: the whole prompt")
	second := reserve()
	assert.Equal(t, 600+600-4*128, pendingPrefill(st), "the first's blocks are believed now")
	first.firstByte()
	assert.Equal(t, 600-4*128, pendingPrefill(st), "a first byte ends it")
	second.end(succeeded)
	assert.Zero(t, pendingPrefill(st), "an end ends it")
	first.end(succeeded)

	// An attempt that ended before it was placed counts nothing.
	late, ok := st.reserve(now, 0, &attemptRules{})
	require.True(t, ok)
	late.end(succeeded)
	late.placeKeys(keys, "")
	assert.Zero(t, pendingPrefill(st))
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}
