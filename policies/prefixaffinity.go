package policies

// prefixAffinity sends every request with the same leading key to the same
// replica: the Free replica with the highest Rendezvous score of
// keys.Leading. When that home is full or unavailable the next-ranked Free
// replica takes the request, so only the home's keys move. It has no load
// bound: a hot prefix stays on its home until the home is full. Without a
// key it falls back to least_load.
type prefixAffinity struct {
	least leastLoad
}

// Name returns "prefix_affinity".
func (*prefixAffinity) Name() string { return "prefix_affinity" }

// Pick returns the highest-ranked Free replica for keys.Leading, or -1.
func (s *prefixAffinity) Pick(keys Keys, replicas []Replica) int {
	if keys.Leading == 0 {
		return s.least.pick(replicas)
	}
	best, bestScore := -1, uint64(0)
	for i := range replicas {
		if !replicas[i].Free() {
			continue
		}
		if sc := replicas[i].rank(keys.Leading); best < 0 || sc > bestScore {
			best, bestScore = i, sc
		}
	}
	return best
}
