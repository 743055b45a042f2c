package caddymodule

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/llmroute/caddy-llmroute/admission"
	"github.com/llmroute/caddy-llmroute/policies"
)

// Admission when the replicas are full. A request that finds every usable
// replica at its cap waits in the package-level queue, whose order is
// admission.Queue's: strict priority bands, then fair across tenants by
// weight (virtual token counters), then first come first served within a
// tenant. The order is kept exactly, not hoped for: a waiter never races
// for a freed slot. One dispatcher at a time walks the queue in that order
// and attempts each waiter's selection on the waiter's behalf (its pool,
// request and keys, under the policy now in charge), until every waiter
// left would find its replicas full; the waiter only learns the result.
// An arrival does not pass the queue either: while anyone waits, it joins
// the queue and a pass decides whether it goes now.
//
// A pass attempts each waiter at most once, and skips a waiter whose
// replicas an earlier attempt of the pass found full (a release that frees
// capacity during the pass asks for another pass). A release, a cooldown
// that ends, a raised cap and a tenant slot given back each ask for a
// pass; a cooldown that begins or a probe that passes (wakeAllFor), and a
// reload (wakeAll), ask for a pass that attempts every waiter, so that
// those that must be refused now are.

// admit selects a replica for a request, at once when nobody waits and its
// tenant is below its cap, else through the queue (wait). A sheddable
// request always goes through the queue, whose passes run one at a time,
// so that two of them never both take the pool's last sheddable slot.
func (p *LLMSelection) admit(pool reverseproxy.UpstreamPool, r *http.Request, rc *routeCtx, keys policies.Keys, start time.Time) *reverseproxy.Upstream {
	tk := rc.tk
	if !tk.sheddable() && waiters.idle() && waiters.acquire(tk) {
		up, res := p.trySelect(pool, r, rc, keys, start, false)
		if up != nil {
			waiters.admitted(tk)
			return up
		}
		waiters.unacquire(tk)
		if why := res.refusal(); why != rejectNone {
			rc.refuse(why, res.minCool)
			return nil
		}
	} else {
		// What trySelect does for a fresh arrival; waiters' pools are as
		// old as their wait and decide no departure.
		p.checkDepartures(pool)
	}
	return p.wait(pool, r, rc, keys, start)
}

// wait queues the request until a pass admits it, refuses it (every replica
// it may use is down), a higher-priority arrival displaces it from a full
// queue, queue_timeout passes or its client leaves.
func (p *LLMSelection) wait(pool reverseproxy.UpstreamPool, r *http.Request, rc *routeCtx, keys policies.Keys, start time.Time) *reverseproxy.Upstream {
	w := &waiter{pol: p, pool: pool, r: r, rc: rc, keys: keys, start: start, tk: rc.tk,
		addrs: usableAddrs(pool, rc), ch: make(chan waitResult, 1)}
	timer := p.clock.NewTimer(time.Duration(p.QueueTimeout))
	defer timer.Stop()
	waitStart := time.Now()
	waiters.push(w)
	// The pass that decides whether it goes at once (nothing else holds a
	// lock here: the pass may run on this goroutine).
	target := waiters.kick(false, true)
	waiters.waitPass(r.Context(), target)
	waiters.enlist(w)
	var res waitResult
	select {
	case res = <-w.ch:
	case <-timer.Chan():
		waiters.abandon(w, waitResult{why: rejectQueueWait})
		res = <-w.ch
	case <-r.Context().Done():
		waiters.abandon(w, waitResult{gone: true})
		res = <-w.ch
	}
	if w.enlisted || res.up != nil {
		el := time.Since(waitStart).Seconds()
		metricQueueWait.Observe(el)
		if tk := rc.tk; tk != nil {
			metricTenantQueueWait.WithLabelValues(tk.flow).Observe(el)
		}
	}
	switch {
	case res.up != nil:
		return res.up
	case res.gone:
		return nil
	case res.why != rejectNone:
		rc.refuse(res.why, time.Second)
		return nil
	}
	rc.refuse(res.res.refusal(), res.res.minCool)
	return nil
}

// usableAddrs lists the replicas of pool a request may still be sent to.
func usableAddrs(pool reverseproxy.UpstreamPool, rc *routeCtx) map[string]struct{} {
	addrs := make(map[string]struct{}, len(pool))
	for _, u := range pool {
		if a := u.String(); !rc.wasTried(a) {
			addrs[a] = struct{}{}
		}
	}
	return addrs
}

// defaultSheddableShare is sheddable_share's default: sheddable traffic
// leaves a fifth of the pool to the higher bands.
const defaultSheddableShare = 0.8

// shedAllowed reports whether the pool, as view shows it, has room for one
// more sheddable request: its available replicas' in-flight count stays
// within sheddable_share of their caps (admission.SheddableAllowed). A
// replica without a cap leaves room.
func (p *LLMSelection) shedAllowed(view []policies.Replica) bool {
	used, caps := 0, 0
	for i := range view {
		v := &view[i]
		if v.Unavailable {
			continue
		}
		if v.Cap <= 0 {
			return true
		}
		used += min(v.InFlight, v.Cap)
		caps += v.Cap
	}
	return admission.SheddableAllowed(used, caps, p.SheddableShare)
}

// waiters is the package-level queue of requests waiting for a slot. It
// lives at package level, like the replica states, so that a slot
// released by a request admitted under an old config admits a request
// queued under the new one (handoff.go).
var waiters = newScheduler()

// scheduler is the queue and its dispatcher.
type scheduler struct {
	mu sync.Mutex
	q  *admission.Queue[*waiter]
	// n is q.Len(), readable without the lock (the arrival's fast path).
	n atomic.Int64

	// The dispatcher: one pass at a time. dirty asks for a pass (dirtyAll
	// for one that attempts every waiter); gen numbers the passes begun,
	// done the passes ended; passed is closed when a pass ends.
	running, dirty, dirtyAll bool
	gen, done                uint64
	passed                   chan struct{}
}

func newScheduler() *scheduler {
	return &scheduler{q: admission.NewQueue[*waiter](), passed: make(chan struct{})}
}

// waiter is one queued request: what a pass needs to attempt its selection
// on its behalf, and where the result goes.
type waiter struct {
	// pol is the policy that queued it; its queue_size counts the waiter
	// (counted) and its successor (live) selects for it.
	pol   *LLMSelection
	pool  reverseproxy.UpstreamPool
	r     *http.Request
	rc    *routeCtx
	keys  policies.Keys
	start time.Time
	tk    *ticket
	// addrs are the replicas it may use (not tried yet).
	addrs map[string]struct{}
	// ch receives the one result.
	ch chan waitResult

	// Guarded by scheduler.mu:
	e     *admission.Entry[*waiter]
	state waiterState
	// counted is set while the waiter takes a place of pol's queue_size;
	// enlisted once it did.
	counted, enlisted bool
	// abandoned is the result for a waiter that timed out, left or lost
	// its place while a pass was attempting it: given unless the attempt
	// admits it.
	abandoned *waitResult
}

type waiterState uint8

const (
	waiting  waiterState = iota
	claimed              // a pass is attempting its selection
	resolved             // its result is in ch
)

// waitResult is how a wait ended: admitted on up; refused by the selection
// (res: every replica it may use is down); refused by the queue (why:
// full, displaced, timed out); or its client left (gone).
type waitResult struct {
	up   *reverseproxy.Upstream
	res  selectResult
	why  rejectReason
	gone bool
}

// attempt selects for w under the policy now in charge.
func (w *waiter) attempt() (*reverseproxy.Upstream, selectResult) {
	return w.pol.live().trySelect(w.pool, w.r, w.rc, w.keys, w.start, true)
}

// flowOf returns the queue flow, cost and held flag of a ticket; a request
// without one (a policy test without llm_route's tenants) waits in the
// default tenant's flow and takes or charges nothing.
func flowOf(tk *ticket) (flow string, band admission.Priority, cost float64, held bool) {
	if tk == nil {
		return defaultTenant, admission.Standard, 0, true
	}
	return tk.flow, tk.band, tk.cost, tk.holds
}

// idle reports whether nobody waits.
func (s *scheduler) idle() bool { return s.n.Load() == 0 }

// len returns the number of queued requests.
func (s *scheduler) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.q.Len()
}

// configure sets a tenant's weight and cap and lets waiters look again.
func (s *scheduler) configure(flow string, cfg admission.Flow) {
	s.mu.Lock()
	s.q.Configure(flow, cfg)
	s.mu.Unlock()
	s.kick(false, false)
}

// acquire takes the ticket's tenant slot for an admission without waiting;
// false when the tenant is at its cap. A ticket that holds its slot (a
// retry) needs none.
func (s *scheduler) acquire(tk *ticket) bool {
	if tk == nil {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if tk.holds {
		return true
	}
	if !s.q.Acquire(tk.flow) {
		return false
	}
	tk.holds, tk.tentative = true, true
	return true
}

// admitted confirms acquire's slot: the request was admitted, and its
// tenant is charged its estimate.
func (s *scheduler) admitted(tk *ticket) {
	if tk == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if tk.tentative {
		tk.tentative = false
		s.q.Charge(tk.flow, tk.cost)
		tk.charged = true
	}
}

// unacquire gives back acquire's slot when the request was not admitted.
func (s *scheduler) unacquire(tk *ticket) {
	if tk == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if tk.tentative {
		tk.tentative, tk.holds = false, false
		s.q.Release(tk.flow)
	}
}

// release gives back the tenant slot of a request that ended. A capped
// tenant's waiters may go now.
func (s *scheduler) release(tk *ticket) {
	if tk == nil {
		return
	}
	s.mu.Lock()
	if !tk.holds {
		s.mu.Unlock()
		return
	}
	tk.holds = false
	s.q.Release(tk.flow)
	st, _ := s.q.Stats(tk.flow)
	s.mu.Unlock()
	if st.MaxInFlight > 0 && st.Queued > 0 {
		s.kick(false, false)
	}
}

// settle corrects the tenant's virtual time by what an admitted request
// used beyond (or below) its estimate.
func (s *scheduler) settle(tk *ticket, used float64) {
	if tk == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if tk.charged {
		s.q.Settle(tk.flow, used-tk.cost)
	}
}

// push queues w, uncounted until enlist.
func (s *scheduler) push(w *waiter) {
	flow, band, cost, held := flowOf(w.tk)
	s.mu.Lock()
	w.e = s.q.Push(flow, band, cost, held, w)
	s.n.Store(int64(s.q.Len()))
	s.mu.Unlock()
}

// enlist gives w, which its first pass did not admit, a place of its
// policy's queue_size: a free one, or that of a waiter of the same queue
// that admission.Queue.Victim names (the newest sheddable one when w is of
// a higher band; else the newest of the tenant holding the most places
// per unit of weight, when that tenant would still hold as many as w's):
// that waiter gets 429 and Retry-After, an admitted request never does.
// Else w is refused (queue_full). A waiter a pass is attempting right now
// keeps its chance.
func (s *scheduler) enlist(w *waiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.state == resolved {
		return
	}
	p := w.pol
	if p.queued.Load() >= int64(p.QueueSize) {
		v := s.q.Victim(w.e, func(e *admission.Entry[*waiter]) bool {
			o := e.Value
			return o.pol == p && o.counted && o.state == waiting
		})
		if v == nil {
			r := waitResult{why: rejectQueueFull}
			if w.state == claimed {
				w.abandoned = &r
			} else {
				s.removeLocked(w, r)
			}
			return
		}
		s.removeLocked(v.Value, waitResult{why: rejectDisplaced})
	}
	p.queued.Add(1)
	metricQueueDepth.Inc()
	w.counted, w.enlisted = true, true
}

// abandon ends w's wait with r (it timed out, or its client left), unless
// a pass is attempting it: then the pass gives r if the attempt fails.
// Either way the result arrives in w.ch.
func (s *scheduler) abandon(w *waiter, r waitResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch w.state {
	case waiting:
		s.removeLocked(w, r)
	case claimed:
		w.abandoned = &r
	}
}

// removeLocked takes w out of the queue with result r.
func (s *scheduler) removeLocked(w *waiter, r waitResult) {
	s.q.Remove(w.e)
	s.resolveLocked(w, r)
}

// resolveLocked delivers w's result; w is out of the queue.
func (s *scheduler) resolveLocked(w *waiter, r waitResult) {
	w.state = resolved
	if w.counted {
		w.counted = false
		w.pol.queued.Add(-1)
		metricQueueDepth.Dec()
	}
	s.n.Store(int64(s.q.Len()))
	w.ch <- r
}

// wake asks for a pass: a slot was released on addr, or its cooldown
// ended. Which replica does not matter: the pass follows the queue's order
// and tries whoever may use what is free.
func (s *scheduler) wake(addr string) { s.kick(false, false) }

// wakeAll asks for a pass that attempts every waiter: a reload changed
// the policy in charge, its caps, its replicas.
func (s *scheduler) wakeAll() { s.kick(true, false) }

// wakeAllFor asks for a pass that attempts every waiter: addr began to
// cool (waiters that have nothing else left must be refused now), or its
// probe passed (its whole cap opened).
func (s *scheduler) wakeAllFor(addr string) { s.kick(true, false) }

// maxPassesPerRun bounds the passes one goroutine runs before it hands
// the dispatcher to a new one, so that no caller is kept for long by
// releases that keep arriving.
const maxPassesPerRun = 8

// kick asks for a pass (attempting every waiter when all) and returns its
// number. With nobody waiting there is nothing to do. When no pass runs,
// the dispatcher starts: on this goroutine when inline (the caller holds
// no lock: an arrival in wait), else on a new one, because a release, a
// reload or a departure check may hold locks a pass needs.
func (s *scheduler) kick(all, inline bool) uint64 {
	s.mu.Lock()
	if s.q.Len() == 0 {
		n := s.done
		s.mu.Unlock()
		return n
	}
	s.dirty = true
	s.dirtyAll = s.dirtyAll || all
	target := s.gen + 1
	if s.running {
		s.mu.Unlock()
		return target
	}
	s.running = true
	s.mu.Unlock()
	if inline {
		s.run()
	} else {
		go s.run()
	}
	return target
}

// run is the dispatcher: passes while they are asked for, at most
// maxPassesPerRun on this goroutine.
func (s *scheduler) run() {
	for i := 0; ; i++ {
		s.mu.Lock()
		if !s.dirty {
			s.running = false
			s.mu.Unlock()
			return
		}
		if i == maxPassesPerRun {
			s.mu.Unlock()
			go s.run() // still running: the new goroutine goes on
			return
		}
		all := s.dirtyAll
		s.dirty, s.dirtyAll = false, false
		s.gen++
		n := s.gen
		s.mu.Unlock()
		s.pass(all)
		s.mu.Lock()
		s.done = n
		close(s.passed)
		s.passed = make(chan struct{})
		s.mu.Unlock()
	}
}

// waitPass waits until pass number target has ended (or ctx ends).
func (s *scheduler) waitPass(ctx context.Context, target uint64) {
	s.mu.Lock()
	for s.done < target {
		ch := s.passed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
		s.mu.Lock()
	}
	s.mu.Unlock()
}

// pass admits waiters in the queue's order until none is left that may
// find room: each is attempted at most once; one whose replicas an
// earlier attempt found full is skipped (unless all); a sheddable one is
// skipped once one of the same policy was refused for the sheddable
// share.
func (s *scheduler) pass(all bool) {
	full := map[string]struct{}{}
	shed := map[*LLMSelection]bool{}
	seen := map[*waiter]struct{}{}
	eligible := func(e *admission.Entry[*waiter]) bool {
		w := e.Value
		if _, ok := seen[w]; ok || w.state != waiting {
			return false
		}
		if e.Band() == admission.Sheddable && shed[w.pol] {
			return false
		}
		if all {
			return true
		}
		for a := range w.addrs {
			if _, ok := full[a]; !ok {
				return true
			}
		}
		return false
	}
	s.mu.Lock()
	n := s.q.Len()
	s.mu.Unlock()
	for range n {
		s.mu.Lock()
		e := s.q.Pick(eligible)
		if e == nil {
			s.mu.Unlock()
			return
		}
		w := e.Value
		seen[w] = struct{}{}
		w.state = claimed
		s.q.Claim(e)
		s.mu.Unlock()

		up, res := w.attempt()

		s.mu.Lock()
		switch {
		case up != nil:
			s.q.Admit(e)
			if tk := w.tk; tk != nil && !tk.holds {
				tk.holds, tk.charged = true, true
			}
			s.resolveLocked(w, waitResult{up: up})
		case res.refusal() != rejectNone:
			s.removeLocked(w, waitResult{res: res})
		case w.abandoned != nil:
			s.removeLocked(w, *w.abandoned)
		default:
			s.q.Unclaim(e)
			w.state = waiting
			if res.shed {
				shed[w.pol] = true
			} else {
				for a := range w.addrs {
					full[a] = struct{}{}
				}
			}
		}
		s.mu.Unlock()
	}
}

// flowStat is one tenant's place in the queue, for /llm_route/state.
type flowStat struct {
	name string
	admission.FlowStats
}

// flows returns every tenant's place in the queue.
func (s *scheduler) flows() []flowStat {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := s.q.Flows()
	out := make([]flowStat, 0, len(names))
	for _, n := range names {
		st, _ := s.q.Stats(n)
		out = append(out, flowStat{name: n, FlowStats: st})
	}
	return out
}
