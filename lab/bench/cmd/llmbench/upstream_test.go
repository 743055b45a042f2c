package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/llmroute/caddy-llmroute/internal/openai"
)

func newTestUpstream(t *testing.T) *httptest.Server {
	u := &fakeUpstream{ans: answers{json: map[int][]byte{}, usage: map[int][]byte{}}, release: make(chan struct{})}
	srv := httptest.NewServer(u)
	t.Cleanup(srv.Close)
	return srv
}

// TestUpstreamSpeaksOpenAI reads the upstream's precomputed answers with
// the shapes the fake replica and the clients share.
func TestUpstreamSpeaksOpenAI(t *testing.T) {
	srv := newTestUpstream(t)
	for _, tc := range []struct {
		name  string
		body  string
		usage bool
	}{
		{"stream with usage", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[]}`, true},
		{"stream without usage", `{"model":"m","stream":true,"messages":[]}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			s := openai.ReadStream(resp.Body)
			if !s.Done || s.Err != nil || s.BadChunk != nil || s.Finish != "stop" || s.ContentChunks != streamChunks || s.Chunks != streamChunks+1+btoi(tc.usage) {
				t.Fatalf("stream read as %+v", s)
			}
			if (s.Usage != nil) != tc.usage || (tc.usage && (s.Usage.PromptTokens == 0 || s.Usage.Cached() != s.Usage.PromptTokens/2)) {
				t.Fatalf("usage %+v, want present %v with half the prompt cached", s.Usage, tc.usage)
			}
		})
	}
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var c openai.Completion
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || c.Object != openai.CompletionObject || len(c.Choices) != 1 || c.Choices[0].FinishReason != "stop" || c.Usage.Cached() != c.Usage.PromptTokens/2 {
		t.Fatalf("JSON answer %+v, %v", c, err)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
