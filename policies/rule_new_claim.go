package policies

// claim records where a new prefix went as its home and returns where it
// finally goes. choice is the placement so far (by load, or its
// rendezvous home); homeNear says the rendezvous home was near and bet
// that the router bets on homes (nearRendezvous).
//
//   - Alone, the router's own table records the choice.
//   - With peers and no Directory, a prefix placed by load away from its
//     rendezvous home is provisional: its next request that matches only
//     the leading run goes home (followLeading), where the other routers
//     send it.
//   - With a Directory, the choice is claimed there and every router
//     follows the first claim: one that names another router's home
//     within the cold bound wins. When the Directory does not answer, the
//     prefix goes where it would without one. During a unique run the
//     claim's answer is almost always "yours", so the claim leaves the
//     request's path when the Directory can (LaterClaimer).
func (c *candidates) claim(choice int, why Reason, homeNear, bet bool) (int, Reason) {
	s, mem, rs := c.s, c.mem, c.replicas
	addr := rs[choice].Addr
	homes := s.homes(mem)
	if s.shared && mem.returns.unique(s.opts.UniqueRun) {
		if lc, ok := homes.(LaterClaimer); ok {
			lc.ClaimLater(c.hk, addr, func(won string, ok bool) {
				if ok && won != addr {
					mem.returns.saw(true) // prefixes do come back
				}
			})
			return choice, why
		}
	}
	var held orderHold
	if s.shared {
		// The claim is a round trip to the shared store: hold the choice
		// as this router's latest now, so that requests picking while it
		// is out see it taken rather than all choosing the same replica
		// from the same view. Pick marks the replica finally chosen.
		held = mem.sent.hold(addr)
	}
	final := choice
	switch won, ok := homes.Claim(c.hk, addr); {
	case !ok:
		if homeNear {
			final, why = c.rendezvous, ReasonRendezvous
		}
	case won != addr:
		mem.returns.saw(true) // prefixes do come back, through the other routers
		if j := find(rs, won); j >= 0 && c.cold.Admits(&rs[j]) {
			final, why = j, ReasonClaimed
		}
	}
	if s.shared && final != choice {
		mem.sent.release(held)
	}
	if bet && !s.shared && choice != c.rendezvous {
		mem.provisional.Learn(c.hk, addr)
	}
	return final, why
}
