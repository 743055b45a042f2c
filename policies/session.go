package policies

import "math"

// Sessions: a client that names its session (a session header, OpenAI's
// prompt_cache_key) says which requests belong together better than a
// prefix hash can guess it: a coding agent's turns share a growing prefix
// that the engine caches where the session ran. So a session binds more
// strongly than a believed prefix, and never more strongly than the load
// bound: a session whose replica is full, cooling, gone or past the bound
// moves, and stays where it moved.

// PickSession returns the replica for a request of the session whose key
// is sessionKey (a hash of its id, so that every router instance computes
// the same) and that was last served by home ("" for a new session): home
// while it is Free and within the load bound of opts (BalanceFactor and
// LoadSlack, as prefix_load bounds a prefix), else the highest rendezvous
// rank of the session key among the Free replicas within that bound (the
// least loaded one when none is). It returns -1 when no replica is Free.
// opts must be resolved (Options.WithDefaults).
func PickSession(sessionKey uint64, home string, replicas []Replica, opts Options) int {
	bound, minLoad, n := LoadBound(replicas, opts.BalanceFactor, opts.LoadSlack)
	if n == 0 {
		return -1
	}
	within := func(r *Replica) bool {
		l := r.Load()
		return l+1 <= bound || l == minLoad
	}
	best, bestScore := -1, uint64(0)
	for i := range replicas {
		r := &replicas[i]
		if !r.Free() || !within(r) {
			continue
		}
		if home != "" && r.Addr == home {
			return i
		}
		if sc := r.rank(sessionKey); best < 0 || sc > bestScore {
			best, bestScore = i, sc
		}
	}
	return best
}

// LoadBound is CHWBL's bound over the Free replicas: a replica whose
// Load()+1 is at most bound stays a candidate, where bound is
// ceil(factor x (total load + 1) / n) + slack; minLoad is the least load
// among them (always within, so that a request is never refused for the
// bound alone) and n how many are Free.
func LoadBound(replicas []Replica, factor float64, slack int) (bound, minLoad, n int) {
	total := 0
	for i := range replicas {
		r := &replicas[i]
		if !r.Free() {
			continue
		}
		l := r.Load()
		if n == 0 || l < minLoad {
			minLoad = l
		}
		n++
		total += l
	}
	if n == 0 {
		return 0, 0, 0
	}
	bound = int(math.Ceil(factor*float64(total+1)/float64(n))) + slack
	return bound, minLoad, n
}
