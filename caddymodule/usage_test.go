package caddymodule

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestUsageSnifferSSE proves the sniffer reads cached tokens from a stream
// split at arbitrary points, relays every byte when not stripping, and
// drops only the usage-only chunk (and its blank line) when stripping.
func TestUsageSnifferSSE(t *testing.T) {
	stream := "data: {\"choices\":[{\"delta\":{\"content\":\"a\"},\"finish_reason\":null}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"prompt_tokens_details\":{\"cached_tokens\":64}}}\n\n" +
		"data: [DONE]\n\n"
	for _, strip := range []bool{false, true} {
		for split := 1; split < len(stream); split += 7 {
			s := &usageSniffer{strip: strip}
			s.start("text/event-stream; charset=utf-8")
			var out strings.Builder
			for i := 0; i < len(stream); i += split {
				out.Write(s.observe([]byte(stream[i:min(i+split, len(stream))])))
			}
			assert.True(t, s.found)
			assert.Equal(t, 64, s.cached)
			assert.Equal(t, 100, s.promptTokens)
			assert.True(t, s.finished)
			if strip {
				assert.NotContains(t, out.String(), "usage")
				assert.True(t, strings.HasSuffix(out.String(), "data: [DONE]\n\n"))
				assert.Equal(t, strings.Count(stream, "\n\n")-1, strings.Count(out.String(), "\n\n"))
			} else {
				assert.Equal(t, stream, out.String())
			}
		}
	}
}

// TestUsageSnifferShapes proves the other engines' usage shapes are read.
func TestUsageSnifferShapes(t *testing.T) {
	cases := []struct {
		name, ct, body string
		cached, prompt int
		found          bool
	}{
		{"openai json", "application/json", `{"choices":[{"message":{}}],"usage":{"prompt_tokens":50,"prompt_tokens_details":{"cached_tokens":32}}}`, 32, 50, true},
		{"llama.cpp timings", "application/json", `{"choices":[],"timings":{"cache_n":40,"prompt_n":10}}`, 40, 50, true},
		{"llama.cpp native", "application/json", `{"content":"x","tokens_cached":12,"tokens_evaluated":20}`, 12, 20, true},
		{"no details", "application/json", `{"usage":{"prompt_tokens":50}}`, 0, 50, false},
		{"responses json", "application/json", `{"id":"resp_1","object":"response","usage":{"input_tokens":80,"input_tokens_details":{"cached_tokens":64},"output_tokens":4}}`, 64, 80, true},
		{"responses stream", "text/event-stream", "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_2\"}}\n\nevent: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_2\",\"usage\":{\"input_tokens\":90,\"input_tokens_details\":{\"cached_tokens\":48}}}}\n\n", 48, 90, true},
		{"not json", "text/plain", `hello`, 0, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &usageSniffer{}
			s.start(c.ct)
			assert.Equal(t, c.body, string(s.observe([]byte(c.body))))
			s.finish()
			assert.Equal(t, c.found, s.found)
			assert.Equal(t, c.cached, s.cached)
			assert.Equal(t, c.prompt, s.promptTokens)
		})
	}
}

// TestWithIncludeUsage proves the body rewrite adds stream_options only
// when the client set none.
func TestWithIncludeUsage(t *testing.T) {
	out, ok := withIncludeUsage([]byte(`{"model":"m","stream":true}`))
	assert.True(t, ok)
	assert.JSONEq(t, `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`, string(out))
	out, ok = withIncludeUsage([]byte(` { } `))
	assert.True(t, ok)
	assert.JSONEq(t, `{"stream_options":{"include_usage":true}}`, string(out))
	_, ok = withIncludeUsage([]byte(`{"stream_options":{"include_usage":false}}`))
	assert.False(t, ok)
}
