package caddymodule

import (
	"net/http"
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
