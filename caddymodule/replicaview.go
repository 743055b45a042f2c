package caddymodule

import (
	"sync/atomic"
	"time"
)

// The replica's live view: what a selection reads of every replica in the
// pool, without the replica's lock. Each change to those fields is made
// under the lock and published before it is released (unlock), so a
// selection never takes one lock per replica (most of Select's cost at 64
// replicas, and a cache line every concurrent selection writes). The view
// is advisory: the replica the strategy picks is reserved under its lock
// (reserve), which checks its availability again.

// replicaLive holds the published fields.
type replicaLive struct {
	inFlight, prefilling, pending atomic.Int64
	// probing is set while the replica awaits its probe's answer
	// (needProbe and probing).
	probing atomic.Bool
	// coolUntil and firstSeen point at copies of the fields, replaced only
	// when those change.
	coolUntil, firstSeen atomic.Pointer[time.Time]
	// engine is the last engine scrape.
	engine atomic.Pointer[engineLoad]
}

// unlock publishes the replica's live view and releases its lock: every
// change to what snapshot reads ends with it.
func (s *replicaState) unlock() {
	s.publishLocked()
	s.mu.Unlock()
}

// publishLocked stores the fields snapshot reads in s.live.
func (s *replicaState) publishLocked() {
	l := &s.live
	l.inFlight.Store(int64(s.inFlight))
	l.prefilling.Store(int64(s.prefilling))
	l.pending.Store(int64(s.pendingPrefillLocked()))
	l.probing.Store(s.needProbe && s.probing)
	if p := l.coolUntil.Load(); p == nil || *p != s.coolUntil {
		t := s.coolUntil
		l.coolUntil.Store(&t)
	}
	if p := l.firstSeen.Load(); p == nil || *p != s.firstSeen {
		t := s.firstSeen
		l.firstSeen.Store(&t)
	}
	if p := l.engine.Load(); p == nil || *p != s.engine {
		e := s.engine
		l.engine.Store(&e)
	}
}

// snapshot returns the fields a strategy needs, from the live view: the
// cap limit ramped by slowStart (slowStartLimitAt), the counts, the
// availability, the engine's load and the pending prefill. Only a cooling
// replica's reason and failure time are read under its lock.
func (s *replicaState) snapshot(now time.Time, limit int, slowStart time.Duration) replicaView {
	l := &s.live
	firstSeen := now
	if p := l.firstSeen.Load(); p != nil {
		firstSeen = *p
	}
	limit = slowStartLimitAt(now, firstSeen, limit, slowStart)
	v := replicaView{limit: limit, inFlight: int(l.inFlight.Load()), prefilling: int(l.prefilling.Load()),
		pending: int(l.pending.Load()), waiting: -1, running: -1, kv: -1}
	var coolUntil time.Time
	if p := l.coolUntil.Load(); p != nil {
		coolUntil = *p
	}
	v.avail = availabilityAt(now, coolUntil, l.probing.Load(), v.inFlight, limit)
	if v.avail == availCooling {
		v.coolLeft = coolUntil.Sub(now)
		s.mu.Lock()
		v.coolReason, v.failedAt = s.coolReason, s.failedAt
		s.mu.Unlock()
	}
	if e := l.engine.Load(); e != nil {
		v.waiting, v.running, v.kv, v.sampledInFlight = e.view(now)
		if d := e.sleeping(now); d > 0 && v.avail != availCooling {
			// A sleeping engine (vLLM's sleep mode) serves nothing: out,
			// like a cooling replica, until a scrape says it woke.
			v.avail, v.coolLeft, v.coolReason = availCooling, d, reasonAsleep
		}
	}
	return v
}
