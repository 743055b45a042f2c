package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/caddymodule/stateapi"
	"github.com/llmroute/caddy-llmroute/internal/testrig/fakereplica"
)

// holdSlot opens a step-held stream and reads its first chunk, so that it
// holds one reservation until released with release().
func holdSlot(t *testing.T, e *env, chunks int) (id string, s *stream, release func() *result) {
	t.Helper()
	id = newID(t)
	s = e.open(id, chatBody(true, false, "holding a slot "+id), map[string]string{
		fakereplica.HeaderFault: fakereplica.FaultStep, fakereplica.HeaderChunks: fmt.Sprint(chunks),
	})
	require.Equal(t, http.StatusOK, s.res.Status)
	release = func() *result {
		e.tracker.StepAll(id, chunks)
		return s.finish()
	}
	// Registered after newEnv's, so it runs before the after-case checks:
	// a case that stops early does not leave its slot held.
	t.Cleanup(func() { release() })
	readEvent(t, s, 5*time.Second)
	return id, s, release
}

// TestAllReplicasCooling proves that when every replica is cooling, the
// client gets 503 with a Retry-After no longer than the cooldown left and
// in OpenAI's error shape, at once, without any replica being contacted.
func TestAllReplicasCooling(t *testing.T) {
	e := newEnv(t, 2, nil, baseConfig())
	hdr := map[string]string{fakereplica.HeaderFault: fakereplica.Fault503, fakereplica.HeaderRetryAfter: "5"}

	// Both replicas answer 503 Retry-After: 5; the request tries both.
	id := newID(t)
	res := e.do(id, chatBody(false, false, "everyone is down"), hdr)
	requireAPIError(t, res, http.StatusServiceUnavailable, "")
	assert.GreaterOrEqual(t, retryAfter(res), 4)
	assert.Len(t, e.tracker.Receipts(id), 2, "the request tries each replica once")
	st := e.state()
	for _, r := range st.Replicas {
		assert.True(t, r.Cooling, "%+v", r)
	}

	// Now both are cooling: refused without contacting anyone.
	before := e.tracker.Total()
	for i := range 3 {
		id := newID(t)
		start := time.Now()
		res := e.do(id, chatBody(i == 1, false, fmt.Sprintf("still down %d", i)), nil)
		requireAPIError(t, res, http.StatusServiceUnavailable, "no_healthy_replica")
		ra := retryAfter(res)
		assert.GreaterOrEqual(t, ra, 1)
		assert.LessOrEqual(t, ra, 5, "Retry-After must not exceed the cooldown left")
		assert.Less(t, time.Since(start), 2*time.Second, "refused at once, not after a wait")
	}
	assert.Equal(t, before, e.tracker.Total(), "no replica may be contacted while all are cooling")
}

// TestQueueOverflow proves the bounded queue: with the only slot taken and
// the queue (size 1) full, the next request gets 429 with Retry-After at
// once and never reaches the replica, while the queued one is served when
// the slot frees.
func TestQueueOverflow(t *testing.T) {
	cfg := baseConfig()
	cfg.MaxInFlight, cfg.QueueSize, cfg.QueueTimeout = 1, 1, 20*time.Second
	e := newEnv(t, 1, nil, cfg)
	_, _, release := holdSlot(t, e, 3)

	queuedID := newID(t)
	queued := make(chan *result, 1)
	go func() { queued <- e.do(queuedID, chatBody(true, false, "I wait in line"), nil) }()
	e.waitState(5*time.Second, "one queued request", func(st stateapi.State) bool { return st.Queued == 1 })

	id := newID(t)
	start := time.Now()
	res := e.do(id, chatBody(false, false, "no room for me"), nil)
	requireAPIError(t, res, http.StatusTooManyRequests, "queue_full")
	assert.GreaterOrEqual(t, retryAfter(res), 1, "429 must carry Retry-After")
	assert.Less(t, time.Since(start), 2*time.Second, "overflow is refused at once")
	assert.Empty(t, e.tracker.Receipts(id))
	assert.Empty(t, e.tracker.Receipts(queuedID), "the queued request must wait for the slot")

	requireStreamComplete(t, release())
	select {
	case r := <-queued:
		requireStreamComplete(t, r)
	case <-time.After(10 * time.Second):
		t.Fatal("the queued request was not served after the slot freed")
	}
	assert.Equal(t, 1, e.tracker.MaxConcurrent(e.rep(0).Addr()))
}

// TestQueueTimeout proves that a request waiting longer than queue_timeout
// for a slot gets 429 with Retry-After (code queue_timeout) after about
// that time, and never reaches the replica.
func TestQueueTimeout(t *testing.T) {
	cfg := baseConfig()
	cfg.MaxInFlight, cfg.QueueSize, cfg.QueueTimeout = 1, 4, 600*time.Millisecond
	e := newEnv(t, 1, nil, cfg)
	_, _, release := holdSlot(t, e, 3)

	id := newID(t)
	start := time.Now()
	res := e.do(id, chatBody(true, false, "I wait too long"), nil)
	el := time.Since(start)
	requireAPIError(t, res, http.StatusTooManyRequests, "queue_timeout")
	assert.GreaterOrEqual(t, retryAfter(res), 1)
	assert.GreaterOrEqual(t, el, 500*time.Millisecond, "refused only after queue_timeout")
	assert.Less(t, el, 5*time.Second)
	assert.Empty(t, e.tracker.Receipts(id))
	assert.Zero(t, e.state().Queued)
	requireStreamComplete(t, release())
}

// TestBodyOverLimit proves that a body over max_body_bytes gets 413 in
// OpenAI's error shape, with or without a Content-Length, and never
// reaches a replica; a body of exactly the limit passes, one byte more
// does not.
func TestBodyOverLimit(t *testing.T) {
	e := newEnv(t, 1, nil, baseConfig()) // max_body_bytes 64KiB
	big := chatBody(false, false, strings.Repeat("x", 100<<10))

	id := newID(t)
	res := e.do(id, big, nil)
	requireAPIError(t, res, http.StatusRequestEntityTooLarge, "request_too_large")
	assert.Empty(t, e.tracker.Receipts(id))

	// Chunked: no Content-Length, the limit is found while reading.
	id2 := newID(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := e.newRequest(ctx, id2, big, nil)
	req.Body = io.NopCloser(strings.NewReader(big))
	req.ContentLength = -1
	req.GetBody = nil
	res2 := e.doReq(req)
	requireAPIError(t, res2, http.StatusRequestEntityTooLarge, "request_too_large")
	assert.Empty(t, e.tracker.Receipts(id2))

	// Exactly at the limit passes; one byte more does not.
	exact := chatBody(false, false, strings.Repeat("y", 64<<10-len(chatBody(false, false, ""))))
	require.Len(t, exact, 64<<10)
	id3 := newID(t)
	res3 := e.do(id3, exact, nil)
	require.Equal(t, http.StatusOK, res3.Status, "a body of exactly max_body_bytes passes: %s", res3.Body)
	assert.Len(t, e.tracker.Receipts(id3), 1)
	id4 := newID(t)
	res4 := e.do(id4, chatBody(false, false, strings.Repeat("y", 64<<10+1-len(chatBody(false, false, "")))), nil)
	requireAPIError(t, res4, http.StatusRequestEntityTooLarge, "request_too_large")
	assert.Empty(t, e.tracker.Receipts(id4))
}

// TestMalformedJSON proves that bodies llm_route cannot parse are refused
// with 400 (415 for a non-JSON content type) in OpenAI's error shape and
// never reach a replica.
func TestMalformedJSON(t *testing.T) {
	e := newEnv(t, 1, nil, baseConfig())
	cases := []struct {
		name, body, ctype string
		status            int
		code              string
	}{
		{"truncated", `{"model":"m","messages":[{"role":"user","content":"hi"}`, "", http.StatusBadRequest, "invalid_json"},
		{"not json", `model=m&prompt=hi`, "", http.StatusBadRequest, "invalid_json"},
		{"missing model", `{"messages":[{"role":"user","content":"hi"}]}`, "", http.StatusBadRequest, "missing_model"},
		{"text/plain", `{"model":"m","messages":[]}`, "text/plain", http.StatusUnsupportedMediaType, "unsupported_media_type"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id := newID(t)
			var hdr map[string]string
			if c.ctype != "" {
				hdr = map[string]string{"Content-Type": c.ctype}
			}
			res := e.do(id, c.body, hdr)
			requireAPIError(t, res, c.status, c.code)
			assert.Empty(t, e.tracker.Receipts(id))
		})
	}
	assert.Zero(t, e.tracker.Total(), "no malformed request may reach a replica")
}

// TestAPIKeyMissingAndWrong proves that requests without the configured
// key, or with a wrong one, get 401 with WWW-Authenticate in OpenAI's
// error shape and never reach a replica; the right key (Bearer or
// X-Api-Key) passes, and is not forwarded.
func TestAPIKeyMissingAndWrong(t *testing.T) {
	e := newEnv(t, 1, nil, baseConfig())
	body := chatBody(false, false, "let me in")
	cases := []struct {
		name string
		hdr  map[string]string
	}{
		{"missing", map[string]string{"Authorization": ""}},
		{"wrong bearer", map[string]string{"Authorization": "Bearer sk-wrong"}},
		{"empty bearer", map[string]string{"Authorization": "Bearer "}},
		{"key as basic", map[string]string{"Authorization": "Basic " + apiKey}},
		{"wrong x-api-key", map[string]string{"Authorization": "", "X-Api-Key": "sk-wrong"}},
		{"key with suffix", map[string]string{"Authorization": "Bearer " + apiKey + "x"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id := newID(t)
			res := e.do(id, body, c.hdr)
			requireAPIError(t, res, http.StatusUnauthorized, "invalid_api_key")
			assert.NotEmpty(t, res.Header.Get("WWW-Authenticate"))
			assert.NotContains(t, string(res.Body), apiKey)
			assert.Empty(t, e.tracker.Receipts(id))
		})
	}
	assert.Zero(t, e.tracker.Total())

	for _, hdr := range []map[string]string{nil, {"Authorization": "", "X-Api-Key": apiKey}} {
		id := newID(t)
		res := e.do(id, body, hdr)
		require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
		rcs := e.tracker.Receipts(id)
		require.Len(t, rcs, 1)
		assert.Empty(t, rcs[0].Authorization, "the client's key must not be forwarded")
	}
}

// TestRetryBeforeFirstByteLandsOnDifferentReplica proves that a request
// refused by a replica (429, 503) before any byte reached the client is
// retried on replicas it has not tried yet, never twice on one, and is
// answered by the healthy one, streamed or not.
func TestRetryBeforeFirstByteLandsOnDifferentReplica(t *testing.T) {
	e := newEnv(t, 3, nil, baseConfig())
	a, b, c := e.rep(0), e.rep(1), e.rep(2)
	a.SetFault(fakereplica.Fault429)
	b.SetFault(fakereplica.Fault503)
	retried := 0
	for i := 0; i < 3 && retried == 0; i++ {
		id := newID(t)
		res := e.do(id, chatBody(i%2 == 0, false, fmt.Sprintf("retry me %d", i)), nil)
		require.NoError(t, res.Err)
		require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
		require.NoError(t, res.ReadErr)
		assert.Equal(t, c.Addr(), res.Header.Get(replicaHdr))
		rcs := e.tracker.Receipts(id)
		require.NotEmpty(t, rcs)
		seen := map[string]bool{}
		for j, rc := range rcs {
			assert.False(t, seen[rc.Replica], "request %s sent twice to %s", id, rc.Replica)
			seen[rc.Replica] = true
			if j < len(rcs)-1 {
				assert.Contains(t, []int{429, 503}, rc.Status, "only refused attempts are retried")
			}
		}
		assert.Equal(t, c.Addr(), rcs[len(rcs)-1].Replica, "the last attempt is the one that answered")
		if len(rcs) > 1 {
			retried++
		}
	}
	assert.Positive(t, retried, "round_robin must have sent a request to A or B first")
}

// TestConcurrentBurstNeverExceedsCap proves that 200 concurrent requests
// against 3 replicas with max_in_flight 4 never put more than 4 requests
// at once on any replica (as the replicas count them and as the router
// reports), queue the rest, and all complete, each sent exactly once.
func TestConcurrentBurstNeverExceedsCap(t *testing.T) {
	cfg := baseConfig()
	cfg.Strategy = "prefix_load"
	cfg.MaxInFlight, cfg.QueueSize, cfg.QueueTimeout = 4, 256, 60*time.Second
	e := newEnv(t, 3, nil, cfg)
	const n = 200

	// Watch the router's own view while the burst runs.
	stop := make(chan struct{})
	var watchWG sync.WaitGroup
	var maxRouter, maxQueued int
	watchWG.Add(1)
	go func() {
		defer watchWG.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			st, err := e.caddy.State(ctx)
			cancel()
			if err != nil {
				continue
			}
			for _, r := range st.Replicas {
				maxRouter = max(maxRouter, r.InFlight)
			}
			maxQueued = max(maxQueued, st.Queued)
		}
	}()

	var wg sync.WaitGroup
	results := make([]*result, n)
	ids := make([]string, n)
	for i := range n {
		ids[i] = newID(t)
	}
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i] = e.do(ids[i], chatBody(i%4 != 0, false, fmt.Sprintf("burst prompt family %d", i%5)),
				map[string]string{fakereplica.HeaderFault: fakereplica.FaultSlow, fakereplica.HeaderDelay: "5ms"})
		}()
	}
	close(start)
	wg.Wait()
	close(stop)
	watchWG.Wait()

	for i, res := range results {
		require.NoError(t, res.Err, "request %d", i)
		require.Equal(t, http.StatusOK, res.Status, "request %d: %s", i, res.Body)
		require.NoError(t, res.ReadErr, "request %d", i)
		assert.Len(t, e.tracker.Receipts(ids[i]), 1, "request %d sent once", i)
	}
	total := 0
	for _, rp := range e.reps {
		m := e.tracker.MaxConcurrent(rp.Addr())
		assert.LessOrEqual(t, m, 4, "replica %s saw %d requests at once (cap 4)", rp.Addr(), m)
		total += e.tracker.Received(rp.Addr())
	}
	assert.Equal(t, n, total)
	assert.LessOrEqual(t, maxRouter, 4, "the router reported more than the cap in flight")
	assert.Positive(t, maxQueued, "the burst must have queued (it did not stress the cap)")
	t.Logf("max router in_flight %d, max queued %d", maxRouter, maxQueued)
}

// failOnce makes the only replica fail once (503, no Retry-After) and waits
// for its cooldown to end, so that the next request is its probe.
func failOnce(t *testing.T, e *env, addr string) {
	t.Helper()
	res := e.do(newID(t), chatBody(false, false, "fail once"),
		map[string]string{fakereplica.HeaderFault: fakereplica.Fault503, fakereplica.HeaderRetryAfter: "none"})
	requireAPIError(t, res, http.StatusServiceUnavailable, "")
	before := e.tracker.Total()

	// Cooling: refused at once, without contact.
	if rs := e.replicaState(addr); rs.Cooling {
		res := e.do(newID(t), chatBody(false, false, "too soon"), nil)
		requireAPIError(t, res, http.StatusServiceUnavailable, "no_healthy_replica")
		assert.GreaterOrEqual(t, retryAfter(res), 1)
		assert.Equal(t, before, e.tracker.Total(), "a cooling replica must not be contacted")
	}
	rs := e.waitState(3*time.Second, "cooldown over", func(st stateapi.State) bool {
		r, _ := st.Replica(addr)
		return !r.Cooling
	}).Replicas[0]
	require.True(t, rs.NeedProbe, "%+v", rs)
}

// sendOthers sends n requests in the background.
func sendOthers(t *testing.T, e *env, n int, what string) <-chan *result {
	out := make(chan *result, n)
	for i := range n {
		go func() { out <- e.do(newID(t), chatBody(false, false, fmt.Sprintf("%s %d", what, i)), nil) }()
	}
	return out
}

// enlisted counts the requests that wait in the queue after the pass of
// their own arrival (each policy's queued): that pass attempted them and
// left them waiting.
func enlisted(st stateapi.State) int {
	n := int64(0)
	for _, p := range st.Policies {
		n += p.Queued
	}
	return int(n)
}

// waitProbeAndOthers waits until the probe is in flight and the n others
// are either all queued behind it, each left waiting by the pass of its
// arrival, or all answered; it reports which.
func waitProbeAndOthers(t *testing.T, e *env, addr string, others <-chan *result, n int) (queued bool, answered []*result) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for len(answered) < n {
		st := e.state()
		if st.Queued == n && enlisted(st) == n {
			return true, nil
		}
		select {
		case r := <-others:
			answered = append(answered, r)
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			t.Fatalf("the others neither queued nor got answers: %+v, %d answered", st, len(answered))
		}
	}
	return false, answered
}

// heldProbe is a streamed request that the replica holds before its
// response headers (fakereplica.HeaderHold) and then steps chunk by chunk.
type heldProbe struct {
	id     string
	chunks int
	opened chan *stream
	s      *stream
}

// openHeldProbe sends a streamed request that the replica holds before its
// headers; e.open runs in the background because it returns only once the
// headers arrive. Every chunk after the first waits for a step.
func openHeldProbe(t *testing.T, e *env, addr string, chunks int) *heldProbe {
	t.Helper()
	p := &heldProbe{id: newID(t), chunks: chunks, opened: make(chan *stream, 1)}
	go func() {
		p.opened <- e.open(p.id, chatBody(true, false, "probe held before its headers "+p.id), map[string]string{
			fakereplica.HeaderFault: fakereplica.FaultStep, fakereplica.HeaderChunks: fmt.Sprint(chunks),
			fakereplica.HeaderHold: "1",
		})
	}()
	// Registered after newEnv's, so it runs before the after-case checks.
	t.Cleanup(func() {
		e.tracker.StepAll(p.id, chunks+1)
		if p.s == nil {
			select {
			case p.s = <-p.opened:
			case <-time.After(15 * time.Second):
				return
			}
		}
		p.s.finish()
	})
	require.True(t, e.tracker.WaitReceived(p.id, 1, 5*time.Second), "the probe did not reach the replica")
	e.waitState(2*time.Second, "probe held before its headers", func(st stateapi.State) bool {
		r, _ := st.Replica(addr)
		return r.Probing && st.TotalInFlight == 1
	})
	return p
}

// sendHeaders lets the held probe send its headers and first chunk, and
// returns its stream once they reached the client.
func (p *heldProbe) sendHeaders(t *testing.T, e *env) *stream {
	t.Helper()
	e.tracker.Step(p.id)
	select {
	case p.s = <-p.opened:
	case <-time.After(10 * time.Second):
		t.Fatal("the probe's headers did not reach the client")
	}
	require.Equal(t, http.StatusOK, p.s.res.Status)
	readEvent(t, p.s, 5*time.Second)
	return p.s
}

// TestCooldownEndsWithSingleProbe proves the probe: a replica that failed
// is not contacted during its cooldown; when the cooldown ends exactly one
// request (the probe) reaches it while the others wait in the queue until
// the probe's response headers arrive. A 2xx there trusts the replica
// again: the waiting requests are served while the probe still streams.
// A probe that fails before its headers starts a longer cooldown and
// nobody else reaches the replica; a probe that passed and then breaks
// mid-stream cools the replica as any broken stream does.
func TestCooldownEndsWithSingleProbe(t *testing.T) {
	cfg := baseConfig()
	cfg.CooldownBase, cfg.CooldownMax = 500*time.Millisecond, 5*time.Second
	cfg.ResponseHeaderTimeout = time.Second
	const n = 3

	t.Run("probe succeeds", func(t *testing.T) {
		e := newEnv(t, 1, nil, cfg)
		addr := e.rep(0).Addr()
		failOnce(t, e, addr)
		before := e.tracker.Total()

		probe := openHeldProbe(t, e, addr, 3)
		others := sendOthers(t, e, n, "during the probe")
		queued, _ := waitProbeAndOthers(t, e, addr, others, n)
		require.True(t, queued, "requests that arrive while the probe awaits its headers must wait in the queue")
		// The queue moves only when a pass runs, and a pass admits before
		// it ends: each of the others was attempted by its arrival's pass
		// and left waiting, and nothing asks for another pass until the
		// probe's headers (no slot is released; the cooldown's end woke
		// the queue a millisecond after it, before the others came).
		assert.Equal(t, before+1, e.tracker.Total(), "only the probe may reach the replica before its headers")
		assert.Equal(t, n, e.state().Queued)

		s := probe.sendHeaders(t, e)
		for range n {
			select {
			case r := <-others:
				require.Equal(t, http.StatusOK, r.Status, "a request queued behind a successful probe is served: %s", r.Body)
			case <-time.After(10 * time.Second):
				t.Fatal("requests queued behind the probe were not served after its 2xx headers")
			}
		}
		rc := e.tracker.Receipts(probe.id)
		require.Len(t, rc, 1)
		assert.True(t, rc[0].EndedAt.IsZero(), "the waiting requests must be admitted before the probe's stream ends")
		rs := e.replicaState(addr)
		assert.False(t, rs.NeedProbe, "%+v", rs)
		assert.False(t, rs.Probing, "%+v", rs)
		assert.Zero(t, rs.Failures)
		assert.Equal(t, 1, rs.InFlight, "only the probe's stream is still in flight: %+v", rs)

		e.tracker.StepAll(probe.id, probe.chunks)
		requireStreamComplete(t, s.finish())
		// Trusted again: concurrent requests all pass.
		for r := range collect(sendOthers(t, e, n, "after the probe"), n) {
			require.Equal(t, http.StatusOK, r.Status, "body: %s", r.Body)
		}
	})

	t.Run("probe passes then breaks", func(t *testing.T) {
		e := newEnv(t, 1, nil, cfg)
		addr := e.rep(0).Addr()
		failOnce(t, e, addr)

		probe := openHeldProbe(t, e, addr, 3)
		s := probe.sendHeaders(t, e)
		rs := e.replicaState(addr)
		require.False(t, rs.NeedProbe, "a probe whose 2xx headers arrived has passed: %+v", rs)

		e.tracker.Cut(probe.id)
		requireStreamBroken(t, s.finish())
		st := e.waitState(2*time.Second, "cooldown after the broken probe stream", func(st stateapi.State) bool {
			r, _ := st.Replica(addr)
			return r.Cooling
		})
		rs, _ = st.Replica(addr)
		assert.Equal(t, "stream_broken", rs.CoolReason)
		assert.True(t, rs.NeedProbe, "%+v", rs)
		assert.Equal(t, 1, rs.Failures, "the probe passed (failures reset), then one broken stream: %+v", rs)
	})

	t.Run("probe fails", func(t *testing.T) {
		e := newEnv(t, 1, nil, cfg)
		addr := e.rep(0).Addr()
		failOnce(t, e, addr)
		before := e.tracker.Total()

		// The probe stalls past response_header_timeout (1s): a failure.
		probeID := newID(t)
		res := e.do(probeID, chatBody(false, false, "probe that stalls"), map[string]string{fakereplica.HeaderFault: fakereplica.FaultStall})
		requireAPIError(t, res, http.StatusServiceUnavailable, "")
		assert.GreaterOrEqual(t, retryAfter(res), 1)
		assert.Len(t, e.tracker.Receipts(probeID), 1)
		rs := e.replicaState(addr)
		assert.True(t, rs.Cooling, "a failed probe starts a new cooldown: %+v", rs)
		assert.True(t, rs.NeedProbe, "%+v", rs)
		assert.False(t, rs.Probing, "%+v", rs)
		assert.Equal(t, 2, rs.Failures, "%+v", rs)

		// Cooling again: refused without contact.
		res = e.do(newID(t), chatBody(false, false, "after the failed probe"), nil)
		requireAPIError(t, res, http.StatusServiceUnavailable, "no_healthy_replica")
		assert.Equal(t, before+1, e.tracker.Total(), "after a failed probe nobody else may reach the replica")
	})
}

// TestQueuedRequestsRefusedWhenAllReplicasStartCooling proves that
// requests waiting in the queue are refused with 503 and Retry-After as
// soon as every replica is cooling, as a request arriving at that moment
// is, instead of sitting in the queue through the cooldown: when the only
// slot holder's stream breaks, and when a probe that others queued behind
// fails.
func TestQueuedRequestsRefusedWhenAllReplicasStartCooling(t *testing.T) {
	const n = 3
	check := func(t *testing.T, e *env, others <-chan *result, failedAt time.Time, before int) {
		t.Helper()
		for i := range n {
			select {
			case r := <-others:
				el := time.Since(failedAt)
				requireAPIError(t, r, http.StatusServiceUnavailable, "no_healthy_replica")
				assert.GreaterOrEqual(t, retryAfter(r), 1)
				assert.Less(t, el, 1500*time.Millisecond, "queued request %d answered %v after every replica started cooling", i, el)
			case <-time.After(8 * time.Second):
				t.Fatalf("queued request %d still waiting 8s after every replica started cooling", i)
			}
		}
		assert.Equal(t, before, e.tracker.Total(), "no queued request may reach a cooling replica")
	}

	t.Run("slot holder breaks", func(t *testing.T) {
		cfg := baseConfig()
		cfg.MaxInFlight, cfg.QueueSize, cfg.QueueTimeout = 1, 8, 10*time.Second
		cfg.CooldownBase, cfg.CooldownMax = 3*time.Second, 10*time.Second
		e := newEnv(t, 1, nil, cfg)
		holder, s, _ := holdSlot(t, e, 4)
		others := sendOthers(t, e, n, "queued behind a stream that breaks")
		e.waitState(5*time.Second, "all queued", func(st stateapi.State) bool { return st.Queued == n })
		before := e.tracker.Total()

		e.tracker.Cut(holder)
		failedAt := time.Now()
		requireStreamBroken(t, s.finish())
		check(t, e, others, failedAt, before)
	})

	// A probe held before its headers fails there: reset (a transport
	// error) or 503. The requests queued behind it are refused at once.
	for _, c := range []struct{ name, fault, reason string }{
		{"probe fails before headers", fakereplica.FaultOK, "transport"},
		{"probe answers 503", fakereplica.Fault503, "503"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := baseConfig()
			cfg.QueueTimeout = 10 * time.Second
			// The failed probe's cooldown (1s, doubled) outlasts check's
			// bound, so that waiting through it shows.
			cfg.CooldownBase, cfg.CooldownMax = 500*time.Millisecond, 10*time.Second
			e := newEnv(t, 1, nil, cfg)
			addr := e.rep(0).Addr()
			failOnce(t, e, addr)
			probeID := newID(t)
			probeRes := make(chan *result, 1)
			go func() {
				probeRes <- e.do(probeID, chatBody(false, false, "probe that fails"), map[string]string{
					fakereplica.HeaderFault: c.fault, fakereplica.HeaderHold: "1", fakereplica.HeaderRetryAfter: "none",
				})
			}()
			require.True(t, e.tracker.WaitReceived(probeID, 1, 5*time.Second))
			e.waitState(2*time.Second, "probe held before its headers", func(st stateapi.State) bool {
				r, _ := st.Replica(addr)
				return r.Probing
			})
			others := sendOthers(t, e, n, "queued behind a failing probe")
			queued, _ := waitProbeAndOthers(t, e, addr, others, n)
			require.True(t, queued, "requests that arrive while the probe awaits its headers must wait in the queue")
			before := e.tracker.Total()
			if c.fault == fakereplica.FaultOK {
				e.tracker.Cut(probeID)
			} else {
				e.tracker.Step(probeID)
			}
			failedAt := time.Now()
			select {
			case r := <-probeRes:
				requireAPIError(t, r, http.StatusServiceUnavailable, "")
			case <-time.After(10 * time.Second):
				t.Fatal("the failed probe got no answer")
			}
			check(t, e, others, failedAt, before)
			rs := e.replicaState(addr)
			assert.True(t, rs.Cooling, "%+v", rs)
			assert.Equal(t, c.reason, rs.CoolReason)
			assert.Equal(t, 2, rs.Failures, "a failed probe backs off further: %+v", rs)
		})
	}
}

// TestQueuedRequestsAdmittedTogetherAfterProbe proves that when a probe's
// 2xx headers arrive, the requests that queued behind it are admitted
// together, up to the replica's cap, while the probe still streams: not one
// after another as each finishes, nor after the probe's answer ends.
func TestQueuedRequestsAdmittedTogetherAfterProbe(t *testing.T) {
	cfg := baseConfig()
	cfg.CooldownBase, cfg.CooldownMax = 300*time.Millisecond, 5*time.Second
	cfg.QueueTimeout = 10 * time.Second
	e := newEnv(t, 1, nil, cfg) // max_in_flight 4
	addr := e.rep(0).Addr()
	failOnce(t, e, addr)

	probe := openHeldProbe(t, e, addr, 3)
	// Three long answers queue behind the probe.
	const n = 3
	ids := make([]string, n)
	for i := range ids {
		ids[i] = newID(t)
	}
	opened := make(chan *stream, n)
	for i := range n {
		go func() {
			s := e.open(ids[i], chatBody(true, false, fmt.Sprintf("long answer %d", i)), map[string]string{
				fakereplica.HeaderFault: fakereplica.FaultStep, fakereplica.HeaderChunks: "2",
			})
			opened <- s
		}()
	}
	taken := 0 // streams read from opened and finished here
	t.Cleanup(func() {
		for _, id := range ids {
			e.tracker.StepAll(id, 2)
		}
		for range n - taken {
			select {
			case s := <-opened:
				s.finish()
			case <-time.After(15 * time.Second):
				return
			}
		}
	})
	// Wait until all three are queued behind the probe, each left waiting
	// by the pass of its arrival.
	deadline := time.Now().Add(5 * time.Second)
	for st := e.state(); st.Queued != n || enlisted(st) != n; st = e.state() {
		select {
		case s := <-opened:
			taken++
			r := s.finish()
			t.Fatalf("a request got an answer while the probe awaited its headers: %d %s", r.Status, r.Body)
		case <-time.After(20 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "the requests did not queue behind the probe: %+v", e.state())
	}

	probe.sendHeaders(t, e)
	// The probe streams on (held at its second chunk) beside the three.
	ok := e.tracker.WaitFor(3*time.Second, func(v fakereplica.View) bool { return v.Concurrent(addr) == n+1 })
	st := e.state()
	assert.True(t, ok, "after the probe's 2xx headers only %d of the %d queued requests were admitted beside it (cap 4); state %+v",
		e.tracker.Concurrent(addr)-1, n, st)
	rc := e.tracker.Receipts(probe.id)
	require.Len(t, rc, 1)
	assert.True(t, rc[0].EndedAt.IsZero(), "the probe's stream must still be running")
}

// collect yields n results from ch, each within 15 s.
func collect(ch <-chan *result, n int) <-chan *result {
	out := make(chan *result, n)
	go func() {
		defer close(out)
		for range n {
			select {
			case r := <-ch:
				out <- r
			case <-time.After(15 * time.Second):
				return
			}
		}
	}()
	return out
}
