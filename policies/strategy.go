package policies

import (
	"fmt"
	"strings"
)

// Default strategy knobs.
const (
	// DefaultBalanceFactor is the CHWBL balance factor c. HAProxy's
	// hash-balance-factor 125 is 1.25; with the absolute slack and the
	// second-choice cold path, 1.5 kept hot prefixes together longer at no
	// cost in tail latency in the simulator (lab/experiments/results/variants.json).
	DefaultBalanceFactor = 1.5
	// DefaultLoadSlack is the absolute slack added to the CHWBL bound.
	DefaultLoadSlack = 2
	// DefaultMinMatchBlocks is the shortest resident prefix that counts.
	DefaultMinMatchBlocks = 1
	// DefaultColdChoices is how many rendezvous-ranked replicas a cold
	// prefix may land on: 1, its home, so that router instances that see
	// different loads still agree. In the simulator (residency.json,
	// routers) this keeps prefix_load's hit rate flat from 1 to 8 routers
	// (shared_prefix 0.90-0.91), where 3 falls from 0.91 to 0.54; 3 is the
	// better choice for a single router (variants.json).
	DefaultColdChoices = 1
	// DefaultColdBalanceFactor is the balance factor of the looser bound a
	// cold prefix's home must be within. A new prefix's placement is
	// where every later request of it goes, from every router instance,
	// and each instance judges the bound from its own in-flight requests
	// only. In the simulator (two routers, standard point) the shared 1.5
	// made instances disagree on 3-4% of new prefixes; 2 and 3 on none of
	// 64 and 1 of 256, with hit rates within 0.005. Through two caddy
	// processes at 16 requests in flight each (bursty, a few per replica)
	// 2 still disagreed on 0-1.5%, 3 on none in ten runs (also at 48 in
	// flight each; integration/multiinstance_test.go). The price is paid
	// by traffic that shares nothing: no_shared_prefix TTFT p99 674 ->
	// 794-797 ms with one router, where ColdChoices 3 is the setting to use.
	DefaultColdBalanceFactor = 3.0
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
	// ColdChoices is how many of its highest-ranked replicas a cold prefix
	// may go to: 1 always sends it home, so that router instances that see
	// different loads still pick the same replica; 2 sends it to the second
	// when that one is less loaded, which keeps two cold prefills that
	// share a home from queueing behind each other;
	// 3 or more sends it to the least-loaded candidate (ties to the higher
	// rank): the lowest tail latency for traffic that shares nothing, and
	// the least agreement between instances. 0 selects DefaultColdChoices.
	ColdChoices int
	// ColdBalanceFactor is c in the bound a cold prefix's home must be
	// within (ColdChoices 1): ceil(c*(total+1)/n) + LoadSlack. Past it the
	// prefix goes to the highest-ranked replica within that bound. It is
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
	switch {
	case o.ColdChoices <= 0:
		o.ColdChoices = DefaultColdChoices
	case o.ColdChoices > 3:
		o.ColdChoices = 3
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
		return &prefixLoad{opts: o, least: leastLoad{seed: o.Seed}}, nil
	}
	return nil, fmt.Errorf("llmroute: unknown strategy %q (valid: %s)", name, strings.Join(StrategyNames, ", "))
}
