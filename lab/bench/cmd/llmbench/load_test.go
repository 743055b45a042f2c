package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/llmroute/caddy-llmroute/policies"
)

func TestDoOne(t *testing.T) {
	up := newTestUpstream(t)
	// cut answers a stream that stops before [DONE].
	cut := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, string(chunkContent)+string(chunkFinish))
	}))
	defer cut.Close()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}))
	defer failing.Close()
	stream := []byte(`{"model":"m","stream":true,"messages":[]}`)
	for _, tc := range []struct {
		name    string
		url     string
		body    []byte
		wantErr bool
		bad     bool // errBadAnswer
	}{
		{name: "stream", url: up.URL, body: stream},
		{name: "json", url: up.URL, body: []byte(`{"model":"m","messages":[]}`)},
		{name: "stream without done", url: cut.URL, body: stream, wantErr: true, bad: true},
		{name: "error status", url: failing.URL, body: stream, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			// A small buffer: the answer arrives over several reads.
			ttfb, n, err := doOne(ctx, newClient(1), tc.url, tc.body, nil, make([]byte, 7))
			if (err != nil) != tc.wantErr || errors.Is(err, errBadAnswer) != tc.bad {
				t.Fatalf("doOne error %v, want error %v (bad answer %v)", err, tc.wantErr, tc.bad)
			}
			if !tc.wantErr && (ttfb <= 0 || n == 0) {
				t.Fatalf("ttfb %v, %d bytes", ttfb, n)
			}
		})
	}
}

func TestPhasePercentiles(t *testing.T) {
	p := phaseResult{ttfb: []time.Duration{time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond, 4 * time.Millisecond}}
	if got := p.pct(.5); got != 2.5 {
		t.Fatalf("p50 = %v, want 2.5 (linear interpolation)", got)
	}
	if got := (&phaseResult{}).pct(.99); got != 0 {
		t.Fatalf("p99 of no samples = %v, want 0", got)
	}
}

// TestWorkloadShapes checks both prompt shapes: bodies near the size, the
// plain ones as before (a system prompt and a user message), the agent
// ones with tool calls and tool messages full of escapes, and every one a
// body llm_route keys (policies.Parse finds a prefix).
func TestWorkloadShapes(t *testing.T) {
	defer func(old string) { promptShape = old }(promptShape)
	for _, shape := range []string{"plain", "agent"} {
		promptShape = shape
		for _, size := range []int{4096, 65536} {
			w := makeWorkload(size, true, "chat")
			if len(w.bodies) != bodiesPerShape {
				t.Fatalf("%s %d: %d bodies", shape, size, len(w.bodies))
			}
			for i, b := range w.bodies {
				if len(b) < size*9/10 || len(b) > size*13/10 {
					t.Fatalf("%s %d: body %d is %d bytes", shape, size, i, len(b))
				}
				var req struct {
					Messages []map[string]any `json:"messages"`
				}
				if err := json.Unmarshal(b, &req); err != nil {
					t.Fatal(err)
				}
				escapes := bytes.Count(b, []byte(`\n`)) + bytes.Count(b, []byte(`\"`)) + bytes.Count(b, []byte(`\t`))
				calls := bytes.Count(b, []byte(`"tool_calls"`))
				switch shape {
				case "plain":
					if len(req.Messages) != 2 || calls != 0 || escapes != 0 {
						t.Fatalf("plain body %d: %d messages, %d tool calls, %d escapes", i, len(req.Messages), calls, escapes)
					}
				case "agent":
					if calls == 0 || calls != bytes.Count(b, []byte(`"tool_call_id"`)) || escapes < (len(b)/2)/40 {
						t.Fatalf("agent body %d of %d bytes: %d tool calls, %d escapes", i, len(b), calls, escapes)
					}
				}
				r, err := policies.Parse("/v1/chat/completions", b, policies.ParseConfig{Deployment: "d"})
				if err != nil || r.NoPrefix != "" || len(r.Keys.Blocks) == 0 {
					t.Fatalf("%s body %d: Parse %v, no prefix %q", shape, i, err, r.NoPrefix)
				}
			}
		}
	}
}

// TestAgentToolsWorkloads checks -prompts agent-tools: chat and messages
// bodies near the size, with the tools, every one keyed by llm_route at
// its endpoint, and bodies of one tenant sharing their leading key.
func TestAgentToolsWorkloads(t *testing.T) {
	defer func(old string) { promptShape = old }(promptShape)
	promptShape = "agent-tools"
	for _, endpoint := range []string{"chat", "messages"} {
		for _, size := range []int{65536, 262144} {
			w := makeWorkload(size, true, endpoint)
			if len(w.bodies) != bodiesPerShape || w.at("http://x/v1/chat/completions") != "http://x"+endpointPaths[endpoint] {
				t.Fatalf("%s %d: %d bodies, url %s", endpoint, size, len(w.bodies), w.at("http://x/v1/chat/completions"))
			}
			leading := map[int]uint64{}
			for i, b := range w.bodies {
				if len(b) < size*9/10 || len(b) > size*11/10 || bytes.Count(b, []byte(`"description"`)) < agentTools {
					t.Fatalf("%s %d: body %d is %d bytes", endpoint, size, i, len(b))
				}
				r, err := policies.Parse(endpointPaths[endpoint], b, policies.ParseConfig{Deployment: "d"})
				if err != nil || r.NoPrefix != "" || len(r.Keys.Blocks) == 0 || !r.Stream {
					t.Fatalf("%s body %d: Parse %v, no prefix %q", endpoint, i, err, r.NoPrefix)
				}
				if k, ok := leading[i%tenants]; ok && k != r.Keys.Leading {
					t.Fatalf("%s body %d: leading key differs from its tenant's", endpoint, i)
				}
				leading[i%tenants] = r.Keys.Leading
			}
			if len(leading) != tenants {
				t.Fatalf("%s %d: %d tenants", endpoint, size, len(leading))
			}
		}
	}
}
