package policies

import "sync/atomic"

// prefixLoad is llmroute's default strategy: cache affinity under a load
// bound, with new prefixes placed by the prefill queued ahead of them.
// A request without keys goes to the least-loaded Free replica. For a
// keyed one, a believed match held on two or more replicas counts as its
// shared leading run, and its home is ranked by its first block past it
// (sharedRun). It is then decided by the first of these rules that
// applies, among the candidates: the Free replicas within the load bound
// (Bound):
//
//  1. history (followHistory): its own conversation, believed resident
//     past the shared leading run, wins where it is.
//  2. hot (spillHot): a prefix resident only on replicas over the bound
//     spills to the highest-ranked candidate.
//  3. leading (followLeading): a match of only the shared leading run goes
//     to the prefix's home, or stays where it matches; with peers and no
//     Directory, a match of only what the replicas hold in common goes by
//     the rank of the request's own opening.
//  4. home (returnHome): a prefix with a recorded home goes home, within a
//     looser bound.
//  5. new: a new prefix is placed by pending prefill, least recently
//     chosen first (byLoad); with peers and no Directory at its
//     rendezvous home while that is near (nearRendezvous); and its home is
//     recorded or claimed (claim).
//
// Each of rules 1-4 yields to a detour (detour) when the prefill the
// request would wait behind there exceeds the cheapest candidate's by more
// than Options.DetourSlack times its prompt. Each rule's doc says why.
//
// Homes (homes.go) come from the shared Directory when one is set;
// otherwise from the router's own table while it has no peers, and from
// the rendezvous rank while it has (Options.Peers, or inferred from the
// engines' metrics: peers.go).
//
// The caller records the decision with the chosen replica's belief
// (Belief.Place); Pick itself changes no index. It records a new prefix's
// home, the order in which it chose the replicas, and weighs the view as
// evidence of peers. Pick costs O(blocks + replicas): Match stops at the
// first missing block, and most replicas miss at block 0. It does not
// allocate once it has seen each replica's address.
type prefixLoad struct {
	opts  Options
	least leastLoad
	// shared is true when homes are Options.Directory, which the operator
	// configured; else they are the router's own (memory.own).
	shared bool
	// mem is what the strategy has learned; a successor takes it over
	// (Inherit).
	mem atomic.Pointer[memory]
}

// memory is what prefix_load learns while it routes. It outlives the
// strategy when a reload's new configuration of the same replicas takes it
// over (Inherit): the engines' caches and the other routers are still
// there, so a reload forgets none of it.
type memory struct {
	// own is the router's own table of homes (unused with a Directory).
	own *HomeTable
	// provisional holds, with peers and no Directory, the new prefixes
	// this router placed by load away from their rendezvous home (claim).
	provisional *HomeTable
	sense       *peerSense
	// sent orders the replicas by this router's last choice of them.
	sent *dispatchOrder
	// returns counts the keyed requests since one found a prefix this
	// router had seen before.
	returns *returnWatch
	// finds is what new prefixes sent home found there (nearRendezvous).
	finds *homeFinds
}

func newPrefixLoad(o Options) *prefixLoad {
	s := &prefixLoad{opts: o, least: leastLoad{seed: o.Seed}, shared: o.Directory != nil}
	m := &memory{provisional: NewHomeTable(12), sense: newPeerSense(), sent: &dispatchOrder{}, returns: &returnWatch{}, finds: &homeFinds{}}
	if !s.shared {
		m.own = NewHomeTable(0)
	}
	s.mem.Store(m)
	return s
}

// Name returns "prefix_load".
func (*prefixLoad) Name() string { return "prefix_load" }

// Pick returns the chosen Free replica's index, or -1 when none is Free.
func (s *prefixLoad) Pick(keys Keys, replicas []Replica) int {
	i, _ := s.PickReason(keys, replicas)
	return i
}

// PickReason implements Reasoner: Pick, and the rule that decided.
func (s *prefixLoad) PickReason(keys Keys, replicas []Replica) (int, Reason) {
	mem := s.mem.Load()
	i, why := s.pick(mem, keys, replicas)
	if i >= 0 {
		mem.sent.mark(replicas[i].Addr)
	}
	return i, why
}

// pick runs the rules in order (see prefixLoad).
func (s *prefixLoad) pick(mem *memory, keys Keys, replicas []Replica) (int, Reason) {
	if s.opts.Peers == PeersAuto {
		mem.sense.observe(replicas)
	}
	c := candidates{s: s, mem: mem, keys: keys, replicas: replicas}
	if c.bound = LoadBound(replicas, s.opts.BalanceFactor, s.opts.LoadSlack); c.bound.N == 0 {
		return -1, ""
	}
	if keys.Leading == 0 && len(keys.Blocks) == 0 {
		return s.least.pick(replicas), ReasonLeastLoad
	}
	c.cold = c.bound.Widen(s.opts.ColdBalanceFactor, s.opts.LoadSlack)
	c.survey()
	if i, m, why := c.affinity(); i >= 0 {
		mem.returns.saw(true)
		if c.detour(i, m) {
			return c.cheap, ReasonDetour
		}
		return i, why
	}
	mem.returns.saw(false)
	slack := int(s.opts.ColdSlack * float64(keys.Bytes))
	choice, why := c.byLoad(slack), ReasonLoad
	bet := s.betsHome(mem, c.peers)
	near := bet && c.nearRendezvous(slack)
	if near && !s.shared {
		choice, why = c.rendezvous, ReasonRendezvous
	}
	return c.claim(choice, why, near, bet)
}

// affinity asks the rules that send a request where its prefix is, in
// order (rule_history.go, rule_hot.go, rule_leading.go, rule_home.go):
// each reads the candidates' survey and either decides (a replica and the
// blocks believed resident there) or passes to the next. i is -1 when none
// applies: a new prefix.
func (c *candidates) affinity() (i, m int, why Reason) {
	if i, m, ok := c.followHistory(); ok {
		return i, m, ReasonHistory
	}
	if i, m, ok := c.spillHot(); ok {
		return i, m, ReasonHot
	}
	if i, m, ok := c.followLeading(); ok {
		return i, m, ReasonLeading
	}
	if i, m, ok := c.returnHome(); ok {
		return i, m, ReasonHome
	}
	return -1, 0, ""
}

// matchOf is how many of keys' blocks are believed resident on r.
func matchOf(keys Keys, r *Replica) int {
	if r.Index == nil {
		return 0
	}
	return r.Index.Match(keys.Blocks)
}

// homes returns where this router records homes: the shared Directory, or
// its own table.
func (s *prefixLoad) homes(m *memory) Directory {
	if s.shared {
		return s.opts.Directory
	}
	return m.own
}

// HomeKey is the key a prefix's home is ranked by: the leading key when
// the leading run (the system and developer messages) covers at least one
// block, else the first block, so that requests with no system prompt,
// which all share one leading key, do not all share one home.
func HomeKey(keys Keys) uint64 {
	if keys.LeadingBlocks == 0 && len(keys.Blocks) > 0 {
		return keys.Blocks[0]
	}
	return keys.Leading
}

// Inherit implements Successor. When prev is prefix_load too, it takes
// over prev's peer sense, provisional placements, dispatch order, run of
// requests that found nothing seen before, what its new prefixes found
// at home and, unless this one shares a Directory, its homes (when prev
// kept its own), and reports true. The options may differ: what was
// learned is about the replicas and the other routers, not the settings.
func (s *prefixLoad) Inherit(prev Strategy) bool {
	p, ok := prev.(*prefixLoad)
	if !ok || p == s {
		return false
	}
	pm, m := p.mem.Load(), *s.mem.Load()
	m.provisional, m.sense, m.sent, m.returns, m.finds = pm.provisional, pm.sense, pm.sent, pm.returns, pm.finds
	if !s.shared && pm.own != nil {
		m.own = pm.own
	}
	s.mem.Store(&m)
	return true
}

// Observe implements CheckObserver: a request this router believed cold
// that found at least half its prompt cached met a prefix placed by
// another router (or kept from long ago), so prefixes do come back, and
// the run of requests that found nothing seen before ends; and what a new
// prefix sent to its rendezvous home found there counts in homeFinds.
func (s *prefixLoad) Observe(c Check, result CheckResult) {
	mem := s.mem.Load()
	if result == CheckCold && c.PromptTokens > 0 && 2*c.CachedTokens >= c.PromptTokens {
		mem.returns.saw(true)
	}
	if c.Reason == ReasonRendezvous {
		mem.finds.saw(c.CachedTokens, c.PromptTokens)
	}
}

// Peers implements PeerSensor: whether the strategy currently treats the
// replicas as shared with other clients (Options.Peers, or what it
// inferred).
func (s *prefixLoad) Peers() bool {
	switch s.opts.Peers {
	case PeersNone:
		return false
	case PeersSome:
		return true
	}
	return s.mem.Load().sense.peers.Load()
}

// HomesNewPrefixes implements PeerSensor: whether a new prefix now goes to
// its rendezvous home when that is near (peers, no Directory, and no run
// of Options.UniqueRun requests that found nothing seen before).
func (s *prefixLoad) HomesNewPrefixes() bool {
	return !s.shared && s.betsHome(s.mem.Load(), s.Peers())
}

// QueuedHomes implements PeerSensor: whether a new prefix goes to its
// rendezvous home even while that home's engine reports a queue
// (homeFinds: the bet pays).
func (s *prefixLoad) QueuedHomes() bool {
	return s.HomesNewPrefixes() && s.mem.Load().finds.pays.Load()
}

// Interface guards
var (
	_ Successor     = (*prefixLoad)(nil)
	_ PeerSensor    = (*prefixLoad)(nil)
	_ CheckObserver = (*prefixLoad)(nil)
	_ Reasoner      = (*prefixLoad)(nil)
)
