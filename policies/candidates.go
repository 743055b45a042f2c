package policies

// candidates is what prefix_load learns of one keyed request's replicas
// in one pass, and what its rules decide from. A candidate is a Free
// replica within the load bound.
type candidates struct {
	s        *prefixLoad
	mem      *memory
	keys     Keys
	replicas []Replica
	// bound is the load bound; cold the looser one a returning prefix's
	// home must be within (each router judges load by its own requests,
	// and a home should be one every router agrees on).
	bound, cold Bound
	// hk is the key the prefix's home is ranked and recorded by.
	hk uint64
	// shared says sharedRun deepened the leading run: what the request
	// matches is what the replicas hold in common.
	shared bool

	// best is the candidate with the longest believed match (bestMatch
	// blocks), ties to the higher rank; warm says that match counts.
	best, bestMatch int
	warm            bool
	// top is the highest-ranked candidate and topMatch its match.
	top, topMatch int
	// rendezvous is the highest-ranked replica within the cold bound, the
	// prefix's home where no router recorded one, and rvMatch its match.
	rendezvous, rvMatch int
	// With a shared run: holders is how many Free replicas are believed to
	// hold it, and holder the highest-ranked of them within the cold bound
	// (-1: none), holderMatch its match.
	holders, holder, holderMatch int
	// spill says a replica over the bound holds the prefix.
	spill bool
	// coolest is the candidate with the least pending prefill (then load,
	// then rank); cheap the one where the request would wait behind the
	// least prefill, its own uncached part included (cheapCost).
	coolest, cheap, cheapCost int

	// What recall found (recalled once, by the rules that need it).
	recalled bool
	peers    bool   // the router treats the replicas as shared
	known    string // the prefix's recorded home, "" if none
	at       int    // known's index when this router may follow it, or -1
}

// survey fills c for keys over replicas in one pass: O(replicas + blocks),
// since most replicas miss at the first block.
func (c *candidates) survey() {
	o := &c.s.opts
	// Each Free replica's match, measured once (kept for the first
	// len(buf) replicas, measured again past them): sharedRun reads them
	// all before the home key the ranks below depend on is known.
	var buf [64]int
	first, second := 0, 0
	for i := range c.replicas {
		if !c.replicas[i].Free() {
			continue
		}
		m := matchOf(c.keys, &c.replicas[i])
		if i < len(buf) {
			buf[i] = m
		}
		if m > first {
			first, second = m, first
		} else if m > second {
			second = m
		}
	}
	if lead := c.sharedRun(second); lead > c.keys.LeadingBlocks {
		c.keys.LeadingBlocks, c.shared = lead, true
		c.hk = c.keys.Blocks[lead]
	} else {
		c.hk = HomeKey(c.keys)
	}
	c.best, c.top, c.rendezvous, c.coolest, c.cheap, c.holder = -1, -1, -1, -1, -1, -1
	var bestRank, topRank, rvRank, coolRank, cheapRank, holderRank uint64
	for i := range c.replicas {
		r := &c.replicas[i]
		if !r.Free() {
			continue
		}
		sc := r.rank(c.hk)
		m := 0
		if i < len(buf) {
			m = buf[i]
		} else {
			m = matchOf(c.keys, r)
		}
		if c.cold.Admits(r) && (c.rendezvous < 0 || sc > rvRank) {
			c.rendezvous, rvRank, c.rvMatch = i, sc, m
		}
		if c.shared && m >= c.keys.LeadingBlocks {
			c.holders++
			if c.cold.Admits(r) && (c.holder < 0 || sc > holderRank) {
				c.holder, holderRank, c.holderMatch = i, sc, m
			}
		}
		if !c.bound.Admits(r) {
			c.spill = c.spill || m >= o.MinMatchBlocks
			continue
		}
		if c.coolest < 0 || cooler(r, sc, &c.replicas[c.coolest], coolRank) {
			c.coolest, coolRank = i, sc
		}
		if q := queued(c.keys, r, m); c.cheap < 0 || q < c.cheapCost || (q == c.cheapCost && cooler(r, sc, &c.replicas[c.cheap], cheapRank)) {
			c.cheap, c.cheapCost, cheapRank = i, q, sc
		}
		if c.top < 0 || sc > topRank {
			c.top, topRank, c.topMatch = i, sc, m
		}
		if c.best < 0 || m > c.bestMatch || (m == c.bestMatch && sc > bestRank) {
			c.best, c.bestMatch, bestRank = i, m, sc
		}
	}
	c.warm = c.bestMatch >= o.MinMatchBlocks
}

// recall looks up the prefix's recorded home: in the shared Directory, or
// in the router's own table, which it follows only while it has no peers
// (each router's own first placements differ).
func (c *candidates) recall() {
	if c.recalled {
		return
	}
	c.recalled, c.at = true, -1
	c.peers = c.s.Peers()
	if addr, ok := c.s.homes(c.mem).Home(c.hk); ok {
		c.known = addr
		if c.s.shared || !c.peers {
			c.at = find(c.replicas, addr)
		}
	}
}

// matchAt is the believed match on replicas[i].
func (c *candidates) matchAt(i int) int {
	if i == c.best {
		return c.bestMatch
	}
	return matchOf(c.keys, &c.replicas[i])
}

// cooler reports whether r (rank sc) has less queued than o (rank osc):
// less prefill pending, then less load, then the higher rank.
func cooler(r *Replica, sc uint64, o *Replica, osc uint64) bool {
	if r.PendingPrefill != o.PendingPrefill {
		return r.PendingPrefill < o.PendingPrefill
	}
	if l, ol := r.Load(), o.Load(); l != ol {
		return l < ol
	}
	return sc > osc
}

// find returns the index of the Free replica at addr, or -1.
func find(replicas []Replica, addr string) int {
	for i := range replicas {
		if replicas[i].Addr == addr {
			if replicas[i].Free() {
				return i
			}
			return -1
		}
	}
	return -1
}
