package policies

import (
	"fmt"
	"math"
	"strings"
)

// Reason names the rule a strategy picked a replica by (prefix_load's
// rules; see prefixLoad), for logs and metrics.
type Reason string

// The reasons prefix_load gives.
const (
	ReasonLeastLoad  Reason = "least_load" // no keys: the least-loaded replica
	ReasonHistory    Reason = "history"    // its own history is resident there
	ReasonHot        Reason = "hot"        // a hot prefix spilled past the bound
	ReasonLeading    Reason = "leading"    // its shared leading run is there
	ReasonHome       Reason = "home"       // its recorded home
	ReasonDetour     Reason = "detour"     // its place had too much prefill queued
	ReasonLoad       Reason = "load"       // a new prefix, placed by load
	ReasonRendezvous Reason = "rendezvous" // a new prefix at its rendezvous home
	ReasonClaimed    Reason = "claimed"    // a new prefix another router placed
)

// Reasoner is a Strategy that says which rule made each pick.
type Reasoner interface {
	// PickReason is Pick, with the rule that decided ("" for -1).
	PickReason(keys Keys, replicas []Replica) (int, Reason)
}

// PickWithReason is s's pick and, when s is a Reasoner, the rule that
// decided ("" otherwise).
func PickWithReason(s Strategy, keys Keys, replicas []Replica) (int, Reason) {
	if r, ok := s.(Reasoner); ok {
		return r.PickReason(keys, replicas)
	}
	return s.Pick(keys, replicas), ""
}

// Strategy picks a replica for one request. Implementations are safe for
// concurrent use and deterministic given their seed.
type Strategy interface {
	// Name is the strategy's configuration name, e.g. "prefix_load".
	Name() string
	// Pick returns the index in replicas of the chosen replica, which is
	// always Free, or -1 when no replica is Free. keys may be empty.
	Pick(keys Keys, replicas []Replica) int
}

// Successor is a Strategy that can take over what another learned while
// routing the same replicas (a reload's new configuration replacing the
// old one's). Inherit reports whether it took anything from prev, which may
// be any Strategy; it is called before the successor's first Pick.
type Successor interface {
	Inherit(prev Strategy) bool
}

// CheckObserver is a Strategy that learns from the engines' reports: the
// caller passes it each prediction checked against the cached tokens an
// engine reported (Belief.Check's input and verdict), for requests it
// routed.
type CheckObserver interface {
	Observe(c Check, result CheckResult)
}

// PeerSensor is a Strategy that tells whether it treats the replicas as
// shared with other routers (configured, or inferred from the engines),
// whether it now sends new prefixes to their rendezvous home (with peers
// and no Directory, unless its traffic has shared nothing for
// Options.UniqueRun requests), and whether it does so even while the
// home's engine has a queue (the new prefixes it sent home lately found
// their prompts' share there that says the bet pays).
type PeerSensor interface {
	Peers() bool
	HomesNewPrefixes() bool
	QueuedHomes() bool
}

// Default strategy knobs. They were measured in the simulator and end to
// end (docs/experiments.md has the figures); they are not Caddyfile
// directives, since no deployment needs other values, and the lab varies
// them through Options (the module's JSON-only tuning object).
const (
	// DefaultBalanceFactor is the CHWBL balance factor c: with the
	// absolute slack it keeps a hot prefix together longer than HAProxy's
	// 1.25 at no cost in tail latency.
	DefaultBalanceFactor = 1.5
	// DefaultLoadSlack is the absolute slack added to the CHWBL bound.
	DefaultLoadSlack = 2
	// DefaultMinMatchBlocks is the shortest resident prefix that counts.
	DefaultMinMatchBlocks = 1
	// DefaultColdSlack is how much more pending prefill than the least a
	// replica may have, as a fraction of a new prefix's own prompt, to be
	// among the replicas the prefix may go to: 0.5, so that placing it
	// there never delays its first token by more than half the prefill it
	// needs anyway. Larger fractions make instances agree on more first
	// placements and queue traffic that shares nothing behind itself.
	DefaultColdSlack = 0.5
	// DefaultDetourSlack is how much longer, as a fraction of the prompt,
	// the prefill a request would wait behind at the replica its prefix
	// belongs to (its own uncached part included) may be than at the
	// cheapest candidate before it takes a detour there: 1.5, so that a
	// prefix keeps its replica until that one has about two and a half
	// more prompts of its size queued than another. Smaller cuts the tail
	// of mixed traffic and loses hits; much larger gives back the tail.
	DefaultDetourSlack = 1.5
	// DefaultColdBalanceFactor is the balance factor of the looser bound a
	// returning prefix's home must be within. A home is where every later
	// request of the prefix goes, from every router instance, and each
	// instance judges the bound from its own in-flight requests only, so
	// the bound must be loose enough that instances agree on it.
	DefaultColdBalanceFactor = 3.0
	// DefaultUniqueRun is how many keyed requests in a row that found
	// nothing seen before make a router with peers place new prefixes by
	// load: 64, so that any traffic where one request in 64 comes back
	// keeps the peer rule, and traffic that shares nothing stops paying
	// for it.
	DefaultUniqueRun = 64
)

// Options tune the strategies. The zero value selects every default.
type Options struct {
	// Seed makes tie-breaking deterministic: two strategies with the same
	// seed make the same choices for the same sequence of calls.
	Seed uint64
	// BalanceFactor is c in prefix_load's bound ceil(c*(total+1)/n): a
	// replica above it is skipped. Near 1 spreads load evenly but splits
	// prefix groups early; larger keeps affinity longer but lets a hot
	// prefix queue. 0 selects DefaultBalanceFactor; it must be >= 1.
	BalanceFactor float64
	// LoadSlack is added to that bound so that a prefix group is not split
	// at low load, where there is no queueing to avoid. 0 selects
	// DefaultLoadSlack; a negative value means no slack (pure CHWBL).
	LoadSlack int
	// MinMatchBlocks is the shortest believed-resident prefix, in blocks,
	// that prefix_load follows; shorter matches count as cold. 0 selects
	// DefaultMinMatchBlocks.
	MinMatchBlocks int
	// Peers says whether other router instances (or clients) send to the
	// same replicas; PeersAuto, the default, infers it from the engines'
	// metrics. With peers a prefix's home is its rendezvous home unless a
	// Directory is shared.
	Peers PeerMode
	// ColdSlack is how much more pending prefill than the least a replica
	// may have, as a fraction of a new prefix's own prompt (Keys.Bytes),
	// to take the prefix: the least recently chosen such replica does
	// when alone, the prefix's rendezvous home when it is one of them and
	// the router has peers and no Directory. Larger makes more instances
	// agree on where a new prefix lives (its first requests hit where the
	// others put it) and queues more traffic that shares nothing behind
	// itself. 0 selects DefaultColdSlack; a negative value means none
	// (only the replicas with the least pending).
	ColdSlack float64
	// DetourSlack is how much more queued prefill, as a fraction of the
	// request's prompt (Keys.Bytes), the replica a request's prefix
	// belongs to (its history, its leading run, its home) may have than
	// the cheapest candidate, counting at each the prefill pending there
	// plus the request's own part not believed resident there, before the
	// request takes a detour to the cheapest. Larger keeps more hits and
	// queues more behind a busy home. 0 selects DefaultDetourSlack; a
	// negative value means none (a detour as soon as another replica is
	// cheaper).
	DetourSlack float64
	// UniqueRun is, with peers and no Directory, the length of a run of
	// keyed requests finding nothing this router has seen before (no
	// prefix believed resident, no home), the current one included, from
	// which it places new prefixes by load, as a lone router does,
	// instead of at their rendezvous home, until a prefix comes back: one
	// this router has seen, or one it believed cold that the engine
	// reported at least half cached (another router placed it; see
	// CheckObserver). The peer rule bets that a new prefix comes back,
	// through this router or another; such a run says the traffic shares
	// nothing. 0 selects
	// DefaultUniqueRun; a negative value means never (the peer rule
	// whatever the traffic). With a Directory, a run of that length
	// (counting also each claim another router had made first as a prefix
	// come back) takes the claims of new prefixes off the request's path
	// when the Directory can (LaterClaimer): the prefix goes where load
	// puts it at once, and an answer naming another router's home ends
	// the run.
	UniqueRun int
	// Directory, when set, is a table of homes shared with the other
	// router instances: a new prefix placed by load is claimed there, and
	// every instance follows the claim. nil keeps homes local.
	Directory Directory `json:"-"`
	// ColdBalanceFactor is c in the bound a cold prefix's home must be
	// within: ceil(c*(total+1)/n) + LoadSlack. Past it the prefix goes
	// to the highest-ranked replica within that bound. It is
	// looser than BalanceFactor because a cold placement should be one
	// every router instance makes alike. 0 selects
	// DefaultColdBalanceFactor, or BalanceFactor when that is larger; it
	// must be >= 1.
	ColdBalanceFactor float64
}

// WithDefaults returns o with every unset knob filled in, as the
// strategies use it, or an error for a knob out of range. Apply it once: a
// negative LoadSlack (no slack) becomes 0, which a second pass reads as
// unset.
func (o Options) WithDefaults() (Options, error) {
	if o.BalanceFactor == 0 {
		o.BalanceFactor = DefaultBalanceFactor
	}
	if !(o.BalanceFactor >= 1) { // also rejects NaN
		return o, fmt.Errorf("llmroute: balance factor %v is below 1", o.BalanceFactor)
	}
	switch {
	case o.LoadSlack == 0:
		o.LoadSlack = DefaultLoadSlack
	case o.LoadSlack < 0:
		o.LoadSlack = 0
	}
	if o.MinMatchBlocks < 1 {
		o.MinMatchBlocks = DefaultMinMatchBlocks
	}
	if o.ColdBalanceFactor == 0 {
		o.ColdBalanceFactor = max(DefaultColdBalanceFactor, o.BalanceFactor)
	}
	if !(o.ColdBalanceFactor >= 1) {
		return o, fmt.Errorf("llmroute: cold balance factor %v is below 1", o.ColdBalanceFactor)
	}
	var err error
	if o.ColdSlack, err = slackOrDefault(o.ColdSlack, DefaultColdSlack, "cold slack"); err != nil {
		return o, err
	}
	if o.DetourSlack, err = slackOrDefault(o.DetourSlack, DefaultDetourSlack, "detour slack"); err != nil {
		return o, err
	}
	if o.Peers < PeersAuto || o.Peers > PeersSome {
		return o, fmt.Errorf("llmroute: unknown peer mode %d", o.Peers)
	}
	if o.UniqueRun == 0 {
		o.UniqueRun = DefaultUniqueRun
	}
	return o, nil
}

// StrategyNames lists the names NewStrategy accepts; prefix_load is the
// default.
var StrategyNames = []string{"round_robin", "prefix_affinity", "least_load", "prefix_load"}

// NewStrategy returns the named strategy configured by opts. It returns an
// error listing the valid names for an unknown name, and one for an invalid
// option.
func NewStrategy(name string, opts Options) (Strategy, error) {
	o, err := opts.WithDefaults()
	if err != nil {
		return nil, err
	}
	switch name {
	case "round_robin":
		return &roundRobin{}, nil
	case "prefix_affinity":
		return &prefixAffinity{least: leastLoad{seed: o.Seed}}, nil
	case "least_load":
		return &leastLoad{seed: o.Seed}, nil
	case "prefix_load":
		return newPrefixLoad(o), nil
	}
	return nil, fmt.Errorf("llmroute: unknown strategy %q (valid: %s)", name, strings.Join(StrategyNames, ", "))
}

// slackOrDefault applies the rule every slack option shares: 0 selects
// def, a negative value means none (0), and NaN or +Inf is an error.
func slackOrDefault(v, def float64, name string) (float64, error) {
	switch {
	case v == 0:
		return def, nil
	case v < 0:
		return 0, nil
	case !(v < math.Inf(1)): // NaN, +Inf
		return v, fmt.Errorf("llmroute: %s %v is not a finite fraction", name, v)
	}
	return v, nil
}
