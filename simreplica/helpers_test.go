package simreplica

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmroute/caddy-llmroute/simengine"
	"github.com/stretchr/testify/require"
)

// engineConfig shortens engine.Config in tests.
type engineConfig = simengine.Config

// testEngine is a fast engine: 20x the modelled GPU, so a step is ~0.5 ms.
func testEngine() simengine.Config { return simengine.Config{NumBlocks: 512, Speed: 20} }

// replica is a Server serving on a 127.0.0.1 listener, with its own client.
type replica struct {
	s      *Server
	url    string
	addr   string
	client *http.Client
	done   chan error
	once   sync.Once
}

// startReplica starts a server on 127.0.0.1:0; the cleanup closes it.
func startReplica(t *testing.T, cfg Config) *replica {
	t.Helper()
	if cfg.Engine == (simengine.Config{}) {
		cfg.Engine = testEngine()
	}
	if cfg.OutputTokens == 0 {
		cfg.OutputTokens = 5
	}
	if cfg.Name == "" {
		cfg.Name = "r1"
	}
	s, err := New(cfg)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r := &replica{
		s:      s,
		addr:   ln.Addr().String(),
		url:    "http://" + ln.Addr().String(),
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}},
		done:   make(chan error, 1),
	}
	go func() { r.done <- s.Serve(ln) }()
	t.Cleanup(r.close)
	return r
}

// close closes the server, waits for Serve to return and drops the
// client's idle connections. It is idempotent.
func (r *replica) close() {
	r.once.Do(func() {
		_ = r.s.Close()
		select {
		case <-r.done:
		case <-time.After(5 * time.Second):
		}
		r.client.Transport.(*http.Transport).CloseIdleConnections()
	})
}

// post sends a JSON body with extra headers (pairs of name, value).
func (r *replica) post(t *testing.T, ctx context.Context, path string, body any, headers ...string) (*http.Response, error) {
	t.Helper()
	var b []byte
	switch v := body.(type) {
	case string:
		b = []byte(v)
	default:
		var err error
		b, err = json.Marshal(v)
		require.NoError(t, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url+path, bytes.NewReader(b))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return r.client.Do(req)
}

// get fetches a path and returns status, headers and body.
func (r *replica) get(t *testing.T, path string) (int, http.Header, string) {
	t.Helper()
	resp, err := r.client.Get(r.url + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, string(b)
}

// chatBody builds a chat request.
func chatBody(content string, stream bool, extra map[string]any) map[string]any {
	b := map[string]any{
		"model":    "m",
		"messages": []map[string]any{{"role": "system", "content": "You are terse."}, {"role": "user", "content": content}},
		"stream":   stream,
	}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

// sseStream is a parsed SSE response.
type sseStream struct {
	chunks []map[string]any // decoded data payloads before [DONE]
	done   bool             // saw data: [DONE]
	err    error            // read error (nil at a clean EOF)
}

// readSSE parses an SSE body until [DONE], EOF or an error. onChunk, if
// set, is called after each decoded chunk.
func readSSE(t *testing.T, body io.Reader, onChunk func(map[string]any)) sseStream {
	t.Helper()
	var out sseStream
	br := bufio.NewReader(body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if !errors.Is(err, io.EOF) || line != "" {
				out.err = err
			}
			return out
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			continue
		}
		payload, ok := strings.CutPrefix(line, "data: ")
		require.True(t, ok, "unexpected SSE line %q", line)
		if payload == "[DONE]" {
			out.done = true
			continue
		}
		require.False(t, out.done, "data after [DONE]")
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(payload), &m), payload)
		out.chunks = append(out.chunks, m)
		if onChunk != nil {
			onChunk(m)
		}
	}
}

// contentOf returns a chunk's content text (chat delta or completion text)
// and whether the chunk has a choice.
func contentOf(m map[string]any) (string, bool) {
	choices, _ := m["choices"].([]any)
	if len(choices) == 0 {
		return "", false
	}
	c := choices[0].(map[string]any)
	if d, ok := c["delta"].(map[string]any); ok {
		s, _ := d["content"].(string)
		return s, true
	}
	s, _ := c["text"].(string)
	return s, true
}

// finishOf returns a chunk's finish_reason ("" when null).
func finishOf(m map[string]any) string {
	choices, _ := m["choices"].([]any)
	if len(choices) == 0 {
		return ""
	}
	s, _ := choices[0].(map[string]any)["finish_reason"].(string)
	return s
}

// eventually polls cond every 10 ms for at most d.
func eventually(t *testing.T, d time.Duration, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v: %s", d, msg)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// longText is about n tokens of deterministic English-like text.
func longText(seed, n int) string {
	words := []string{"alpha", "router", "cache", "prefix", "replica", "token", "block", "stream", "queue", "model"}
	var b strings.Builder
	for i := 0; b.Len() < n*4; i++ {
		b.WriteString(words[(i*7+seed*13+i/3)%len(words)])
		if i%11 == 10 {
			b.WriteString(".\n")
		} else {
			b.WriteByte(' ')
		}
	}
	return b.String()
}
