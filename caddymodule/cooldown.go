package caddymodule

import "time"

// Cooldown: a replica that fails is taken out of rotation for a capped,
// exponentially growing while, then let back in through one probe request
// (attempt.go judges the probe at its response headers). Dial timeouts are
// softer than other failures: they cool a replica only when they repeat.

// cooldownConfig bounds the backoff of a failing replica and says how
// many dial timeouts in a row (within dialWindow of each other) cool it.
type cooldownConfig struct {
	base, max  time.Duration
	dialFails  int
	dialWindow time.Duration
}

// reasonDialTimeout is the failure reason of an attempt whose connection
// could not be established within the transport's dial timeout.
const reasonDialTimeout = "dial_timeout"

// failedLocked applies the failure o of an attempt that began at started
// and reports whether the replica began (or extended) a cooldown: always,
// except for a dial timeout that does not yet complete a streak.
func (s *replicaState) failedLocked(now, started time.Time, o outcome, cd cooldownConfig) bool {
	if o.reason == reasonDialTimeout && !s.countDialTimeoutLocked(now, started, cd) {
		return false
	}
	s.failLocked(now, o.reason, o.retryAfter, cd)
	return true
}

// failLocked starts (or extends) a cooldown with capped exponential backoff,
// honouring the replica's Retry-After up to the cap.
func (s *replicaState) failLocked(now time.Time, reason string, retryAfter time.Duration, cd cooldownConfig) {
	s.failures++
	d := cd.base
	for i := 1; i < s.failures && d < cd.max; i++ {
		d *= 2
	}
	if retryAfter > d {
		d = retryAfter
	}
	if d > cd.max {
		d = cd.max
	}
	until := now.Add(d)
	if until.After(s.coolUntil) {
		s.coolUntil = until
	}
	s.coolReason = reason
	s.needProbe = true
	metricCooldowns.WithLabelValues(s.addr, reason).Inc()
	// Queued requests wait on releases; a cooldown ending is a release too.
	if s.wakeTimer != nil {
		s.wakeTimer.Stop()
	}
	addr := s.addr
	s.wakeTimer = s.clk.AfterFunc(s.coolUntil.Sub(now)+time.Millisecond, func() { waiters.wake(addr) })
}

// trustLocked marks the replica healthy again and reports whether it was
// awaiting a probe's success (then its whole cap opens).
func (s *replicaState) trustLocked() bool {
	opened := s.needProbe
	s.failures = 0
	s.needProbe = false
	s.coolReason = ""
	return opened
}

// countDialTimeoutLocked counts a dial timeout of an attempt that began at
// started and reports whether the replica must cool now. A dial timeout
// alone does not say the replica is down: under a burst of new connections
// its accept queue overflows and dials time out while it serves. Timeouts
// of dials that overlapped count once (only an attempt that began after
// the last counted timeout counts again), so a burst is one event, while
// a replica that is truly unreachable gathers cd.dialFails of them in as
// many dial timeouts. The streak ends with any connection or success from
// the replica, or after cd.dialWindow without another counted timeout.
func (s *replicaState) countDialTimeoutLocked(now, started time.Time, cd cooldownConfig) bool {
	if cd.dialFails <= 1 {
		return true
	}
	if s.dialTimeouts > 0 && now.Sub(s.dialLast) > cd.dialWindow {
		s.dialTimeouts = 0
	}
	if s.dialTimeouts > 0 && !started.After(s.dialLast) {
		return false // dialled while the last counted timeout was pending
	}
	s.dialTimeouts++
	s.dialLast = now
	if s.dialTimeouts < cd.dialFails {
		return false
	}
	s.dialTimeouts = 0
	return true
}

// connected records that a connection to the replica was established: it
// accepts connections, so earlier dial timeouts were a passing overflow.
func (s *replicaState) connected() {
	s.mu.Lock()
	s.dialTimeouts = 0
	s.mu.Unlock()
}
