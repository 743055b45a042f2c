package caddymodule

import (
	"container/list"
	"net/http"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/llmroute/caddy-llmroute/policies"
)

// wait queues a request that found every usable replica full, bounded by
// queue_size, until a slot it may use is released (or a cooldown ends),
// queue_timeout passes or its client leaves. Each wake re-selects under
// the policy now in charge (live: a reload may have replaced this one).
func (p *LLMSelection) wait(pool reverseproxy.UpstreamPool, r *http.Request, rc *routeCtx, keys policies.Keys, start time.Time) *reverseproxy.Upstream {
	if p.queued.Add(1) > int64(p.QueueSize) {
		p.queued.Add(-1)
		rc.refuse(rejectQueueFull, time.Second)
		return nil
	}
	defer p.queued.Add(-1)
	metricQueueDepth.Inc()
	defer metricQueueDepth.Dec()
	addrs := make(map[string]struct{}, len(pool))
	for _, u := range pool {
		addrs[u.String()] = struct{}{}
	}
	w := waiters.add(addrs)
	defer waiters.remove(w)
	timer := p.clock.NewTimer(time.Duration(p.QueueTimeout))
	defer timer.Stop()
	waitStart := time.Now()
	defer func() { metricQueueWait.Observe(time.Since(waitStart).Seconds()) }()
	for {
		up, res := p.live().trySelect(pool, r, rc, keys, start, true)
		if up != nil {
			return up
		}
		if why := res.refusal(); why != rejectNone {
			rc.refuse(why, res.minCool)
			return nil
		}
		select {
		case <-w.ch:
		case <-timer.Chan():
			rc.refuse(rejectQueueWait, time.Second)
			return nil
		case <-r.Context().Done():
			return nil
		}
	}
}

// waiters is the package-level FIFO of requests waiting for a slot. It lives
// at package level, like the replica states, so that a slot released by a
// request admitted under an old config wakes a request queued under the new
// one.
var waiters = &waitList{}

// waitList is a FIFO of waiting requests, woken in order when a slot is
// released or a cooldown ends. It does not poll: a waiter sleeps on its own
// channel until wake signals it, its deadline passes or its client leaves.
type waitList struct {
	mu sync.Mutex
	l  list.List
}

// waiter is one queued request. ch has room for one pending signal; addrs
// lists the replicas the request may use (nil means any).
type waiter struct {
	ch    chan struct{}
	addrs map[string]struct{}
	elem  *list.Element
}

func (w *waiter) accepts(addr string) bool {
	if w.addrs == nil {
		return true
	}
	_, ok := w.addrs[addr]
	return ok
}

// add appends a waiter for the given replicas to the queue.
func (wl *waitList) add(addrs map[string]struct{}) *waiter {
	w := &waiter{ch: make(chan struct{}, 1), addrs: addrs}
	wl.mu.Lock()
	w.elem = wl.l.PushBack(w)
	wl.mu.Unlock()
	return w
}

// remove takes w out of the queue. A signal that arrived after w last woke
// is passed on to the next waiter, so that no released slot is left unclaimed.
func (wl *waitList) remove(w *waiter) {
	wl.mu.Lock()
	if w.elem != nil {
		wl.l.Remove(w.elem)
		w.elem = nil
	}
	wl.mu.Unlock()
	pending := false
	select {
	case <-w.ch:
		pending = true
	default:
	}
	if pending {
		for addr := range w.addrs {
			wl.wake(addr)
		}
		if w.addrs == nil {
			wl.wake("")
		}
	}
}

// wake signals the first waiter that may use addr and has no signal pending
// (an empty addr matches every waiter).
func (wl *waitList) wake(addr string) { wl.signal(addr, false) }

// wakeAll signals every waiter, e.g. after a reload raised a cap.
func (wl *waitList) wakeAll() { wl.signal("", true) }

// wakeAllFor signals every waiter that may use addr. A replica that changed
// state for more than one slot (it began to cool, so waiters may have to be
// refused now; its probe succeeded, so its whole cap opened) needs every
// waiter to look again, in queue order.
func (wl *waitList) wakeAllFor(addr string) { wl.signal(addr, true) }

// signal walks the queue in order and signals the waiters that may use
// addr: the first one without a pending signal, or all of them.
func (wl *waitList) signal(addr string, all bool) {
	wl.mu.Lock()
	defer wl.mu.Unlock()
	for e := wl.l.Front(); e != nil; e = e.Next() {
		w := e.Value.(*waiter)
		if addr != "" && !w.accepts(addr) {
			continue
		}
		select {
		case w.ch <- struct{}{}:
			if !all {
				return
			}
		default:
			// already signalled and not yet awake: try the next one
		}
	}
}

// len returns the number of queued requests.
func (wl *waitList) len() int {
	wl.mu.Lock()
	defer wl.mu.Unlock()
	return wl.l.Len()
}
