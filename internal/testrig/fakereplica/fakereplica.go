// Package fakereplica is a purpose-built fake of an OpenAI-compatible LLM
// replica for failure-path tests: each fault it can produce is
// deterministic, chosen per request (the X-Fake-Fault header) or for the
// whole replica (SetFault), and every request it receives is recorded per
// X-Request-Id in a Tracker that several replicas may share.
//
// It speaks just enough of POST /v1/chat/completions: a JSON answer, or an
// SSE stream of chat.completion.chunk events ending with "data: [DONE]",
// with usage (including prompt_tokens_details.cached_tokens) when the
// request asks for it with stream_options.include_usage. The shapes are
// internal/openai's, which the clients of the soak and the lab read.
//
// It is one of three fake replicas, each for its own job: this one, in
// process, injects faults and records receipts for the integration tests
// and the soak; the proxy-cost bench's upstream (lab/bench/cmd/llmbench,
// upstream.go) answers from precomputed bytes in a child process so that
// it costs next to nothing beside the proxy it measures; and simreplica
// models an engine (tokenizer, paged KV cache, batching, vLLM metrics) for
// the demo and the end-to-end experiments.
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
	"syscall"
	"time"

	"github.com/llmroute/caddy-llmroute/internal/openai"
	"github.com/llmroute/caddy-llmroute/internal/sse"
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

// CutUnframed is the cut mode of a replica that sends its answer without
// HTTP framing (no Content-Length, not chunked: Connection: close) and
// ends it early by closing the connection cleanly, so that the cut shows
// only in the protocol (no [DONE], half a JSON body).
const CutUnframed = "unframed"

// Request headers that steer the fake.
const (
	HeaderRequestID  = "X-Request-Id"
	HeaderFault      = "X-Fake-Fault"
	HeaderFaultOnce  = "X-Fake-Fault-Once"  // "1": fault only the id's first receipt (in the Tracker)
	HeaderChunks     = "X-Fake-Chunks"      // number of content chunks, default 5
	HeaderCutAfter   = "X-Fake-Cut-After"   // chunks sent before a cut, default 2
	HeaderDelay      = "X-Fake-Delay"       // Go duration between chunks for "slow", default 30ms
	HeaderRetryAfter = "X-Fake-Retry-After" // Retry-After for 429/503, default "1"; "none" sends none; for 500 only when set
	HeaderStall      = "X-Fake-Stall"       // Go duration a stall lasts at most, default 30s
	HeaderCutMode    = "X-Fake-Cut-Mode"    // "rst" (default): reset the connection; "fin": close it; CutUnframed
	HeaderCutWait    = "X-Fake-Cut-Wait"    // "1": before a cut, wait for Tracker.Cut(id) (so the test knows what got through)
	// HeaderEarly "1": answer a status fault before reading the body (as a
	// rate limiter in front of an engine may), then drain the body slowly
	// (32 KiB every 5 ms) on the same connection and close it.
	HeaderEarly = "X-Fake-Early"
	// HeaderHold "1": after reading the body, hold before sending any
	// response header until Tracker.Step(id) (one step; the answer then
	// goes on as the fault says), Tracker.Cut(id) (the connection is reset
	// before any header: a transport error), the request ends or the
	// stall limit passes.
	HeaderHold = "X-Fake-Hold"
	// HeaderTotalTokens, an integer (any, negative or absurd), is the
	// total_tokens the answer's usage reports, its completion_tokens the
	// rest after the prompt: a faulty engine's usage.
	HeaderTotalTokens = "X-Fake-Total-Tokens"
)

// Outcomes recorded for each receipt.
const (
	OutcomePending   = ""          // the handler is still running
	OutcomeDone      = "done"      // answered in full ([DONE] sent for a stream)
	OutcomeStatus    = "status"    // answered with an error status (429/503/500)
	OutcomeCut       = "cut"       // the connection was cut mid-answer on purpose
	OutcomeReset     = "reset"     // the connection was reset before any response header (HeaderHold, Tracker.Cut)
	OutcomeCancelled = "cancelled" // the request's context ended before the answer was complete
	OutcomeStalled   = "stalled"   // a stall ran out its limit without being cancelled
	OutcomeBadInput  = "bad_input" // the body was not a chat request
)

// Receipt is one request a replica received.
type Receipt struct {
	Replica string    // the replica's address
	ID      string    // X-Request-Id
	At      time.Time // when the request's headers arrived (monotonic)
	Fault   string    // the fault applied
	// Authorization is the Authorization header the replica saw.
	Authorization string
	// Method, URI and Header are the request line and headers it saw.
	Method, URI string
	Header      http.Header
	// Stream and IncludeUsage are what the body asked for.
	Stream, IncludeUsage bool
	// ChunksSent counts content chunks produced (counted just before each
	// is written and flushed).
	ChunksSent int
	// SentDone is set just before "data: [DONE]" (or a whole JSON answer)
	// is written: a client that saw [DONE] must have a receipt with it.
	SentDone bool
	Outcome  string
	// Status is the status code the replica answered with (0 for none).
	Status int
	// EndedAt is when the handler returned.
	EndedAt time.Time
	// BodyLen, ContentLength and BodyErr describe the body as received.
	BodyLen       int
	ContentLength int64
	BodyErr       string
}

// Tracker records receipts per request id across replicas, holds the step
// gates of FaultStep and tracks concurrency per replica.
type Tracker struct {
	mu       sync.Mutex
	byID     map[string][]*Receipt
	total    int
	gates    map[string]chan struct{}
	cuts     map[string]chan struct{}
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
		cuts:     make(map[string]chan struct{}),
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

// ChunksSent returns the chunks sent for id's last receipt.
func (t *Tracker) ChunksSent(id string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return View{t}.ChunksSent(id)
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

// Cut makes a FaultStep request with this id, waiting for its next step,
// die instead: its connection is cut as with FaultCut.
func (t *Tracker) Cut(id string) {
	t.mu.Lock()
	c, ok := t.cuts[id]
	if !ok {
		c = make(chan struct{})
		t.cuts[id] = c
	}
	select {
	case <-c:
	default:
		close(c)
	}
	t.mu.Unlock()
}

func (t *Tracker) cutChan(id string) chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.cuts[id]
	if !ok {
		c = make(chan struct{})
		t.cuts[id] = c
	}
	return c
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

// AllEnded reports whether every receipt of id ended (true when none).
func (v View) AllEnded(id string) bool {
	for _, r := range v.t.byID[id] {
		if r.EndedAt.IsZero() {
			return false
		}
	}
	return true
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
	return StartWith(tracker, Options{})
}

// Options tune a replica's listener.
type Options struct {
	// RecvBuffer, when set, is the socket receive buffer (SO_RCVBUF) of
	// its connections: small values make a client that sends a large body
	// block until the replica reads it.
	RecvBuffer int
	// ListenAddr, when set, is the host:port to listen on instead of
	// 127.0.0.1:0 (for example 127.0.0.3:8000: replicas on distinct
	// loopback addresses with one port, as behind a DNS name).
	ListenAddr string
}

// StartWith starts a replica with options.
func StartWith(tracker *Tracker, o Options) (*Replica, error) {
	if tracker == nil {
		tracker = NewTracker()
	}
	lc := net.ListenConfig{}
	if o.RecvBuffer > 0 {
		lc.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				serr = setRecvBuffer(fd, o.RecvBuffer)
			})
			if err != nil {
				return err
			}
			return serr
		}
	}
	listen := "127.0.0.1:0"
	if o.ListenAddr != "" {
		listen = o.ListenAddr
	}
	ln, err := lc.Listen(context.Background(), "tcp", listen)
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
	arrived := time.Now()
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
	var body []byte
	var bodyErr error
	early := r.Header.Get(HeaderEarly) == "1" && (fault == Fault429 || fault == Fault503 || fault == Fault500)
	if !early {
		body, bodyErr = io.ReadAll(io.LimitReader(r.Body, 64<<20))
	}
	var req chatRequest
	jsonErr := json.Unmarshal(body, &req)
	rc := &Receipt{
		Replica: rp.addr, ID: id, At: arrived, Fault: fault,
		Authorization: r.Header.Get("Authorization"),
		Method:        r.Method, URI: r.URL.RequestURI(), Header: r.Header.Clone(),
		Stream:        req.Stream,
		IncludeUsage:  req.StreamOptions != nil && req.StreamOptions.IncludeUsage,
		BodyLen:       len(body),
		ContentLength: r.ContentLength,
	}
	if bodyErr != nil {
		rc.BodyErr = bodyErr.Error()
	}
	rp.tracker.receive(rc)
	outcome := OutcomeDone
	defer func() { rp.tracker.end(rc, outcome) }()

	if jsonErr != nil && !early {
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
		cutMode:  r.Header.Get(HeaderCutMode),
		cutWait:  r.Header.Get(HeaderCutWait) == "1",
	}
	if p.ra == "" {
		p.ra = "1"
	}
	ctx := r.Context()

	if early {
		outcome = OutcomeStatus
		rp.answerEarly(w, rc, fault, p)
		return
	}
	if r.Header.Get(HeaderHold) == "1" {
		switch rp.wait(ctx, id, FaultStep, p) {
		case waitEnd:
			outcome = OutcomeCancelled
			return
		case waitCut:
			outcome = OutcomeReset
			rp.resetBeforeHeaders(w)
			return
		}
	}
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
		ra := r.Header.Get(HeaderRetryAfter) // only when asked for
		rp.writeError(w, rc, http.StatusInternalServerError, "server_error", "fake replica failed", ra)
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

	usage := &openai.Usage{
		PromptTokens:        promptTokens,
		CompletionTokens:    p.chunks + 1,
		TotalTokens:         promptTokens + p.chunks + 1,
		PromptTokensDetails: &openai.PromptTokensDetails{CachedTokens: cached},
	}
	if v, err := strconv.ParseInt(r.Header.Get(HeaderTotalTokens), 10, 64); err == nil {
		usage.TotalTokens, usage.CompletionTokens = int(v), int(v)-promptTokens
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
	ra, cutMode      string
	cutWait          bool
}

// wait blocks before a chunk as the fault says. It returns waitGo to go
// on, waitEnd when the request ended meanwhile, waitCut when the test asked
// for a cut (Tracker.Cut).
func (rp *Replica) wait(ctx context.Context, id, fault string, p params) waitResult {
	var c, cut <-chan struct{}
	var d time.Duration
	switch fault {
	case FaultSlow:
		d = p.delay
	case FaultStep:
		c = rp.tracker.gate(id)
		cut = rp.tracker.cutChan(id)
		d = p.stall
	default:
		if ctx.Err() != nil {
			return waitEnd
		}
		return waitGo
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c:
		return waitGo
	case <-cut:
		return waitCut
	case <-t.C:
		if fault == FaultSlow {
			return waitGo
		}
		return waitEnd
	case <-ctx.Done():
		return waitEnd
	case <-rp.closed:
		return waitEnd
	}
}

type waitResult int

const (
	waitGo waitResult = iota
	waitEnd
	waitCut
)

func (rp *Replica) answerJSON(w http.ResponseWriter, r *http.Request, rc *Receipt, fault string, p params, usage *openai.Usage) string {
	if fault == FaultSlow || fault == FaultStep {
		switch rp.wait(r.Context(), rc.ID, fault, p) {
		case waitEnd:
			return OutcomeCancelled
		case waitCut:
			fault = FaultCut
		}
	}
	var sb strings.Builder
	for k := range p.chunks {
		fmt.Fprintf(&sb, "tok%d ", k)
	}
	b, _ := json.Marshal(openai.Completion{
		ID: "chatcmpl-" + rc.ID, Object: openai.CompletionObject, Created: time.Now().Unix(), Model: "fake",
		Choices: []openai.CompletionChoice{{FinishReason: "stop", Message: openai.Message{Role: "assistant", Content: sb.String()}}},
		Usage:   usage,
	})
	w.Header().Set("Content-Type", "application/json")
	if fault == FaultCut && p.cutMode == CutUnframed {
		unframed(w)
	} else {
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	}
	w.WriteHeader(http.StatusOK)
	rp.tracker.update(rc, func(rc *Receipt) { rc.Status = http.StatusOK })
	if fault == FaultCut {
		_, _ = w.Write(b[:len(b)/2])
		rp.cutWhenTold(r.Context(), w, rc.ID, p)
		return OutcomeCut
	}
	rp.tracker.update(rc, func(rc *Receipt) { rc.SentDone = true })
	if _, err := w.Write(b); err != nil {
		return OutcomeCancelled
	}
	return OutcomeDone
}

func (rp *Replica) answerStream(w http.ResponseWriter, r *http.Request, rc *Receipt, fault string, p params, usage *openai.Usage) string {
	ctx := r.Context()
	rcl := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	if fault == FaultCut && p.cutMode == CutUnframed {
		unframed(w)
	}
	w.WriteHeader(http.StatusOK)
	rp.tracker.update(rc, func(rc *Receipt) { rc.Status = http.StatusOK })
	send := func(v openai.Chunk) error {
		b, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return err
		}
		return rcl.Flush()
	}
	chunk := func(choices []openai.Choice, usage *openai.Usage) openai.Chunk {
		return openai.Chunk{ID: "chatcmpl-" + rc.ID, Object: openai.ChunkObject, Created: time.Now().Unix(), Model: "fake",
			Choices: choices, Usage: usage}
	}
	for k := range p.chunks {
		if k > 0 {
			switch rp.wait(ctx, rc.ID, fault, p) {
			case waitEnd:
				return OutcomeCancelled
			case waitCut:
				rp.cut(w, p.cutMode)
				return OutcomeCut
			}
		}
		if fault == FaultCut && k == p.cutAfter {
			rp.cutWhenTold(ctx, w, rc.ID, p)
			return OutcomeCut
		}
		// Counted before the write: a client may read the chunk before
		// this handler runs again.
		rp.tracker.update(rc, func(rc *Receipt) { rc.ChunksSent++ })
		if err := send(chunk([]openai.Choice{{Delta: openai.Delta{Content: fmt.Sprintf("tok%d ", k)}}}, nil)); err != nil {
			return OutcomeCancelled
		}
	}
	if fault == FaultCut {
		rp.cutWhenTold(ctx, w, rc.ID, p)
		return OutcomeCut
	}
	if err := send(chunk([]openai.Choice{{FinishReason: openai.Reason("stop")}}, nil)); err != nil {
		return OutcomeCancelled
	}
	if rc.IncludeUsage {
		// Choices empty, not null: the usage-only chunk.
		if err := send(chunk([]openai.Choice{}, usage)); err != nil {
			return OutcomeCancelled
		}
	}
	rp.tracker.update(rc, func(rc *Receipt) { rc.SentDone = true })
	if _, err := io.WriteString(w, sse.DoneEvent); err != nil {
		return OutcomeCancelled
	}
	if err := rcl.Flush(); err != nil {
		return OutcomeCancelled
	}
	return OutcomeDone
}

// answerEarly writes a status answer on the raw connection before the
// request body was read, then reads the body slowly and closes.
func (rp *Replica) answerEarly(w http.ResponseWriter, rc *Receipt, fault string, p params) {
	status, _ := strconv.Atoi(fault)
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	defer conn.Close()
	body := fmt.Sprintf(`{"error":{"message":"early %d","type":"rate_limit_error","param":null,"code":"fake_%d"}}`, status, status)
	ra := ""
	if p.ra != "" && p.ra != "none" {
		ra = "Retry-After: " + p.ra + "\r\n"
	}
	fmt.Fprintf(buf, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s",
		status, http.StatusText(status), len(body), ra, body)
	_ = buf.Flush()
	rp.tracker.update(rc, func(rc *Receipt) { rc.Status = status })
	chunk := make([]byte, 32<<10)
	deadline := time.Now().Add(10 * time.Second)
	_ = conn.SetReadDeadline(deadline)
	for time.Now().Before(deadline) {
		if _, err := buf.Read(chunk); err != nil {
			return
		}
		select {
		case <-time.After(5 * time.Millisecond):
		case <-rp.closed:
			return
		}
	}
}

// cutWhenTold cuts the connection, first waiting for Tracker.Cut(id) when
// the request asked for it (bounded by the stall limit).
func (rp *Replica) cutWhenTold(ctx context.Context, w http.ResponseWriter, id string, p params) {
	if p.cutWait {
		_ = http.NewResponseController(w).Flush()
		t := time.NewTimer(p.stall)
		defer t.Stop()
		select {
		case <-rp.tracker.cutChan(id):
		case <-ctx.Done():
		case <-t.C:
		case <-rp.closed:
		}
	}
	rp.cut(w, p.cutMode)
}

// resetBeforeHeaders takes over the connection before any response byte
// was written and resets it.
func (rp *Replica) resetBeforeHeaders(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// unframed has net/http send the answer without framing: with
// Transfer-Encoding identity it neither chunks nor sets a length, and
// closes the connection after the reply.
func unframed(w http.ResponseWriter) {
	w.Header().Set("Transfer-Encoding", "identity")
	w.Header().Set("Connection", "close")
}

// cut flushes what was written, takes over the connection and closes it,
// so that the peer sees the answer end without its terminating chunk.
func (rp *Replica) cut(w http.ResponseWriter, mode string) {
	rcl := http.NewResponseController(w)
	_ = rcl.Flush()
	if mode == CutUnframed {
		return // the handler returns: net/http closes the connection cleanly
	}
	conn, buf, err := rcl.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = buf.Flush()
	if tc, ok := conn.(*net.TCPConn); ok && mode != "fin" {
		// A reset discards what the peer has not received yet: let
		// what was written arrive first, then reset.
		drainSendQueue(tc, time.Second)
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
	_ = json.NewEncoder(w).Encode(openai.NewError(msg, typ, "fake_"+strconv.Itoa(status)))
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
