package caddymodule

import (
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/jonboulle/clockwork"

	"github.com/llmroute/caddy-llmroute/policies"
)

// replicas holds the per-replica state that must outlive a config reload:
// in-flight reservations, cooldowns and the residency belief. It is keyed
// by the replica's dial address, never by *Upstream pointer, because
// dynamic upstreams are new values on every attempt and a reload makes new
// ones too.
var replicas = caddy.NewUsagePool()

// defaultIndexBlocks is the residency index capacity used until the engine
// reports its own cache size: 16k blocks of 128 bytes believe at most 2 MiB
// of prompt text per replica, and cost about 0.6 MiB of router memory.
const defaultIndexBlocks = policies.DefaultIndexCapacity

// replicaState is what llmroute knows of one replica: its load, its health
// and what it is believed to cache. The attempts on it (attempt.go) take
// and give back its slots; cooldown.go judges its failures. All fields are
// guarded by mu except addr, addrHash, clk and belief (which has its own lock).
type replicaState struct {
	addr string
	// addrHash is policies.HashAddr(addr), for the strategies' ranks.
	addrHash uint64
	clk      clockwork.Clock
	belief   *policies.Belief
	// reports says for which endpoint kinds the engine has reported
	// cached tokens (cachereport.go).
	reports reportKinds
	// metrics caches the replica's feedback counters (feedback.go).
	metrics replicaCounters

	mu sync.Mutex
	// inFlight counts the slots held by attempts on this replica.
	inFlight int
	// prefilling counts those attempts whose first byte has not reached
	// the client yet.
	prefilling int
	// failures counts consecutive failures; it drives the backoff.
	failures int
	// dialTimeouts counts the dial timeouts of the current streak (see
	// countDialTimeoutLocked); dialLast is when the last one was counted.
	dialTimeouts int
	dialLast     time.Time
	// statusFails holds the identities (routeCtx.requestID) of the
	// distinct requests whose status failures (fail_status) make up the
	// current streak; see countStatusFailLocked.
	statusFails []uint64
	// failedAt is when the replica last began a cooldown.
	failedAt time.Time
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
	wakeTimer clockwork.Timer
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
	// prefill lists the attempts' pending prefill (prefill.go).
	prefill []prefillEntry

	// live is what selections read without the lock (replicaview.go); unlock
	// publishes it.
	live replicaLive
}

// newReplicaState returns the state of a replica llmroute has not seen
// before, on clock clk.
func newReplicaState(addr string, clk clockwork.Clock) *replicaState {
	s := &replicaState{addr: addr, addrHash: policies.HashAddr(addr), clk: clk, belief: policies.NewBelief(defaultIndexBlocks), firstSeen: clk.Now()}
	s.mu.Lock()
	s.unlock()
	return s
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

// acquireReplica returns the state for addr and takes one reference on it;
// a state it creates runs on clk.
func acquireReplica(addr string, clk clockwork.Clock) *replicaState {
	v, _, _ := replicas.LoadOrNew(addr, func() (caddy.Destructor, error) {
		return newReplicaState(addr, clk), nil
	})
	return v.(*replicaState)
}

// releaseReplica drops one reference on addr's state.
func releaseReplica(addr string) { _, _ = replicas.Delete(addr) }

// depart marks the replica as gone from a policy's upstream set and takes
// over that policy's reference: dropped now when nothing is in flight,
// else by the end of the last attempt on it.
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
	s.unlock()
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
	return availabilityAt(now, s.coolUntil, s.needProbe && s.probing, s.inFlight, limit)
}

// availabilityAt is the rule both the reservation (availableLocked) and
// the lock-free view (snapshot) apply: cooling until coolUntil, then a
// probe in flight (probeBusy), then the cap.
func availabilityAt(now, coolUntil time.Time, probeBusy bool, inFlight, limit int) availability {
	switch {
	case now.Before(coolUntil):
		return availCooling
	case probeBusy:
		return availProbing
	case limit > 0 && inFlight >= limit:
		return availFull
	}
	return availOK
}

// replicaView is what one selection reads of a replica (snapshot).
type replicaView struct {
	// limit is the cap in force (slow start applied).
	limit                int
	inFlight, prefilling int
	avail                availability
	coolLeft             time.Duration
	coolReason           string
	failedAt             time.Time
	waiting, running     int
	kv                   float64
	// sampledInFlight is inFlight when the engine figures were sampled.
	sampledInFlight int
	// pending is the replica's pending prefill in bytes (prefill.go).
	pending int
}

// slowStartLimitAt ramps the cap of a replica first seen at firstSeen
// linearly over slowStart, so that a replica that joins (a scale-up, a
// dynamic upstream) takes load gradually instead of a stampede of every
// request that finds it idle.
func slowStartLimitAt(now, firstSeen time.Time, limit int, slowStart time.Duration) int {
	if slowStart <= 0 || limit <= 0 {
		return limit
	}
	age := now.Sub(firstSeen)
	if age >= slowStart {
		return limit
	}
	l := int(float64(limit) * float64(age) / float64(slowStart))
	return max(l, 1)
}
