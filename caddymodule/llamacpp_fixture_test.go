package caddymodule

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fixtureBody returns a recorded fixture (SOURCE beside them names the
// server's build).
func fixtureBody(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/engines/llamacpp/" + name)
	require.NoError(t, err)
	return b
}

// TestLlamaCppAnswersRecorded reads what llama.cpp's real server answered
// as llm_route reads an engine's answer: cached_tokens reported cold (0)
// and warm, in JSON and in the stream's usage chunk, Anthropic's
// cache_read_input_tokens and the Responses API's input_tokens_details.
func TestLlamaCppAnswersRecorded(t *testing.T) {
	for _, c := range []struct {
		file, ctype     string
		cached, prompt  int
		promptAtLeast   bool
		wantFound, warm bool
	}{
		{"chat_cold.json", "application/json", 0, 462, false, true, false},
		{"chat_warm.json", "application/json", 455, 462, false, true, true},
		{"chat_stream.sse", "text/event-stream", 455, 462, false, true, true},
		{"completions.json", "application/json", 0, 0, true, true, false},
		{"messages.json", "application/json", 455, 463, false, true, true},
		{"messages_stream.sse", "text/event-stream", 455, 0, true, true, true},
		{"responses.json", "application/json", 455, 463, false, true, true},
	} {
		t.Run(c.file, func(t *testing.T) {
			s := &usageSniffer{}
			s.start(c.ctype)
			body := fixtureBody(t, c.file)
			assert.Equal(t, string(body), string(s.observe(body)), "relayed unchanged")
			s.finish()
			assert.Equal(t, c.wantFound, s.found, "the figure is read")
			if c.warm {
				assert.Equal(t, c.cached, s.cached)
			} else {
				assert.Zero(t, s.cached, "llama.cpp reports 0 cached, not silence")
			}
			if c.promptAtLeast {
				assert.Positive(t, s.promptTokens)
			} else {
				assert.Equal(t, c.prompt, s.promptTokens)
			}
		})
	}
}

// TestLlamaCppMetricsRecorded reads the real server's /metrics: the load
// figures and its prompt counters (restart detection), and that without
// the key it answered 401.
func TestLlamaCppMetricsRecorded(t *testing.T) {
	s, err := parseEngineSample(bytes.NewReader(fixtureBody(t, "metrics.txt")))
	require.NoError(t, err)
	assert.Equal(t, "llamacpp", s.engine)
	assert.True(t, s.hasLoad)
	assert.Positive(t, s.queries, "llamacpp:prompt_tokens_total")
	assert.Positive(t, s.hits, "llamacpp:prompt_tokens_cached_total")
	assert.Equal(t, -1.0, s.kvUsage, "llama.cpp exports no KV usage")
	nokey := string(fixtureBody(t, "metrics_nokey.txt"))
	assert.True(t, strings.HasPrefix(nokey, "status 401"), nokey)
	assert.Contains(t, string(fixtureBody(t, "models_nokey.txt")), "status 401", "this build keeps /v1/models behind the key too")
}
