package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/caddymodule/stateapi"
	"github.com/llmroute/caddy-llmroute/internal/testrig/caddyproc"
	"github.com/llmroute/caddy-llmroute/internal/testrig/fakereplica"
)

// readEvent reads the next event within timeout, or fails the test: a
// chunk the replica sent must reach the client without waiting for the
// next one.
func readEvent(t *testing.T, s *stream, timeout time.Duration) string {
	t.Helper()
	type evErr struct {
		ev  string
		err error
	}
	ch := make(chan evErr, 1)
	go func() {
		ev, err := s.next()
		ch <- evErr{ev, err}
	}()
	select {
	case r := <-ch:
		require.NoError(t, r.err)
		return r.ev
	case <-time.After(timeout):
		s.abandon()
		<-ch
		t.Fatalf("no event within %v: the chunk the replica sent is held back", timeout)
		return ""
	}
}

// TestSlowStreamChunksFlowThrough proves that each chunk reaches the client
// before the replica produces the next: the replica writes chunk k, then
// waits for the test, which only lets it go on after it read chunk k from
// Caddy (and checks the replica had not produced chunk k+1 yet).
func TestSlowStreamChunksFlowThrough(t *testing.T) {
	e := newEnv(t, 1, nil, baseConfig())
	id := newID(t)
	const chunks = 6
	s := e.open(id, chatBody(true, false, "one chunk at a time"), map[string]string{
		fakereplica.HeaderFault: fakereplica.FaultStep, fakereplica.HeaderChunks: fmt.Sprint(chunks),
	})
	require.Equal(t, http.StatusOK, s.res.Status)
	for k := range chunks {
		ev := readEvent(t, s, 5*time.Second)
		assert.Contains(t, ev, fmt.Sprintf("tok%d ", k), "chunk %d", k)
		sent := e.tracker.ChunksSent(id)
		assert.Equal(t, k+1, sent, "the client read chunk %d while the replica had produced only %d chunks", k, sent)
		e.tracker.Step(id)
	}
	res := s.finish()
	requireStreamComplete(t, res)
	assert.Len(t, e.tracker.Receipts(id), 1)
}

// TestClientDisconnectMidStream proves that a client leaving mid-stream
// cancels the upstream request (the replica sees its context end while it
// waits to produce the next chunk), frees the reservation, and does not
// cool the replica down (a client leaving says nothing about the replica).
func TestClientDisconnectMidStream(t *testing.T) {
	e := newEnv(t, 1, nil, baseConfig())
	addr := e.rep(0).Addr()
	id := newID(t)
	s := e.open(id, chatBody(true, false, "I will leave early"), map[string]string{
		fakereplica.HeaderFault: fakereplica.FaultStep, fakereplica.HeaderChunks: "10",
	})
	require.Equal(t, http.StatusOK, s.res.Status)
	readEvent(t, s, 5*time.Second)
	e.tracker.Step(id)
	readEvent(t, s, 5*time.Second)
	s.abandon()

	rcs, ok := e.tracker.WaitEnded(id, 5*time.Second)
	require.True(t, ok, "the replica's request must end after the client left")
	require.Len(t, rcs, 1)
	assert.Equal(t, fakereplica.OutcomeCancelled, rcs[0].Outcome, "the upstream request must be cancelled")
	assert.Less(t, rcs[0].ChunksSent, 10)
	e.waitState(idleWait, "reservation freed", stateapi.State.Idle)
	rs := e.replicaState(addr)
	assert.False(t, rs.Cooling, "a client disconnect must not cool the replica: %+v", rs)
	assert.False(t, rs.NeedProbe)

	// The replica still serves.
	res := e.do(newID(t), chatBody(true, false, "after the disconnect"), nil)
	requireStreamComplete(t, res)
}

// TestClientDisconnectBeforeHeaders proves that a client leaving while the
// replica is still working on a non-streamed answer (no header sent yet)
// cancels the upstream request, frees the reservation, and does not cool
// the replica down: the replica did nothing wrong.
func TestClientDisconnectBeforeHeaders(t *testing.T) {
	e := newEnv(t, 1, nil, baseConfig())
	addr := e.rep(0).Addr()
	id := newID(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := e.newRequest(ctx, id, chatBody(false, false, "a long prefill"), map[string]string{
		fakereplica.HeaderFault: fakereplica.FaultStall,
	})
	done := make(chan *result, 1)
	go func() { done <- e.doReq(req) }()
	require.True(t, e.tracker.WaitReceived(id, 1, 5*time.Second), "the replica must get the request")
	cancel()
	res := <-done
	require.Error(t, res.Err, "the client gave up")

	rcs, ok := e.tracker.WaitEnded(id, 5*time.Second)
	require.True(t, ok, "the replica's request must end after the client left")
	assert.Equal(t, fakereplica.OutcomeCancelled, rcs[0].Outcome)
	e.waitState(idleWait, "reservation freed", stateapi.State.Idle)
	rs := e.replicaState(addr)
	assert.False(t, rs.Cooling, "a client disconnect must not cool the replica: %+v", rs)
	assert.False(t, rs.NeedProbe, "a client disconnect must not make the replica need a probe: %+v", rs)
	assert.Zero(t, rs.Failures, "%+v", rs)
}

// TestClientDisconnectWhileQueued proves that a client leaving while its
// request waits in the queue leaves the queue, takes no slot, never
// reaches a replica, and does not disturb the request holding the slot.
func TestClientDisconnectWhileQueued(t *testing.T) {
	cfg := baseConfig()
	cfg.MaxInFlight, cfg.QueueSize, cfg.QueueTimeout = 1, 4, 20*time.Second
	e := newEnv(t, 1, nil, cfg)
	_, _, release := holdSlot(t, e, 3)

	id := newID(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := e.newRequest(ctx, id, chatBody(true, false, "I will not wait"), nil)
	done := make(chan *result, 1)
	go func() { done <- e.doReq(req) }()
	e.waitState(5*time.Second, "one queued request", func(st stateapi.State) bool { return st.Queued == 1 })
	cancel()
	res := <-done
	require.Error(t, res.Err)
	st := e.waitState(5*time.Second, "queue empty", func(st stateapi.State) bool { return st.Queued == 0 })
	assert.Equal(t, 1, st.TotalInFlight, "only the slot holder is in flight")
	assert.Empty(t, e.tracker.Receipts(id))

	requireStreamComplete(t, release())
	// The slot is free for the next request.
	requireStreamComplete(t, e.do(newID(t), chatBody(true, false, "next"), nil))
}

// reload posts cfg to the admin API in the background and waits until it
// is the running config (Caddy may answer /load only once the old server
// drained). It returns a channel with the /load result.
func reload(t *testing.T, e *env, cfg caddyproc.SiteConfig, marker string) <-chan error {
	t.Helper()
	loadErr := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		loadErr <- e.caddy.Load(ctx, cfg.Caddyfile())
	}()
	out := make(chan error, 1)
	for range 200 {
		select {
		case err := <-loadErr:
			require.NoError(t, err)
			require.True(t, configHas(t, e, marker), "POST /load returned but the config lacks %s", marker)
			out <- nil
			return out
		case <-time.After(50 * time.Millisecond):
			if configHas(t, e, marker) {
				go func() { out <- <-loadErr }()
				return out
			}
		}
	}
	t.Fatal("the new config never became active")
	return nil
}

// openHeld opens a step-held stream and reads its first two chunks.
func openHeld(t *testing.T, e *env, chunks int) (string, *stream) {
	t.Helper()
	id := newID(t)
	s := e.open(id, chatBody(true, false, "stream across a reload "+id), map[string]string{
		fakereplica.HeaderFault: fakereplica.FaultStep, fakereplica.HeaderChunks: fmt.Sprint(chunks),
	})
	require.Equal(t, http.StatusOK, s.res.Status)
	t.Cleanup(func() { e.tracker.StepAll(id, chunks); s.finish() })
	readEvent(t, s, 5*time.Second)
	e.tracker.Step(id)
	readEvent(t, s, 5*time.Second)
	return id, s
}

// finishHeld lets a held stream run to its end and checks it completed.
func finishHeld(t *testing.T, e *env, id string, s *stream, from, chunks int) {
	t.Helper()
	for k := from; k < chunks; k++ {
		e.tracker.Step(id)
		ev := readEvent(t, s, 5*time.Second)
		assert.Contains(t, ev, fmt.Sprintf("tok%d ", k))
	}
	requireStreamComplete(t, s.finish())
}

// TestReloadMidStream proves that a config reload through the admin API
// (POST /load) while a stream is in flight does not break the stream: it
// completes with [DONE], its reservation (taken under the old config)
// survives the reload and is released at the end, and the new config
// serves the next request; also when the reload removes the replica that
// is serving the stream.
func TestReloadMidStream(t *testing.T) {
	t.Run("new strategy and cap", func(t *testing.T) {
		e := newEnv(t, 2, nil, baseConfig())
		id, s := openHeld(t, e, 6)
		require.Equal(t, 1, e.state().TotalInFlight)

		cfg := e.cfg
		cfg.Strategy, cfg.MaxInFlight = "least_load", 8
		done := reload(t, e, cfg, `"least_load"`)
		assert.Equal(t, 1, e.state().TotalInFlight, "the stream's reservation must survive the reload")
		finishHeld(t, e, id, s, 2, 6)
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(15 * time.Second):
			t.Fatal("POST /load did not return after the stream ended")
		}
		e.freshConns()
		requireStreamComplete(t, doAfterReload(t, e, chatBody(true, false, "after the reload")))
		assert.Contains(t, configJSON(t, e), `"max_in_flight":8`)
	})
	t.Run("serving replica removed", func(t *testing.T) {
		e := newEnv(t, 2, nil, baseConfig())
		id, s := openHeld(t, e, 6)
		serving := e.tracker.Receipts(id)[0].Replica
		other := e.rep(0).Addr()
		if other == serving {
			other = e.rep(1).Addr()
		}
		cfg := e.cfg
		cfg.Upstreams = []string{other}
		cfg.QueueSize = 17 // marks the new config
		done := reload(t, e, cfg, `"queue_size":17`)
		finishHeld(t, e, id, s, 2, 6)
		require.NoError(t, <-done)
		e.freshConns()
		for i := range 3 {
			res := doAfterReload(t, e, chatBody(i == 0, false, fmt.Sprintf("only the other one %d", i)))
			require.NoError(t, res.Err)
			require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
			assert.Equal(t, other, res.Header.Get(replicaHdr))
		}
		if rs, ok := e.state().Replica(serving); ok {
			assert.Zero(t, rs.InFlight, "the removed replica's reservation must be released: %+v", rs)
		}
	})
}

// TestReloadKeepsCooldown proves that a replica's cooldown survives a
// config reload: after the reload the cooling replica is still skipped
// until its Retry-After has passed.
func TestReloadKeepsCooldown(t *testing.T) {
	cfg := baseConfig()
	cfg.StatusFails = 1 // one 500 cools
	e := newEnv(t, 2, nil, cfg)
	a, b := e.rep(0), e.rep(1)
	// A 500 is not retried: A cools without the request going elsewhere.
	a.SetFault(fakereplica.Fault500)
	for i := range 2 { // round_robin: one of them meets A
		res := e.do(newID(t), chatBody(false, false, fmt.Sprintf("before the reload %d", i)), map[string]string{fakereplica.HeaderRetryAfter: "8"})
		require.NoError(t, res.Err)
		require.Contains(t, []int{http.StatusOK, http.StatusInternalServerError}, res.Status, "body: %s", res.Body)
	}
	require.Equal(t, 1, e.tracker.Received(a.Addr()))
	require.True(t, e.replicaState(a.Addr()).Cooling)
	a.SetFault("")

	cfg = e.cfg
	cfg.QueueSize = 18
	require.NoError(t, <-reload(t, e, cfg, `"queue_size":18`))
	e.freshConns()
	rs := e.replicaState(a.Addr())
	assert.True(t, rs.Cooling, "the cooldown must survive the reload: %+v", rs)
	for i := range 4 {
		res := doAfterReload(t, e, chatBody(false, false, fmt.Sprintf("after the reload %d", i)))
		require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
		assert.Equal(t, b.Addr(), res.Header.Get(replicaHdr), "a cooling replica must be skipped after a reload too")
	}
	assert.Equal(t, 1, e.tracker.Received(a.Addr()))
}

// TestReloadRaisingCapAdmitsQueued proves that a reload raising
// max_in_flight lets requests already waiting in the queue through at
// once, instead of leaving them to wait for a slot under the old cap.
func TestReloadRaisingCapAdmitsQueued(t *testing.T) {
	cfg := baseConfig()
	cfg.MaxInFlight, cfg.QueueSize, cfg.QueueTimeout = 1, 4, 20*time.Second
	e := newEnv(t, 1, nil, cfg)
	id, s := openHeld(t, e, 4)

	queuedID := newID(t)
	queued := make(chan *result, 1)
	go func() { queued <- e.do(queuedID, chatBody(false, false, "waiting for a slot"), nil) }()
	e.waitState(5*time.Second, "one queued request", func(st stateapi.State) bool { return st.Queued == 1 })

	cfg = e.cfg
	cfg.MaxInFlight = 4
	done := reload(t, e, cfg, `"max_in_flight":4`)
	e.freshConns()
	select {
	case r := <-queued:
		require.Equal(t, http.StatusOK, r.Status, "body: %s", r.Body)
	case <-time.After(3 * time.Second):
		st := e.state()
		finishHeld(t, e, id, s, 2, 4)
		r := <-queued
		t.Fatalf("the queued request still waited 3s after the reload raised the cap to 4 (state %+v); it was served (%d) only when the slot freed", st, r.Status)
	}
	finishHeld(t, e, id, s, 2, 4)
	require.NoError(t, <-done)
}

// doAfterReload sends a request right after a reload. A connection that
// the old server accepted while shutting down can fail before the request
// is read; no replica saw it, so it is retried as clients do (three tries,
// on fresh connections). A request a replica saw is never retried.
func doAfterReload(t *testing.T, e *env, body string) *result {
	t.Helper()
	var res *result
	for try := range 3 {
		if try > 0 {
			time.Sleep(100 * time.Millisecond)
			e.freshConns()
		}
		id := newID(t)
		res = e.do(id, body, nil)
		if res.Err == nil {
			return res
		}
		require.Empty(t, e.tracker.Receipts(id), "a request that reached a replica failed: %v", res.Err)
		t.Logf("request after the reload failed before reaching a replica (%v); retrying", res.Err)
	}
	return res
}

// adminHTTP talks to Caddy's admin API without keep-alive: a reload
// replaces the admin server, and a request on a connection kept to the old
// one fails with EOF.
var adminHTTP = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}

// configJSON returns the running config as JSON. The admin server may be
// between its old and new listener during a reload: three tries.
func configJSON(t *testing.T, e *env) string {
	var err error
	for try := range 3 {
		if try > 0 {
			time.Sleep(50 * time.Millisecond)
		}
		var resp *http.Response
		resp, err = adminHTTP.Get("http://" + e.cfg.AdminAddr + "/config/")
		if err != nil {
			continue
		}
		b, rerr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if err = rerr; err == nil {
			return string(b)
		}
	}
	require.NoError(t, err)
	return ""
}

func configHas(t *testing.T, e *env, s string) bool {
	return strings.Contains(configJSON(t, e), s)
}
