package caddymodule

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/cespare/xxhash/v2"

	"github.com/llmroute/caddy-llmroute/policies"
)

// routeVarKey is the caddyhttp var under which llm_route hands the routing
// context to the selection policy (Select sees a request clone that shares
// the context, so vars are the way through).
const routeVarKey = "llmroute.route"

// routeCtx is one request's routing state, shared by the handler (which
// creates it and settles it) and the policy (which starts its attempts).
// It owns the attempt in progress; mu is locked only in this file and in
// dialtrace.go, which records the attempts' dials.
type routeCtx struct {
	req     *policies.Request
	started time.Time
	// session is the request's session identity ("" for none) and
	// sessionKey its key (session.go); set before the policy runs.
	session    string
	sessionKey uint64
	// pin is the replica that holds the state a /v1/responses follow-up
	// continues ("" for none), pinKey the state's key (session.go).
	pin    string
	pinKey uint64
	// shared is llm_route's shared store (nil without one), where a
	// response's pin is written as its id streams by (sharedpins.go).
	shared *sharedStore
	// lease is the request's lease of its tenant's max_in_flight across
	// the instances (sharedleases.go); nil for none.
	lease *lease
	// tk is the request's admission ticket (budgets.go): its tenant, band
	// and estimate; nil without llm_route's tenants. Set before the
	// policy runs; its slot is given back by finish.
	tk *ticket
	// ph are the values of the {llm.*} placeholders (placeholders.go).
	ph placeholderValues

	mu sync.Mutex
	// body is the body as sent upstream; nil when not read, and dropped
	// at the first byte of the answer (no retry can follow).
	body []byte
	// buf is the buffer the body was read into (body.go); inBuf says body
	// still lies in it, under the request's hold, and own is the reader
	// the handler left on the request, which nobody reads once an attempt
	// has its own.
	buf    *bodyBuf
	bufGen uint64
	inBuf  bool
	own    io.Closer
	// ownR is own's storage when the body is pooled: the handler's reader
	// lives as long as the request, so it needs no allocation of its own.
	ownR pooledReader
	// cur is the attempt in progress, if any.
	cur *attempt
	// tried lists the replicas this request has been sent to; it only
	// grows (triedList hands out its header), in triedBuf for the first
	// two.
	tried    []string
	triedBuf [2]string
	// reject is set when the policy gave up; retryAfter goes with it.
	reject     rejectReason
	retryAfter time.Duration
	// done is set once the handler has settled the request.
	done bool
	// id is the request's identity (requestIDLocked), 0 until needed.
	id uint64
	// failedOn is the last attempt that ended with a status failure, and
	// failedStatus its status: the same status from the next replica makes
	// it the request's fault (judgeLocked).
	failedOn     *attempt
	failedStatus int
	// dialTimedOut and gotConn name the attempt whose dial to the replica
	// timed out, and the one that got a connection: an attempt that failed
	// without an answer, whose dial timed out and that got no connection,
	// failed by dial timeout.
	dialTimedOut, gotConn *attempt
	// holds is where the request passed its slot hold (slot_hold; nil
	// when it passed none) and place its place there, which endHold (or
	// finish) gives back.
	holds *slotHolds
	place *holdPlace
	// pick is why the policy chose the replica of the latest attempt
	// (pickreason.go), for the access log; queued says the request went
	// through the wait queue.
	pick   string
	queued bool
	// trace is the client trace the handler puts in the request's context
	// (see dialTrace); it lives here to save an allocation per request.
	trace httptrace.ClientTrace
}

// init sets a fresh (zero) routing context up: that of a request that
// started at now; req and body are nil for a request without a parsed
// body.
func (rc *routeCtx) init(now time.Time, req *policies.Request, body []byte) {
	rc.started, rc.req, rc.body = now, req, body
}

// holdBody makes the request's hold on buf, where its body lies, the
// context's, and returns the reader the handler leaves on the request.
func (rc *routeCtx) holdBody(buf *bodyBuf) io.ReadCloser {
	rc.buf, rc.bufGen, rc.inBuf = buf, buf.generation(), buf != nil
	var r io.ReadCloser
	if buf != nil && buf.class >= 0 {
		r = buf.readerInto(&rc.ownR, rc.body)
	} else {
		r = buf.reader(rc.body)
	}
	rc.own = r
	return r
}

// releaseBodyLocked gives back the request's hold on the body's buffer.
func (rc *routeCtx) releaseBodyLocked() {
	if rc.inBuf {
		rc.inBuf = false
		rc.buf.drop()
	}
}

// getRouteCtx returns the routing context of r, or nil if llm_route did not
// run before the policy.
func getRouteCtx(r *http.Request) *routeCtx {
	v, _ := caddyhttp.GetVar(r.Context(), routeVarKey).(*routeCtx)
	return v
}

// keys returns the request's prefix keys (none for an unparsed body).
func (rc *routeCtx) keys() policies.Keys {
	if rc.req == nil {
		return policies.Keys{}
	}
	return rc.req.Keys
}

// pending reports whether an attempt is in progress (so a Select call is a
// retry) and whether the policy already refused the request.
func (rc *routeCtx) pending() (inProgress, refused bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.cur != nil, rc.reject != rejectNone
}

// wasTried reports whether the request was already sent to addr.
func (rc *routeCtx) wasTried(addr string) bool {
	return triedIn(rc.triedList(), addr)
}

// triedList returns the replicas the request was sent to so far, for a
// selection to check each replica without a lock per replica. The list
// only grows, so the slice stays valid as it is.
func (rc *routeCtx) triedList() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.tried
}

// triedIn reports whether addr is in tried.
func triedIn(tried []string, addr string) bool {
	for _, a := range tried {
		if a == addr {
			return true
		}
	}
	return false
}

// begin makes a the attempt in progress. It refuses (and ends a) when the
// handler already settled the request, which can happen only if Select
// races the end of the request.
func (rc *routeCtx) begin(a *attempt) bool {
	rc.mu.Lock()
	done := rc.done
	if !done {
		rc.cur = a
		if rc.tried == nil {
			rc.tried = rc.triedBuf[:0]
		}
		rc.tried = append(rc.tried, a.rep.addr)
	}
	rc.mu.Unlock()
	if done {
		a.end(neutralEnd)
	}
	return !done
}

// current returns the attempt in progress, nil if none.
func (rc *routeCtx) current() *attempt {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.cur
}

// endCurrent ends the attempt in progress with o (a retry follows).
func (rc *routeCtx) endCurrent(o outcome) {
	rc.mu.Lock()
	cur := rc.cur
	rc.cur = nil
	var forgive *attempt
	if cur != nil {
		o, forgive = rc.judgeLocked(cur, o)
	}
	rc.mu.Unlock()
	rc.endJudged(cur, o, forgive)
}

// finish ends whatever is still held with o; the handler calls it once,
// from a defer, so that it runs on success, error, abort panic and
// disconnect.
func (rc *routeCtx) finish(o outcome) {
	rc.mu.Lock()
	cur := rc.cur
	rc.cur = nil
	rc.done = true
	var forgive *attempt
	if cur != nil {
		o, forgive = rc.judgeLocked(cur, o)
	}
	if rc.inBuf {
		rc.body = nil // its buffer goes back to the pool
	}
	rc.releaseBodyLocked()
	rc.mu.Unlock()
	rc.buf.retire(rc.bufGen) // nothing reads the body any more (body.go)
	waiters.release(rc.tk)   // the tenant's slot (waitqueue.go)
	rc.endJudged(cur, o, forgive)
	rc.endHold(holdSample{})
}

// held reports whether the request has passed its slot hold.
func (rc *routeCtx) held() bool { return rc.holds != nil }

// hold passes the request's slot hold (slothold.go): it may wait, up to
// limit, while a request of its prompt runs, then counts as running until
// endHold. False means the client left while it waited.
func (rc *routeCtx) hold(ctx context.Context, holds *slotHolds, head uint64, promptBytes int, limit time.Duration) bool {
	place, out := holds.enter(ctx, head, promptBytes, limit)
	metricSlotHolds.WithLabelValues(string(out)).Inc()
	rc.holds = holds
	if place == nil {
		return false
	}
	rc.mu.Lock()
	rc.place = place
	rc.mu.Unlock()
	return true
}

// endHold gives back the request's place among the running requests of
// its prompt, once, with what it took (s).
func (rc *routeCtx) endHold(s holdSample) {
	rc.mu.Lock()
	p := rc.place
	rc.place = nil
	rc.mu.Unlock()
	if p != nil {
		rc.holds.leave(p, s)
	}
}

// judgeLocked decides whose fault a status failure of attempt a is. The
// same status from a second replica means the request is at fault, not
// the replicas: the attempt ends neutral and the earlier replica forgets
// the failure (returned as forgive). Otherwise the failure is stamped with
// the request's identity for the replica's streak.
func (rc *routeCtx) judgeLocked(a *attempt, o outcome) (outcome, *attempt) {
	if o.kind != outcomeFailure || o.reason != reasonStatus {
		return o, nil
	}
	if rc.failedOn != nil && rc.failedOn.rep != a.rep && rc.failedStatus == o.status {
		return neutralEnd, rc.failedOn
	}
	rc.failedOn, rc.failedStatus = a, o.status
	o.reqID = rc.requestIDLocked()
	return o, nil
}

// endJudged ends a with o and takes the request's failure back from the
// replica of forgive.
func (rc *routeCtx) endJudged(a *attempt, o outcome, forgive *attempt) {
	if forgive != nil {
		forgive.rep.forgiveStatusFail(rc.requestID())
	}
	if a != nil {
		a.end(o)
	}
}

// requestID returns the request's identity.
func (rc *routeCtx) requestID() uint64 {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.requestIDLocked()
}

// requestIDLocked identifies the request's content: a hash of its body,
// so that the same input sent again has the same identity. It is computed
// when first needed (a status failure), before the body is dropped
// (answered runs before the first byte); a request without a body gets a
// unique identity.
func (rc *routeCtx) requestIDLocked() uint64 {
	if rc.id == 0 {
		if rc.body != nil {
			rc.id = xxhash.Sum64(rc.body) | 1
		} else {
			rc.id = uniqueIDs.Add(2) // even: never a body's hash
		}
	}
	return rc.id
}

// uniqueIDs numbers requests without a body.
var uniqueIDs atomic.Uint64

// refuse records an admission refusal and counts it.
func (rc *routeCtx) refuse(r rejectReason, retryAfter time.Duration) {
	rc.mu.Lock()
	rc.reject, rc.retryAfter = r, retryAfter
	rc.mu.Unlock()
	metricRejected.WithLabelValues(r.String()).Inc()
	if rc.tk != nil {
		metricTenantRejected.WithLabelValues(rc.tk.flow, r.String()).Inc()
	}
}

// rejection returns the policy's refusal, rejectNone if there was none.
func (rc *routeCtx) rejection() (rejectReason, time.Duration) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.reject, rc.retryAfter
}

// attemptBody returns a fresh reader over the request body for one
// upstream attempt, false when there is no body to send. Select installs
// it on the request right before reverse_proxy sends it: the transport of
// a failed attempt may still hold (and later close) the previous reader on
// its own goroutine, so sharing one rewinding reader between attempts
// races and can send a retry a cut body. A new reader per attempt cannot.
func (rc *routeCtx) attemptBody() (io.ReadCloser, int64, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	b := rc.body
	if b == nil {
		return nil, 0, false
	}
	if rc.inBuf {
		return rc.buf.reader(b), int64(len(b)), true
	}
	return bodyReader(b), int64(len(b)), true
}

// attemptBodyBytes returns the body attempts send (false when none).
func (rc *routeCtx) attemptBodyBytes() ([]byte, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.body, rc.body != nil
}

// setBody replaces the body every later attempt sends.
func (rc *routeCtx) setBody(b []byte) {
	rc.mu.Lock()
	rc.body = b
	rc.releaseBodyLocked()
	rc.mu.Unlock()
}

// attempted reports whether the request was sent to any replica.
func (rc *routeCtx) attempted() bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.tried) > 0
}

// bodyReader is one attempt's reader over body.
func bodyReader(body []byte) io.ReadCloser { return io.NopCloser(bytes.NewReader(body)) }

// firstByte marks the attempt in progress as answering. No retry can
// follow, so the body is no longer needed: the request's hold on its
// buffer goes, and so does the handler's reader when an attempt sends its
// own, so that the buffer goes back to its pool as soon as the transport
// has sent it (not when a long stream ends).
func (rc *routeCtx) firstByte() {
	rc.mu.Lock()
	cur := rc.cur
	rc.body = nil
	rc.releaseBodyLocked()
	own := rc.own
	if cur != nil {
		rc.own = nil
	}
	rc.mu.Unlock()
	if cur != nil {
		if own != nil {
			_ = own.Close()
		}
		cur.firstByte()
	}
}

// answered passes the status of the response headers relayed to the
// client to the attempt in progress (a probe is judged there). A failure
// status fixes the request's identity while the body is still at hand.
func (rc *routeCtx) answered(status int) {
	rc.mu.Lock()
	cur := rc.cur
	if status >= 500 {
		rc.requestIDLocked()
	}
	rc.mu.Unlock()
	if cur != nil {
		cur.answered(status)
	}
}
