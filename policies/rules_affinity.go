package policies

// The rules that send a request to where its prefix already is. Each
// reads the candidates' survey and either decides (a replica and the
// blocks believed resident there) or passes to the next; prefix_load asks
// them in the order of affinity() and checks each decision for a detour.

// followHistory: a request whose believed match reaches past its shared
// leading run carries its own conversation's history, which is cached
// where that match is. The longest match among the candidates wins, ties
// to the higher rendezvous rank.
func (c *candidates) followHistory() (int, int, bool) {
	if c.warm && c.bestMatch > c.keys.LeadingBlocks {
		return c.best, c.bestMatch, true
	}
	return -1, 0, false
}

// spillHot: a prefix believed resident only on replicas over the load
// bound is hot. It spills to the highest-ranked candidate, which every
// router computes alike, so that the spill builds one second copy rather
// than one per router.
func (c *candidates) spillHot() (int, int, bool) {
	if c.spill && !c.warm {
		return c.top, c.topMatch, true
	}
	return -1, 0, false
}

// followLeading: a match that covers no more than the leading run (the
// system prompt and tools every request of this key shares, not a
// conversation's own history) goes to the prefix's recorded home when
// this router may follow it and it is a candidate, so that one copy of a
// shared prompt serves it. Without a home to follow (peers, no Directory),
// a match where this router placed the prefix by load goes to the
// rendezvous home, where the other routers send it; any other stays where
// the index says, so that a replica that joins does not pull warm
// prefixes away from their cache.
func (c *candidates) followLeading() (int, int, bool) {
	if !c.warm {
		return -1, 0, false
	}
	c.recall()
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

// returnHome: a prefix believed resident nowhere that has a recorded home
// came back (the index forgot it, or another router placed it): it goes
// home when that is within the cold bound and this router may follow it,
// else to its rendezvous home within the cold bound.
func (c *candidates) returnHome() (int, int, bool) {
	c.recall()
	switch {
	case c.known == "":
		return -1, 0, false
	case c.at >= 0 && c.cold.Admits(&c.replicas[c.at]):
		return c.at, c.matchAt(c.at), true
	}
	return c.rendezvous, c.rvMatch, true
}

// trusted reports whether this router may follow the homes it recorded:
// shared ones always, its own only while it has no peers (each router's
// own first placements differ).
func (c *candidates) trusted() bool { return c.s.shared || !c.peers }
