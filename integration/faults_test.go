package integration

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/caddymodule/stateapi"
	"github.com/llmroute/caddy-llmroute/internal/testrig/fakereplica"
	"github.com/llmroute/caddy-llmroute/internal/testrig/netx"
)

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	addr, err := netx.FreeAddr()
	require.NoError(t, err)
	return addr
}

// TestConnectionRefused proves that a replica refusing connections is
// skipped: with a live replica beside it, every request succeeds on the
// live one and the dead one cools down (reason "transport"); with only the
// dead one, the client gets 503 with Retry-After in OpenAI's error shape.
func TestConnectionRefused(t *testing.T) {
	t.Run("other replica serves", func(t *testing.T) {
		dead := closedAddr(t)
		e := newEnv(t, 1, []string{dead}, baseConfig())
		live := e.rep(0).Addr()
		for i := range 2 {
			id := newID(t)
			res := e.do(id, chatBody(i%2 == 0, false, fmt.Sprintf("refused %d", i)), nil)
			require.NoError(t, res.Err)
			require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
			require.NoError(t, res.ReadErr)
			assert.Equal(t, live, res.Header.Get(replicaHdr))
			assert.Len(t, e.tracker.Receipts(id), 1)
		}
		rs := e.replicaState(dead)
		assert.GreaterOrEqual(t, rs.Failures, 1, "round_robin must have tried the dead replica once: %+v", rs)
		assert.True(t, rs.Cooling, "a refusing replica cools down: %+v", rs)
		assert.Equal(t, "transport", rs.CoolReason)
	})
	t.Run("only replica refuses", func(t *testing.T) {
		dead := closedAddr(t)
		e := newEnv(t, 0, []string{dead}, baseConfig())
		id := newID(t)
		res := e.do(id, chatBody(false, false, "nobody home"), nil)
		requireAPIError(t, res, http.StatusServiceUnavailable, "")
		assert.GreaterOrEqual(t, retryAfter(res), 1, "503 must carry Retry-After")
		assert.True(t, e.replicaState(dead).Cooling)
	})
}

// statusFaultRetried is the shared body of the 429 and 503 cases: replica
// A answers status with Retry-After: 3 to everything, B is healthy. The
// request that round_robin sends to A first is retried on B before any
// byte reaches the client; A cools for the Retry-After it asked for, and
// the next requests go to B only. With A alone, the client gets an error
// with a Retry-After honouring A's.
func statusFaultRetried(t *testing.T, fault string, status int, reason string) {
	t.Run("retried on the other replica", func(t *testing.T) {
		e := newEnv(t, 2, nil, baseConfig())
		a, b := e.rep(0), e.rep(1)
		a.SetFault(fault)
		hdr := map[string]string{fakereplica.HeaderRetryAfter: "3"}
		var faultAt time.Time
		for i := range 4 {
			id := newID(t)
			res := e.do(id, chatBody(i%2 == 1, false, fmt.Sprintf("status fault %d", i)), hdr)
			require.NoError(t, res.Err)
			require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
			require.NoError(t, res.ReadErr)
			assert.Equal(t, b.Addr(), res.Header.Get(replicaHdr))
			for _, rc := range e.tracker.Receipts(id) {
				if rc.Replica == a.Addr() {
					faultAt = rc.At
				}
			}
		}
		assert.Equal(t, 1, e.tracker.Received(a.Addr()), "A answered %s once, then cooled: it must not see more requests", fault)
		assert.Equal(t, 4, e.tracker.Received(b.Addr()))
		rs := e.replicaState(a.Addr())
		assert.True(t, rs.Cooling, "%+v", rs)
		assert.Equal(t, reason, rs.CoolReason)
		assert.True(t, rs.NeedProbe)
		require.NotNil(t, rs.CoolUntil)
		require.False(t, faultAt.IsZero())
		// Retry-After: 3 is honoured (the base cooldown is 1s).
		left := rs.CoolUntil.Sub(faultAt)
		assert.InDelta(t, 3.0, left.Seconds(), 0.5, "cooldown must follow the replica's Retry-After")
	})
	t.Run("only replica", func(t *testing.T) {
		e := newEnv(t, 1, nil, baseConfig())
		e.rep(0).SetFault(fault)
		id := newID(t)
		res := e.do(id, chatBody(false, false, "alone"), map[string]string{fakereplica.HeaderRetryAfter: "3"})
		require.NoError(t, res.Err)
		assert.Contains(t, []int{status, http.StatusServiceUnavailable}, res.Status, "body: %s", res.Body)
		requireAPIError(t, res, res.Status, "")
		t.Logf("client saw %d Retry-After %q body %s", res.Status, res.Header.Get("Retry-After"), res.Body)
		ra := retryAfter(res)
		assert.GreaterOrEqual(t, ra, 2, "the client's Retry-After must honour the replica's (3s)")
		assert.LessOrEqual(t, ra, 3)
		assert.Len(t, e.tracker.Receipts(id), 1)
	})
}

// TestReplica429RetryAfter proves the 429 path: retried on another replica
// before the first byte, the 429ing replica cools for its Retry-After, and
// alone it yields an error with Retry-After to the client.
func TestReplica429RetryAfter(t *testing.T) {
	statusFaultRetried(t, fakereplica.Fault429, http.StatusTooManyRequests, "429")
}

// TestReplica503 proves the 503 path, as for 429.
func TestReplica503(t *testing.T) {
	statusFaultRetried(t, fakereplica.Fault503, http.StatusServiceUnavailable, "503")
}

// TestReplica500 proves that a 500 (not in lb_retry_match) reaches the
// client as the replica sent it, once, and that a replica answering 500
// to every request cools down (500 is a default fail_status) after
// status_fails (3) distinct requests in a row, so that the next requests
// go elsewhere; one bad request cannot take it out (see
// TestPoisonedRequestsKeepReplicas).
func TestReplica500(t *testing.T) {
	e := newEnv(t, 2, nil, baseConfig())
	a, b := e.rep(0), e.rep(1)
	a.SetFault(fakereplica.Fault500)
	saw500 := 0
	for i := range 10 {
		id := newID(t)
		res := e.do(id, chatBody(false, false, fmt.Sprintf("five hundred %d", i)), nil)
		require.NoError(t, res.Err)
		require.Len(t, e.tracker.Receipts(id), 1, "a 500 is not retried")
		if res.Status == http.StatusInternalServerError {
			saw500++
			require.LessOrEqual(t, saw500, 3, "A must cool after three distinct 500s in a row")
			requireAPIError(t, res, http.StatusInternalServerError, "fake_500")
			assert.Equal(t, a.Addr(), res.Header.Get(replicaHdr))
			continue
		}
		require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
		assert.Equal(t, b.Addr(), res.Header.Get(replicaHdr))
	}
	assert.Equal(t, 3, saw500, "round_robin must have sent A three requests before it cooled")
	assert.Equal(t, 3, e.tracker.Received(a.Addr()))
	rs := e.replicaState(a.Addr())
	assert.True(t, rs.Cooling, "%+v", rs)
	assert.Equal(t, "5xx", rs.CoolReason)
}

// TestStallBeforeHeaders proves that a replica that never sends headers is
// abandoned at response_header_timeout: the stalled upstream request is
// cancelled, the request is retried on the healthy replica (no byte had
// reached the client), and the staller cools down; alone, it yields 503
// with Retry-After.
func TestStallBeforeHeaders(t *testing.T) {
	cfg := baseConfig()
	cfg.ResponseHeaderTimeout = 700 * time.Millisecond
	t.Run("retried on the other replica", func(t *testing.T) {
		e := newEnv(t, 2, nil, cfg)
		a, b := e.rep(0), e.rep(1)
		a.SetFault(fakereplica.FaultStall)
		for i := range 2 {
			id := newID(t)
			start := time.Now()
			res := e.do(id, chatBody(true, false, fmt.Sprintf("stall %d", i)), nil)
			requireStreamComplete(t, res)
			assert.Equal(t, b.Addr(), res.Header.Get(replicaHdr))
			assert.Less(t, time.Since(start), 10*time.Second)
		}
		require.Equal(t, 1, e.tracker.Received(a.Addr()))
		ok := e.tracker.WaitFor(3*time.Second, func(v fakereplica.View) bool { return v.Concurrent(a.Addr()) == 0 })
		require.True(t, ok, "the stalled upstream request must be cancelled")
		rs := e.replicaState(a.Addr())
		assert.True(t, rs.Cooling, "%+v", rs)
		assert.Equal(t, "transport", rs.CoolReason)
	})
	t.Run("only replica", func(t *testing.T) {
		e := newEnv(t, 1, nil, cfg)
		e.rep(0).SetFault(fakereplica.FaultStall)
		id := newID(t)
		start := time.Now()
		res := e.do(id, chatBody(false, false, "stall alone"), nil)
		el := time.Since(start)
		requireAPIError(t, res, http.StatusServiceUnavailable, "")
		assert.GreaterOrEqual(t, retryAfter(res), 1)
		assert.GreaterOrEqual(t, el, 600*time.Millisecond, "the answer comes after response_header_timeout")
		rcs, ok := e.tracker.WaitEnded(id, 3*time.Second)
		require.True(t, ok)
		require.Len(t, rcs, 1)
		assert.Equal(t, fakereplica.OutcomeCancelled, rcs[0].Outcome, "the stalled upstream request must be cancelled")
	})
}

// TestDeathMidStream proves that a replica dying after the first chunks
// (connection reset or closed without the final chunk) is shown to the
// client as a broken stream: the chunks already sent, then an error, no
// [DONE]; the request is not sent again anywhere; the replica cools
// ("stream_broken"). The same holds for a death right after the headers,
// for a client that did not ask for usage (the usage chunk is stripped),
// and for a JSON answer cut in half. A streaming replica cuts only once
// the test has read what came before the cut, and a reset waits until what
// was written has been received, so that it cannot overtake it.
func TestDeathMidStream(t *testing.T) {
	cases := []struct {
		name                 string
		cutAfter             int
		cutMode              string
		includeUsage, stream bool
	}{
		{"stream reset after 2 chunks", 2, "rst", true, true},
		{"stream closed after 2 chunks", 2, "fin", true, true},
		{"stream reset after headers", 0, "rst", true, true},
		{"stream without usage reset after 3 chunks", 3, "rst", false, true},
		{"stream reset after the last content chunk", 5, "rst", true, true},
		{"json reset midway", 0, "rst", false, false},
		{"json closed midway", 0, "fin", false, false},
		// An answer without HTTP framing (Connection: close) that the
		// replica ends early by closing cleanly: only the protocol shows
		// the cut (no [DONE], half a JSON body), and llm_route aborts the
		// client's connection itself.
		{"unframed stream closed after 2 chunks", 2, fakereplica.CutUnframed, true, true},
		{"unframed stream closed after headers", 0, fakereplica.CutUnframed, true, true},
		{"unframed stream without usage closed after the last content chunk", 5, fakereplica.CutUnframed, false, true},
		{"unframed json closed midway", 0, fakereplica.CutUnframed, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, 2, nil, baseConfig())
			id := newID(t)
			hdr := map[string]string{
				fakereplica.HeaderFault: fakereplica.FaultCut, fakereplica.HeaderCutAfter: fmt.Sprint(c.cutAfter),
				fakereplica.HeaderChunks: "5", fakereplica.HeaderCutMode: c.cutMode,
			}
			var res *result
			if c.stream {
				// The replica cuts when told, after the test read what
				// came before.
				hdr[fakereplica.HeaderCutWait] = "1"
				s := e.open(id, chatBody(true, c.includeUsage, "die midway"), hdr)
				require.Equal(t, http.StatusOK, s.res.Status)
				for k := range c.cutAfter {
					ev := readEvent(t, s, 5*time.Second)
					assert.Contains(t, ev, fmt.Sprintf("tok%d ", k))
				}
				e.tracker.Cut(id)
				res = s.finish()
			} else {
				// Caddy holds a small JSON head in its buffer: nothing
				// to read before the cut.
				res = e.do(id, chatBody(false, false, "die midway"), hdr)
				require.NoError(t, res.Err, "a cut JSON answer may show as a status then an error, never as nothing")
				require.Equal(t, http.StatusOK, res.Status)
			}
			requireStreamBroken(t, res)
			if c.stream {
				assert.Len(t, res.Events, c.cutAfter, "exactly the chunks sent before the cut reach the client")
			}
			rcs, ok := e.tracker.WaitEnded(id, 5*time.Second)
			require.True(t, ok)
			require.Len(t, rcs, 1, "no retry after the first byte")
			assert.Equal(t, fakereplica.OutcomeCut, rcs[0].Outcome)
			st := e.waitState(2*time.Second, "cooldown", func(st stateapi.State) bool {
				r, _ := st.Replica(rcs[0].Replica)
				return r.Cooling
			})
			r, _ := st.Replica(rcs[0].Replica)
			reason := "stream_broken"
			if c.cutMode == fakereplica.CutUnframed {
				reason = "stream_incomplete"
			}
			assert.Equal(t, reason, r.CoolReason)
			assert.Contains(t, e.metrics(), `outcome="`+reason+`",replica="`+rcs[0].Replica+`"`)
			assert.NotContains(t, e.metrics(), `outcome="ok",replica="`+rcs[0].Replica+`"`)
		})
	}
}

// TestRetrySendsTheWholeBody proves that a request retried on another
// replica carries its whole body there, even when the refusing replica
// answered (429, as a rate limiter in front of an engine may) before it
// read the body: the healthy replica gets the complete request, is not
// blamed, and the client gets its answer. The race it guards against
// (the previous attempt's body writer still running when the retry reads
// the body) is timing-dependent, so the case runs up to 60 retried
// requests and stops at the first broken one.
func TestRetrySendsTheWholeBody(t *testing.T) {
	cfg := baseConfig()
	cfg.MaxBodyBytes = "4MiB"
	cfg.CooldownBase, cfg.CooldownMax = time.Millisecond, time.Millisecond
	// A's small receive buffer keeps the proxy writing the body to A
	// while A's early 429 is already back.
	e := newEnv(t, 2, nil, cfg, fakereplica.Options{RecvBuffer: 16 << 10})
	a, b := e.rep(0), e.rep(1)
	a.SetFault(fakereplica.Fault429)
	body := chatBody(false, false, strings.Repeat("a long document to summarise. ", 1<<20/30))
	retried := 0
	for i := 0; i < 120 && retried < 60; i++ {
		id := newID(t)
		res := e.do(id, body, map[string]string{fakereplica.HeaderEarly: "1", fakereplica.HeaderRetryAfter: "none"})
		require.NoError(t, res.Err)
		rcs := e.tracker.Receipts(id)
		if len(rcs) < 2 {
			require.Equal(t, http.StatusOK, res.Status, "request %d: body %.300s", i, res.Body)
			continue
		}
		retried++
		last := rcs[len(rcs)-1]
		require.Equal(t, b.Addr(), last.Replica)
		require.Equal(t, len(body), last.BodyLen, "retry %d: B received %d of %d body bytes (err %q); the client got %d %.200s",
			retried, last.BodyLen, len(body), last.BodyErr, res.Status, res.Body)
		require.Equal(t, http.StatusOK, res.Status, "retry %d: body %.300s", retried, res.Body)
		rs := e.replicaState(b.Addr())
		require.False(t, rs.Cooling, "the healthy replica must not be blamed for a broken retry: %+v", rs)
	}
	assert.Positive(t, retried)
}
