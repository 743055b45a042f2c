package policies

import "math"

// prefixLoad is llmroute's default strategy: cache affinity under a load
// bound. For each request:
//
//  1. Candidates are the Free replicas within the bound
//     load+1 <= ceil(c*(total+1)/n) + slack, where total and n are the load
//     and count of Free replicas, c is Options.BalanceFactor and slack is
//     Options.LoadSlack. The least-loaded Free replica is always a candidate.
//     A replica whose engine reports KV usage >= 0.95 is not a candidate
//     while any other Free replica is not that full.
//  2. Among candidates, the longest Index.Match of keys.Blocks wins when it
//     is at least Options.MinMatchBlocks; equal matches go to the higher
//     Rendezvous rank of keys.Leading.
//  3. A cold prefix (no such match on any Free replica) goes to its home:
//     the highest Rendezvous rank of keys.Leading among Free replicas
//     within the looser cold bound, where c is Options.ColdBalanceFactor
//     (3 by default), so that every router instance picks the same
//     replica although each sees only its own in-flight requests
//     (Options.ColdChoices 1, the default). A prefix resident only on
//     replicas over the bound is hot, not cold: it spills to the
//     highest-ranked candidate, deterministic too. ColdChoices 2 lets a
//     cold prefix go to the second-ranked candidate when that one is less
//     loaded; 3 to the least-loaded candidate, ties to the home. Those cut
//     tail latency for traffic that shares nothing when one router
//     decides, and cost hit rate when several do, because each then
//     places a new prefix by its own view of the load
//     (lab/experiments/results/variants.json and residency.json).
//  4. A request without keys goes to the least-loaded candidate, ties broken
//     pseudo-randomly.
//
// Why each rule, and what it takes from the routers in router-anchors.md:
//
//   - The bound is CHWBL's (KubeAI, HAProxy hash-balance-factor 125), which
//     proves no replica exceeds c times the average. Alone it splits a prefix
//     group as soon as the group has two requests in flight at low load,
//     which wastes cache exactly where there is no queueing to avoid; the
//     absolute slack keeps a group together until it is slack requests above
//     its fair share. Where SGLang switches to pure least-load past a fixed
//     imbalance threshold (max-min > 64 and max > 1.5 x min), and AIBrix past
//     a running-count gap of 8, the bound here acts per replica: only the
//     overloaded replica sheds, and the rest keep their affinity.
//   - Load is the router's own in-flight count plus the engine's waiting
//     queue when known (Replica.Load), the two signals llm-d's scorers weigh
//     (queue 2, KV usage 2); KV usage enters as the saturation cut rather
//     than a weight, because llm-d's own "saturated at KV >= 0.8" and
//     Dynamo's cost (uncached prefill blocks + active decode blocks) agree
//     that a full cache loses the hit anyway. Unknown engine figures count
//     as no extra load, never as idle: the in-flight count still applies.
//   - Longest match among candidates is the prefix scorer of llm-d and
//     Dynamo's uncached-prefill term; restricting it to candidates replaces
//     llm-d's weighted sum, whose weights trade hit rate against queueing
//     implicitly, with an explicit bound.
//   - Ties and cold prefixes go by Rendezvous rank rather than at random
//     (llm-d, vLLM production-stack) or by index order. This is where we aim
//     higher: every router instance computes the same home from the same
//     key, so several instances with no shared index still agree (SGLang's
//     gateway lost follow-up hits from 0.94 to 0.66 going from one gateway
//     to eight), and a hot prefix that exceeds the bound spills to its
//     next-ranked candidate, which is deterministic too, so the spill lands
//     on the same second replica from every instance.
//
// The caller records the decision with the chosen replica's Index.Insert;
// Pick itself does not change any index. Pick costs O(blocks + replicas):
// Match stops at the first missing block, and most replicas miss at block 0.
// It does not allocate.
type prefixLoad struct {
	opts  Options
	least leastLoad
	match MatchFunc // nil: the replica's Index
}

// MatchFunc answers how much of keys is resident on replicas[i] (0 =
// nothing, in any unit where larger is longer). prefix_load asks
// Replica.Index by default; the simulator's oracle answers from the
// engine's true cache instead, to measure what a perfect hint would give
// the same decision rule.
type MatchFunc func(keys Keys, i int, r *Replica) int

// NewPrefixLoadWithMatch returns prefix_load with its residency answer
// replaced by match (MinMatchBlocks then applies in match's unit).
func NewPrefixLoadWithMatch(opts Options, match MatchFunc) (Strategy, error) {
	o, err := opts.WithDefaults()
	if err != nil {
		return nil, err
	}
	return &prefixLoad{opts: o, least: leastLoad{seed: o.Seed}, match: match}, nil
}

// Name returns "prefix_load".
func (*prefixLoad) Name() string { return "prefix_load" }

// Pick returns the chosen Free replica's index, or -1 when none is Free.
func (s *prefixLoad) Pick(keys Keys, replicas []Replica) int {
	// Pass 1: totals over Free replicas, and the least load among those
	// that are not KV-saturated (among all Free ones if every one is).
	n, total := 0, 0
	minAll, minUnsat, unsat := 0, 0, 0
	for i := range replicas {
		r := &replicas[i]
		if !r.Free() {
			continue
		}
		l := r.Load()
		if n == 0 || l < minAll {
			minAll = l
		}
		n++
		total += l
		if !saturated(r) {
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
		return s.least.pick(replicas, true)
	}
	allSat, minLoad := unsat == 0, minUnsat
	if allSat {
		minLoad = minAll
	}
	bound := int(math.Ceil(s.opts.BalanceFactor*float64(total+1)/float64(n))) + s.opts.LoadSlack
	coldBound := int(math.Ceil(s.opts.ColdBalanceFactor*float64(total+1)/float64(n))) + s.opts.LoadSlack

	// Pass 2: among candidates (within bound), the longest match (ties by
	// rank), the home (highest rank) and the second; among replicas within
	// coldBound, the cold home.
	best, bestMatch, bestScore := -1, 0, uint64(0)
	home, homeScore, second, secondScore := -1, uint64(0), -1, uint64(0)
	// coldHome is the highest-ranked replica within the cold bound; spill
	// is set when the prefix is resident only on replicas over the bound.
	coldHome, coldScore, spill := -1, uint64(0), false
	// coolest is the least-loaded candidate (ties to the higher rank), the
	// cold choice when ColdChoices is 3 or more.
	coolest, coolestScore := -1, uint64(0)
	for i := range replicas {
		r := &replicas[i]
		if !r.Free() || (!allSat && saturated(r)) {
			continue
		}
		l := r.Load()
		sc := Rendezvous(keys.Leading, r.Addr)
		var m int
		if s.match != nil {
			m = s.match(keys, i, r)
		} else {
			m = r.Index.Match(keys.Blocks)
		}
		if (l+1 <= coldBound || l == minLoad) && (coldHome < 0 || sc > coldScore) {
			coldHome, coldScore = i, sc
		}
		if l+1 > bound && l != minLoad {
			// A replica that holds the prefix but is over the bound makes
			// this a spill of a hot prefix, not a cold placement.
			spill = spill || m >= s.opts.MinMatchBlocks
			continue
		}
		if coolest < 0 || l < replicas[coolest].Load() || (l == replicas[coolest].Load() && sc > coolestScore) {
			coolest, coolestScore = i, sc
		}
		switch {
		case home < 0 || sc > homeScore:
			second, secondScore = home, homeScore
			home, homeScore = i, sc
		case second < 0 || sc > secondScore:
			second, secondScore = i, sc
		}
		if best < 0 || m > bestMatch || (m == bestMatch && sc > bestScore) {
			best, bestMatch, bestScore = i, m, sc
		}
	}
	if bestMatch >= s.opts.MinMatchBlocks {
		return best
	}
	switch {
	case s.opts.ColdChoices >= 3:
		return coolest
	case s.opts.ColdChoices == 2 && second >= 0 && replicas[second].Load() < replicas[home].Load():
		return second
	case s.opts.ColdChoices == 2 || spill:
		return home
	}
	return coldHome
}
