package policies

// followLeading: a match that covers no more than the leading run (the
// system prompt and tools every request of this key shares, not a
// conversation's own history) goes to the prefix's recorded home when
// this router may follow it and it is a candidate, so that one copy of a
// shared prompt serves it. Without a home to follow (peers, no Directory),
// a match where this router placed the prefix by load goes to the
// rendezvous home, where the other routers send it; any other stays where
// the index says, so that a replica that joins does not pull warm
// prefixes away from their cache.
//
// A match of only what the replicas hold in common (sharedRun) with no
// recorded home passes when this router follows the homes it records (a
// Directory, or no peers): past the shared run the request is new, and
// the new-prefix rules place it by load and record its home, which the
// conversation's later requests (through any router of a Directory)
// follow. With peers and no Directory it goes by the rank of its own
// opening within the cold bound, as a home does, which every router
// computes alike; the longest match within each router's own load bound
// differs from router to router (each judges load by its own requests),
// and a conversation would land wherever its turns came in. The rank is
// taken among the replicas believed to hold the shared run while fewer
// than half the Free replicas do: a family's prefix, whose copies are
// worth their hit. Held by more, it is a head that every request opens
// with and every replica soon holds; each router believes it held where
// it sent it, and sets that differ would part a conversation's turns, so
// the rank is taken among all (the rendezvous home).
func (c *candidates) followLeading() (int, int, bool) {
	if !c.warm {
		return -1, 0, false
	}
	c.recall()
	switch {
	case c.shared && !c.trusted() && c.holder >= 0 && 2*c.holders < c.bound.N:
		return c.holder, c.holderMatch, true
	case c.shared && !c.trusted():
		return c.rendezvous, c.rvMatch, true
	case c.shared && c.known == "":
		return -1, 0, false
	}
	switch {
	case c.at >= 0 && c.bound.Admits(&c.replicas[c.at]):
		return c.at, c.matchAt(c.at), true
	case !c.trusted() && c.best != c.top:
		if addr, ok := c.mem.provisional.Home(c.hk); ok && addr == c.replicas[c.best].Addr {
			return c.top, c.topMatch, true
		}
	}
	return c.best, c.bestMatch, true
}

// trusted reports whether this router may follow the homes it recorded:
// shared ones always, its own only while it has no peers (each router's
// own first placements differ).
func (c *candidates) trusted() bool { return c.s.shared || !c.peers }
