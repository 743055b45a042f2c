package simreplica

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// responseObj is the part of a response object the tests read.
type responseObj struct {
	ID                 string  `json:"id"`
	Object             string  `json:"object"`
	Status             string  `json:"status"`
	Model              string  `json:"model"`
	PreviousResponseID *string `json:"previous_response_id"`
	Conversation       *struct {
		ID string `json:"id"`
	} `json:"conversation"`
	Output []struct {
		Type    string `json:"type"`
		Role    string `json:"role"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	} `json:"output"`
	Usage struct {
		InputTokens        int `json:"input_tokens"`
		InputTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"input_tokens_details"`
		OutputTokens int `json:"output_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

func (r *replica) respond(t *testing.T, body map[string]any) (int, responseObj, map[string]map[string]any) {
	t.Helper()
	resp, err := r.post(t, context.Background(), pathResponses, body)
	require.NoError(t, err)
	defer resp.Body.Close()
	var o responseObj
	var e map[string]map[string]any
	if resp.StatusCode == http.StatusOK {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&o))
	} else {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
	}
	return resp.StatusCode, o, e
}

func TestResponsesNonStreaming(t *testing.T) {
	r := startReplica(t, Config{Name: "a"})
	other := startReplica(t, Config{Name: "b"})
	first := map[string]any{"model": "m", "instructions": "You are terse.", "input": longText(4, 200)}
	st, o, _ := r.respond(t, first)
	require.Equal(t, http.StatusOK, st)
	assert.True(t, strings.HasPrefix(o.ID, "resp_"), o.ID)
	assert.Equal(t, "response", o.Object)
	assert.Equal(t, "completed", o.Status)
	assert.Nil(t, o.PreviousResponseID)
	require.Len(t, o.Output, 1)
	assert.Equal(t, "message", o.Output[0].Type)
	assert.Equal(t, "output_text", o.Output[0].Content[0].Type)
	assert.Len(t, strings.Fields(o.Output[0].Content[0].Text), 5)
	assert.Equal(t, 5, o.Usage.OutputTokens)
	assert.Zero(t, o.Usage.InputTokensDetails.CachedTokens)
	assert.Equal(t, o.Usage.InputTokens+5, o.Usage.TotalTokens)

	// Ids are unique per request and per replica.
	_, again, _ := r.respond(t, first)
	_, elsewhere, _ := other.respond(t, first)
	assert.NotEqual(t, o.ID, again.ID)
	assert.NotEqual(t, o.ID, elsewhere.ID)
	assert.NotEqual(t, again.ID, elsewhere.ID)
	assert.Positive(t, again.Usage.InputTokensDetails.CachedTokens)

	// A follow-up continues the previous response here: its prompt is the
	// previous prompt and answer, then the new input, mostly cached.
	st, next, _ := r.respond(t, map[string]any{"model": "m", "previous_response_id": o.ID, "input": "and then?"})
	require.Equal(t, http.StatusOK, st)
	require.NotNil(t, next.PreviousResponseID)
	assert.Equal(t, o.ID, *next.PreviousResponseID)
	assert.Greater(t, next.Usage.InputTokens, o.Usage.InputTokens+o.Usage.OutputTokens)
	bs := r.s.Config().Engine.BlockSize
	assert.GreaterOrEqual(t, next.Usage.InputTokensDetails.CachedTokens, o.Usage.InputTokens/bs*bs-bs)

	// Another replica's response, or one never made, is not found here.
	for _, id := range []string{elsewhere.ID, "resp_nope"} {
		st, _, e := r.respond(t, map[string]any{"model": "m", "previous_response_id": id, "input": "x"})
		require.Equal(t, http.StatusNotFound, st)
		assert.Equal(t, "previous_response_not_found", e["error"]["code"])
		assert.Equal(t, "previous_response_id", e["error"]["param"])
		assert.Equal(t, "invalid_request_error", e["error"]["type"])
	}

	st, _, e := r.respond(t, map[string]any{"model": "m", "previous_response_id": o.ID, "conversation": "conv_1", "input": "x"})
	assert.Equal(t, http.StatusBadRequest, st)
	assert.Equal(t, "previous_response_id", e["error"]["param"])
}

func TestResponsesConversation(t *testing.T) {
	r := startReplica(t, Config{})
	st, first, _ := r.respond(t, map[string]any{"model": "m", "conversation": "conv_a", "input": []map[string]any{
		{"role": "developer", "content": "You are terse."}, {"role": "user", "content": []map[string]any{{"type": "input_text", "text": longText(5, 100)}}}}})
	require.Equal(t, http.StatusOK, st)
	require.NotNil(t, first.Conversation)
	assert.Equal(t, "conv_a", first.Conversation.ID)
	st, second, _ := r.respond(t, map[string]any{"model": "m", "conversation": map[string]string{"id": "conv_a"}, "input": "more"})
	require.Equal(t, http.StatusOK, st)
	assert.Greater(t, second.Usage.InputTokens, first.Usage.InputTokens+first.Usage.OutputTokens, "the conversation so far leads the prompt")
	assert.Positive(t, second.Usage.InputTokensDetails.CachedTokens)
	_, fresh, _ := r.respond(t, map[string]any{"model": "m", "conversation": "conv_b", "input": "more"})
	assert.Less(t, fresh.Usage.InputTokens, first.Usage.InputTokens, "a new conversation starts empty")
}

func TestResponsesStreaming(t *testing.T) {
	r := startReplica(t, Config{})
	body := map[string]any{"model": "m", "stream": true, "input": longText(6, 100)}
	resp, err := r.post(t, context.Background(), pathResponses, body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	evs, err := readNamedSSE(t, resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"}
	for range 5 {
		want = append(want, "response.output_text.delta")
	}
	want = append(want, "response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed")
	require.Equal(t, want, names(evs))
	for i, e := range evs {
		assert.Equal(t, i, num(e.data, "sequence_number"))
	}
	created := evs[0].data["response"].(map[string]any)
	done := evs[len(evs)-1].data["response"].(map[string]any)
	id := created["id"].(string)
	assert.True(t, strings.HasPrefix(id, "resp_"))
	assert.Equal(t, id, done["id"])
	assert.Equal(t, "in_progress", created["status"])
	assert.Equal(t, "completed", done["status"])
	var text strings.Builder
	for _, e := range evs[4:9] {
		text.WriteString(e.data["delta"].(string))
	}
	assert.Equal(t, text.String(), evs[9].data["text"])
	assert.Equal(t, 5, num(done, "usage", "output_tokens"))
	assert.Positive(t, num(done, "usage", "input_tokens"))
	assert.Contains(t, done["usage"].(map[string]any)["input_tokens_details"], "cached_tokens")

	// The streamed response is recorded: a follow-up finds it.
	st, _, _ := r.respond(t, map[string]any{"model": "m", "previous_response_id": id, "input": "next"})
	assert.Equal(t, http.StatusOK, st)

	// A stream cut midway is not: it never completed.
	resp, err = r.post(t, context.Background(), pathResponses, body, HeaderFault, "cut-after=2")
	require.NoError(t, err)
	evs, err = readNamedSSE(t, resp.Body)
	resp.Body.Close()
	require.Error(t, err)
	require.NotEmpty(t, evs)
	assert.NotContains(t, names(evs), "response.completed")
	cutID := evs[0].data["response"].(map[string]any)["id"].(string)
	st, _, _ = r.respond(t, map[string]any{"model": "m", "previous_response_id": cutID, "input": "next"})
	assert.Equal(t, http.StatusNotFound, st)

	// max_output_tokens reached: incomplete.
	st, o, _ := r.respond(t, map[string]any{"model": "m", "input": "x", "max_output_tokens": 2})
	require.Equal(t, http.StatusOK, st)
	assert.Equal(t, "incomplete", o.Status)
	assert.Equal(t, 2, o.Usage.OutputTokens)
}

func TestResponsesBadBodies(t *testing.T) {
	r := startReplica(t, Config{})
	for _, body := range []map[string]any{
		{"input": "x"},
		{"model": "m"},
		{"model": "m", "input": []any{}},
		{"model": "m", "input": 5},
		{"model": "m", "input": []map[string]any{{"content": "no role"}}},
		{"model": "m", "input": "x", "max_output_tokens": 0},
		{"model": "m", "input": "x", "conversation": 5},
	} {
		st, _, e := r.respond(t, body)
		assert.Equal(t, http.StatusBadRequest, st, "%v", body)
		assert.Equal(t, "invalid_request_error", e["error"]["type"])
	}
}

func TestStoredTokensBounded(t *testing.T) {
	st := storedTokens{max: 3}
	for i := range 5 {
		st.put(fmt.Sprint(i), []uint32{uint32(i)})
	}
	assert.Len(t, st.byID, 3)
	for i, want := range []bool{false, false, true, true, true} {
		_, ok := st.get(fmt.Sprint(i))
		assert.Equal(t, want, ok, "id %d", i)
	}
	st.put("3", []uint32{9}) // an update does not evict
	assert.Len(t, st.byID, 3)
	got, _ := st.get("3")
	assert.Equal(t, []uint32{9}, got)
	_, ok := st.get("2")
	assert.True(t, ok)
}
