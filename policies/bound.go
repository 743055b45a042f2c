package policies

import "math"

// Bound is the load bound every prefix rule and the session rule share:
// CHWBL's bound over the Free replicas (KubeAI, HAProxy's
// hash-balance-factor), which proves no replica exceeds the factor times
// the mean load, plus an absolute slack so that a prefix group is not split
// while the replicas are nearly idle, where there is no queueing to avoid.
// Only the overloaded replica sheds; the rest keep their affinity.
type Bound struct {
	// Limit is ceil(factor x (total load + 1) / n) + slack: a replica whose
	// Load()+1 is at most Limit stays a candidate.
	Limit int
	// MinLoad is the least load among the Free replicas: the least loaded
	// is always within, so that no request is refused for the bound alone.
	MinLoad int
	// N is how many replicas are Free (0: none, and nothing is within).
	N int
	// total is the Free replicas' summed load, kept to widen the bound.
	total int
}

// LoadBound returns the bound of factor and slack over replicas' Free
// members, in one pass.
func LoadBound(replicas []Replica, factor float64, slack int) Bound {
	var b Bound
	for i := range replicas {
		r := &replicas[i]
		if !r.Free() {
			continue
		}
		l := r.Load()
		if b.N == 0 || l < b.MinLoad {
			b.MinLoad = l
		}
		b.N++
		b.total += l
	}
	return b.Widen(factor, slack)
}

// Widen returns the bound of another factor and slack over the same
// replicas.
func (b Bound) Widen(factor float64, slack int) Bound {
	if b.N == 0 {
		return Bound{}
	}
	b.Limit = int(math.Ceil(factor*float64(b.total+1)/float64(b.N))) + slack
	return b
}

// Admits reports whether r, a Free replica, is within the bound (or the
// least loaded).
func (b Bound) Admits(r *Replica) bool {
	l := r.Load()
	return l+1 <= b.Limit || l == b.MinLoad
}
