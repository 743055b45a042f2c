package caddymodule

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/policies"
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

// TestWithIncludeUsage proves the body rewrite adds stream_options, in
// place in the buffer the body was read into or in a copy, and that a
// body with a stream_options of its own is never rewritten (the handler
// asks only when Parse found none).
func TestWithIncludeUsage(t *testing.T) {
	for in, want := range map[string]string{
		`{"model":"m","stream":true}`: `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`,
		` { } `:                       `{"stream_options":{"include_usage":true}}`,
	} {
		out, ok := withIncludeUsage(nil, []byte(in))
		assert.True(t, ok)
		assert.JSONEq(t, want, string(out))
		bb, body, err := readBody(strings.NewReader(in), int64(len(in)), 1<<20)
		require.NoError(t, err)
		out, ok = withIncludeUsage(bb, body)
		assert.True(t, ok)
		assert.JSONEq(t, want, string(out))
		assert.Same(t, &bb.b[bb.off], &out[0], "in place, in the room before the body")
		assert.Same(t, &body[len(body)-1], &out[len(out)-1], "the body itself did not move")
	}
	for _, body := range []string{`{"stream_options":{"include_usage":false}}`, `{"stream_options":null}`} {
		req, err := policies.Parse("/v1/chat/completions", []byte(body), policies.ParseConfig{})
		if err == nil {
			assert.True(t, req.HasStreamOptions, body)
		}
		req, err = policies.Parse("/v1/chat/completions", []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}],`+body[1:]), policies.ParseConfig{})
		require.NoError(t, err)
		assert.True(t, req.HasStreamOptions, body)
	}
	req, err := policies.Parse("/v1/chat/completions", []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"\"stream_options\""}]}`), policies.ParseConfig{})
	require.NoError(t, err)
	assert.False(t, req.HasStreamOptions, "only the body's own field counts")
}
