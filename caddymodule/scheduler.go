package caddymodule

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/llmroute/caddy-llmroute/admission"
	"github.com/llmroute/caddy-llmroute/policies"
)

// The wait queue's dispatcher: one pass at a time walks the queue in
// admission order (admission.Queue) and runs each waiter's selection on
// its behalf (waitqueue.go has the policy's side).

// waiters is the package-level queue of requests waiting for a slot. It
// lives at package level, like the replica states, so that a slot
// released by a request admitted under an old config admits a request
// queued under the new one (reload.go).
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
