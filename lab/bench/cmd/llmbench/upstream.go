package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/llmroute/caddy-llmroute/internal/sse"
)

// The fake upstream is an OpenAI-compatible replica reduced to what costs
// nothing: it reads the body (it must, to keep the connection reusable and
// to be fair to proxies that stream the body), looks for two literal flags
// with bytes.Contains instead of decoding JSON, and answers from
// precomputed bytes. It runs in a child process of llmbench (the same
// binary, -role=upstream) so that its CPU and GC are not the load
// generator's. It is kept apart from internal/testrig/fakereplica (in process,
// fault injection, a receipt per request: the integration tests' and the
// soak's replica) because the bench measures the proxy's CPU per request
// on a shared machine, and whatever the upstream spends is noise in that
// figure; upstream_test.go checks its bytes against internal/openai's
// shapes, which the fake replica writes and the clients read.
//
// Requests:
//   - "stream":true in the body: an SSE answer of streamChunks content
//     chunks, a finish chunk, a usage-only chunk when the body contains
//     "include_usage":true (llm_route's request_usage adds it), then
//     "data: [DONE]". Each event is written and flushed on its own.
//   - otherwise a chat.completion JSON with usage.
//   - on /v1/messages, Anthropic's shapes instead: a stream of
//     message_start (with the usage), content_block_start, streamChunks
//     text deltas, content_block_stop, message_delta and message_stop; or
//     a message JSON with usage.
//   - header X-Bench-Slow: "<interval>,<chunks>" streams up to <chunks>
//     content chunks <interval> apart (the concurrency test's slow
//     streams); POST /_bench/release ends every such stream in progress
//     (finish chunk, usage, [DONE]).
//
// usage.prompt_tokens_details.cached_tokens is always half the prompt
// tokens, so that llmroute's feedback sees steady hits and never purges.

const streamChunks = 6

// messageStop is the event an Anthropic stream ends with.
const messageStop = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"

// anthropicStart is message_start, with half the prompt read from cache.
func anthropicStart(promptTokens int) []byte {
	return []byte(fmt.Sprintf("event: message_start\ndata: "+`{"type":"message_start","message":{"id":"msg_bench","type":"message","role":"assistant","model":"bench-model","content":[],"stop_reason":null,"usage":{"input_tokens":%d,"cache_read_input_tokens":%d,"output_tokens":1}}}`+"\n\n",
		promptTokens-promptTokens/2, promptTokens/2))
}

func anthropicJSON(promptTokens int) []byte {
	return []byte(fmt.Sprintf(`{"id":"msg_bench","type":"message","role":"assistant","model":"bench-model","content":[{"type":"text","text":"token token token token token token"}],"stop_reason":"end_turn","usage":{"input_tokens":%d,"cache_read_input_tokens":%d,"output_tokens":%d}}`,
		promptTokens-promptTokens/2, promptTokens/2, streamChunks))
}

var (
	anthropicBlockStart = []byte("event: content_block_start\ndata: " + `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}` + "\n\n")
	anthropicDelta      = []byte("event: content_block_delta\ndata: " + `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" token"}}` + "\n\n")
	anthropicEnd        = []byte("event: content_block_stop\ndata: " + `{"type":"content_block_stop","index":0}` + "\n\n" +
		"event: message_delta\ndata: " + fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":%d}}`, streamChunks) + "\n\n")
)

var (
	chunkContent = []byte(`data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"bench-model","choices":[{"index":0,"delta":{"content":" token"},"finish_reason":null}]}` + "\n\n")
	chunkFinish  = []byte(`data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"bench-model","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n")
	chunkDone    = []byte(sse.DoneEvent)
)

func usageChunk(promptTokens int) []byte {
	return []byte(fmt.Sprintf(`data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"bench-model","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}}`+"\n\n",
		promptTokens, streamChunks, promptTokens+streamChunks, promptTokens/2))
}

func jsonAnswer(promptTokens int) []byte {
	return []byte(fmt.Sprintf(`{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"bench-model","choices":[{"index":0,"message":{"role":"assistant","content":"token token token token token token"},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}}`,
		promptTokens, streamChunks, promptTokens+streamChunks, promptTokens/2))
}

// answers caches the per-prompt-size byte slices (prompt sizes are few).
type answers struct {
	mu    sync.RWMutex
	json  map[int][]byte
	usage map[int][]byte
}

func (a *answers) get(promptTokens int, stream bool) []byte {
	a.mu.RLock()
	m := a.json
	if stream {
		m = a.usage
	}
	b, ok := m[promptTokens]
	a.mu.RUnlock()
	if ok {
		return b
	}
	if stream {
		b = usageChunk(promptTokens)
	} else {
		b = jsonAnswer(promptTokens)
	}
	a.mu.Lock()
	if len(m) < 4096 {
		m[promptTokens] = b
	}
	a.mu.Unlock()
	return b
}

var bufPool = sync.Pool{New: func() any { return bytes.NewBuffer(make([]byte, 0, 80<<10)) }}

type fakeUpstream struct {
	ans answers

	// release ends every slow stream in progress (the concurrency test
	// holds its streams open until it has measured them).
	mu      sync.Mutex
	release chan struct{}
}

func (u *fakeUpstream) releaseCh() chan struct{} {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.release
}

func (u *fakeUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/_bench/release" {
		u.mu.Lock()
		close(u.release)
		u.release = make(chan struct{})
		u.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
		return
	}
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	defer bufPool.Put(buf)
	if _, err := buf.ReadFrom(r.Body); err != nil {
		http.Error(w, "read: "+err.Error(), http.StatusBadRequest)
		return
	}
	body := buf.Bytes()
	// Round to 64 tokens so that the answer cache stays small.
	promptTokens := (len(body)/4 + 63) &^ 63
	stream := bytes.Contains(body, []byte(`"stream":true`))
	usage := bytes.Contains(body, []byte(`"include_usage":true`))
	h := w.Header()
	if r.URL.Path == "/v1/messages" {
		u.serveMessages(w, promptTokens, stream)
		return
	}
	if !stream {
		b := u.ans.get(promptTokens, false)
		h["Content-Type"] = []string{"application/json"}
		h["Content-Length"] = []string{strconv.Itoa(len(b))}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(b)
		return
	}
	chunks, interval := streamChunks, time.Duration(0)
	var release chan struct{}
	if s := r.Header.Get("X-Bench-Slow"); s != "" {
		release = u.releaseCh()
		iv, n, _ := strings.Cut(s, ",")
		if d, err := time.ParseDuration(iv); err == nil {
			interval = d
		}
		if c, err := strconv.Atoi(n); err == nil && c > 0 {
			chunks = c
		}
	}
	h["Content-Type"] = []string{"text/event-stream"}
	h["Cache-Control"] = []string{"no-cache"}
	w.WriteHeader(http.StatusOK)
	fl := w.(http.Flusher)
	for i := 0; i < chunks; i++ {
		if i > 0 && interval > 0 {
			t := time.NewTimer(interval)
			select {
			case <-t.C:
			case <-release:
				t.Stop()
				i = chunks // end the stream now
			case <-r.Context().Done():
				t.Stop()
				return
			}
			if i == chunks {
				break
			}
		}
		if _, err := w.Write(chunkContent); err != nil {
			return
		}
		fl.Flush()
	}
	_, _ = w.Write(chunkFinish)
	fl.Flush()
	if usage {
		_, _ = w.Write(u.ans.get(promptTokens, true))
		fl.Flush()
	}
	_, _ = w.Write(chunkDone)
	fl.Flush()
}

// serveMessages answers /v1/messages in Anthropic's shapes (the answers
// are built per request: an agent's turn is worth the few allocations).
func (u *fakeUpstream) serveMessages(w http.ResponseWriter, promptTokens int, stream bool) {
	h := w.Header()
	if !stream {
		b := anthropicJSON(promptTokens)
		h["Content-Type"] = []string{"application/json"}
		h["Content-Length"] = []string{strconv.Itoa(len(b))}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(b)
		return
	}
	h["Content-Type"] = []string{"text/event-stream"}
	h["Cache-Control"] = []string{"no-cache"}
	w.WriteHeader(http.StatusOK)
	fl := w.(http.Flusher)
	for _, ev := range [][]byte{anthropicStart(promptTokens), anthropicBlockStart} {
		_, _ = w.Write(ev)
		fl.Flush()
	}
	for range streamChunks {
		if _, err := w.Write(anthropicDelta); err != nil {
			return
		}
		fl.Flush()
	}
	_, _ = w.Write(anthropicEnd)
	fl.Flush()
	_, _ = w.Write([]byte(messageStop))
	fl.Flush()
}

// runUpstream listens on n loopback ports, prints "LISTEN a,b,c" on stdout
// and serves until stdin closes (the parent exited or closed the pipe).
func runUpstream(n int) error {
	u := &fakeUpstream{ans: answers{json: map[int][]byte{}, usage: map[int][]byte{}}, release: make(chan struct{})}
	var addrs []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		addrs = append(addrs, ln.Addr().String())
		srv := &http.Server{Handler: u, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10}
		go func() { _ = srv.Serve(ln) }()
	}
	fmt.Printf("LISTEN %s\n", strings.Join(addrs, ","))
	_, _ = io.Copy(io.Discard, bufio.NewReader(os.Stdin))
	return nil
}
