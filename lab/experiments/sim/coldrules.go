package sim

import "github.com/llmroute/caddy-llmroute/policies"

// coldRules is prefix_load with the cold rules it had before it placed new
// prefixes by load (Config.ColdChoices, the variants "cold_choices 1-3"):
// lab-only, to measure what the shipped rules gain over them. A request
// whose believed match counts goes to the longest match among the
// candidates, and a cold one to:
//
//	1: the highest rendezvous rank of its leading key within the cold
//	   bound, or the top-ranked candidate when its prefix is hot;
//	2: the top-ranked candidate, or the second when that one is less loaded;
//	3: the least-loaded candidate, ties to the higher rank.
//
// It decides from the pieces the product exports (the load bound, the
// index, rendezvous ranks) and keeps a prefix_load beside it for what the
// simulator reads of the strategy: keyless picks, peer sense and checks.
type coldRules struct {
	pl      policies.Strategy
	opts    policies.Options // resolved
	choices int
}

func newColdRules(opts policies.Options, choices int) (*coldRules, error) {
	o, err := opts.WithDefaults()
	if err != nil {
		return nil, err
	}
	pl, err := policies.NewStrategy("prefix_load", opts)
	if err != nil {
		return nil, err
	}
	return &coldRules{pl: pl, opts: o, choices: min(choices, 3)}, nil
}

func (p *coldRules) pick(f *flight, view []policies.Replica) int {
	keys := f.req.Keys
	i := p.pl.Pick(keys, view) // the peer sense's view; keyless picks
	if i < 0 || (keys.Leading == 0 && len(keys.Blocks) == 0) {
		return i
	}
	return p.decide(keys, view)
}

func (p *coldRules) decide(keys policies.Keys, view []policies.Replica) int {
	b := policies.LoadBound(view, p.opts.BalanceFactor, p.opts.LoadSlack)
	cold := b.Widen(p.opts.ColdBalanceFactor, p.opts.LoadSlack)
	hk := keys.Leading
	best, bestMatch, bestRank := -1, 0, uint64(0)
	home, homeRank, second, secondRank := -1, uint64(0), -1, uint64(0)
	coldHome, coldRank, coolest, coolRank := -1, uint64(0), -1, uint64(0)
	spill := false
	for i := range view {
		r := &view[i]
		if !r.Free() {
			continue
		}
		sc := policies.Rendezvous(hk, r.Addr)
		m := 0
		if r.Index != nil {
			m = r.Index.Match(keys.Blocks)
		}
		if cold.Admits(r) && (coldHome < 0 || sc > coldRank) {
			coldHome, coldRank = i, sc
		}
		if !b.Admits(r) {
			spill = spill || m >= p.opts.MinMatchBlocks
			continue
		}
		if l := r.Load(); coolest < 0 || l < view[coolest].Load() || (l == view[coolest].Load() && sc > coolRank) {
			coolest, coolRank = i, sc
		}
		switch {
		case home < 0 || sc > homeRank:
			second, secondRank = home, homeRank
			home, homeRank = i, sc
		case second < 0 || sc > secondRank:
			second, secondRank = i, sc
		}
		if best < 0 || m > bestMatch || (m == bestMatch && sc > bestRank) {
			best, bestMatch, bestRank = i, m, sc
		}
	}
	switch {
	case bestMatch >= p.opts.MinMatchBlocks:
		return best
	case p.choices >= 3:
		return coolest
	case p.choices == 2 && second >= 0 && view[second].Load() < view[home].Load():
		return second
	case p.choices == 2 || spill:
		return home
	}
	return coldHome
}
