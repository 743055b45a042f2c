// Package fakereplica is a purpose-built fake of an OpenAI-compatible LLM
// replica for failure-path tests: each fault it can produce is
// deterministic, chosen per request (the X-Fake-Fault header) or for the
// whole replica (SetFault), and every request it receives is recorded per
// X-Request-Id in a Tracker that several replicas may share.
//
// It speaks just enough of POST /v1/chat/completions: a JSON answer, or an
// SSE stream of chat.completion.chunk events ending with "data: [DONE]",
// with usage (including prompt_tokens_details.cached_tokens) when the
// request asks for it with stream_options.include_usage.
package fakereplica

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Faults a replica can be asked to produce.
const (
	// FaultOK answers normally.
	FaultOK = "ok"
	// Fault429 answers 429 with Retry-After and an OpenAI error body.
	Fault429 = "429"
	// Fault503 answers 503 with Retry-After and an OpenAI error body.
	Fault503 = "503"
	// Fault500 answers 500 with an OpenAI error body.
	Fault500 = "500"
	// FaultStall never sends response headers: it waits until the request
	// is cancelled, the replica closes, or the stall limit passes.
	FaultStall = "stall"
	// FaultCut sends the headers and CutAfter chunks (or half of a JSON
	// body), then hijacks the connection and closes it: the replica dies
	// mid-stream.
	FaultCut = "cut"
	// FaultSlow waits Delay before each chunk after the first (or before a
	// JSON answer).
	FaultSlow = "slow"
	// FaultStep waits for Tracker.Step(id) before each chunk after the
	// first, so that a test decides when the next chunk is produced.
	FaultStep = "step"
)

// Request headers that steer the fake.
const (
	HeaderRequestID  = "X-Request-Id"
	HeaderFault      = "X-Fake-Fault"
	HeaderFaultOnce  = "X-Fake-Fault-Once"  // "1": fault only the id's first receipt (in the Tracker)
	HeaderChunks     = "X-Fake-Chunks"      // number of content chunks, default 5
	HeaderCutAfter   = "X-Fake-Cut-After"   // chunks sent before a cut, default 2
	HeaderDelay      = "X-Fake-Delay"       // Go duration between chunks for "slow", default 30ms
	HeaderRetryAfter = "X-Fake-Retry-After" // Retry-After for 429/503, default "1"; "none" sends none
	HeaderStall      = "X-Fake-Stall"       // Go duration a stall lasts at most, default 30s
)

// Outcomes recorded for each receipt.
const (
	OutcomePending   = ""          // the handler is still running
	OutcomeDone      = "done"      // answered in full ([DONE] sent for a stream)
	OutcomeStatus    = "status"    // answered with an error status (429/503/500)
	OutcomeCut       = "cut"       // the connection was cut mid-answer on purpose
	OutcomeCancelled = "cancelled" // the request's context ended before the answer was complete
	OutcomeStalled   = "stalled"   // a stall ran out its limit without being cancelled
	OutcomeBadInput  = "bad_input" // the body was not a chat request
)

// Receipt is one request a replica received.
type Receipt struct {
	Replica string    // the replica's address
	ID      string    // X-Request-Id
	At      time.Time // when the request arrived (monotonic)
	Fault   string    // the fault applied
	// Authorization is the Authorization header the replica saw.
	Authorization string
	// Stream and IncludeUsage are what the body asked for.
	Stream, IncludeUsage bool
	// ChunksSent counts content chunks written and flushed.
	ChunksSent int
	// SentDone is set just before "data: [DONE]" (or a whole JSON answer)
	// is written: a client that saw [DONE] must have a receipt with it.
	SentDone bool
	Outcome  string
	// Status is the status code the replica answered with (0 for none).
	Status int
	// EndedAt is when the handler returned.
	EndedAt time.Time
}

// Tracker records receipts per request id across replicas, holds the step
// gates of FaultStep and tracks concurrency per replica.
type Tracker struct {
	mu       sync.Mutex
	byID     map[string][]*Receipt
	total    int
	gates    map[string]chan struct{}
	changed  chan struct{}
	maxConc  map[string]int
	curConc  map[string]int
	received map[string]int
}

// NewTracker returns an empty tracker.
func NewTracker() *Tracker {
	return &Tracker{
		byID:     make(map[string][]*Receipt),
		gates:    make(map[string]chan struct{}),
		changed:  make(chan struct{}),
		maxConc:  make(map[string]int),
		curConc:  make(map[string]int),
		received: make(map[string]int),
	}
}

// notifyLocked wakes every WaitFor.
func (t *Tracker) notifyLocked() {
	close(t.changed)
	t.changed = make(chan struct{})
}

func (t *Tracker) receive(rc *Receipt) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.byID[rc.ID] = append(t.byID[rc.ID], rc)
	t.total++
	t.received[rc.Replica]++
	t.curConc[rc.Replica]++
	if c := t.curConc[rc.Replica]; c > t.maxConc[rc.Replica] {
		t.maxConc[rc.Replica] = c
	}
	t.notifyLocked()
}

// update applies f to rc under the tracker's lock.
func (t *Tracker) update(rc *Receipt, f func(*Receipt)) {
	t.mu.Lock()
	f(rc)
	t.notifyLocked()
	t.mu.Unlock()
}

func (t *Tracker) end(rc *Receipt, outcome string) {
	t.mu.Lock()
	if rc.Outcome == OutcomePending {
		rc.Outcome = outcome
	}
	rc.EndedAt = time.Now()
	t.curConc[rc.Replica]--
	t.notifyLocked()
	t.mu.Unlock()
}

func (t *Tracker) countID(id string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byID[id])
}

// Receipts returns copies of the receipts of id, in arrival order.
func (t *Tracker) Receipts(id string) []Receipt {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Receipt, 0, len(t.byID[id]))
	for _, r := range t.byID[id] {
		out = append(out, *r)
	}
	return out
}

// IDs returns every request id seen.
func (t *Tracker) IDs() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.byID))
	for id := range t.byID {
		out = append(out, id)
	}
	return out
}

// Total returns the number of requests received by all replicas.
func (t *Tracker) Total() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total
}

// Received returns the number of requests the replica at addr received.
func (t *Tracker) Received(addr string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.received[addr]
}

// MaxConcurrent returns the most requests the replica at addr handled at
// once.
func (t *Tracker) MaxConcurrent(addr string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.maxConc[addr]
}

// Concurrent returns the requests the replica at addr is handling now.
func (t *Tracker) Concurrent(addr string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.curConc[addr]
}

// Step lets a FaultStep request with this id produce its next chunk. Steps
// given ahead of time are remembered (up to 1024).
func (t *Tracker) Step(id string) {
	select {
	case t.gate(id) <- struct{}{}:
	default:
	}
}

// StepAll lets a FaultStep request with this id produce n more chunks.
func (t *Tracker) StepAll(id string, n int) {
	for range n {
		t.Step(id)
	}
}

func (t *Tracker) gate(id string) chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	g, ok := t.gates[id]
	if !ok {
		g = make(chan struct{}, 1024)
		t.gates[id] = g
	}
	return g
}

// WaitFor waits until cond (called under the tracker's lock with a view of
// it) holds, or timeout passes. It reports whether cond held.
func (t *Tracker) WaitFor(timeout time.Duration, cond func(v View) bool) bool {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		t.mu.Lock()
		ok := cond(View{t})
		ch := t.changed
		t.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-timer.C:
			return false
		}
	}
}

// WaitEnded waits until id has at least one receipt and all of its
// receipts ended; it returns them.
func (t *Tracker) WaitEnded(id string, timeout time.Duration) ([]Receipt, bool) {
	ok := t.WaitFor(timeout, func(v View) bool {
		rs := v.t.byID[id]
		if len(rs) == 0 {
			return false
		}
		for _, r := range rs {
			if r.EndedAt.IsZero() {
				return false
			}
		}
		return true
	})
	return t.Receipts(id), ok
}

// WaitReceived waits until id has been received n times in all.
func (t *Tracker) WaitReceived(id string, n int, timeout time.Duration) bool {
	return t.WaitFor(timeout, func(v View) bool { return len(v.t.byID[id]) >= n })
}

// View is the tracker as WaitFor conditions see it (under its lock).
type View struct{ t *Tracker }

// Count returns how many times id was received.
func (v View) Count(id string) int { return len(v.t.byID[id]) }

// ChunksSent returns the chunks sent for id's last receipt.
func (v View) ChunksSent(id string) int {
	rs := v.t.byID[id]
	if len(rs) == 0 {
		return 0
	}
	return rs[len(rs)-1].ChunksSent
}

// Concurrent returns the requests the replica at addr is handling now.
func (v View) Concurrent(addr string) int { return v.t.curConc[addr] }

// Replica is one fake replica: an HTTP server on a loopback port.
type Replica struct {
	tracker *Tracker
	ln      net.Listener
	srv     *http.Server
	addr    string
	fault   atomic.Pointer[string]
	closed  chan struct{}
	once    sync.Once

	histMu  sync.Mutex
	history []string // recent prompts, for cached_tokens
}

// Start starts a replica on 127.0.0.1 on a free port, recording into
// tracker (a new one when nil).
func Start(tracker *Tracker) (*Replica, error) {
	if tracker == nil {
		tracker = NewTracker()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	rp := &Replica{tracker: tracker, ln: ln, addr: ln.Addr().String(), closed: make(chan struct{})}
	rp.srv = &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = rp.srv.Serve(ln) }()
	return rp, nil
}

// Addr returns the replica's host:port.
func (rp *Replica) Addr() string { return rp.addr }

// Tracker returns the replica's tracker.
func (rp *Replica) Tracker() *Tracker { return rp.tracker }

// SetFault makes every request get fault, whatever its header says; ""
// returns to per-request faults.
func (rp *Replica) SetFault(fault string) {
	if fault == "" {
		rp.fault.Store(nil)
		return
	}
	rp.fault.Store(&fault)
}

// CloseIdle closes the replica's idle keep-alive connections.
func (rp *Replica) CloseIdle() {
	rp.srv.SetKeepAlivesEnabled(false)
	rp.srv.SetKeepAlivesEnabled(true)
}

// Close stops the replica: stalled and stepping handlers end at once.
func (rp *Replica) Close() {
	rp.once.Do(func() {
		close(rp.closed)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := rp.srv.Shutdown(ctx); err != nil {
			_ = rp.srv.Close()
		}
	})
}

// chatRequest is the part of a chat completion request the fake reads.
type chatRequest struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role    string `json:"role"`
		Content any    `json:"content"`
	} `json:"messages"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

func (rp *Replica) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		// Health and metrics probes: answer, record nothing.
		w.WriteHeader(http.StatusOK)
		return
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	id := r.Header.Get(HeaderRequestID)
	fault := r.Header.Get(HeaderFault)
	if fault == "" {
		fault = FaultOK
	}
	if r.Header.Get(HeaderFaultOnce) == "1" && rp.tracker.countID(id) > 0 {
		fault = FaultOK
	}
	if f := rp.fault.Load(); f != nil {
		fault = *f
	}
	var req chatRequest
	jsonErr := json.Unmarshal(body, &req)
	rc := &Receipt{
		Replica: rp.addr, ID: id, At: time.Now(), Fault: fault,
		Authorization: r.Header.Get("Authorization"),
		Stream:        req.Stream,
		IncludeUsage:  req.StreamOptions != nil && req.StreamOptions.IncludeUsage,
	}
	rp.tracker.receive(rc)
	outcome := OutcomeDone
	defer func() { rp.tracker.end(rc, outcome) }()

	if jsonErr != nil {
		outcome = OutcomeBadInput
		rp.writeError(w, rc, http.StatusBadRequest, "invalid_request_error", "bad body", "")
		return
	}
	prompt := promptText(req)
	promptTokens := max(1, len(prompt)/4)
	cached := rp.cachedTokens(prompt)
	p := params{
		chunks:   headerInt(r, HeaderChunks, 5),
		cutAfter: headerInt(r, HeaderCutAfter, 2),
		delay:    headerDuration(r, HeaderDelay, 30*time.Millisecond),
		stall:    headerDuration(r, HeaderStall, 30*time.Second),
		ra:       r.Header.Get(HeaderRetryAfter),
	}
	if p.ra == "" {
		p.ra = "1"
	}
	ctx := r.Context()

	switch fault {
	case Fault429:
		outcome = OutcomeStatus
		rp.writeError(w, rc, http.StatusTooManyRequests, "rate_limit_error", "fake replica is rate limiting", p.ra)
		return
	case Fault503:
		outcome = OutcomeStatus
		rp.writeError(w, rc, http.StatusServiceUnavailable, "server_error", "fake replica is unavailable", p.ra)
		return
	case Fault500:
		outcome = OutcomeStatus
		rp.writeError(w, rc, http.StatusInternalServerError, "server_error", "fake replica failed", "")
		return
	case FaultStall:
		t := time.NewTimer(p.stall)
		defer t.Stop()
		select {
		case <-ctx.Done():
			outcome = OutcomeCancelled
		case <-rp.closed:
			outcome = OutcomeCancelled
		case <-t.C:
			outcome = OutcomeStalled
		}
		return
	}

	usage := map[string]any{
		"prompt_tokens":         promptTokens,
		"completion_tokens":     p.chunks + 1,
		"total_tokens":          promptTokens + p.chunks + 1,
		"prompt_tokens_details": map[string]any{"cached_tokens": cached},
	}
	if !req.Stream {
		outcome = rp.answerJSON(w, r, rc, fault, p, usage)
		return
	}
	outcome = rp.answerStream(w, r, rc, fault, p, usage)
}

type params struct {
	chunks, cutAfter int
	delay, stall     time.Duration
	ra               string
}

// wait blocks before a chunk as the fault says; it returns false when the
// request ended meanwhile.
func (rp *Replica) wait(ctx context.Context, id, fault string, p params) bool {
	var c <-chan struct{}
	var d time.Duration
	switch fault {
	case FaultSlow:
		d = p.delay
	case FaultStep:
		c = rp.tracker.gate(id)
		d = p.stall
	default:
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c:
		return true
	case <-t.C:
		return fault == FaultSlow
	case <-ctx.Done():
		return false
	case <-rp.closed:
		return false
	}
}

func (rp *Replica) answerJSON(w http.ResponseWriter, r *http.Request, rc *Receipt, fault string, p params, usage map[string]any) string {
	if (fault == FaultSlow || fault == FaultStep) && !rp.wait(r.Context(), rc.ID, fault, p) {
		return OutcomeCancelled
	}
	var sb strings.Builder
	for k := range p.chunks {
		fmt.Fprintf(&sb, "tok%d ", k)
	}
	b, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-" + rc.ID, "object": "chat.completion", "created": time.Now().Unix(), "model": "fake",
		"choices": []any{map[string]any{
			"index": 0, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": sb.String()},
		}},
		"usage": usage,
	})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	rp.tracker.update(rc, func(rc *Receipt) { rc.Status = http.StatusOK })
	if fault == FaultCut {
		_, _ = w.Write(b[:len(b)/2])
		rp.cut(w)
		return OutcomeCut
	}
	rp.tracker.update(rc, func(rc *Receipt) { rc.SentDone = true })
	if _, err := w.Write(b); err != nil {
		return OutcomeCancelled
	}
	return OutcomeDone
}

func (rp *Replica) answerStream(w http.ResponseWriter, r *http.Request, rc *Receipt, fault string, p params, usage map[string]any) string {
	ctx := r.Context()
	rcl := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rp.tracker.update(rc, func(rc *Receipt) { rc.Status = http.StatusOK })
	send := func(v any) error {
		b, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return err
		}
		return rcl.Flush()
	}
	chunk := func(content string, finish any) map[string]any {
		return map[string]any{
			"id": "chatcmpl-" + rc.ID, "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": "fake",
			"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": content}, "finish_reason": finish}},
		}
	}
	for k := range p.chunks {
		if k > 0 && !rp.wait(ctx, rc.ID, fault, p) {
			return OutcomeCancelled
		}
		if fault == FaultCut && k == p.cutAfter {
			rp.cut(w)
			return OutcomeCut
		}
		if err := send(chunk(fmt.Sprintf("tok%d ", k), nil)); err != nil {
			return OutcomeCancelled
		}
		rp.tracker.update(rc, func(rc *Receipt) { rc.ChunksSent++ })
	}
	if fault == FaultCut {
		rp.cut(w)
		return OutcomeCut
	}
	if err := send(chunk("", "stop")); err != nil {
		return OutcomeCancelled
	}
	if rc.IncludeUsage {
		u := map[string]any{
			"id": "chatcmpl-" + rc.ID, "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": "fake",
			"choices": []any{}, "usage": usage,
		}
		if err := send(u); err != nil {
			return OutcomeCancelled
		}
	}
	rp.tracker.update(rc, func(rc *Receipt) { rc.SentDone = true })
	if _, err := io.WriteString(w, "data: [DONE]\n\n"); err != nil {
		return OutcomeCancelled
	}
	if err := rcl.Flush(); err != nil {
		return OutcomeCancelled
	}
	return OutcomeDone
}

// cut flushes what was written, takes over the connection and closes it,
// so that the peer sees the answer end without its terminating chunk.
func (rp *Replica) cut(w http.ResponseWriter) {
	rcl := http.NewResponseController(w)
	_ = rcl.Flush()
	conn, buf, err := rcl.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = buf.Flush()
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

func (rp *Replica) writeError(w http.ResponseWriter, rc *Receipt, status int, typ, msg, retryAfter string) {
	if retryAfter != "" && retryAfter != "none" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	rp.tracker.update(rc, func(rc *Receipt) { rc.Status = status })
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"message": msg, "type": typ, "param": nil, "code": "fake_" + strconv.Itoa(status),
	}})
}

// cachedTokens is a rough prefix cache: the longest common prefix with a
// recent prompt on this replica, in 4-byte tokens, whole 16-token blocks.
func (rp *Replica) cachedTokens(prompt string) int {
	rp.histMu.Lock()
	defer rp.histMu.Unlock()
	best := 0
	for _, h := range rp.history {
		n := 0
		for n < len(h) && n < len(prompt) && h[n] == prompt[n] {
			n++
		}
		best = max(best, n)
	}
	rp.history = append(rp.history, prompt)
	if len(rp.history) > 32 {
		rp.history = rp.history[1:]
	}
	return best / 4 / 16 * 16
}

func promptText(req chatRequest) string {
	var sb strings.Builder
	for _, m := range req.Messages {
		sb.WriteString(m.Role)
		sb.WriteByte(':')
		switch c := m.Content.(type) {
		case string:
			sb.WriteString(c)
		default:
			b, _ := json.Marshal(c)
			sb.Write(b)
		}
		sb.WriteByte('\n')
	}
	return sb.String()
}

func headerInt(r *http.Request, name string, def int) int {
	if v := r.Header.Get(name); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			return n
		}
	}
	return def
}

func headerDuration(r *http.Request, name string, def time.Duration) time.Duration {
	if v := r.Header.Get(name); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d >= 0 {
			return d
		}
	}
	return def
}
