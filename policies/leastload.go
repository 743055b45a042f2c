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
	return s.pick(replicas)
}

// rand returns the next tie-breaking value: deterministic given the seed
// and the number of calls, lock-free.
func (s *leastLoad) rand() uint64 { return mix64(s.seed ^ mix64(s.n.Add(1))) }

// pick returns a least-loaded Free replica.
func (s *leastLoad) pick(replicas []Replica) int {
	min, ties := 0, 0
	for i := range replicas {
		r := &replicas[i]
		if !r.Free() {
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
		return -1
	}
	k := int(s.rand() % uint64(ties))
	for i := range replicas {
		r := &replicas[i]
		if !r.Free() || r.Load() != min {
			continue
		}
		if k == 0 {
			return i
		}
		k--
	}
	return -1 // unreachable
}
