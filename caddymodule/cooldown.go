package caddymodule

import "time"

// Cooldown: a replica that fails is taken out of rotation for a capped,
// exponentially growing while, then let back in through one probe request
// (attempt.go judges the probe at its response headers).
//
// Which failures say the replica is at fault:
//   - a refused or reset connection, a stream broken midway, a 503 or a
//     429 (the replica's own word that it is down or busy): the replica,
//     at once;
//   - a dial timeout: the replica only when it repeats (a healthy replica
//     whose accept queue overflows under a burst times out dials too);
//   - a status in fail_status (500, 502, 504 by default): the replica only
//     when it repeats across distinct requests, because an engine answers
//     500 to an input it mishandles, and a key holder who sends such
//     inputs must not take replicas out. A request that already failed
//     with the same status on another replica is the request's fault
//     (routeCtx.judge), and status failures alone never cool every
//     replica: the least recently failed one stays routable (pick.go).

// cooldownConfig bounds the backoff of a failing replica and says how
// many dial timeouts in a row (within dialWindow of each other), and how
// many status failures of distinct requests in a row, cool it.
type cooldownConfig struct {
	base, max   time.Duration
	dialFails   int
	dialWindow  time.Duration
	statusFails int
}

// reasonDialTimeout is the failure reason of an attempt whose connection
// could not be established within the transport's dial timeout.
const reasonDialTimeout = "dial_timeout"

// failedLocked applies the failure o of an attempt that began at started
// and reports whether the replica began (or extended) a cooldown: always,
// except for a dial timeout or a status failure that does not yet complete
// its streak. A status failure of the probe cools the replica again at
// once: it was already on probation.
func (s *replicaState) failedLocked(now, started time.Time, probe bool, o outcome, cd cooldownConfig) bool {
	switch {
	case o.reason == reasonDialTimeout:
		if !s.countDialTimeoutLocked(now, started, cd) {
			return false
		}
	case o.reason == reasonStatus && !probe:
		if !s.countStatusFailLocked(o.reqID, cd) {
			return false
		}
	}
	s.failLocked(now, o.reason, o.retryAfter, cd)
	return true
}

// countStatusFailLocked counts a status failure of the request with
// identity id and reports whether the replica must cool now: when
// cd.statusFails distinct requests in a row failed with a fail_status on
// it. The same request sent again (a client retrying a poisoned input)
// counts once; any success ends the streak (clearStatusFailsLocked).
func (s *replicaState) countStatusFailLocked(id uint64, cd cooldownConfig) bool {
	if cd.statusFails <= 1 {
		return true
	}
	for _, v := range s.statusFails {
		if v == id {
			return false
		}
	}
	s.statusFails = append(s.statusFails, id)
	if len(s.statusFails) < cd.statusFails {
		return false
	}
	s.statusFails = s.statusFails[:0]
	return true
}

// forgiveStatusFail takes the request with identity id out of the
// replica's streak of status failures: the request failed the same way on
// another replica, so it was the request's fault.
func (s *replicaState) forgiveStatusFail(id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, v := range s.statusFails {
		if v == id {
			s.statusFails = append(s.statusFails[:i], s.statusFails[i+1:]...)
			return
		}
	}
}

// endStatusCooldown ends a cooldown that status failures alone began, so
// that one probe may go through: the selection calls it on the least
// recently failed replica when every replica would otherwise be out.
func (s *replicaState) endStatusCooldown(now time.Time) bool {
	s.mu.Lock()
	defer s.unlock()
	if s.coolReason != reasonStatus || !now.Before(s.coolUntil) {
		return false
	}
	s.coolUntil = now
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
	s.failedAt = now
	s.statusFails = s.statusFails[:0]
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
	s.statusFails = s.statusFails[:0]
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
