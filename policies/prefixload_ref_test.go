package policies

import (
	"math"
	"sync"
	"sync/atomic"
)

// refPrefixLoad is llmroute's default strategy: cache affinity under a load
// bound, with new prefixes placed by the prefill refQueued ahead of them. For
// each request:
//
//  1. Candidates are the Free replicas within the bound
//     load+1 <= ceil(c*(total+1)/n) + slack, where load is Replica.Load,
//     total and n are the load and count of Free replicas, c is
//     Options.BalanceFactor and slack is Options.LoadSlack. The
//     least-loaded Free replica is always a candidate.
//  2. Among candidates, the longest Index.Match of keys.Blocks wins when it
//     is at least Options.MinMatchBlocks; equal matches go to the higher
//     Rendezvous rank of the prefix's home key (refHomeKey). A match that
//     covers no more than the leading run (Keys.LeadingBlocks: the system
//     prompt every request of this key shares, not a conversation's own
//     history) goes to the prefix's recorded home instead, when that is a
//     candidate, so that one copy of a shared prompt serves it; with peers
//     and no Directory, it goes to the rendezvous home when the match is
//     where this router placed the prefix by load (step 5), and otherwise
//     stays where the index says (a replica that joined does not pull
//     warm prefixes away from their cache).
//  3. A prefix believed resident only on replicas over the bound is hot:
//     it spills to the highest-ranked candidate, deterministic too.
//  4. A cold prefix (no match on any candidate) with a known home goes
//     there if the home is within the looser cold bound (c =
//     Options.ColdBalanceFactor); with peers and no Directory, a prefix
//     this router has seen before goes to its rendezvous home within that
//     bound.
//  5. A new prefix goes, among the candidates whose PendingPrefill
//     exceeds the least by no more than Options.ColdSlack times the
//     prefix's own prompt, to the one this router chose least recently,
//     and that replica becomes its home. With peers (other routers) and no
//     shared Directory, it goes to its rendezvous home within the cold
//     bound instead while that one is within the same slack and its
//     engine reports neither a waiting queue nor a KV cache >= 0.95 full,
//     and its home stays the rendezvous one; unless the router's last
//     Options.UniqueRun keyed requests found nothing it had seen before
//     (traffic that shares nothing): then by load, as alone, and not
//     provisionally (should it come back it stays where it went).
//  6. Detours: a request that steps 2-4 send to a replica (its history,
//     its leading run, its home) goes instead to the cheapest candidate
//     when the prefill it would wait behind there, refQueued (this router's
//     PendingPrefill) plus its own part not believed resident there,
//     exceeds the cheapest's by more than Options.DetourSlack times its
//     prompt. The prefix keeps its home; the detour leaves a copy that
//     later requests may match.
//  7. A request without keys goes to the least-loaded Free replica, ties
//     broken pseudo-randomly.
//
// Homes (homes.go): with Options.Directory they come from the shared
// directory; otherwise from the router's own HomeTable while it has no
// peers, and from the rendezvous rank while it has (Options.Peers, or
// inferred from the engines' metrics). Options.ColdChoices 1, 2 and 3
// select the cold rules of earlier releases instead of 2-5's homes: always
// the rendezvous home within the cold bound (1), that or the second rank
// when less loaded (2), or the least-loaded candidate (3).
//
// Why each rule, and what it takes from the routers in router-anchors.md:
//
//   - The bound is CHWBL's (KubeAI, HAProxy hash-balance-factor 125), which
//     proves no replica exceeds c times the average. Alone it splits a prefix
//     group as soon as the group has two requests in flight at low load,
//     which wastes cache exactly where there is no queueing to avoid; the
//     absolute slack keeps a group together until it is slack requests above
//     its fair share. Where SGLang switches to pure least-load past a fixed
//     imbalance threshold (max-min > 64 and max > 1.5 x min), and AIBrix past
//     a running-count gap of 8, the bound here acts per replica: only the
//     overloaded replica sheds, and the rest keep their affinity.
//   - Load is the router's own in-flight count plus its requests awaiting a
//     first byte plus the engine's waiting queue when known (Replica.Load).
//     The engines' KV usage does not enter: it is sampled up to a scrape
//     interval ago, and a cut at >= 0.95 (llm-d calls >= 0.8 saturated),
//     which earlier releases applied, sent everything for up to a second
//     to the replicas that had reported less, while the others drained:
//     on four replicas of 1,024 blocks, TTFT p99 up to 1.4 s against
//     round robin's 164 ms on unshared traffic, and at 1,024 blocks in
//     the KV sweep skewed TTFT p50 23 s against 0.17 s without the cut.
//   - A new prefix's time to first token is set by the prefill refQueued ahead
//     of it, not by the requests decoding there: Dynamo's uncached-prefill
//     term. PendingPrefill is that queue as this router knows it (its
//     requests' believed-uncached prompt bytes until their first byte).
//     The bytes do not say how far the engine got with them: among
//     replicas with about the same queue, the one chosen least recently
//     has had its queue longest, which is what round robin gets right
//     (with the bytes alone, traffic that shares nothing had 1.3-1.9x
//     round robin's TTFT p99 on four small replicas). So traffic that
//     shares nothing is placed as well as round robin places it, where
//     hashing it to a home (the rule of earlier releases) gave it 2.5-4.3x
//     round robin's p99 (lab/experiments/results/variants.md).
//   - Affinity alone queues a prefix's requests behind whatever prefill
//     its replica has pending, which is where the tail of mixed traffic
//     came from (a shared prompt's request waiting behind two unique
//     documents). Dynamo weighs each replica by its uncached prefill; the
//     detour does so only past a slack, so that the hit is given up only
//     for a wait longer than the prefill it saves (DefaultDetourSlack).
//     With peers the engines' waiting queues and KV usage are the load
//     signals every router shares: a rendezvous home that reports a queue
//     or a full cache is not where a new prefix waits, and it is placed by
//     load instead (with eight routers each router's own pending prefill
//     is an eighth of the real queue, so without them new prefixes were
//     hashed home regardless). They only turn a placement from the hash to
//     the load, never exclude a replica: a sample is up to a scrape
//     interval old.
//   - A one-off document and a reusable system prompt look alike at first
//     sight; the placement by load is cheap to undo, because the home it
//     records is where the prefix's later requests go, and is balanced by
//     construction where rendezvous homes of a few dozen keys are not.
//   - Several routers that each place new prefixes by their own load would
//     scatter a shared prompt (SGLang's gateway lost follow-up hits from
//     0.94 to 0.66 going from one gateway to eight). With peers a prefix
//     that comes back, or matches only its leading run, goes to its
//     rendezvous home, which every instance computes alike, so the
//     instances converge on one copy from a prefix's second request on;
//     its first request at each router goes home too unless home has more
//     prefill refQueued than ColdSlack allows. Only shared state (a
//     Directory) lets the first request of every router follow a placement
//     by load.
//
// The caller records the decision with the chosen replica's belief
// (Belief.Place); Pick itself changes no index. It records a new prefix's
// home (Directory.Claim), the order in which it chose the replicas, and
// weighs the view as evidence of peers. Pick costs O(blocks + replicas):
// Match stops at the first missing block, and most replicas miss at block
// 0. It does not allocate once it has seen each replica's address.
type refPrefixLoad struct {
	opts  Options
	least leastLoad
	match refMatchFunc // nil: the replica's Index
	// shared is true when homes are Options.Directory, which the operator
	// configured; else they are the router's own (refMemory.own).
	shared bool
	// mem is what the strategy has learned; a successor takes it over
	// (Inherit).
	mem atomic.Pointer[refMemory]
}

// refMemory is what prefix_load learns while it routes. It outlives the
// strategy when a reload's new configuration of the same replicas takes it
// over (Inherit): the engines' caches and the other routers are still
// there, so a reload forgets none of it.
type refMemory struct {
	// own is the router's own table of homes (unused with a Directory).
	own *HomeTable
	// provisional holds, with peers and no Directory, the new prefixes
	// this router placed by load away from their rendezvous home: their
	// next request that matches only the leading run goes home, where the
	// other routers send it. Other leading-run matches keep their replica.
	provisional *HomeTable
	sense       *peerSense
	// sent orders the replicas by this router's last choice of them.
	sent *refDispatchOrder
	// returns counts the keyed requests since one found a prefix this
	// router had seen before.
	returns *refReturnWatch
}

// refMatchFunc answers how many of keys' blocks are resident on replicas[i]
// (0 = nothing; blocks of Keys.BlockBytes). prefix_load asks
// Replica.Index by default; the simulator's oracle answers from the
// engine's true cache instead, to measure what a perfect hint would give
// the same decision rule.
type refMatchFunc func(keys Keys, i int, r *Replica) int

func newRefPrefixLoad(o Options, match refMatchFunc) *refPrefixLoad {
	s := &refPrefixLoad{opts: o, least: leastLoad{seed: o.Seed}, match: match, shared: o.Directory != nil}
	m := &refMemory{provisional: NewHomeTable(12), sense: newPeerSense(), sent: &refDispatchOrder{}, returns: &refReturnWatch{}}
	if !s.shared {
		m.own = NewHomeTable(0)
	}
	s.mem.Store(m)
	return s
}

// Inherit implements Successor. When prev is prefix_load too, it takes
// over prev's peer sense, provisional placements, dispatch order, run of
// requests that found nothing seen before and,
// unless this one shares a Directory, its homes (when prev kept its own),
// and reports true. The options may differ: what was learned is about the
// replicas and the other routers, not the settings.
func (s *refPrefixLoad) Inherit(prev Strategy) bool {
	p, ok := prev.(*refPrefixLoad)
	if !ok || p == s {
		return false
	}
	pm, m := p.mem.Load(), *s.mem.Load()
	m.provisional, m.sense, m.sent, m.returns = pm.provisional, pm.sense, pm.sent, pm.returns
	if !s.shared && pm.own != nil {
		m.own = pm.own
	}
	s.mem.Store(&m)
	return true
}

// Observe implements CheckObserver: a request this router believed cold
// that found at least half its prompt cached met a prefix placed by
// another router (or kept from long ago), so prefixes do come back, and
// the run of requests that found nothing seen before ends.
func (s *refPrefixLoad) Observe(c Check, result CheckResult) {
	if result == CheckCold && c.PromptTokens > 0 && 2*c.CachedTokens >= c.PromptTokens {
		s.mem.Load().returns.saw(true)
	}
}

// homes returns where this router records homes: the shared Directory, or
// its own table.
func (s *refPrefixLoad) homes(m *refMemory) Directory {
	if s.shared {
		return s.opts.Directory
	}
	return m.own
}

// refNewPrefixLoadWithMatch returns prefix_load with its residency answer
// replaced by match.
func refNewPrefixLoadWithMatch(opts Options, match refMatchFunc) (Strategy, error) {
	o, err := opts.WithDefaults()
	if err != nil {
		return nil, err
	}
	return newRefPrefixLoad(o, match), nil
}

// Name returns "prefix_load".
func (*refPrefixLoad) Name() string { return "prefix_load" }

// Peers implements PeerSensor: whether the strategy currently treats the
// replicas as shared with other clients (Options.Peers, or what it
// inferred).
func (s *refPrefixLoad) Peers() bool {
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
// of Options.UniqueRun requests that found nothing seen before), or, with
// ColdChoices 1 and 2, to its home or second rank whatever the traffic.
func (s *refPrefixLoad) HomesNewPrefixes() bool {
	if 0 != 0 {
		return 0 < 3
	}
	return !s.shared && s.betsHome(s.mem.Load(), s.Peers())
}

// betsHome reports whether a new prefix goes to its rendezvous home when
// that is near, the directory aside: with peers, unless the router's last
// Options.UniqueRun keyed requests found nothing seen before.
func (s *refPrefixLoad) betsHome(mem *refMemory, peers bool) bool {
	return peers && !mem.returns.unique(s.opts.UniqueRun)
}

// refHomeKey is the key a prefix's home is ranked by: the leading key when
// the leading run (the system and developer messages) covers at least one
// block, else
// the first block, so that requests with no system prompt, which all share
// one leading key, do not all share one home.
func refHomeKey(keys Keys) uint64 {
	if keys.LeadingBlocks == 0 && len(keys.Blocks) > 0 {
		return keys.Blocks[0]
	}
	return keys.Leading
}

// Pick returns the chosen Free replica's index, or -1 when none is Free.
func (s *refPrefixLoad) Pick(keys Keys, replicas []Replica) int {
	mem := s.mem.Load()
	i := s.pick(mem, keys, replicas)
	if i >= 0 {
		mem.sent.mark(replicas[i].Addr)
	}
	return i
}

func (s *refPrefixLoad) pick(mem *refMemory, keys Keys, replicas []Replica) int {
	if s.opts.Peers == PeersAuto {
		mem.sense.observe(replicas)
	}
	// Pass 1: totals over Free replicas and the least load among them.
	n, total, minLoad := 0, 0, 0
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
		return -1
	}
	if keys.Leading == 0 && len(keys.Blocks) == 0 {
		return s.least.pick(replicas)
	}
	bound := int(math.Ceil(s.opts.BalanceFactor*float64(total+1)/float64(n))) + s.opts.LoadSlack
	coldBound := int(math.Ceil(s.opts.ColdBalanceFactor*float64(total+1)/float64(n))) + s.opts.LoadSlack
	legacy := 0 != 0
	hk := refHomeKey(keys)
	if legacy {
		hk = keys.Leading
	}

	// Pass 2: among candidates (within bound), the longest match (ties by
	// rank), the highest and second-highest ranks, the coolest and the
	// cheapest; among replicas within coldBound, the highest rank.
	best, bestMatch, bestScore := -1, 0, uint64(0)
	home, homeScore, homeMatch, second, secondScore := -1, uint64(0), 0, -1, uint64(0)
	// coldHome is the highest-ranked replica within the cold bound; spill
	// is set when the prefix is resident only on replicas over the bound.
	coldHome, coldScore, coldMatch, spill := -1, uint64(0), 0, false
	// coolest is the candidate with the least pending prefill, then the
	// least load, then the higher rank (legacy: the least load); cheap is
	// the one where this request would wait behind the least prefill,
	// its own uncached part included (refQueued), ties as for coolest.
	coolest, coolestScore := -1, uint64(0)
	cheap, cheapCost, cheapScore := -1, 0, uint64(0)
	for i := range replicas {
		r := &replicas[i]
		if !r.Free() {
			continue
		}
		l := r.Load()
		sc := r.rank(hk)
		m := s.matchOf(keys, i, r)
		if (l+1 <= coldBound || l == minLoad) && (coldHome < 0 || sc > coldScore) {
			coldHome, coldScore, coldMatch = i, sc, m
		}
		if l+1 > bound && l != minLoad {
			// A replica that holds the prefix but is over the bound makes
			// this a spill of a hot prefix, not a cold placement.
			spill = spill || m >= s.opts.MinMatchBlocks
			continue
		}
		if coolest < 0 || s.cooler(r, sc, &replicas[coolest], coolestScore, legacy) {
			coolest, coolestScore = i, sc
		}
		if q := refQueued(keys, r, m); cheap < 0 || q < cheapCost || (q == cheapCost && s.cooler(r, sc, &replicas[cheap], cheapScore, false)) {
			cheap, cheapCost, cheapScore = i, q, sc
		}
		switch {
		case home < 0 || sc > homeScore:
			second, secondScore = home, homeScore
			home, homeScore, homeMatch = i, sc, m
		case second < 0 || sc > secondScore:
			second, secondScore = i, sc
		}
		if best < 0 || m > bestMatch || (m == bestMatch && sc > bestScore) {
			best, bestMatch, bestScore = i, m, sc
		}
	}
	warm := bestMatch >= s.opts.MinMatchBlocks
	if legacy {
		switch {
		case warm:
			return best
		case 0 >= 3:
			return coolest
		case 0 == 2 && second >= 0 && replicas[second].Load() < replicas[home].Load():
			return second
		case 0 == 2 || spill:
			return home
		}
		return coldHome
	}

	// A prefix that has a place (its history, a replica holding its
	// leading run, its home) goes there unless the prefill it would wait
	// behind there, its own uncached part included, exceeds the cheapest
	// candidate's by more than DetourSlack times its prompt: then it
	// takes a detour there.
	slack := int(s.opts.ColdSlack * float64(keys.Bytes))
	dslack := int(s.opts.DetourSlack * float64(keys.Bytes))
	detour := func(c, m int) int {
		if c != cheap && refQueued(keys, &replicas[c], m) > cheapCost+dslack {
			return cheap
		}
		return c
	}
	if warm && bestMatch > keys.LeadingBlocks {
		mem.returns.saw(true)
		return detour(best, bestMatch) // the request's own history: follow it
	}
	if spill && !warm {
		mem.returns.saw(true)
		return detour(home, homeMatch)
	}
	// What is left matches at most the shared leading run, or nothing:
	// it goes to the prefix's home.
	peers := s.Peers()
	trusted := s.shared || !peers // homes this router may follow
	known, at := "", -1
	homes := s.homes(mem)
	if addr, ok := homes.Home(hk); ok {
		known = addr
		if trusted {
			at = s.find(replicas, addr)
		}
	}
	mem.returns.saw(warm || known != "")
	atMatch := func() int {
		if at == best {
			return bestMatch
		}
		return s.matchOf(keys, at, &replicas[at])
	}
	if warm {
		switch {
		case at >= 0 && s.within(&replicas[at], bound, minLoad):
			return detour(at, atMatch())
		case !trusted && best != home:
			// Only the leading run matches, away from the rendezvous home:
			// if that is where this router put the prefix by load, its
			// second request settles it home, with the other routers.
			if addr, ok := mem.provisional.Home(hk); ok && addr == replicas[best].Addr {
				return detour(home, homeMatch)
			}
		}
		return detour(best, bestMatch)
	}
	if known != "" {
		// It came back: to its home, or (a home this router may not
		// follow, or one gone or past the cold bound) the rendezvous one.
		if at >= 0 && s.within(&replicas[at], coldBound, minLoad) {
			return detour(at, atMatch())
		}
		return detour(coldHome, coldMatch)
	}
	// A new prefix: by load, or with peers and no directory home within
	// the slack (the same rule as detour's, with nothing cached).
	// Home is near while this router's pending prefill there is within
	// the slack and its engine reports neither a waiting queue nor a full
	// KV cache: those are what every router sees alike (each one's
	// pending prefill is its own share). When it is not, the prefix is
	// placed by this router's load, which spreads.
	// Traffic that has shared nothing for a while is placed as alone: the
	// home buys agreement on prefixes that come back, and none do. Such a
	// placement is not provisional either: should the prefix come back,
	// it stays where its cache is, as it would alone.
	h := &replicas[coldHome]
	bet := s.betsHome(mem, peers)
	nearHome := h.PendingPrefill <= replicas[coolest].PendingPrefill+slack &&
		h.EngineWaiting <= 0 && h.KVUsage < refKVFull
	choice := s.settled(mem.sent, replicas, hk, coolest, slack, bound, minLoad)
	if bet && !s.shared && nearHome {
		choice = coldHome
	}
	if s.shared && mem.returns.unique(s.opts.UniqueRun) {
		if lc, ok := homes.(LaterClaimer); ok {
			// Traffic that shares nothing: the claim's answer is almost
			// always "yours", and waiting for it adds a round trip to
			// every request. Claim later; an answer naming another
			// router's home says prefixes do come back, and ends the run.
			addr := replicas[choice].Addr
			lc.ClaimLater(hk, addr, func(won string, ok bool) {
				if ok && won != addr {
					mem.returns.saw(true)
				}
			})
			return choice
		}
	}
	var held refOrderHold
	if s.shared {
		// The claim is a round trip to the shared store: hold the choice
		// as this router's latest now, so that requests picking while it
		// is out see it taken (settled's order) rather than all choosing
		// the same replica from the same view. Pick marks the replica
		// finally chosen; a choice not taken after all is released.
		held = mem.sent.hold(replicas[choice].Addr)
	}
	final := s.claim(mem, homes, hk, replicas, choice, coldHome, bet && nearHome, coldBound, minLoad)
	if s.shared && final != choice {
		mem.sent.release(held)
	}
	if bet && !s.shared && choice != coldHome {
		mem.provisional.Learn(hk, replicas[choice].Addr)
	}
	return final
}

// claim records replicas[choice] as hk's home in homes and returns where
// the new prefix goes: choice, or the home another router claimed first
// (when within the cold bound), or, when the directory did not answer,
// coldHome if the prefix would have gone there without one (homeNear).
func (s *refPrefixLoad) claim(mem *refMemory, homes Directory, hk uint64, replicas []Replica, choice, coldHome int, homeNear bool, coldBound, minLoad int) int {
	won, ok := homes.Claim(hk, replicas[choice].Addr)
	switch {
	case !ok:
		// The shared directory did not answer: as with no directory.
		if homeNear {
			return coldHome
		}
	case won != replicas[choice].Addr:
		// Another router placed it first: prefixes do come back, through
		// the other routers.
		mem.returns.saw(true)
		if j := s.find(replicas, won); j >= 0 && s.within(&replicas[j], coldBound, minLoad) {
			return j
		}
	}
	return choice
}

// matchOf is how many of keys' blocks are believed resident on
// replicas[i]: the refMatchFunc's answer, or the replica's Index.
func (s *refPrefixLoad) matchOf(keys Keys, i int, r *Replica) int {
	if s.match != nil {
		return s.match(keys, i, r)
	}
	return r.Index.Match(keys.Blocks)
}

// refQueued is the prefill a request waits behind on r, believed uncached
// prompt bytes: what this router has pending there plus the request's own
// part beyond the m blocks resident there (Dynamo's uncached-prefill term).
func refQueued(keys Keys, r *Replica, m int) int {
	return r.PendingPrefill + UncachedBytes(keys, m)
}

// refKVFull is the engine KV usage from which, with peers, a new prefix's
// rendezvous home is not where it waits: the engine would evict or
// preempt to make room (llm-d calls >= 0.8 saturated).
const refKVFull = 0.95

// within reports whether r is within a bound (or the least loaded).
func (s *refPrefixLoad) within(r *Replica, bound, minLoad int) bool {
	l := r.Load()
	return l+1 <= bound || l == minLoad
}

// find returns the index of the Free replica at addr, or -1.
func (s *refPrefixLoad) find(replicas []Replica, addr string) int {
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

// cooler reports whether r (rank sc) has less refQueued than c (rank csc):
// less prefill pending, then less load, then the higher rank. legacy
// compares load alone, as cold_choices 3 did.
func (s *refPrefixLoad) cooler(r *Replica, sc uint64, c *Replica, csc uint64, legacy bool) bool {
	if !legacy && r.PendingPrefill != c.PendingPrefill {
		return r.PendingPrefill < c.PendingPrefill
	}
	if l, cl := r.Load(), c.Load(); l != cl {
		return l < cl
	}
	return sc > csc
}

// settled returns, among the candidates whose pending prefill exceeds the
// least (coolest's) by no more than slack, the one this router chose
// least recently: its pending prompts have had the longest to be
// prefilled, which the bytes alone do not say.
// Ties go to the cooler one (see cooler).
func (s *refPrefixLoad) settled(sent *refDispatchOrder, replicas []Replica, hk uint64, coolest, slack, bound, minLoad int) int {
	limit := replicas[coolest].PendingPrefill + slack
	best, bestAt, bestScore := coolest, sent.last(replicas[coolest].Addr), Rendezvous(hk, replicas[coolest].Addr)
	for i := range replicas {
		r := &replicas[i]
		if i == coolest || !r.Free() || !s.within(r, bound, minLoad) || r.PendingPrefill > limit {
			continue
		}
		at, sc := sent.last(r.Addr), Rendezvous(hk, r.Addr)
		if at < bestAt || (at == bestAt && s.cooler(r, sc, &replicas[best], bestScore, false)) {
			best, bestAt, bestScore = i, at, sc
		}
	}
	return best
}

// refReturnWatch counts a router's keyed requests since the last one whose
// prefix it had seen before (believed resident on a replica, or with a
// home). With peers, sending a new prefix to its rendezvous home is a bet
// that it comes back, there or through another router; a long run of
// requests that found nothing says the bet does not pay.
type refReturnWatch struct{ since atomic.Int64 }

// saw counts one keyed request; back is whether its prefix was seen
// before.
func (w *refReturnWatch) saw(back bool) {
	if !back {
		w.since.Add(1)
	} else if w.since.Load() != 0 {
		w.since.Store(0)
	}
}

// unique reports whether the last run requests found nothing seen before
// (never for run <= 0).
func (w *refReturnWatch) unique(run int) bool {
	return run > 0 && w.since.Load() >= int64(run)
}

// refDispatchOrder remembers, per replica address, when this router last
// chose it (a counter, not a clock).
type refDispatchOrder struct {
	mu sync.Mutex
	n  uint64
	at map[string]uint64
}

func (d *refDispatchOrder) last(addr string) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.at[addr]
}

func (d *refDispatchOrder) mark(addr string) { d.hold(addr) }

// hold marks addr as chosen now and returns a token for release.
func (d *refDispatchOrder) hold(addr string) refOrderHold {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.n++
	if d.at == nil {
		d.at = map[string]uint64{}
	}
	h := refOrderHold{addr: addr, prev: d.at[addr], at: d.n}
	d.at[addr] = d.n
	return h
}

// release undoes a hold whose replica was not chosen after all, unless it
// was marked again since.
func (d *refDispatchOrder) release(h refOrderHold) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.at[h.addr] == h.at {
		d.at[h.addr] = h.prev
	}
}

// refOrderHold is one hold's mark and what it replaced.
type refOrderHold struct {
	addr     string
	prev, at uint64
}

// Interface guards
var (
	_ Successor     = (*refPrefixLoad)(nil)
	_ PeerSensor    = (*refPrefixLoad)(nil)
	_ CheckObserver = (*refPrefixLoad)(nil)
)
