package caddymodule

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// outcomeKind is what an attempt's end says of its replica.
type outcomeKind int

const (
	// outcomeSuccess: the replica answered and the answer was relayed whole.
	outcomeSuccess outcomeKind = iota
	// outcomeNeutral: nothing learned about the replica (client went away,
	// the request was bad, a 4xx answer).
	outcomeNeutral
	// outcomeFailure: the replica failed; it cools down.
	outcomeFailure
)

// outcome is how one attempt on a replica ended: its kind, and for a
// failure the reason (a metrics label), the status the replica answered
// (0 for a transport failure) and its Retry-After.
type outcome struct {
	kind       outcomeKind
	reason     string
	status     int
	retryAfter time.Duration
	// reqID identifies the request's content (routeCtx.requestID) on a
	// status failure, so that a replica's streak counts distinct requests.
	reqID uint64
}

// Failure reasons of an answered request.
const (
	// reasonRateLimited: the replica answered 429.
	reasonRateLimited = "429"
	// reasonUnavailable: the replica answered 503.
	reasonUnavailable = "503"
	// reasonStatus: the replica answered a status in fail_status. Unlike
	// the others it may be the request's fault (an input the engine
	// mishandles), so it cools the replica only when it repeats
	// (cooldown.go, countStatusFailLocked).
	reasonStatus = "5xx"
	// reasonIncomplete: the answer ended without its protocol's end (no
	// [DONE], message_stop or response.completed; a JSON body cut
	// short) where HTTP framing could not tell; the client's connection
	// was aborted (answerend.go).
	reasonIncomplete = "stream_incomplete"
)

// Outcomes without detail.
var (
	succeeded  = outcome{kind: outcomeSuccess}
	neutralEnd = outcome{kind: outcomeNeutral}
)

// failed is a failure for reason, with the replica's Retry-After (0 if
// none).
func failed(reason string, retryAfter time.Duration) outcome {
	return outcome{kind: outcomeFailure, reason: reason, retryAfter: retryAfter}
}

// settle classifies how a request ended for the attempt in progress (a, nil
// when none was made) and names the ending for the requests metric.
// returned is false when reverse_proxy did not return: it panicked with
// http.ErrAbortHandler because the replica broke the stream midway.
func settle(r *http.Request, ww *routeWriter, a *attempt, returned bool) (outcome, string) {
	clientGone := r.Context().Err() != nil
	switch {
	case ww.cut:
		return failed(reasonIncomplete, 0), reasonIncomplete
	case !returned && clientGone:
		return neutralEnd, "client_disconnect"
	case !returned:
		return failed("stream_broken", 0), "stream_broken"
	case a != nil && !ww.wroteHeader:
		return previousAttempt(r, a.rules.failStatus), "upstream_error"
	case clientGone:
		return neutralEnd, "client_disconnect"
	case a == nil:
		return neutralEnd, "rejected"
	}
	o := classifyStatus(ww.status, a.rules.failStatus)
	switch {
	case o.kind == outcomeFailure:
		o.retryAfter = parseRetryAfter(ww.Header().Get("Retry-After"), time.Now())
		return o, "upstream_" + o.reason
	case ww.status >= 400:
		return o, "upstream_4xx"
	}
	return o, "ok"
}

// Placeholders reverse_proxy sets after each upstream round trip; Select
// reads them on a retry to learn how the previous attempt ended.
const (
	phStatus     = "http.reverse_proxy.status_code"
	phRetryAfter = "http.reverse_proxy.header.Retry-After"
)

// previousAttempt classifies the attempt that just failed before reaching
// the client. A status placeholder means the replica answered and a
// retry_match rule rejected the answer (for example 429 or 503); no status
// means the round trip itself failed: by dial timeout ("dial_timeout",
// which cools the replica only when it repeats) or otherwise (refused,
// reset, no headers in time: "transport").
func previousAttempt(r *http.Request, failStatus map[int]bool) outcome {
	repl, _ := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	var v any
	ok := false
	if repl != nil {
		v, ok = repl.Get(phStatus)
	}
	if !ok {
		if rc := getRouteCtx(r); rc != nil && rc.dialTimeout() {
			return failed(reasonDialTimeout, 0)
		}
		return failed("transport", 0)
	}
	status, _ := v.(int)
	o := classifyStatus(status, failStatus)
	o.retryAfter = upstreamRetryAfter(r)
	return o
}

// upstreamRetryAfter is the Retry-After of the last upstream answer, 0 if
// it had none.
func upstreamRetryAfter(r *http.Request) time.Duration {
	if repl, _ := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); repl != nil {
		if h, ok := repl.GetString(phRetryAfter); ok {
			return parseRetryAfter(h, time.Now())
		}
	}
	return 0
}

// clearAttemptPlaceholders forgets the previous attempt's status so that a
// later Select does not mistake it for the new attempt's.
func clearAttemptPlaceholders(r *http.Request) {
	if repl, _ := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); repl != nil {
		repl.Delete(phStatus)
	}
}

// classifyStatus maps an upstream status to what it says of the replica.
func classifyStatus(status int, failStatus map[int]bool) outcome {
	var o outcome
	switch {
	case status == http.StatusTooManyRequests:
		o = failed(reasonRateLimited, 0)
	case status == http.StatusServiceUnavailable:
		o = failed(reasonUnavailable, 0)
	case failStatus[status]:
		o = failed(reasonStatus, 0)
	}
	if o.kind == outcomeFailure {
		o.status = status
		return o
	}
	switch {
	case status >= 200 && status < 400:
		return succeeded
	}
	// Other 4xx: the request was at fault, not the replica.
	return neutralEnd
}

// parseRetryAfter reads a Retry-After value in seconds or as an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil {
		if n < 0 {
			return 0
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// retryAfterSeconds formats d for a Retry-After header, at least 1 second.
func retryAfterSeconds(d time.Duration) string {
	s := int((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return strconv.Itoa(s)
}
