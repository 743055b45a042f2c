package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/llmroute/caddy-llmroute/internal/openai"
	"github.com/llmroute/caddy-llmroute/internal/sse"
)

func newTestUpstreamHandler() *fakeUpstream {
	return &fakeUpstream{ans: answers{json: map[int][]byte{}, usage: map[int][]byte{}}, release: make(chan struct{})}
}

func newTestUpstream(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(newTestUpstreamHandler())
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

// TestUpstreamSpeaksAnthropic reads the upstream's /v1/messages answers
// event by event (the usage in message_start, streamChunks text deltas,
// message_stop last) and checks that doOne accepts them, and rejects a
// chat stream sent as if it were one.
func TestUpstreamSpeaksAnthropic(t *testing.T) {
	srv := newTestUpstream(t)
	resp, err := http.Post(srv.URL+"/v1/messages", "application/json", strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := sse.NewReader(resp.Body)
	var types []string
	for range 20 {
		p, err := r.Next()
		if err != nil {
			break
		}
		var ev struct {
			Type    string `json:"type"`
			Message struct {
				Usage struct {
					Input  int `json:"input_tokens"`
					Cached int `json:"cache_read_input_tokens"`
				} `json:"usage"`
			} `json:"message"`
		}
		if err := json.Unmarshal(p, &ev); err != nil {
			t.Fatalf("event %q: %v", p, err)
		}
		if ev.Type == "message_start" && (ev.Message.Usage.Cached == 0 || ev.Message.Usage.Input == 0) {
			t.Fatalf("message_start without usage: %q", p)
		}
		types = append(types, ev.Type)
	}
	if len(types) != streamChunks+5 || types[0] != "message_start" || types[len(types)-1] != "message_stop" || strings.Count(strings.Join(types, ","), "content_block_delta") != streamChunks {
		t.Fatalf("events %v", types)
	}
	buf := make([]byte, 4096)
	for _, body := range []string{`{"model":"m","stream":true,"messages":[]}`, `{"model":"m","messages":[]}`} {
		if _, _, err := doOne(t.Context(), http.DefaultClient, srv.URL+"/v1/messages", []byte(body), nil, buf); err != nil {
			t.Fatalf("doOne %s: %v", body, err)
		}
	}
	// A chat stream where an Anthropic one is due does not end as one.
	chat := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.URL.Path = "/v1/chat/completions"
		newTestUpstreamHandler().ServeHTTP(w, r)
	}))
	defer chat.Close()
	if _, _, err := doOne(t.Context(), http.DefaultClient, chat.URL+"/v1/messages", []byte(`{"stream":true}`), nil, buf); err == nil {
		t.Fatal("doOne accepted a stream without message_stop")
	}
}
