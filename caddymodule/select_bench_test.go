package caddymodule

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"go.uber.org/zap"

	"github.com/llmroute/caddy-llmroute/internal/agentbody"
	"github.com/llmroute/caddy-llmroute/policies"
)

// Benchmarks of llmroute's own per-request work, without the network:
//
//   - BenchmarkSelect: LLMSelection.Select as reverse_proxy calls it (the
//     routing context in the request's vars, a pool of Upstreams with Host
//     set, as Caddy's own selectionpolicies_bench_test.go builds them), then
//     the release the handler does at the end: the whole decision and
//     reservation, per strategy, at 8, 64 and 512 replicas.
//   - BenchmarkHandler: LLMRoute.ServeHTTP with a next handler that selects
//     and writes an answer through the routeWriter the way reverse_proxy
//     does (JSON, or SSE with a usage chunk to strip): body read, parse,
//     prefix keys, select, usage sniffing, feedback, release and metrics.
//
// Run: go test ./caddymodule -run '^$' -bench 'Select|Handler' -benchmem

// benchBodies returns n distinct chat bodies of about size bytes over
// tenants shared system prompts (half of the size).
func benchBodies(n, size, tenants int, stream bool) [][]byte {
	word := func(r *rand.Rand, n int) string {
		var b strings.Builder
		for b.Len() < n {
			b.WriteString(strconv.FormatUint(r.Uint64()%100000, 36))
			b.WriteByte(' ')
		}
		return b.String()[:n]
	}
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	type body struct {
		Model    string `json:"model"`
		Stream   bool   `json:"stream"`
		Messages []msg  `json:"messages"`
	}
	out := make([][]byte, n)
	for i := range out {
		sr := rand.New(rand.NewPCG(uint64(size), uint64(i%tenants)))
		ur := rand.New(rand.NewPCG(uint64(size), uint64(1000+i)))
		b, _ := json.Marshal(body{Model: "bench-model", Stream: stream, Messages: []msg{
			{Role: "system", Content: word(sr, size/2)},
			{Role: "user", Content: word(ur, max(size-size/2-120, 16))},
		}})
		out[i] = b
	}
	return out
}

// benchPolicy returns a provisioned-enough policy (what Provision sets,
// without a caddy.Context).
func benchPolicy(b *testing.B, strategy string, maxInFlight int) *LLMSelection {
	p := &LLMSelection{Strategy: strategy, MaxInFlight: maxInFlight, QueueSize: 256, BalanceFactor: 1.25,
		IndexBlocks: defaultIndexBlocks, logger: zap.NewNop()}
	if err := p.setup(); err != nil {
		b.Fatal(err)
	}
	return p
}

// benchPool returns n upstreams with addresses unique to this benchmark
// (replica state is package-level, keyed by address).
func benchPool(tag string, n int) reverseproxy.UpstreamPool {
	pool := make(reverseproxy.UpstreamPool, n)
	for i := range pool {
		pool[i] = &reverseproxy.Upstream{Host: new(reverseproxy.Host), Dial: fmt.Sprintf("bench-%s-%d.invalid:%d", tag, n, 8000+i)}
	}
	return pool
}

// benchRequest returns a request whose context carries Caddy's vars and
// replacer, as it does inside a Caddy server.
func benchRequest(b *testing.B, body []byte) (*http.Request, map[string]any) {
	vars := map[string]any{}
	ctx := context.WithValue(context.Background(), caddyhttp.VarsCtxKey, vars)
	ctx = context.WithValue(ctx, caddy.ReplacerCtxKey, caddy.NewReplacer())
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://bench/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	r.Header.Set("Content-Type", "application/json")
	return r, vars
}

// benchRequests parses 64 bench bodies of 4 KiB, 8 tenants' prompts.
func benchRequests(b *testing.B) []*policies.Request {
	bodies := benchBodies(64, 4<<10, 8, false)
	reqs := make([]*policies.Request, len(bodies))
	for i, body := range bodies {
		var err error
		if reqs[i], err = policies.Parse("/v1/chat/completions", body, policies.ParseConfig{Deployment: "bench"}); err != nil {
			b.Fatal(err)
		}
	}
	return reqs
}

// selectOnce routes req through p as llm_route would (its routing context
// in r's vars) and settles it; false when no upstream was chosen.
func selectOnce(p *LLMSelection, pool reverseproxy.UpstreamPool, r *http.Request, vars map[string]any, req *policies.Request) bool {
	rc := newRouteCtx(time.Now(), req, nil)
	vars[routeVarKey] = rc
	if p.Select(pool, r, nil) == nil {
		return false
	}
	rc.finish(succeeded)
	return true
}

// checkNoReservations fails b if any replica of pool still holds one.
func checkNoReservations(b *testing.B, p *LLMSelection, pool reverseproxy.UpstreamPool) {
	for _, u := range pool {
		if n := p.state(u.String()).inFlightNow(); n != 0 {
			b.Fatalf("%s: %d reservations left", u, n)
		}
	}
}

func BenchmarkSelect(b *testing.B) {
	reqs := benchRequests(b)
	for _, strategy := range []string{"round_robin", "prefix_affinity", "least_load", "prefix_load"} {
		for _, n := range []int{8, 64, 512} {
			b.Run(fmt.Sprintf("%s/%d", strategy, n), func(b *testing.B) {
				p := benchPolicy(b, strategy, 1<<20)
				pool := benchPool("select-"+strategy, n)
				r, vars := benchRequest(b, nil)
				// Warm the indexes: every body once.
				for _, req := range reqs {
					if !selectOnce(p, pool, r, vars, req) {
						b.Fatal("no upstream")
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				i := 0
				for b.Loop() {
					if !selectOnce(p, pool, r, vars, reqs[i%len(reqs)]) {
						b.Fatal("no upstream")
					}
					i++
				}
				b.StopTimer()
				checkNoReservations(b, p, pool)
			})
		}
	}
}

// BenchmarkSelectParallel is BenchmarkSelect/prefix_load with selections
// running on every CPU at once (b.RunParallel), as under concurrent
// traffic: what one selection costs while the others read the same
// replicas' state.
func BenchmarkSelectParallel(b *testing.B) {
	reqs := benchRequests(b)
	for _, n := range []int{64, 512} {
		b.Run(fmt.Sprintf("prefix_load/%d", n), func(b *testing.B) {
			p := benchPolicy(b, "prefix_load", 1<<20)
			pool := benchPool(fmt.Sprintf("select-parallel-%d", n), n)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				r, vars := benchRequest(b, nil)
				i := 0
				for pb.Next() {
					if !selectOnce(p, pool, r, vars, reqs[i%len(reqs)]) {
						b.Error("no upstream")
						return
					}
					i++
				}
			})
			b.StopTimer()
			checkNoReservations(b, p, pool)
		})
	}
}

// benchWriter is a ResponseWriter that keeps nothing.
type benchWriter struct{ h http.Header }

func (w *benchWriter) Header() http.Header         { return w.h }
func (w *benchWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *benchWriter) WriteHeader(int)             {}
func (w *benchWriter) Flush()                      {}

var (
	benchJSONAnswer = []byte(`{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"bench-model","choices":[{"index":0,"message":{"role":"assistant","content":"token token token token token token"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1024,"completion_tokens":6,"total_tokens":1030,"prompt_tokens_details":{"cached_tokens":512}}}`)
	benchSSEChunk   = []byte(`data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"bench-model","choices":[{"index":0,"delta":{"content":" token"},"finish_reason":null}]}` + "\n\n")
	benchSSEFinish  = []byte(`data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"bench-model","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n")
	benchSSEUsage   = []byte(`data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"bench-model","choices":[],"usage":{"prompt_tokens":1024,"completion_tokens":6,"total_tokens":1030,"prompt_tokens_details":{"cached_tokens":512}}}` + "\n\n")
	benchSSEDone    = []byte("data: [DONE]\n\n")
)

func BenchmarkHandler(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10, 512 << 10} {
		for _, stream := range []bool{false, true} {
			mode := map[bool]string{false: "json", true: "sse"}[stream]
			b.Run(fmt.Sprintf("%dKiB/%s", size>>10, mode), func(b *testing.B) {
				benchHandler(b, fmt.Sprintf("handler-%d-%s", size, mode), "/v1/chat/completions", benchBodies(64, size, 8, stream), stream)
			})
		}
	}
	// Coding agents' bodies (internal/agentbody: 51 KiB, 40 tools, a
	// history of tool calls whose results are source files), as
	// Anthropic messages and as chat with tools, streamed. The -general
	// cases send each body with a second "model" field first: the fast
	// path declines it at that key, and encoding/json (the general path)
	// parses the rest as it would the body itself (the last "model"
	// wins), so they measure the general path in the same run.
	for _, endpoint := range []string{"messages", "chat"} {
		path, build := "/v1/messages", agentbody.Messages
		if endpoint == "chat" {
			path, build = "/v1/chat/completions", agentbody.Chat
		}
		bodies := make([][]byte, 64)
		for i := range bodies {
			bodies[i] = build(agentbody.Spec{Size: 51 << 10, Tools: 40, Tenant: i % 8, Seed: uint64(i), Stream: true, Model: "bench-model"})
		}
		general := make([][]byte, len(bodies))
		for i, body := range bodies {
			general[i] = append([]byte(`{"model":"bench-model",`), body[1:]...)
		}
		b.Run("agent51KiB/"+endpoint+"/sse", func(b *testing.B) {
			benchHandler(b, "handler-agent-"+endpoint, path, bodies, true)
		})
		b.Run("agent51KiB/"+endpoint+"-general/sse", func(b *testing.B) {
			benchHandler(b, "handler-agent-general-"+endpoint, path, general, true)
		})
		big := make([][]byte, 16)
		for i := range big {
			big[i] = build(agentbody.Spec{Size: 256 << 10, Tools: 40, Tenant: i % 8, Seed: uint64(i), Stream: true, Model: "bench-model"})
		}
		b.Run("agent256KiB/"+endpoint+"/sse", func(b *testing.B) {
			benchHandler(b, "handler-agent256-"+endpoint, path, big, true)
		})
	}
}

// benchHandler runs LLMRoute.ServeHTTP on bodies, in turn, at path, with
// a next handler that selects and answers as reverse_proxy does (an
// Anthropic stream on /v1/messages, an OpenAI one elsewhere).
func benchHandler(b *testing.B, tag, path string, bodies [][]byte, stream bool) {
	h := &LLMRoute{Deployment: "bench", MaxBodyBytes: 8 << 20, RequestUsage: true, logger: zap.NewNop()}
	h.parseCfg = policies.ParseConfig{Deployment: h.Deployment}
	p := benchPolicy(b, "prefix_load", 1<<20)
	pool := benchPool(tag, 8)
	events := [][]byte{benchSSEChunk, benchSSEChunk, benchSSEChunk, benchSSEChunk, benchSSEChunk, benchSSEChunk, benchSSEFinish, benchSSEUsage, benchSSEDone}
	if path == "/v1/messages" {
		events = benchAnthropicEvents
	}
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		// What reverse_proxy does, minus the network: select, read the
		// (replayed) body, relay the answer.
		if p.Select(pool, r, w) == nil {
			return fmt.Errorf("no upstream")
		}
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
		if !stream {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(200)
			_, _ = w.Write(benchJSONAnswer)
			return nil
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		rc := http.NewResponseController(w)
		for _, c := range events {
			_, _ = w.Write(c)
			_ = rc.Flush()
		}
		return nil
	})
	vars := map[string]any{}
	ctx := context.WithValue(context.Background(), caddyhttp.VarsCtxKey, vars)
	ctx = context.WithValue(ctx, caddy.ReplacerCtxKey, caddy.NewReplacer())
	base, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://bench"+path, nil)
	if err != nil {
		b.Fatal(err)
	}
	base.Header.Set("Content-Type", "application/json")
	w := &benchWriter{h: http.Header{}}
	one := func(i int) {
		body := bodies[i%len(bodies)]
		r := *base
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		clear(w.h)
		if err := h.ServeHTTP(w, &r, next); err != nil {
			b.Fatal(err)
		}
	}
	for i := range bodies {
		one(i)
	}
	b.SetBytes(int64(len(bodies[0])))
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		one(i)
		i++
	}
	b.StopTimer()
	checkNoReservations(b, p, pool)
}

// benchAnthropicEvents is an Anthropic stream of six text deltas, with
// the usage in message_start and message_delta.
var benchAnthropicEvents = func() [][]byte {
	ev := func(typ, data string) []byte { return []byte("event: " + typ + "\ndata: " + data + "\n\n") }
	out := [][]byte{ev("message_start", `{"type":"message_start","message":{"id":"msg_bench","type":"message","role":"assistant","model":"bench-model","content":[],"stop_reason":null,"usage":{"input_tokens":512,"cache_read_input_tokens":12800,"output_tokens":1}}}`),
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)}
	for range 6 {
		out = append(out, ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" token"}}`))
	}
	return append(out, ev("content_block_stop", `{"type":"content_block_stop","index":0}`),
		ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":6}}`),
		ev("message_stop", `{"type":"message_stop"}`))
}()
