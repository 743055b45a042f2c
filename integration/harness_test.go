// Package integration drives the real caddy binary (Caddy v2.11.9 with
// llmroute) against purpose-built fake replicas, one failure at a time,
// and checks after every case what the client saw, that no reservation is
// left behind, that nothing was sent to a replica again after the client
// got its first byte, and that a cut stream never looks complete.
package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/caddymodule/stateapi"
	"github.com/llmroute/caddy-llmroute/internal/openai"
	"github.com/llmroute/caddy-llmroute/internal/sse"
	"github.com/llmroute/caddy-llmroute/internal/testrig/caddyproc"
	"github.com/llmroute/caddy-llmroute/internal/testrig/fakereplica"
	"github.com/llmroute/caddy-llmroute/internal/testrig/netx"
)

// caddyBin is the caddy binary under test: $LLMROUTE_CADDY, or the
// repository's ./caddy (built with ./xcaddy.sh build when missing).
var caddyBin string

// TestMain finds (or builds) the caddy binary every case runs.
func TestMain(m *testing.M) {
	flag.Parse()
	bin, err := findCaddy()
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration: no caddy binary:", err)
		os.Exit(1)
	}
	caddyBin = bin
	os.Exit(m.Run())
}

func findCaddy() (string, error) {
	root, err := filepath.Abs("..")
	if err != nil {
		return "", err
	}
	if b := os.Getenv("LLMROUTE_CADDY"); b != "" {
		// Relative to the repository root, like ./caddy.
		if !filepath.IsAbs(b) {
			b = filepath.Join(root, b)
		}
		if _, err := os.Stat(b); err != nil {
			return "", err
		}
		return b, nil
	}
	bin := filepath.Join(root, "caddy")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	fmt.Fprintln(os.Stderr, "integration: ./caddy is missing; running ./xcaddy.sh build (a few minutes)")
	cmd := exec.Command("./xcaddy.sh", "build")
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("./xcaddy.sh build: %w", err)
	}
	return bin, nil
}

const (
	apiKey     = "sk-test-integration"
	replicaHdr = "X-LLMRoute-Replica"
	// idleWait bounds how long a case waits for its reservations to go.
	idleWait = 5 * time.Second
)

var idSeq atomic.Int64

// newID returns a request id unique in this test binary.
func newID(t *testing.T) string {
	return fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "_"), idSeq.Add(1))
}

// env is one case's world: fake replicas sharing a tracker, one caddy
// process in front of them, and what the client saw per request id.
type env struct {
	t       *testing.T
	tracker *fakereplica.Tracker
	reps    []*fakereplica.Replica
	cfg     caddyproc.SiteConfig
	caddy   *caddyproc.Caddy
	url     string
	client  *http.Client

	mu      sync.Mutex
	results map[string]*result
}

// baseConfig is the config most cases start from: round_robin (so that
// which replica goes first is predictable), caps small enough to reach.
func baseConfig() caddyproc.SiteConfig {
	return caddyproc.SiteConfig{
		APIKey:                apiKey,
		MaxBodyBytes:          "64KiB",
		ReplicaHdr:            replicaHdr,
		Strategy:              "round_robin",
		MaxInFlight:           4,
		QueueSize:             16,
		QueueTimeout:          5 * time.Second,
		CooldownBase:          time.Second,
		CooldownMax:           10 * time.Second,
		Retries:               2,
		DialTimeout:           time.Second,
		ResponseHeaderTimeout: 5 * time.Second,
	}
}

// newEnv starts n fake replicas (the i-th with opts[i], if given) plus
// extra upstream addresses (for example a closed port), and caddy with cfg
// (Upstreams, AdminAddr and ListenAddr are filled in). Everything stops
// when the test ends; the after-case checks run first.
func newEnv(t *testing.T, n int, extra []string, cfg caddyproc.SiteConfig, opts ...fakereplica.Options) *env {
	t.Helper()
	e := &env{t: t, tracker: fakereplica.NewTracker(), results: map[string]*result{}}
	for i := range n {
		var o fakereplica.Options
		if i < len(opts) {
			o = opts[i]
		}
		rp, err := fakereplica.StartWith(e.tracker, o)
		require.NoError(t, err)
		t.Cleanup(rp.Close)
		e.reps = append(e.reps, rp)
		cfg.Upstreams = append(cfg.Upstreams, rp.Addr())
	}
	cfg.Upstreams = append(cfg.Upstreams, extra...)
	e.start(cfg)
	// Registered last, so it runs first: the after-case checks.
	t.Cleanup(e.afterCase)
	return e
}

func (e *env) rep(i int) *fakereplica.Replica { return e.reps[i] }

// start runs caddy with cfg on fresh loopback addresses (filled into
// e.cfg), stopped when the test ends with its log tail on failure, and
// sets e.url and a client for its site.
func (e *env) start(cfg caddyproc.SiteConfig) {
	t := e.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var c *caddyproc.Caddy
	var err error
	// Fresh addresses again when another process took the listen address
	// between FreeAddr and caddy's bind (at most three tries).
	for try := 0; try < 3; try++ {
		cfg.AdminAddr, err = netx.FreeAddr()
		require.NoError(t, err)
		cfg.ListenAddr, err = netx.FreeAddr()
		require.NoError(t, err)
		c, err = caddyproc.StartCaddy(ctx, caddyBin, t.TempDir(), cfg.Caddyfile(), cfg.AdminAddr, cfg.ListenAddr)
		if !errors.Is(err, caddyproc.ErrListenTaken) {
			break
		}
		t.Logf("start %d: %v", try+1, err)
	}
	require.NoError(t, err)
	e.cfg = cfg
	e.caddy = c
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			t.Logf("caddy log tail:\n%s", c.LogTail(6000))
		}
	})
	e.url = "http://" + cfg.ListenAddr
	tr := &http.Transport{Proxy: nil, DisableCompression: true, MaxIdleConnsPerHost: 512}
	e.client = &http.Client{Transport: tr, Timeout: 60 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
}

// freshConns drops the client's idle keep-alive connections. After a
// reload the old server closes its idle connections; a request sent on one
// at that moment fails with EOF or a reset (HTTP/1.1's keep-alive race, as
// with any server that closes idle connections), which is not what a case
// is about.
func (e *env) freshConns() {
	tr := &http.Transport{Proxy: nil, DisableCompression: true, MaxIdleConnsPerHost: 512}
	e.t.Cleanup(tr.CloseIdleConnections)
	e.mu.Lock()
	old := e.client
	e.client = &http.Client{Transport: tr, Timeout: 60 * time.Second}
	e.mu.Unlock()
	old.Transport.(*http.Transport).CloseIdleConnections()
}

// httpClient returns the client to send requests with.
func (e *env) httpClient() *http.Client {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.client
}

// result is what the client saw of one request.
type result struct {
	ID     string
	Status int
	Header http.Header
	// FirstByte is when the response headers reached the client.
	FirstByte time.Time
	Body      []byte
	// Events are the SSE data payloads, in order.
	Events  []string
	SawDone bool
	// ReadErr ended the body read; nil means a clean end.
	ReadErr error
	// Err is set when no response arrived at all.
	Err error
	// ClientGone marks a request the client itself abandoned.
	ClientGone bool
}

func (r *result) record(e *env) {
	e.mu.Lock()
	e.results[r.ID] = r
	e.mu.Unlock()
}

// chatBody builds a chat completion request.
func chatBody(stream, includeUsage bool, prompt string) string {
	m := map[string]any{
		"model": "test-model",
		"messages": []map[string]string{
			{"role": "system", "content": "You are a terse assistant used by the llmroute integration tests."},
			{"role": "user", "content": prompt},
		},
		"stream": stream,
	}
	if includeUsage {
		m["stream_options"] = map[string]bool{"include_usage": true}
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// newRequest builds an authenticated POST to /v1/chat/completions.
func (e *env) newRequest(ctx context.Context, id, body string, hdr map[string]string) *http.Request {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(e.t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set(fakereplica.HeaderRequestID, id)
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	return req
}

// do sends one request and reads its whole answer.
func (e *env) do(id, body string, hdr map[string]string) *result {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return e.doReq(e.newRequest(ctx, id, body, hdr))
}

// doReq sends req and reads its whole answer.
func (e *env) doReq(req *http.Request) *result {
	id := req.Header.Get(fakereplica.HeaderRequestID)
	res := &result{ID: id}
	defer res.record(e)
	resp, err := e.httpClient().Do(req)
	if err != nil {
		res.Err = err
		return res
	}
	res.FirstByte = time.Now()
	defer resp.Body.Close()
	res.Status, res.Header = resp.StatusCode, resp.Header
	sr := newSSE(resp.Body)
	for {
		ev, err := sr.next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				res.ReadErr = err
			}
			break
		}
		res.addEvent(ev)
	}
	res.Body = sr.raw.Bytes()
	return res
}

func (r *result) addEvent(ev string) {
	if ev == "" {
		return
	}
	r.Events = append(r.Events, ev)
	if ev == "[DONE]" {
		r.SawDone = true
	}
}

// stream is a streamed answer read event by event.
type stream struct {
	e      *env
	res    *result
	resp   *http.Response
	sr     *sseReader
	cancel context.CancelFunc
	done   bool // finished or abandoned
}

// open sends a request and returns once the response headers arrived.
func (e *env) open(id, body string, hdr map[string]string) *stream {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	req := e.newRequest(ctx, id, body, hdr)
	res := &result{ID: id}
	resp, err := e.httpClient().Do(req)
	if err != nil {
		cancel()
		res.Err = err
		res.record(e)
		require.NoError(e.t, err)
	}
	res.FirstByte = time.Now()
	res.Status, res.Header = resp.StatusCode, resp.Header
	return &stream{e: e, res: res, resp: resp, sr: newSSE(resp.Body), cancel: cancel}
}

// next reads the next SSE event; an error ends the stream.
func (s *stream) next() (string, error) {
	ev, err := s.sr.next()
	if err == nil {
		s.res.addEvent(ev)
	}
	return ev, err
}

// finish reads the rest and records the result; later calls return it.
func (s *stream) finish() *result {
	if s.done {
		return s.res
	}
	s.done = true
	for {
		ev, err := s.sr.next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				s.res.ReadErr = err
			}
			break
		}
		s.res.addEvent(ev)
	}
	s.resp.Body.Close()
	s.cancel()
	s.res.Body = s.sr.raw.Bytes()
	s.res.record(s.e)
	return s.res
}

// abandon makes the client go away mid-answer.
func (s *stream) abandon() *result {
	if s.done {
		return s.res
	}
	s.done = true
	s.cancel()
	s.resp.Body.Close()
	s.res.ClientGone = true
	s.res.ReadErr = context.Canceled
	s.res.record(s.e)
	return s.res
}

// sseReader splits a body into SSE data payloads (internal/sse) and keeps
// every byte read in raw.
type sseReader struct {
	r   *sse.Reader
	raw bytes.Buffer
}

func newSSE(body io.Reader) *sseReader {
	s := &sseReader{}
	s.r = sse.NewReader(io.TeeReader(body, &s.raw))
	return s
}

// next returns the payload of the next "data:" line. A body that is not
// SSE comes back whole in raw, with io.EOF at its end: a last line without
// its newline is fine for JSON and a sign of a cut for SSE, which the
// caller judges from ReadErr and [DONE].
func (s *sseReader) next() (string, error) {
	p, err := s.r.Next()
	if errors.Is(err, sse.ErrPartialLine) {
		return "", io.EOF
	}
	if err != nil {
		return "", err
	}
	return string(p), nil
}

// requireAPIError checks that res is an OpenAI-style JSON error with
// status (and code, when not empty), and returns the parsed body.
func requireAPIError(t *testing.T, res *result, status int, code string) openai.ErrorBody {
	t.Helper()
	require.NoError(t, res.Err)
	require.Equal(t, status, res.Status, "body: %s", res.Body)
	assert.Contains(t, res.Header.Get("Content-Type"), "application/json")
	var b openai.ErrorBody
	require.NoError(t, json.Unmarshal(res.Body, &b), "body: %s", res.Body)
	require.NotNil(t, b.Error, "body: %s", res.Body)
	assert.NotEmpty(t, b.Error.Message)
	assert.NotEmpty(t, b.Error.Type)
	assert.NotNil(t, b.Error.Param, "param must be present (null allowed): %s", res.Body)
	assert.NotNil(t, b.Error.Code, "code must be present: %s", res.Body)
	var raw map[string]map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(res.Body, &raw))
	for _, k := range []string{"message", "type", "param", "code"} {
		assert.Contains(t, raw["error"], k, "error.%s missing: %s", k, res.Body)
	}
	if code != "" {
		assert.Equal(t, strconv.Quote(code), string(b.Error.Code), "body: %s", res.Body)
	}
	return b
}

// retryAfter returns the Retry-After header in seconds (-1 if missing or
// not a number).
func retryAfter(res *result) int {
	v := res.Header.Get("Retry-After")
	n, err := strconv.Atoi(v)
	if err != nil {
		return -1
	}
	return n
}

// requireStreamComplete checks a whole, cleanly ended SSE answer.
func requireStreamComplete(t *testing.T, res *result) {
	t.Helper()
	require.NoError(t, res.Err)
	require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
	assert.Contains(t, res.Header.Get("Content-Type"), "text/event-stream")
	require.NoError(t, res.ReadErr)
	require.NotEmpty(t, res.Events)
	assert.Equal(t, "[DONE]", res.Events[len(res.Events)-1], "stream must end with data: [DONE]")
}

// requireStreamBroken checks that the client saw the stream break: an
// error instead of a clean end, and no [DONE].
func requireStreamBroken(t *testing.T, res *result) {
	t.Helper()
	require.NoError(t, res.Err)
	assert.Error(t, res.ReadErr, "a cut stream must not end cleanly for the client")
	assert.False(t, res.SawDone, "a cut stream must not show [DONE]")
}

// state reads the router state.
func (e *env) state() stateapi.State {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := e.caddy.State(ctx)
	require.NoError(e.t, err)
	return st
}

// waitState polls the router state until cond holds (bounded).
func (e *env) waitState(timeout time.Duration, what string, cond func(stateapi.State) bool) stateapi.State {
	ctx, cancel := context.WithTimeout(context.Background(), timeout+5*time.Second)
	defer cancel()
	st, err := e.caddy.WaitState(ctx, timeout, cond)
	require.NoError(e.t, err, "waiting for %s; last state %+v", what, st)
	return st
}

// replicaState returns addr's router state.
func (e *env) replicaState(addr string) stateapi.Replica {
	st := e.state()
	rs, ok := st.Replica(addr)
	require.True(e.t, ok, "replica %s not in state %+v", addr, st)
	return rs
}

// afterCase runs the checks every case must pass.
func (e *env) afterCase() {
	t := e.t
	if e.caddy == nil || e.caddy.Exited() {
		t.Errorf("caddy exited during the test")
		return
	}
	// Zero reservations left, nothing queued.
	ctx, cancel := context.WithTimeout(context.Background(), idleWait+5*time.Second)
	defer cancel()
	st, err := e.caddy.WaitIdle(ctx, idleWait)
	if assert.NoError(t, err, "reservations left after the case: %+v", st) {
		assert.Zero(t, st.TotalInFlight)
		assert.Zero(t, st.Queued)
		for _, r := range st.Replicas {
			assert.Zero(t, r.InFlight, "replica %s in_flight", r.Addr)
		}
	}
	e.mu.Lock()
	results := make([]*result, 0, len(e.results))
	for _, r := range e.results {
		results = append(results, r)
	}
	e.mu.Unlock()
	for _, res := range results {
		e.checkDelivery(res)
	}
}

// checkDelivery checks one request against what the replicas recorded.
func (e *env) checkDelivery(res *result) {
	t := e.t
	// Let handlers that are still unwinding (a cancelled stream) finish.
	e.tracker.WaitFor(2*time.Second, func(v fakereplica.View) bool { return v.AllEnded(res.ID) })
	receipts := e.tracker.Receipts(res.ID)
	perReplica := map[string]int{}
	for _, rc := range receipts {
		perReplica[rc.Replica]++
		if rc.BodyErr != "" {
			assert.Fail(t, "truncated request body", "request %s reached %s with %d of %d body bytes (%s)", res.ID, rc.Replica, rc.BodyLen, rc.ContentLength, rc.BodyErr)
			continue // a broken send, not a resend: reported as such only
		}
		if !res.FirstByte.IsZero() {
			assert.False(t, rc.At.After(res.FirstByte),
				"request %s reached %s %v after its first byte reached the client", res.ID, rc.Replica, rc.At.Sub(res.FirstByte))
		}
	}
	for addr, n := range perReplica {
		assert.LessOrEqual(t, n, 1, "request %s sent %d times to %s (retries go to untried replicas only)", res.ID, n, addr)
	}
	if res.SawDone {
		sent := false
		for _, rc := range receipts {
			sent = sent || rc.SentDone
		}
		assert.True(t, sent, "request %s: the client saw [DONE] that no replica sent", res.ID)
	}
	// A cut matters when no other attempt sent a whole answer (a reset may
	// beat the headers, and then Caddy rightly retries elsewhere).
	anyDone := false
	for _, rc := range receipts {
		anyDone = anyDone || rc.SentDone
	}
	for _, rc := range receipts {
		if rc.Outcome == fakereplica.OutcomeCut && !anyDone && !res.ClientGone {
			assert.Error(t, res.ReadErr, "request %s: cut by %s but the client saw a clean end", res.ID, rc.Replica)
			assert.False(t, res.SawDone, "request %s: cut by %s but the client saw [DONE]", res.ID, rc.Replica)
		}
	}
}

// TestStartCaddyNoticesTakenAddress proves that StartCaddy tells a taken
// listen address apart (ErrListenTaken, which newEnv retries on fresh
// addresses) instead of handing back a caddy whose site is someone else's:
// another HTTP server holds the address, and whichever happens first
// (caddy's bind fails and it exits, or the other server answers the
// probe) the error says so.
func TestStartCaddyNoticesTakenAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: http.NotFoundHandler()}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	admin, err := netx.FreeAddr()
	require.NoError(t, err)
	cfg := baseConfig()
	cfg.AdminAddr, cfg.ListenAddr = admin, ln.Addr().String()
	cfg.Upstreams = []string{"127.0.0.1:1"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := caddyproc.StartCaddy(ctx, caddyBin, t.TempDir(), cfg.Caddyfile(), cfg.AdminAddr, cfg.ListenAddr)
	if c != nil {
		c.Stop()
	}
	require.ErrorIs(t, err, caddyproc.ErrListenTaken)
}
