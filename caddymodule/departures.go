package caddymodule

import (
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/llmroute/caddy-llmroute/policies"
)

// checkDepartures notices replicas that left the upstream set (dynamic
// upstreams, a scale-down): their belief is purged so that a replica
// coming back under the same address starts cold, as its engine does.
// Requests still in flight on a departed replica keep their slot until they
// end; until then the replica drains (replica.go, depart). The common case
// (same set) costs one hash; static upstreams, which arrive as the same
// slice every time, not even that.
func (p *LLMSelection) checkDepartures(pool reverseproxy.UpstreamPool) {
	if len(pool) > 0 && p.lastPool.Load() == &pool[0] && int(p.lastLen.Load()) == len(pool) {
		return
	}
	var sig uint64
	for _, u := range pool {
		sig ^= policies.Rendezvous(0x9e3779b97f4a7c15, u.String())
	}
	sig ^= uint64(len(pool))
	if p.poolSig.Load() == sig {
		p.rememberPool(pool)
		return
	}
	p.poolMu.Lock()
	defer p.poolMu.Unlock()
	if p.poolSig.Load() == sig {
		return
	}
	now := make(map[string]struct{}, len(pool))
	for _, u := range pool {
		now[u.String()] = struct{}{}
	}
	for addr := range p.poolLast {
		if _, ok := now[addr]; ok {
			continue
		}
		if v, ok := p.states.LoadAndDelete(addr); ok {
			p.statesGen.Add(1) // statesOf must not hand it out again
			st := v.(*replicaState)
			st.purge(policies.PurgeRemoved)
			st.depart()
			if p.scraper != nil {
				p.scraper.unwatch(addr)
			}
		}
	}
	p.poolLast = now
	if p.poolSig.Load() == 0 && p.inherit(sig, now) {
		// Before the first Pick of this set (Inherit's contract): others
		// wait on poolMu or on poolSig's store below.
		p.logger.Debug("took over what the previous configuration's strategy learned")
	}
	p.poolSig.Store(sig)
	p.rememberPool(pool)
	p.succeed(sig)
}

// departedOf returns the replicas of pool that the last set checked by
// checkDepartures no longer holds (nil when there are none).
func (p *LLMSelection) departedOf(pool reverseproxy.UpstreamPool) map[string]bool {
	p.poolMu.Lock()
	defer p.poolMu.Unlock()
	if p.poolLast == nil {
		return nil
	}
	var gone map[string]bool
	for _, u := range pool {
		if _, ok := p.poolLast[u.String()]; !ok {
			if gone == nil {
				gone = map[string]bool{}
			}
			gone[u.String()] = true
		}
	}
	return gone
}

// rememberPool notes the slice of a set already checked, for the fast path.
func (p *LLMSelection) rememberPool(pool reverseproxy.UpstreamPool) {
	if len(pool) > 0 {
		p.lastLen.Store(int64(len(pool)))
		p.lastPool.Store(&pool[0])
	}
}
