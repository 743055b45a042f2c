package policies

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
	b := LoadBound(replicas, opts.BalanceFactor, opts.LoadSlack)
	best, bestScore := -1, uint64(0)
	for i := range replicas {
		r := &replicas[i]
		if !r.Free() || !b.Admits(r) {
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
