package simreplica

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseChatRendersTemplate(t *testing.T) {
	g, err := parseChat([]byte(`{
		"model": "m", "stream": true, "stream_options": {"include_usage": true}, "max_tokens": 7,
		"messages": [
			{"role": "system", "content": "Be brief."},
			{"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "image_url", "image_url": {"url": "x"}}, {"type": "text", "text": "there"}]},
			{"role": "assistant", "content": null, "tool_calls": []}
		]}`))
	require.NoError(t, err)
	assert.Equal(t, "m", g.model)
	assert.True(t, g.stream)
	assert.True(t, g.includeUsage)
	assert.Equal(t, 7, g.maxTokens)
	assert.Equal(t, "<|system|>\nBe brief.\n<|user|>\nHi <|image_url|>there\n<|assistant|>\n\n<|assistant|>\n", g.prompt)
}

func TestParseChatMaxCompletionTokensWins(t *testing.T) {
	g, err := parseChat([]byte(`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":9,"max_completion_tokens":4}`))
	require.NoError(t, err)
	assert.Equal(t, 4, g.maxTokens)
	assert.False(t, g.includeUsage, "include_usage needs stream")
}

func TestParseChatErrors(t *testing.T) {
	for body, param := range map[string]string{
		``:   "",
		`{`:  "",
		`[]`: "",
		`{"messages":[{"role":"user","content":"x"}]}`:            "model",
		`{"model":"","messages":[{"role":"user","content":"x"}]}`: "model",
		`{"model":"m"}`:                                                        "messages",
		`{"model":"m","messages":[]}`:                                          "messages",
		`{"model":"m","messages":"hi"}`:                                        "messages",
		`{"model":"m","messages":[{"content":"x"}]}`:                           "messages",
		`{"model":"m","messages":[{"role":"user","content":5}]}`:               "messages",
		`{"model":"m","messages":[{"role":"user","content":[{}]}]}`:            "messages",
		`{"model":"m","messages":[{"role":"u","content":"x"}],"max_tokens":0}`: "max_tokens",
	} {
		_, err := parseChat([]byte(body))
		require.Error(t, err, body)
		br, ok := err.(*badRequest)
		require.True(t, ok, body)
		assert.Equal(t, param, br.param, body)
	}
}

func TestParseCompletionsPromptForms(t *testing.T) {
	g, err := parseCompletions([]byte(`{"model":"m","prompt":"hello"}`))
	require.NoError(t, err)
	assert.Equal(t, "hello", g.prompt)
	assert.Equal(t, 0, g.maxTokens)

	g, err = parseCompletions([]byte(`{"model":"m","prompt":["hello"]}`))
	require.NoError(t, err)
	assert.Equal(t, "hello", g.prompt)

	g, err = parseCompletions([]byte(`{"model":"m","prompt":[5,6,7]}`))
	require.NoError(t, err)
	assert.Equal(t, []uint32{5, 6, 7}, g.tokens())

	for _, body := range []string{`{"model":"m"}`, `{"model":"m","prompt":null}`, `{"model":"m","prompt":["a","b"]}`, `{"model":"m","prompt":{}}`, `{"model":"m","prompt":[]}`} {
		_, err := parseCompletions([]byte(body))
		assert.Error(t, err, body)
	}
}
