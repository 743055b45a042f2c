package caddymodule

import (
	"net/http"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/llmroute/caddy-llmroute/policies"
)

// selectResult summarises a failed selection.
type selectResult struct {
	// total replicas; cooling of them are down (cooling, unhealthy, tried
	// or gone), limited of those cooling after a 429.
	total, cooling, limited int
	minCool                 time.Duration
	// shed is set when a sheddable request found the pool at its
	// sheddable share (waitqueue.go, shedAllowed): it waits.
	shed bool
}

// refusal is why a request must be refused now (rejectNone: it may
// wait): every replica is down, and if each one is down because it
// answered 429, the replicas are rate limiting (the client is told 429,
// as the replicas would have told it), else they are unavailable (503).
func (res selectResult) refusal() rejectReason {
	switch {
	case res.cooling < res.total:
		return rejectNone
	case res.limited == res.cooling:
		return rejectRateLimited
	}
	return rejectNoHealthy
}

// selectScratch is one selection's view of the pool and the states behind
// it. It is pooled (scratches), so that a decision allocates nothing for
// its view whatever the pool's size: the strategies read the view and keep
// none of it.
type selectScratch struct {
	view   []policies.Replica
	states []*replicaState
	downs  []bool // counted in res.cooling
}

var scratches = sync.Pool{New: func() any { return new(selectScratch) }}

// release clears the scratch (it must not keep replica states or indexes
// alive) and returns it to the pool.
func (sc *selectScratch) release() {
	clear(sc.view)
	clear(sc.states)
	sc.view, sc.states, sc.downs = sc.view[:0], sc.states[:0], sc.downs[:0]
	scratches.Put(sc)
}

// trySelect builds the replicas' view, asks the strategy, reserves a slot
// on its pick and starts the attempt there. A lost race for the last slot
// makes it ask again without that replica, at most once per replica.
// queued says that pool is as old as the request's wait in the queue: with
// dynamic upstreams it may predate a join or a departure, so it neither
// decides departures (that would purge and drop a replica that joined
// since, whose fresh state would then forget its slow start and in-flight
// count) nor brings back a replica that left since.
//
// Its cost is a lock-free read of each replica (snapshot, replicaview.go), the
// strategy's pick and one lock on the pick (reserve): the replicas' states
// come from the last pool resolved (statesOf), the tried list is read
// once, and the view is pooled.
func (p *LLMSelection) trySelect(pool reverseproxy.UpstreamPool, r *http.Request, rc *routeCtx, keys policies.Keys, start time.Time, queued bool) (*reverseproxy.Upstream, selectResult) {
	now := p.clock.Now()
	sc := scratches.Get().(*selectScratch)
	defer sc.release()
	var res selectResult
	res.total = len(pool)
	var gone map[string]bool
	if queued {
		gone = p.departedOf(pool)
	} else {
		p.checkDepartures(pool)
	}
	resolved := p.statesOf(pool, gone)
	tried := rc.triedList()
	for i, u := range pool {
		addr := u.String()
		if gone[addr] {
			res.cooling++
			sc.view = append(sc.view, policies.Replica{Addr: addr, Unavailable: true, EngineWaiting: -1, EngineRunning: -1, KVUsage: -1})
			sc.states = append(sc.states, nil)
			sc.downs = append(sc.downs, true)
			continue
		}
		st := resolved[i]
		limit := p.MaxInFlight
		if u.MaxRequests > 0 && (limit == 0 || u.MaxRequests < limit) {
			limit = u.MaxRequests
		}
		v := st.snapshot(now, limit, time.Duration(p.SlowStart))
		limit = v.limit
		down := v.avail == availCooling || !u.Healthy() || triedIn(tried, addr)
		unavailable := down || v.avail == availProbing
		if down {
			res.cooling++
			if v.coolLeft > 0 && (res.minCool == 0 || v.coolLeft < res.minCool) {
				res.minCool = v.coolLeft
			}
			if v.coolReason == reasonRateLimited {
				res.limited++
			}
		}
		inFlight := v.inFlight
		if v.avail == availFull {
			// Full is expressed through InFlight >= Cap so strategies see it.
			inFlight = max(v.inFlight, limit)
		}
		sinceSample := 0
		if v.running >= 0 {
			sinceSample = inFlight - v.sampledInFlight
		}
		sc.view = append(sc.view, policies.Replica{
			Addr:       addr,
			AddrHash:   st.addrHash,
			InFlight:   inFlight,
			Prefilling: v.prefilling,
			// What the replica still has to prefill for this router.
			PendingPrefill: v.pending,
			Cap:            limit,
			Unavailable:    unavailable,
			EngineWaiting:  v.waiting,
			EngineRunning:  v.running,
			// The engine's counts are judged against this router's
			// in-flight count at the sample.
			InFlightSinceSample: sinceSample,
			KVUsage:             v.kv,
			Index:               st.belief.Index(),
		})
		sc.states = append(sc.states, st)
		sc.downs = append(sc.downs, down)
	}
	view, states := sc.view, sc.states
	if res.cooling == res.total {
		p.keepOneRoutable(pool, rc, view, states, &res, now)
	}
	if rc.tk.sheddable() && res.cooling < res.total && !p.shedAllowed(view) {
		res.shed = true // the rest of the pool is kept for higher bands
		return nil, res
	}
	if rc.req != nil {
		leaveOutOtherModels(view, rc.req.Model, now) // modelchoice.go
		if adaptersRunning.Load() {
			preferRunningAdapter(view, rc.req.Model, func(i int) bool {
				if states[i] == nil {
					return false
				}
				e := states[i].live.engine.Load()
				return e != nil && e.runs(now, rc.req.Model)
			})
		}
	}
	pinned := pinTo(rc, view, sc.downs, &res)
	for range len(view) {
		i, how, why := p.pick(rc, keys, view, pinned)
		if i < 0 {
			break
		}
		a, ok := states[i].reserve(now, view[i].Cap, &p.rules)
		if !ok {
			view[i].Unavailable = true
			continue
		}
		if !rc.begin(a) {
			return nil, res
		}
		rc.setPick(p.pickReason(pinned >= 0, how, why), queued)
		if how != "" {
			metricSessionRoutes.WithLabelValues(how).Inc()
			sessionHomes.Add(rc.sessionKey, view[i].Addr)
			if rc.shared != nil {
				rc.shared.shareSession(rc.sessionKey, view[i].Addr) // sharedsessions.go
			}
		}
		a.placeKeys(keys, why)
		clearAttemptPlaceholders(r)
		if body, n, ok := rc.attemptBody(); ok {
			r.Body = body
			if r.ContentLength != n { // checkPin rewrote the body
				r.ContentLength = n
				setContentLength(r.Header, n)
			}
		}
		if p.decision != nil {
			p.decision.Observe(time.Since(start).Seconds())
		}
		return pool[i], res
	}
	return nil, res
}

// resolvedPool is the replica states of one upstream slice, in its order,
// as of the policy's states generation gen.
type resolvedPool struct {
	gen    uint64
	states []*replicaState
}

// statesOf returns the replica state of each upstream of pool, in order
// (nil for those in gone, which must not be brought back). Static
// upstreams arrive as the same slice on every request, so the states of
// the last pool resolved are kept and checked entry by entry (the same
// address, and no state dropped since: p.statesGen); only a pool that
// differs is looked up address by address and becomes the one kept.
func (p *LLMSelection) statesOf(pool reverseproxy.UpstreamPool, gone map[string]bool) []*replicaState {
	if len(gone) > 0 {
		states := make([]*replicaState, len(pool))
		for i, u := range pool {
			if addr := u.String(); !gone[addr] {
				states[i] = p.state(addr)
			}
		}
		return states
	}
	gen := p.statesGen.Load()
	if c := p.resolved.Load(); c != nil && c.gen == gen && len(c.states) == len(pool) {
		same := true
		for i, u := range pool {
			if c.states[i].addr != u.String() {
				same = false
				break
			}
		}
		if same {
			return c.states
		}
	}
	states := make([]*replicaState, len(pool))
	for i, u := range pool {
		states[i] = p.state(u.String())
	}
	p.resolved.Store(&resolvedPool{gen: gen, states: states})
	return states
}

// pick chooses among view: the replica holding the request's response
// state when it has one (pinned), a session's home or new home by
// policies.PickSession (for the prefix strategies), else the strategy's
// pick. how names a session's placement for metrics ("" for none), why
// the strategy's rule when it names one (policies.Reasoner).
func (p *LLMSelection) pick(rc *routeCtx, keys policies.Keys, view []policies.Replica, pinned int) (int, string, policies.Reason) {
	switch {
	case pinned >= 0:
		if view[pinned].Free() {
			return pinned, "", ""
		}
		return -1, "", ""
	case rc.sessionKey != 0 && p.strategy.Name() != "round_robin" && p.strategy.Name() != "least_load":
		home, _ := sessionHomes.Get(rc.sessionKey)
		i := policies.PickSession(rc.sessionKey, home, view, p.opts)
		switch {
		case i < 0:
			return -1, "", ""
		case home == "":
			return i, "new", ""
		case view[i].Addr == home:
			return i, "home", ""
		}
		return i, "moved", ""
	}
	i, why := policies.PickWithReason(p.strategy, keys, view)
	return i, "", why
}

// pinTo returns the index in view of the replica holding the response
// state the request continues (-1 for none), and takes every other
// replica out of the view, counted as down in res: the state is there and
// nowhere else, so the request waits for that replica when it is full and
// is refused when it is down, rather than going elsewhere.
func pinTo(rc *routeCtx, view []policies.Replica, downs []bool, res *selectResult) int {
	if rc.pin == "" {
		return -1
	}
	at := -1
	for i := range view {
		if view[i].Addr == rc.pin {
			at = i
			continue
		}
		view[i].Unavailable = true
		if !downs[i] {
			res.cooling++
		}
	}
	return at
}

// checkPin handles a /v1/responses follow-up whose state lives on a
// replica that is no longer in pool: refused (previous_response_not_found)
// unless its input carries the whole conversation, which is then sent
// without previous_response_id to wherever it routes. It reports whether
// the request may go on.
func checkPin(rc *routeCtx, pool reverseproxy.UpstreamPool) bool {
	if rc.pin == "" {
		return true
	}
	for _, u := range pool {
		if u.String() == rc.pin {
			metricStateRoutes.WithLabelValues("pinned").Inc()
			return true
		}
	}
	if rc.req != nil && rc.req.InputHasHistory {
		if b, ok := rc.attemptBodyBytes(); ok {
			if nb, ok := withoutPrevious(b); ok {
				rc.setBody(nb)
				rc.pin = ""
				stateHomes.Remove(rc.pinKey)
				metricStateRoutes.WithLabelValues("resent").Inc()
				return true
			}
		}
	}
	metricStateRoutes.WithLabelValues("gone").Inc()
	rc.refuse(rejectStateGone, 0)
	return false
}

// keepOneRoutable keeps status failures from taking out every replica (a
// key holder sending inputs the engine answers 500 to must not take the
// pool down, as Envoy's max ejection percent keeps hosts in rotation):
// when every replica is down and some are cooling only because of
// fail_status answers, the least recently failed of those, if this
// request has not tried it, has its cooldown ended so that one probe goes
// through. Its view entry and res are updated.
func (p *LLMSelection) keepOneRoutable(pool reverseproxy.UpstreamPool, rc *routeCtx, view []policies.Replica, states []*replicaState, res *selectResult, now time.Time) {
	best := -1
	var bestAt time.Time
	for i, st := range states {
		if st == nil || !pool[i].Healthy() || rc.wasTried(view[i].Addr) {
			continue
		}
		v := st.snapshot(now, view[i].Cap, 0)
		if v.avail != availCooling || v.coolReason != reasonStatus {
			continue
		}
		if best < 0 || v.failedAt.Before(bestAt) {
			best, bestAt = i, v.failedAt
		}
	}
	if best < 0 || !states[best].endStatusCooldown(now) {
		return
	}
	metricStatusOverrides.WithLabelValues(view[best].Addr).Inc()
	v := states[best].snapshot(now, view[best].Cap, 0)
	view[best].Unavailable = v.avail != availOK
	res.cooling--
}

// state returns this policy's replica state for addr, taking the policy's
// reference the first time the address is seen.
func (p *LLMSelection) state(addr string) *replicaState {
	if v, ok := p.states.Load(addr); ok {
		return v.(*replicaState)
	}
	st := acquireReplica(addr, p.clock)
	if v, loaded := p.states.LoadOrStore(addr, st); loaded {
		releaseReplica(addr)
		return v.(*replicaState)
	}
	st.rejoin(p.clock.Now())
	st.belief.Configure(p.IndexBlocks)
	if p.scraper != nil {
		p.scraper.watch(st)
	}
	return st
}

// selectUntracked serves requests that did not pass through llm_route: it
// picks by strategy with Caddy's own request counts and reserves nothing.
func (p *LLMSelection) selectUntracked(pool reverseproxy.UpstreamPool) *reverseproxy.Upstream {
	view := make([]policies.Replica, len(pool))
	for i, u := range pool {
		view[i] = policies.Replica{
			Addr: u.String(), InFlight: u.NumRequests(), Cap: u.MaxRequests,
			Unavailable: !u.Healthy(), EngineWaiting: -1, EngineRunning: -1, KVUsage: -1,
		}
	}
	if i := p.strategy.Pick(policies.Keys{}, view); i >= 0 {
		return pool[i]
	}
	return nil
}
