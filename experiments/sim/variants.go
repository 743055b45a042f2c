package sim

import (
	"math"

	"github.com/llmroute/caddy-llmroute/policies"
)

// Variants are experiment-only policies that test changes recommended for
// prefix_load; they are not part of the comparison and the module does not
// implement them.
var Variants = []string{"prefix_load_p2c"}

// prefixLoadP2C is prefix_load (same bound, slack, saturation rule, longest
// believed match, rendezvous ties) with one change on the cold path: a
// request whose prefix no candidate holds goes to the less loaded of its
// two highest-ranked candidates (ties to the higher rank) instead of always
// to the first. Both choices are deterministic in the key, so router
// instances still agree on where a new prefix may land, but two cold
// prefills that hash to the same home no longer queue behind each other
// while the second-ranked replica idles.
type prefixLoadP2C struct {
	opts  policies.Options
	least policies.Strategy
}

func (p *prefixLoadP2C) pick(f *flight, view []policies.Replica) int {
	keys := f.req.Keys
	n, total := 0, 0
	minAll, minUnsat, unsat := 0, 0, 0
	for i := range view {
		r := &view[i]
		if !r.Free() {
			continue
		}
		l := r.Load()
		if n == 0 || l < minAll {
			minAll = l
		}
		n++
		total += l
		if r.KVUsage < 0.95 {
			if unsat == 0 || l < minUnsat {
				minUnsat = l
			}
			unsat++
		}
	}
	if n == 0 {
		return -1
	}
	if keys.Leading == 0 && len(keys.Blocks) == 0 {
		return p.least.Pick(keys, view)
	}
	allSat, minLoad := unsat == 0, minUnsat
	if allSat {
		minLoad = minAll
	}
	bound := int(math.Ceil(p.opts.BalanceFactor*float64(total+1)/float64(n))) + p.opts.LoadSlack
	best, bestMatch, bestScore := -1, 0, uint64(0)
	home, homeScore, second, secondScore := -1, uint64(0), -1, uint64(0)
	for i := range view {
		r := &view[i]
		if !r.Free() || (!allSat && r.KVUsage >= 0.95) {
			continue
		}
		if l := r.Load(); l+1 > bound && l != minLoad {
			continue
		}
		sc := policies.Rendezvous(keys.Leading, r.Addr)
		switch {
		case home < 0 || sc > homeScore:
			second, secondScore = home, homeScore
			home, homeScore = i, sc
		case second < 0 || sc > secondScore:
			second, secondScore = i, sc
		}
		m := r.Index.Match(keys.Blocks)
		if best < 0 || m > bestMatch || (m == bestMatch && sc > bestScore) {
			best, bestMatch, bestScore = i, m, sc
		}
	}
	if bestMatch >= p.opts.MinMatchBlocks {
		return best
	}
	if second >= 0 && view[second].Load() < view[home].Load() {
		return second
	}
	return home
}
