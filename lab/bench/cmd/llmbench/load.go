package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmroute/caddy-llmroute/internal/agentbody"
	"github.com/llmroute/caddy-llmroute/internal/sse"
	"github.com/llmroute/caddy-llmroute/internal/stats"
)

// workload is one prompt size and stream mode: a fixed set of request
// bodies, cycled. Bodies share one of tenants system prompts (half the
// size) and end in a user message of their own, so prefix strategies have
// shared prefixes to find and every body is distinct.
type workload struct {
	size   int
	stream bool
	// endpoint is "chat" (/v1/chat/completions) or "messages"
	// (Anthropic's /v1/messages, -prompts agent-tools only).
	endpoint string
	bodies   [][]byte
}

// endpointPaths are the endpoints' URL paths.
var endpointPaths = map[string]string{"chat": "/v1/chat/completions", "messages": "/v1/messages"}

// at returns a target's URL (its chat URL) for w's endpoint.
func (w workload) at(url string) string {
	if w.endpoint == "" || w.endpoint == "chat" {
		return url
	}
	return strings.TrimSuffix(url, endpointPaths["chat"]) + endpointPaths[w.endpoint]
}

const (
	tenants        = 8
	bodiesPerShape = 256
)

var vocab = strings.Fields(`the of and to in is you that it he was for on are as with his they at be this have from or one had by
word but not what all were we when your can said there use an each which she do how their if will up other about out many then them
these so some her would make like him into time has look two more write go see number no way could people my than first water been
call who oil its now find long down day did get come made may part cache prefix token model replica route stream chunk block hash`)

func words(r *rand.Rand, n int) string {
	var b strings.Builder
	b.Grow(n + 16)
	for b.Len() < n {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(vocab[r.IntN(len(vocab))])
	}
	return b.String()[:n]
}

type chatMsg struct {
	Role       string     `json:"role"`
	Content    *string    `json:"content"`
	ToolCalls  []toolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

func text(s string) *string { return &s }

// promptShape is -prompts: "plain" (a system prompt and a user message of
// words), "agent" (what a coding agent sends: the system prompt, a task,
// then rounds of an assistant tool call and the tool message carrying a
// source file, line breaks, tabs and quotes all through, to the size) or
// "agent-tools" (internal/agentbody: the same with a 6 KiB system prompt
// and agentTools tool definitions, as chat or as Anthropic messages).
var promptShape = "plain"

// agentTools is the number of tool definitions of -prompts agent-tools
// bodies (27 KB of them, as coding agents send).
const agentTools = 40

// agentTurns appends tool-call rounds to msgs until the body would reach
// size bytes.
func agentTurns(r *rand.Rand, msgs []chatMsg, size, base int) []chatMsg {
	for n, round := base, 0; n < size; round++ {
		id := fmt.Sprintf("call_%d_%d", r.IntN(1<<30), round)
		var tc toolCall
		tc.ID, tc.Type = id, "function"
		tc.Function.Name = "read_file"
		tc.Function.Arguments = fmt.Sprintf(`{"path":"pkg/%s/%s.go"}`, vocab[r.IntN(len(vocab))], vocab[r.IntN(len(vocab))])
		file := agentbody.Source(r, min(size-n, 8<<10))
		msgs = append(msgs, chatMsg{Role: "assistant", ToolCalls: []toolCall{tc}}, chatMsg{Role: "tool", ToolCallID: id, Content: text(file)})
		n += len(file)*11/10 + 160 // escaped, plus the round's fields
	}
	return msgs
}

type chatReq struct {
	Model     string    `json:"model"`
	Stream    bool      `json:"stream"`
	MaxTokens int       `json:"max_tokens"`
	Messages  []chatMsg `json:"messages"`
}

func makeWorkload(size int, stream bool, endpoint string) workload {
	if promptShape == "agent-tools" {
		w := workload{size: size, stream: stream, endpoint: endpoint}
		build := agentbody.Chat
		if endpoint == "messages" {
			build = agentbody.Messages
		}
		for i := range bodiesPerShape {
			w.bodies = append(w.bodies, build(agentbody.Spec{Size: size, Tools: agentTools, Tenant: i % tenants, Seed: uint64(1000 + i), Stream: stream, Model: "bench-model"}))
		}
		return w
	}
	sysPrompts := make([]string, tenants)
	for t := range tenants {
		r := rand.New(rand.NewPCG(uint64(size), uint64(t)))
		sysPrompts[t] = fmt.Sprintf("You are the assistant of tenant %d. ", t) + words(r, size/2)
	}
	w := workload{size: size, stream: stream, endpoint: "chat"}
	for i := range bodiesPerShape {
		r := rand.New(rand.NewPCG(uint64(size), uint64(1000+i)))
		req := chatReq{Model: "bench-model", Stream: stream, MaxTokens: 64, Messages: []chatMsg{
			{Role: "system", Content: text(sysPrompts[i%tenants])},
			{Role: "user", Content: text("")},
		}}
		b, _ := json.Marshal(req)
		if promptShape == "agent" {
			req.Messages[1].Content = text(fmt.Sprintf("Task %d: fix the handler in pkg/%s.", i, vocab[r.IntN(len(vocab))]))
			req.Messages = agentTurns(r, req.Messages, size, len(b))
		} else {
			fill := max(size-len(b), 16)
			req.Messages[1].Content = text(fmt.Sprintf("Question %d: ", i) + words(r, fill))
		}
		b, _ = json.Marshal(req)
		w.bodies = append(w.bodies, b)
	}
	return w
}

func (w workload) label() string {
	m := "json"
	if w.stream {
		m = "sse"
	}
	if w.endpoint == "messages" {
		m += "/messages"
	}
	return fmt.Sprintf("%dKiB/%s", w.size>>10, m)
}

// newClient returns a client with its own connection pool: keep-alive,
// no compression, no HTTP/2, at most maxConns connections kept idle.
func newClient(maxConns int) *http.Client {
	tr := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		MaxIdleConns:          0,
		MaxIdleConnsPerHost:   maxConns,
		IdleConnTimeout:       30 * time.Second,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
		ResponseHeaderTimeout: 60 * time.Second,
		WriteBufferSize:       64 << 10,
		ReadBufferSize:        32 << 10,
	}
	return &http.Client{Transport: tr}
}

var errBadAnswer = errors.New("bad answer")

// doOne sends one request and reads the whole answer. ttfb runs from just
// before the request is written to the first byte of the response body
// (for SSE, the first event; for JSON, the answer). It checks the status
// and that a stream ends with [DONE].
//
// Unlike the other SSE clients (internal/openai.ReadStream), it does not
// parse the stream: it reads into buf and keeps only the tail (sse.Tail),
// so that the load generator spends as little CPU per answer as it can on
// the machine it shares with the proxy it measures.
func doOne(ctx context.Context, cl *http.Client, url string, body []byte, hdr http.Header, buf []byte) (time.Duration, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header[k] = v
	}
	t0 := time.Now()
	resp, err := cl.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	var ttfb time.Duration
	var tail sse.Tail
	var end endTail // Anthropic's streams end with message_stop
	messages := strings.HasSuffix(url, endpointPaths["messages"])
	total := 0
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if total == 0 {
				ttfb = time.Since(t0)
			}
			total += n
			_, _ = tail.Write(buf[:n])
			if messages {
				end.write(buf[:n])
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, total, err
		}
	}
	if resp.StatusCode != http.StatusOK {
		return 0, total, fmt.Errorf("status %d", resp.StatusCode)
	}
	if total == 0 {
		return 0, 0, errBadAnswer
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		switch {
		case messages && !end.is(messageStop):
			return 0, total, fmt.Errorf("%w: stream did not end with message_stop", errBadAnswer)
		case !messages && !tail.EndsWithDone():
			return 0, total, fmt.Errorf("%w: stream did not end with [DONE]", errBadAnswer)
		}
	}
	return ttfb, total, nil
}

// endTail keeps the last bytes of an answer, enough to tell that an
// Anthropic stream ended with its message_stop event (sse.Tail's
// counterpart for a longer end).
type endTail struct {
	b [len(messageStop)]byte
	n int
}

func (t *endTail) write(p []byte) {
	if len(p) >= len(t.b) {
		t.n = copy(t.b[:], p[len(p)-len(t.b):])
		return
	}
	keep := min(t.n, len(t.b)-len(p))
	copy(t.b[:], t.b[t.n-keep:t.n])
	t.n = keep + copy(t.b[keep:], p)
}

func (t *endTail) is(s string) bool { return t.n == len(s) && string(t.b[:t.n]) == s }

// phaseResult is what one load phase measured.
type phaseResult struct {
	ok, errs int
	firstErr string
	skipped  int // open loop: sends skipped because maxOutstanding were in flight
	wall     time.Duration
	ttfb     []time.Duration // sorted
	bytes    int64
}

func (p *phaseResult) rps() float64 {
	if p.wall <= 0 {
		return 0
	}
	return float64(p.ok) / p.wall.Seconds()
}

// ttfbMs returns the sorted TTFBs in milliseconds.
func (p *phaseResult) ttfbMs() []float64 {
	ms := make([]float64, len(p.ttfb))
	for i, d := range p.ttfb {
		ms[i] = float64(d) / float64(time.Millisecond)
	}
	return ms
}

// pct returns the percentile q (0..1, stats.Percentile) of the TTFBs in
// ms; 0 when there are none.
func (p *phaseResult) pct(q float64) float64 {
	if len(p.ttfb) == 0 {
		return 0
	}
	return stats.Percentile(p.ttfbMs(), q)
}

type collector struct {
	mu sync.Mutex
	r  phaseResult
}

func (c *collector) add(ttfbs []time.Duration, ok, errs int, firstErr error, bytes int64) {
	c.mu.Lock()
	c.r.ttfb = append(c.r.ttfb, ttfbs...)
	c.r.ok += ok
	c.r.errs += errs
	c.r.bytes += bytes
	if firstErr != nil && c.r.firstErr == "" {
		c.r.firstErr = firstErr.Error()
	}
	c.mu.Unlock()
}

func (c *collector) result(wall time.Duration) phaseResult {
	r := c.r
	r.wall = wall
	sort.Slice(r.ttfb, func(i, j int) bool { return r.ttfb[i] < r.ttfb[j] })
	return r
}

// closedLoop runs conc workers, each sending its next request as soon as
// the last one ended, until dur has passed (dur 0: no time limit) or maxReq
// requests were sent (maxReq > 0). Requests in flight at the deadline complete and count.
func closedLoop(cl *http.Client, url string, w workload, conc int, dur time.Duration, maxReq int) phaseResult {
	url = w.at(url)
	var next atomic.Int64
	var col collector
	ctx, cancel := context.WithTimeout(context.Background(), dur+60*time.Second)
	defer cancel()
	start := time.Now()
	deadline := start.Add(dur)
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 32<<10)
			var ttfbs []time.Duration
			ok, errs := 0, 0
			var firstErr error
			var nbytes int64
			for dur == 0 || time.Now().Before(deadline) {
				i := next.Add(1) - 1
				if maxReq > 0 && i >= int64(maxReq) {
					break
				}
				t, n, err := doOne(ctx, cl, url, w.bodies[int(i)%len(w.bodies)], nil, buf)
				nbytes += int64(n)
				if err != nil {
					errs++
					if firstErr == nil {
						firstErr = err
					}
					if ctx.Err() != nil {
						break
					}
					continue
				}
				ok++
				ttfbs = append(ttfbs, t)
			}
			col.add(ttfbs, ok, errs, firstErr, nbytes)
		}()
	}
	wg.Wait()
	return col.result(time.Since(start))
}

// openLoop sends rate requests per second, evenly spaced, for dur,
// whatever the answers do (at most maxOut in flight; a send that finds
// maxOut in flight is skipped and counted). It measures latency without
// the queueing a saturated closed loop adds.
func openLoop(cl *http.Client, url string, w workload, rate int, dur time.Duration, maxOut int) phaseResult {
	url = w.at(url)
	var col collector
	ctx, cancel := context.WithTimeout(context.Background(), dur+60*time.Second)
	defer cancel()
	sem := make(chan struct{}, maxOut)
	bufs := sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	n := int(dur / interval)
	skipped := 0
	var wg sync.WaitGroup
	for i := range n {
		at := start.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
		select {
		case sem <- struct{}{}:
		default:
			skipped++
			continue
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			bp := bufs.Get().(*[]byte)
			t, nb, err := doOne(ctx, cl, url, w.bodies[i%len(w.bodies)], nil, *bp)
			bufs.Put(bp)
			if err != nil {
				col.add(nil, 0, 1, err, int64(nb))
				return
			}
			col.add([]time.Duration{t}, 1, 0, nil, int64(nb))
		}(i)
	}
	wg.Wait()
	r := col.result(time.Since(start))
	r.skipped = skipped
	return r
}

func sortDurations(d []time.Duration) {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
}

// openLoopMulti is openLoop over several targets at once: one fixed-rate
// stream of ratePerTarget*len(urls) requests/s whose request i goes to
// target i%len(urls), with the same sequence of bodies for every target.
// Every target is thus measured in the same time window, under the same
// noise, which is what a comparison of tail latencies needs on a shared
// machine.
func openLoopMulti(clients []*http.Client, urls []string, w workload, ratePerTarget int, dur time.Duration, maxOut int) []phaseResult {
	k := len(urls)
	cols := make([]collector, k)
	skipped := make([]int, k)
	ctx, cancel := context.WithTimeout(context.Background(), dur+60*time.Second)
	defer cancel()
	sem := make(chan struct{}, maxOut)
	bufs := sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
	interval := time.Second / time.Duration(ratePerTarget*k)
	start := time.Now()
	n := int(dur/interval) / k * k
	var wg sync.WaitGroup
	for i := range n {
		at := start.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
		ti := i % k
		select {
		case sem <- struct{}{}:
		default:
			skipped[ti]++
			continue
		}
		wg.Add(1)
		go func(i, ti int) {
			defer wg.Done()
			defer func() { <-sem }()
			bp := bufs.Get().(*[]byte)
			t, nb, err := doOne(ctx, clients[ti], w.at(urls[ti]), w.bodies[(i/k)%len(w.bodies)], nil, *bp)
			bufs.Put(bp)
			if err != nil {
				cols[ti].add(nil, 0, 1, err, int64(nb))
				return
			}
			cols[ti].add([]time.Duration{t}, 1, 0, nil, int64(nb))
		}(i, ti)
	}
	wg.Wait()
	wall := time.Since(start)
	out := make([]phaseResult, k)
	for i := range cols {
		out[i] = cols[i].result(wall)
		out[i].skipped = skipped[i]
	}
	return out
}
