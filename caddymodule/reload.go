package caddymodule

import (
	"sync"
	"time"

	"github.com/llmroute/caddy-llmroute/policies"
)

// The reload hand-off. A config change through the admin API provisions a
// new LLMSelection and then cleans up the old one while requests routed by
// the old one still stream, and others still wait in the queue. Four
// things keep that seamless:
//
//  1. Replica state is package-level (replica.go), keyed by dial address:
//     the new policy takes references on the same states, so in-flight
//     counts, cooldowns and beliefs carry over. The old policy's
//     references are dropped stateGracePeriod after its Cleanup, by which
//     time the new one has taken its own for every replica it routes to.
//  2. The wait queue is package-level too (waitqueue.go): a slot freed by
//     a request the old policy admitted wakes a request the new one
//     queued, and the other way round.
//  3. A request queued under the old policy re-selects under the new one
//     (live): the new limits apply to it at once (a raised cap admits it).
//     successors maps an upstream set's signature to the newest policy that
//     has routed for that set (recorded in checkDepartures); until the new
//     config has routed anything, the only live policy stands in, and with
//     several live policies the request waits under its own.
//  4. What the strategy learned while routing (prefix_load's homes, its
//     provisional placements, whether it has peers: policies.Successor)
//     passes to the first policy that routes the same upstream set next:
//     the old policy's while it is still live (successors), else the one
//     a reload retired for that set up to stateGracePeriod ago (bequests),
//     else (the reload changed the set) the policy whose set shares the
//     most replicas with the new one.
//
// goLive and retire bracket a policy's life; each wakes the queue so that
// waiters look again under the policy now in charge.

// stateGracePeriod is how long replica state outlives the last config that
// referenced it.
var stateGracePeriod = 2 * time.Minute

// successors maps an upstream-set signature to the newest policy that has
// routed for that set.
var successors sync.Map // uint64 -> *LLMSelection

// livePolicies lists the provisioned policies that no reload has retired.
var livePolicies struct {
	sync.Mutex
	list []*LLMSelection
}

// goLive adds a provisioned policy to the live ones. A reload may have
// raised a cap: queued requests look again.
func goLive(p *LLMSelection) {
	livePolicies.Lock()
	livePolicies.list = append(livePolicies.list, p)
	livePolicies.Unlock()
	waiters.wakeAll()
}

// bequests holds, per upstream-set signature, the strategy of the last
// policy retired while routing that set and the set's addresses, for
// stateGracePeriod.
var bequests struct {
	sync.Mutex
	m map[uint64]bequest
}

type bequest struct {
	strategy policies.Strategy
	addrs    map[string]struct{}
}

// retire takes a policy a reload replaced out of the live ones and of the
// successors, so that requests queued under it move on, and leaves its
// strategy to the next policy that routes its upstream set.
func retire(p *LLMSelection) {
	p.retired.Store(true)
	if learns(p.strategy) {
		p.poolMu.Lock()
		sig, addrs := p.poolSig.Load(), p.poolLast // replaced, never changed in place
		p.poolMu.Unlock()
		if sig != 0 {
			bequests.Lock()
			if bequests.m == nil {
				bequests.m = map[uint64]bequest{}
			}
			bequests.m[sig] = bequest{strategy: p.strategy, addrs: addrs}
			bequests.Unlock()
			time.AfterFunc(stateGracePeriod, func() {
				bequests.Lock()
				if bequests.m[sig].strategy == p.strategy {
					delete(bequests.m, sig)
				}
				bequests.Unlock()
			})
		}
	}
	livePolicies.Lock()
	for i, q := range livePolicies.list {
		if q == p {
			livePolicies.list = append(livePolicies.list[:i], livePolicies.list[i+1:]...)
			break
		}
	}
	livePolicies.Unlock()
	successors.Range(func(k, v any) bool {
		successors.CompareAndDelete(k, p)
		return true
	})
}

// live returns the policy that should decide for a request queued under p:
// p itself until a reload retires it, then the new config's policy for the
// same upstream set, or, before that one has routed anything, the only llm
// policy of the new config (with several, it waits for the first).
func (p *LLMSelection) live() *LLMSelection {
	if !p.retired.Load() {
		return p
	}
	if v, ok := successors.Load(p.poolSig.Load()); ok {
		return v.(*LLMSelection)
	}
	livePolicies.Lock()
	defer livePolicies.Unlock()
	if len(livePolicies.list) == 1 {
		return livePolicies.list[0]
	}
	return p
}

// succeed records p as the newest policy routing for the upstream set with
// signature sig; if it replaces another, requests queued under that one
// look again under p's limits.
func (p *LLMSelection) succeed(sig uint64) {
	if p.retired.Load() {
		return
	}
	if old, loaded := successors.Swap(sig, p); loaded && old != p {
		waiters.wakeAll()
	}
}

// inherit gives p's strategy, before it routes the upstream set with
// signature sig and addresses addrs for the first time, what the strategy
// of the set's last policy learned: the live one's (successors), else a
// retired one's (bequests); failing both (the reload changed the set), the
// one whose set shares the most replicas with addrs, live or retired. It
// reports whether there was something to take. A retired strategy is
// taken once.
func (p *LLMSelection) inherit(sig uint64, addrs map[string]struct{}) bool {
	s, ok := p.strategy.(policies.Successor)
	if !ok {
		return false
	}
	if v, ok := successors.Load(sig); ok {
		if q := v.(*LLMSelection); q != p && learns(q.strategy) {
			return s.Inherit(q.strategy)
		}
	}
	var prev policies.Strategy
	bequests.Lock()
	if l, ok := bequests.m[sig]; ok {
		prev = l.strategy
		delete(bequests.m, sig)
	}
	bequests.Unlock()
	if prev == nil {
		prev = nearestPolicy(p, addrs)
	}
	return prev != nil && s.Inherit(prev)
}

// nearestPolicy returns the strategy of the live policy other than p, or
// else of the retired one (taking it), whose last upstream set shares the
// most replicas with addrs; nil when none shares any.
func nearestPolicy(p *LLMSelection, addrs map[string]struct{}) policies.Strategy {
	var best policies.Strategy
	most := 0
	livePolicies.Lock()
	live := append([]*LLMSelection(nil), livePolicies.list...)
	livePolicies.Unlock()
	for _, q := range live {
		if q == p || !learns(q.strategy) || q.poolSig.Load() == 0 {
			// (One that has not routed yet may be in its own first route,
			// holding its poolMu and waiting for p's.)
			continue
		}
		// q is past its first route: it never waits for another policy's
		// poolMu, so waiting for q's here cannot deadlock.
		q.poolMu.Lock()
		n := overlap(q.poolLast, addrs)
		q.poolMu.Unlock()
		if n > most {
			best, most = q.strategy, n
		}
	}
	if best != nil {
		return best
	}
	bequests.Lock()
	defer bequests.Unlock()
	var at uint64
	for sig, l := range bequests.m {
		if n := overlap(l.addrs, addrs); n > most {
			best, most, at = l.strategy, n, sig
		}
	}
	if best != nil {
		delete(bequests.m, at)
	}
	return best
}

// learns reports whether s learns something a successor can take over.
func learns(s policies.Strategy) bool {
	_, ok := s.(policies.Successor)
	return ok
}

// overlap counts the addresses a and b share.
func overlap(a, b map[string]struct{}) int {
	if len(a) > len(b) {
		a, b = b, a
	}
	n := 0
	for k := range a {
		if _, ok := b[k]; ok {
			n++
		}
	}
	return n
}
