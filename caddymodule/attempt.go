package caddymodule

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
)

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
func previousAttempt(r *http.Request, failStatus map[int]bool) (outcome, string, time.Duration) {
	repl, _ := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	var v any
	ok := false
	if repl != nil {
		v, ok = repl.Get(phStatus)
	}
	if !ok {
		if rc := getRouteCtx(r); rc != nil && rc.dialTimeout() {
			return outcomeFailure, reasonDialTimeout, 0
		}
		return outcomeFailure, "transport", 0
	}
	status, _ := v.(int)
	o, reason := classifyStatus(status, failStatus)
	return o, reason, upstreamRetryAfter(r)
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
func classifyStatus(status int, failStatus map[int]bool) (outcome, string) {
	switch {
	case status == http.StatusTooManyRequests:
		return outcomeFailure, "429"
	case status == http.StatusServiceUnavailable:
		return outcomeFailure, "503"
	case failStatus[status]:
		return outcomeFailure, "5xx"
	case status >= 200 && status < 400:
		return outcomeSuccess, ""
	}
	// Other 4xx: the request was at fault, not the replica.
	return outcomeNeutral, ""
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
