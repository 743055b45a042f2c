package caddymodule

import (
	"sync"
	"time"

	"github.com/llmroute/caddy-llmroute/policies"
)

// attempt is one try of a request on one replica, from the in-flight slot
// it reserves to the outcome it ends with. The policy creates it (reserve,
// then place), the routing context owns it while it runs, and end gives
// the slot back exactly once, however many paths get there: a retry, the
// handler's deferred settlement, a reload.
type attempt struct {
	rep *replicaState
	// rules are the settings of the policy that made the attempt, which
	// judge its end even when a reload has replaced that policy since.
	rules *attemptRules
	// started is when the slot was taken: the attempt's dial (if any)
	// began after it.
	started time.Time
	once    sync.Once

	// Guarded by rep.mu:
	//
	// place is what the replica's belief said when the request was sent
	// there; place.Head is counted pending until the first byte.
	place policies.Placement
	// why is the strategy's rule that placed it (policies.Reasoner), for
	// the feedback.
	why policies.Reason
	// probe is true while this attempt is the replica's probe and has not
	// been judged yet.
	probe bool
	// prefilling is true until the first byte reached the client.
	prefilling bool
	// released is set when end ran.
	released bool
}

// attemptRules are one policy's settings that its attempts carry to their
// end.
type attemptRules struct {
	cd cooldownConfig
	// failStatus lists the statuses that count as a replica failure.
	failStatus map[int]bool
	// strategy names the strategy that decided (for metrics).
	strategy string
	// indexAnswers adds the answer streamed back to the replica's index
	// (answers.go).
	indexAnswers bool
	// observer is the strategy, when it learns from the engines' reports
	// (feedback.go).
	observer policies.CheckObserver
	// cacheReport is the pool's cache_report mode (cachereport.go).
	cacheReport string
}

// attemptRules gathers the policy's settings that judge each attempt.
func (p *LLMSelection) attemptRules() attemptRules {
	r := attemptRules{
		cd: cooldownConfig{
			base: time.Duration(p.CooldownBase), max: time.Duration(p.CooldownMax),
			dialFails: p.DialTimeoutFails, dialWindow: time.Duration(p.DialTimeoutWindow),
			statusFails: p.StatusFails,
		},
		failStatus: map[int]bool{429: true, 503: true},
		strategy:   p.strategy.Name(),
	}
	for _, s := range p.FailStatus {
		r.failStatus[s] = true
	}
	r.indexAnswers = p.IndexAnswers == nil || *p.IndexAnswers
	r.observer, _ = p.strategy.(policies.CheckObserver)
	r.cacheReport = p.CacheReport
	return r
}

// reserve takes one in-flight slot if the replica is available and below
// limit (0 = no limit), for an attempt judged by rules. It is the only
// place a slot is taken, so that a cap holds however many requests select
// at once. After a cooldown the first attempt is the probe.
func (s *replicaState) reserve(now time.Time, limit int, rules *attemptRules) (*attempt, bool) {
	s.mu.Lock()
	defer s.unlock()
	if s.availableLocked(now, limit) != availOK {
		return nil, false
	}
	s.inFlight++
	s.prefilling++
	a := &attempt{rep: s, rules: rules, prefilling: true, started: now}
	if s.needProbe {
		s.probing = true
		a.probe = true
	}
	return a, true
}

// placeKeys tells the replica's belief that the request with keys goes
// there (policies.Belief.Place: the prediction, the optimistic insert, the
// pending count), keeps what it said and the rule that chose the replica
// (why) for the feedback, and counts the prompt it believes uncached as
// the replica's pending prefill until the first byte (prefill.go).
func (a *attempt) placeKeys(keys policies.Keys, why policies.Reason) {
	pl := a.rep.belief.Place(keys)
	s := a.rep
	s.mu.Lock()
	a.place, a.why = pl, why
	ended := a.released || !a.prefilling
	if ended {
		// Ended before it was placed: nothing is pending any more.
		s.belief.EndPending(pl.Head)
		a.place.Head = 0
	}
	s.mu.Unlock() // nothing snapshot reads changed: addPending publishes
	if !ended {
		addPending(a, policies.UncachedBytes(keys, pl.Predicted))
	}
}

// prediction returns what the belief said when the attempt was placed,
// and the rule that placed it.
func (a *attempt) prediction() (policies.Placement, policies.Reason) {
	a.rep.mu.Lock()
	defer a.rep.mu.Unlock()
	return a.place, a.why
}

// endPrefillLocked ends the attempt's prefilling phase: at its first byte
// or its end, whichever comes first.
func (a *attempt) endPrefillLocked() {
	if !a.prefilling {
		return
	}
	a.prefilling = false
	s := a.rep
	s.prefilling--
	s.belief.EndPending(a.place.Head)
	a.place.Head = 0
}

// firstByte records that the answer started: the request no longer delays
// the first token of requests behind it, and the replica accepts work, so
// earlier dial timeouts were a passing overflow.
func (a *attempt) firstByte() {
	s := a.rep
	s.mu.Lock()
	a.endPrefillLocked()
	s.dialTimeouts = 0
	s.unlock()
}

// answered records the status of the response headers relayed to the
// client. A probe is judged here, not when its answer ends (an LLM stream
// may last minutes): a success status means the replica is healthy again,
// its cap opens and the requests waiting for it are admitted together. The
// probe's stream goes on as an ordinary request; if it breaks later, that
// is a broken stream and cools the replica like any other. Any other
// status leaves the probe to be judged when it ends (a failure status
// cools the replica again).
func (a *attempt) answered(status int) {
	if classifyStatus(status, a.rules.failStatus).kind != outcomeSuccess {
		return
	}
	s := a.rep
	s.mu.Lock()
	passed := false
	if a.probe && !a.released {
		a.probe = false
		s.probing = false
		if s.needProbe {
			passed = s.trustLocked()
		}
	}
	s.unlock()
	if passed {
		waiters.wakeAllFor(s.addr)
	}
}

// end frees the slot and applies the attempt's outcome to the replica: a
// success trusts it again, a failure cools it (cooldown.go). It runs once;
// later calls do nothing.
func (a *attempt) end(o outcome) {
	a.once.Do(func() {
		s := a.rep
		s.mu.Lock()
		a.released = true
		s.inFlight--
		a.endPrefillLocked()
		if s.inFlight < 0 {
			// Cannot happen: end runs once per attempt. Clamp so a bug
			// shows in tests as a count mismatch, not a negative cap.
			s.inFlight = 0
		}
		if a.probe {
			s.probing = false
		}
		drained := 0
		if s.inFlight == 0 {
			drained, s.drainRefs = s.drainRefs, 0
		}
		opened := false // more than this one slot became usable
		cooled := false
		switch o.kind {
		case outcomeSuccess:
			s.dialTimeouts = 0
			if !s.needProbe || a.probe {
				opened = s.trustLocked()
			}
		case outcomeFailure:
			cooled = s.failedLocked(s.clk.Now(), a.started, a.probe, o, a.rules.cd)
		}
		s.unlock()
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
