package caddymodule

import (
	"errors"
	"net"
	"net/http/httptrace"
)

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
		cur := rc.cur
		var ne net.Error
		switch {
		case err == nil:
			rc.gotConn = cur
		case errors.As(err, &ne) && ne.Timeout():
			rc.dialTimedOut = cur
		}
		rc.mu.Unlock()
		if err == nil && cur != nil {
			cur.rep.connected()
		}
	}
	return &rc.trace
}

// dialTimeout reports whether the attempt in progress failed to connect
// within the dial timeout.
func (rc *routeCtx) dialTimeout() bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.cur != nil && rc.dialTimedOut == rc.cur && rc.gotConn != rc.cur
}
