package openai

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/llmroute/caddy-llmroute/internal/sse"
)

const (
	role    = `data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n"
	tokA    = `data: {"choices":[{"index":0,"delta":{"content":" the"},"finish_reason":null}]}` + "\n\n"
	tokB    = `data: {"choices":[{"index":0,"delta":{"content":" cache"},"finish_reason":null}]}` + "\n\n"
	finish  = `data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n"
	usage   = `data: {"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":2,"total_tokens":102,"prompt_tokens_details":{"cached_tokens":96}}}` + "\n\n"
	done    = "data: [DONE]\n\n"
	garbage = "data: {not json\n\n"
)

func TestReadStream(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		body                 string
		done                 bool
		chunks, content      int
		finish               string
		prompt, cached       int
		badChunk             bool
		err                  error
		firstContentExpected bool
	}{
		{name: "whole", body: role + tokA + tokB + finish + usage + done, done: true, chunks: 5, content: 2, finish: "stop", prompt: 100, cached: 96, firstContentExpected: true},
		{name: "nothing after done is read", body: tokA + done + garbage, done: true, chunks: 1, content: 1, firstContentExpected: true},
		{name: "no done", body: tokA + finish + usage, chunks: 3, content: 1, finish: "stop", prompt: 100, cached: 96, firstContentExpected: true},
		{name: "cut mid-line", body: tokA + `data: {"choi`, chunks: 1, content: 1, err: sse.ErrPartialLine, firstContentExpected: true},
		{name: "bad chunk", body: tokA + garbage + finish + done, done: true, chunks: 2, content: 1, finish: "stop", badChunk: true, firstContentExpected: true},
		{name: "role only", body: role + done, done: true, chunks: 1},
		{name: "empty", body: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := time.Now()
			s := ReadStream(strings.NewReader(tc.body))
			if s.Done != tc.done || s.Chunks != tc.chunks || s.ContentChunks != tc.content || s.Finish != tc.finish {
				t.Fatalf("got done=%v chunks=%d content=%d finish=%q, want %v %d %d %q", s.Done, s.Chunks, s.ContentChunks, s.Finish, tc.done, tc.chunks, tc.content, tc.finish)
			}
			if tc.prompt != 0 && (s.Usage == nil || s.Usage.PromptTokens != tc.prompt) || s.Usage.Cached() != tc.cached {
				t.Fatalf("usage %+v, want prompt %d cached %d", s.Usage, tc.prompt, tc.cached)
			}
			if (s.BadChunk != nil) != tc.badChunk {
				t.Fatalf("bad chunk %v, want %v", s.BadChunk, tc.badChunk)
			}
			if !errors.Is(s.Err, tc.err) || (tc.err == nil) != (s.Err == nil) {
				t.Fatalf("err %v, want %v", s.Err, tc.err)
			}
			if tc.firstContentExpected == s.FirstContent.IsZero() || (!s.FirstContent.IsZero() && s.FirstContent.Before(before)) {
				t.Fatalf("first content at %v (read started %v), expected %v", s.FirstContent, before, tc.firstContentExpected)
			}
		})
	}
}

// TestChunkEncoding checks the shapes a fake replica writes: a usage chunk
// has "choices":[] (not null, which the router would not take for a
// usage-only chunk) and content chunks carry no usage.
func TestChunkEncoding(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Chunk
		want string
	}{
		{"content", Chunk{ID: "x", Object: ChunkObject, Created: 1, Model: "m", Choices: []Choice{{Delta: Delta{Content: "tok0 "}}}},
			`{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"tok0 "},"finish_reason":null}]}`},
		{"finish", Chunk{Choices: []Choice{{Delta: Delta{}, FinishReason: Reason("stop")}}},
			`{"choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop"}]}`},
		{"usage", Chunk{Choices: []Choice{}, Usage: &Usage{PromptTokens: 3, CompletionTokens: 2, TotalTokens: 5, PromptTokensDetails: &PromptTokensDetails{CachedTokens: 0}}},
			`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"prompt_tokens_details":{"cached_tokens":0}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.c)
			if err != nil || string(b) != tc.want {
				t.Fatalf("encoded %s (%v), want %s", b, err, tc.want)
			}
		})
	}
}
