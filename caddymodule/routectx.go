package caddymodule

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/llmroute/caddy-llmroute/policies"
)

// routeVarKey is the caddyhttp var under which llm_route hands the routing
// context to the selection policy (Select sees a request clone that shares
// the context, so vars are the way through).
const routeVarKey = "llmroute.route"

// rejectReason says why the policy gave up on a request without an upstream.
type rejectReason int

const (
	rejectNone       rejectReason = iota
	rejectQueueFull               // bounded wait queue was full -> 429
	rejectQueueWait               // waited past queue_timeout -> 429
	rejectNoHealthy               // every replica is cooling or tried -> 503
	rejectNoReplicas              // the pool is empty -> 503
)

func (r rejectReason) String() string {
	switch r {
	case rejectQueueFull:
		return "queue_full"
	case rejectQueueWait:
		return "queue_timeout"
	case rejectNoHealthy:
		return "no_healthy_replica"
	case rejectNoReplicas:
		return "no_replicas"
	}
	return "none"
}

// routeCtx is one request's routing state, shared by the handler (which
// creates it and releases it) and the policy (which reserves and records).
type routeCtx struct {
	req     *policies.Request
	body    []byte // the body as sent upstream; nil when not read
	started time.Time

	mu sync.Mutex
	// current is the reservation of the attempt in progress, if any.
	current *reservation
	// currentAddr is the replica of the attempt in progress.
	currentAddr string
	// cd is the cooldown config of the policy that took current.
	cd cooldownConfig
	// failStatus lists the statuses the policy treats as replica failures.
	failStatus map[int]bool
	// tried lists the replicas this request has been sent to.
	tried []string
	// attempts counts upstream attempts.
	attempts int
	// predicted is the number of blocks the index believed resident on the
	// chosen replica.
	predicted int
	// concurrent is set when another request with the same first block
	// was awaiting its first byte on the chosen replica (see
	// reservation.concurrent): a miss then says nothing about the index.
	concurrent bool
	// strategy names the strategy that decided.
	strategy string
	// indexMax is the policy's configured index capacity.
	indexMax int
	// reject is set when the policy gave up; retryAfter goes with it.
	reject     rejectReason
	retryAfter time.Duration
	// released is set once the handler has released everything.
	released bool
	// dialTimedOut and gotConn name the attempt (by its reservation) whose
	// dial to the replica timed out, and the one that got a connection:
	// an attempt that failed without an answer, whose dial timed out and
	// that got no connection, failed by dial timeout.
	dialTimedOut, gotConn *reservation
	// trace is the client trace the handler puts in the request's context
	// (see dialTrace); it lives here to save an allocation per request.
	trace httptrace.ClientTrace
}

// getRouteCtx returns the routing context of r, or nil if llm_route did not
// run before the policy.
func getRouteCtx(r *http.Request) *routeCtx {
	v, _ := caddyhttp.GetVar(r.Context(), routeVarKey).(*routeCtx)
	return v
}

func (rc *routeCtx) wasTried(addr string) bool {
	for _, a := range rc.tried {
		if a == addr {
			return true
		}
	}
	return false
}

// attach records a new attempt's reservation. It refuses (and releases the
// reservation) when the handler already finished, which can happen only if
// Select races the end of the request.
func (rc *routeCtx) attach(res *reservation, addr string, cd cooldownConfig, fail map[int]bool, predicted int, strategy string, indexMax int) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.released {
		res.release(outcomeNeutral, "", 0, cd)
		return false
	}
	rc.current, rc.currentAddr, rc.cd, rc.failStatus = res, addr, cd, fail
	rc.tried = append(rc.tried, addr)
	rc.attempts++
	rc.predicted = predicted
	rc.concurrent = res.concurrent
	rc.strategy = strategy
	rc.indexMax = indexMax
	return true
}

// endAttempt releases the attempt in progress with the given outcome and
// returns the replica it was on ("" if none).
func (rc *routeCtx) endAttempt(o outcome, reason string, retryAfter time.Duration) string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.current == nil {
		return ""
	}
	rc.current.release(o, reason, retryAfter, rc.cd)
	rc.current = nil
	return rc.currentAddr
}

// firstByte marks the attempt in progress as answering. No retry can
// follow, so the body is no longer needed.
func (rc *routeCtx) firstByte() {
	rc.mu.Lock()
	cur := rc.current
	rc.body = nil
	rc.mu.Unlock()
	if cur != nil {
		cur.firstByte()
	}
}

// dialTrace returns the client trace that tells this request's attempts'
// dial timeouts from other transport errors. reverse_proxy dials with the
// request's context (less its cancellation), so these hooks see the dials
// made for this request's attempts.
func (rc *routeCtx) dialTrace() *httptrace.ClientTrace {
	// ConnectDone alone: a pooled connection makes no dial (nothing to
	// record), and of several dials of one attempt (happy eyeballs) one
	// that connects marks the attempt as connected.
	rc.trace.ConnectDone = func(_, _ string, err error) {
		rc.mu.Lock()
		cur := rc.current
		var ne net.Error
		switch {
		case err == nil:
			rc.gotConn = cur
		case errors.As(err, &ne) && ne.Timeout():
			rc.dialTimedOut = cur
		}
		rc.mu.Unlock()
		if err == nil && cur != nil {
			cur.replica.connected()
		}
	}
	return &rc.trace
}

// dialTimeout reports whether the attempt in progress failed to connect
// within the dial timeout.
func (rc *routeCtx) dialTimeout() bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.current != nil && rc.dialTimedOut == rc.current && rc.gotConn != rc.current
}

// answered passes the status of the response headers relayed to the
// client to the attempt in progress (a probe is judged there).
func (rc *routeCtx) answered(status int) {
	rc.mu.Lock()
	cur, fail := rc.current, rc.failStatus
	rc.mu.Unlock()
	if cur != nil {
		cur.answered(status, fail)
	}
}

// finish releases whatever is still held; the handler calls it once, from a
// defer, so that it runs on success, error, abort panic and disconnect.
func (rc *routeCtx) finish(o outcome, reason string, retryAfter time.Duration) {
	rc.mu.Lock()
	cur, cd := rc.current, rc.cd
	rc.current = nil
	rc.released = true
	rc.mu.Unlock()
	if cur != nil {
		cur.release(o, reason, retryAfter, cd)
	}
}

// attemptBody returns a fresh reader over the request body for one
// upstream attempt. Select installs it on the request right before
// reverse_proxy sends it: the transport of a failed attempt may still hold
// (and later close) the previous reader on its own goroutine, so sharing
// one rewinding reader between attempts races and can send a retry a cut
// body. A new reader per attempt cannot.
func attemptBody(b []byte) io.ReadCloser {
	return io.NopCloser(bytes.NewReader(b))
}
