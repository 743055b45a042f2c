package caddymodule

import (
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/llmroute/caddy-llmroute/policies"
)

// replicas holds the per-replica state that must outlive a config reload:
// in-flight reservations, cooldowns and the residency index. It is keyed by
// the replica's dial address, never by *Upstream pointer, because dynamic
// upstreams are new values on every attempt and a reload makes new ones too.
var replicas = caddy.NewUsagePool()

// defaultIndexBlocks is the residency index capacity used until the engine
// reports its own cache size: 16k blocks of 128 bytes believe at most 2 MiB
// of prompt text per replica, and cost about 1.6 MiB of router memory.
const defaultIndexBlocks = 16384

// replicaState is what llmroute knows of one replica. All fields are guarded
// by mu except index (which has its own lock) and addr.
type replicaState struct {
	addr  string
	index *policies.Index

	mu sync.Mutex
	// inFlight counts reservations held on this replica.
	inFlight int
	// prefilling counts those reservations whose first byte has not
	// reached the client yet.
	prefilling int
	// failures counts consecutive failures; it drives the backoff.
	failures int
	// dialTimeouts counts the dial timeouts of the current streak (see
	// countDialTimeoutLocked); dialLast is when the last one was counted.
	dialTimeouts int
	dialLast     time.Time
	// coolUntil is when the current cooldown ends.
	coolUntil time.Time
	// coolReason says why the replica is cooling (for state and metrics).
	coolReason string
	// needProbe is set by a failure: after the cooldown only one request
	// (the probe) may go through until its answer starts with a success
	// status.
	needProbe bool
	// probing is true while that probe awaits its response headers.
	probing bool
	// wakeTimer wakes queued requests when the cooldown ends.
	wakeTimer *time.Timer
	// firstSeen is when llmroute first saw the replica (or saw it come
	// back after it left the upstream set); slow start ramps its cap from
	// there.
	firstSeen time.Time
	// departed is set when the replica left a policy's upstream set, and
	// cleared when a policy sees it again.
	departed bool
	// drainRefs counts the policy references on this state kept after the
	// replica left because requests were still in flight on it; the last
	// release drops them (see depart). Until then the state, its
	// in-flight count and the reservations show in /llm_route/state, and
	// a replica that comes back under the same address resumes with the
	// requests it still runs counted against its cap.
	drainRefs int
	// engine holds the last engine metrics scraped from the replica.
	engine engineLoad
	// feedback tracks the engine's reported cached tokens.
	feedback feedbackState
	// pending counts, by the first block of their prompt, this router's
	// requests on the replica whose first byte has not arrived: the engine
	// may still be computing that prefix, so a request sent meanwhile may
	// find none of it cached although the index (which believes a prefix
	// as soon as it is routed) predicts it. Nil until first used.
	pending map[uint64]int
}

// Destruct implements caddy.Destructor; it stops the cooldown timer.
func (s *replicaState) Destruct() error {
	s.mu.Lock()
	if s.wakeTimer != nil {
		s.wakeTimer.Stop()
	}
	s.mu.Unlock()
	return nil
}

// acquireReplica returns the state for addr and takes one reference on it.
func acquireReplica(addr string) *replicaState {
	v, _, _ := replicas.LoadOrNew(addr, func() (caddy.Destructor, error) {
		return &replicaState{addr: addr, index: policies.NewIndex(defaultIndexBlocks), firstSeen: time.Now()}, nil
	})
	return v.(*replicaState)
}

// releaseReplica drops one reference on addr's state.
func releaseReplica(addr string) { _, _ = replicas.Delete(addr) }

// depart marks the replica as gone from a policy's upstream set and takes
// over that policy's reference: dropped now when nothing is in flight,
// else by the release of the last reservation.
func (s *replicaState) depart() {
	s.mu.Lock()
	s.departed = true
	keep := s.inFlight > 0
	if keep {
		s.drainRefs++
	}
	s.mu.Unlock()
	if !keep {
		releaseReplica(s.addr)
	}
}

// rejoin is called when a policy starts using the state: a replica that
// had departed starts its slow start again, as its engine may have
// restarted cold.
func (s *replicaState) rejoin(now time.Time) {
	s.mu.Lock()
	if s.departed {
		s.departed = false
		s.firstSeen = now
	}
	s.mu.Unlock()
}

// availability describes why a replica can or cannot take a request now.
type availability int

const (
	availOK      availability = iota
	availFull                 // at its in-flight cap
	availCooling              // in cooldown
	availProbing              // its probe is in flight: wait for the answer
)

// availableLocked reports whether the replica can take a request now.
func (s *replicaState) availableLocked(now time.Time, limit int) availability {
	if now.Before(s.coolUntil) {
		return availCooling
	}
	if s.needProbe && s.probing {
		return availProbing
	}
	if limit > 0 && s.inFlight >= limit {
		return availFull
	}
	return availOK
}

// replicaView is what one selection reads of a replica, under one lock.
type replicaView struct {
	inFlight, prefilling int
	avail                availability
	coolLeft             time.Duration
	waiting, running     int
	kv                   float64
}

// snapshot returns the fields a strategy needs, under one lock.
func (s *replicaState) snapshot(now time.Time, limit int) replicaView {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := replicaView{inFlight: s.inFlight, prefilling: s.prefilling, avail: s.availableLocked(now, limit)}
	if now.Before(s.coolUntil) {
		v.coolLeft = s.coolUntil.Sub(now)
	}
	v.waiting, v.running, v.kv = s.engineViewLocked(now)
	return v
}

// slowStartLimit ramps a new replica's cap linearly over slowStart, so that
// a replica that joins (a scale-up, a dynamic upstream) takes load gradually
// instead of a stampede of every request that finds it idle.
func (s *replicaState) slowStartLimit(now time.Time, limit int, slowStart time.Duration) int {
	if slowStart <= 0 || limit <= 0 {
		return limit
	}
	age := now.Sub(s.firstSeen)
	if age >= slowStart {
		return limit
	}
	l := int(float64(limit) * float64(age) / float64(slowStart))
	return max(l, 1)
}

// tryReserve takes one in-flight slot if the replica is available and below
// limit (0 = no limit). It is the only place a slot is taken, so that a cap
// holds however many requests select at once.
func (s *replicaState) tryReserve(now time.Time, limit int) (*reservation, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.availableLocked(now, limit) != availOK {
		return nil, false
	}
	s.inFlight++
	s.prefilling++
	r := &reservation{replica: s, prefilling: true, started: now}
	if s.needProbe {
		s.probing = true
		r.probe = true
	}
	return r, true
}

// outcome is how one attempt on a replica ended.
type outcome int

const (
	// outcomeSuccess: the replica answered and the answer was relayed whole.
	outcomeSuccess outcome = iota
	// outcomeNeutral: nothing learned about the replica (client went away,
	// the request was bad, a 4xx answer).
	outcomeNeutral
	// outcomeFailure: the replica failed; it cools down.
	outcomeFailure
)

// reservation is one in-flight slot on one replica. release runs at most
// once, however many paths try to release it.
type reservation struct {
	replica *replicaState
	once    sync.Once
	// probe is true while this reservation is the replica's probe and has
	// not been judged yet; guarded by replica.mu.
	probe bool
	// prefilling is true until the first byte reached the client; guarded
	// by replica.mu.
	prefilling bool
	// released is set when release ran; guarded by replica.mu.
	released bool
	// started is when the slot was taken: the attempt's dial (if any)
	// began after it.
	started time.Time
	// head is the first block of the prompt, counted in the replica's
	// pending map while prefilling; 0 if not counted.
	head uint64
	// concurrent is set when another request with the same first block
	// was pending on the replica when this one was sent.
	concurrent bool
}

// markPending counts the reservation's prompt, whose first block is head,
// as pending on its replica until its first byte, and records whether
// another request with that head was pending already.
func (r *reservation) markPending(head uint64) {
	s := r.replica
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.released || !r.prefilling || head == 0 {
		return
	}
	if s.pending == nil {
		s.pending = map[uint64]int{}
	}
	r.concurrent = s.pending[head] > 0
	s.pending[head]++
	r.head = head
}

// endPrefillLocked ends the reservation's prefilling phase: at its first
// byte or its release, whichever comes first.
func (r *reservation) endPrefillLocked() {
	if !r.prefilling {
		return
	}
	r.prefilling = false
	s := r.replica
	s.prefilling--
	if r.head != 0 {
		if s.pending[r.head]--; s.pending[r.head] <= 0 {
			delete(s.pending, r.head)
		}
		r.head = 0
	}
}

// answered records the status of the response headers relayed to the
// client. A probe is judged here, not when its answer ends (an LLM stream
// may last minutes): a success status means the replica is healthy again,
// its cap opens and the requests waiting for it are admitted together. The
// probe's stream goes on as an ordinary request; if it breaks later, that
// is a broken stream and cools the replica like any other. Any other
// status leaves the probe to be judged when it is released (a failure
// status cools the replica again).
func (r *reservation) answered(status int, failStatus map[int]bool) {
	if o, _ := classifyStatus(status, failStatus); o != outcomeSuccess {
		return
	}
	s := r.replica
	s.mu.Lock()
	passed := false
	if r.probe && !r.released {
		r.probe = false
		s.probing = false
		if s.needProbe {
			passed = s.trustLocked()
		}
	}
	s.mu.Unlock()
	if passed {
		waiters.wakeAllFor(s.addr)
	}
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

// firstByte records that the answer started: the request no longer delays
// the first token of requests behind it.
func (r *reservation) firstByte() {
	s := r.replica
	s.mu.Lock()
	r.endPrefillLocked()
	s.dialTimeouts = 0
	s.mu.Unlock()
}

// connected records that a connection to the replica was established: it
// accepts connections, so earlier dial timeouts were a passing overflow.
func (s *replicaState) connected() {
	s.mu.Lock()
	s.dialTimeouts = 0
	s.mu.Unlock()
}

// reasonDialTimeout is the failure reason of an attempt whose connection
// could not be established within the transport's dial timeout.
const reasonDialTimeout = "dial_timeout"

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

// release frees the slot and records the attempt's outcome; failure
// carries the reason and the replica's Retry-After (0 if none).
func (r *reservation) release(o outcome, reason string, retryAfter time.Duration, cd cooldownConfig) {
	r.once.Do(func() {
		s := r.replica
		s.mu.Lock()
		r.released = true
		s.inFlight--
		r.endPrefillLocked()
		if s.inFlight < 0 {
			// Cannot happen: release runs once per reservation. Clamp so a
			// bug shows in tests as a count mismatch, not a negative cap.
			s.inFlight = 0
		}
		if r.probe {
			s.probing = false
		}
		drained := 0
		if s.inFlight == 0 {
			drained, s.drainRefs = s.drainRefs, 0
		}
		opened := false // more than this one slot became usable
		cooled := false
		switch o {
		case outcomeSuccess:
			s.dialTimeouts = 0
			if !s.needProbe || r.probe {
				opened = s.trustLocked()
			}
		case outcomeFailure:
			now := time.Now()
			if reason != reasonDialTimeout || s.countDialTimeoutLocked(now, r.started, cd) {
				s.failLocked(now, reason, retryAfter, cd)
				cooled = true
			}
		}
		s.mu.Unlock()
		for range drained {
			releaseReplica(s.addr)
		}
		if opened || cooled {
			// Probe passed: the whole cap opened. Cooling began: queued
			// requests must look again and be refused if nothing is left.
			waiters.wakeAllFor(s.addr)
		} else {
			waiters.wake(s.addr)
		}
	})
}

// cooldownConfig bounds the backoff of a failing replica and says how
// many dial timeouts in a row (within dialWindow of each other) cool it.
type cooldownConfig struct {
	base, max  time.Duration
	dialFails  int
	dialWindow time.Duration
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
	s.wakeTimer = time.AfterFunc(time.Until(s.coolUntil)+time.Millisecond, func() { waiters.wake(addr) })
}
