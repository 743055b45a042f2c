package policies

import "sync/atomic"

// leastLoad picks a Free replica with the fewest Load(). Ties are broken
// pseudo-randomly, never toward the first replica: a fixed tie-break sends
// a burst that arrives before any load is counted all to one replica.
type leastLoad struct {
	seed uint64
	n    atomic.Uint64 // calls so far; mixed with seed for each tie-break
}

// Name returns "least_load".
func (*leastLoad) Name() string { return "least_load" }

// Pick returns the index of a least-loaded Free replica, or -1.
func (s *leastLoad) Pick(_ Keys, replicas []Replica) int {
	return s.pick(replicas, false)
}

// rand returns the next tie-breaking value: deterministic given the seed
// and the number of calls, lock-free.
func (s *leastLoad) rand() uint64 { return mix64(s.seed ^ mix64(s.n.Add(1))) }

// pick returns a least-loaded Free replica. With avoidSaturated it ignores
// replicas whose engine reports a nearly full KV cache, unless all Free
// replicas do.
func (s *leastLoad) pick(replicas []Replica, avoidSaturated bool) int {
	min, ties := 0, 0
	for i := range replicas {
		r := &replicas[i]
		if !r.Free() || (avoidSaturated && saturated(r)) {
			continue
		}
		switch l := r.Load(); {
		case ties == 0 || l < min:
			min, ties = l, 1
		case l == min:
			ties++
		}
	}
	if ties == 0 {
		if avoidSaturated {
			return s.pick(replicas, false)
		}
		return -1
	}
	k := int(s.rand() % uint64(ties))
	for i := range replicas {
		r := &replicas[i]
		if !r.Free() || (avoidSaturated && saturated(r)) || r.Load() != min {
			continue
		}
		if k == 0 {
			return i
		}
		k--
	}
	return -1 // unreachable
}

// kvSaturated is the engine KV usage from which a replica no longer takes
// prefix traffic beyond its fair share: it would evict (or preempt) to make
// room, so a cache hit there is likely to be lost anyway.
const kvSaturated = 0.95

// saturated reports whether the engine says its KV cache is nearly full.
func saturated(r *Replica) bool { return r.KVUsage >= kvSaturated }
