package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/llmroute/caddy-llmroute/policies"
	"github.com/llmroute/caddy-llmroute/simengine"
)

// Policies lists every policy the simulator compares, in report order. The
// four of policies.StrategyNames run the router's own code; random,
// bounded_hash and oracle are reference points defined here.
var Policies = []string{"random", "round_robin", "prefix_affinity", "least_load", "prefix_load", "bounded_hash", "oracle"}

// picker chooses a replica for one request, like policies.Strategy but
// with access to the whole request (the reference policies need its hash
// key or its tokens).
type picker interface {
	pick(f *flight, view []policies.Replica) int
}

// strategyPicker runs a policies.Strategy: the decision code of the Caddy
// module, unchanged.
type strategyPicker struct{ s policies.Strategy }

func (p strategyPicker) pick(f *flight, view []policies.Replica) int {
	i, why := policies.PickWithReason(p.s, f.req.Keys, view)
	f.why = why
	return i
}

// observerOf returns the picker's strategy when it learns from the
// engines' reports (policies.CheckObserver), as the module passes them.
func observerOf(p picker) policies.CheckObserver {
	o, _ := strategyOf(p).(policies.CheckObserver)
	return o
}

// strategyOf returns the policies.Strategy a picker runs, or nil.
func strategyOf(p picker) policies.Strategy {
	switch p := p.(type) {
	case strategyPicker:
		return p.s
	case *oracle:
		return p.s
	case *coldRules:
		return p.pl
	}
	return nil
}

// randomPicker picks a Free replica uniformly at random.
type randomPicker struct{ rng *rand.Rand }

func (p randomPicker) pick(_ *flight, view []policies.Replica) int {
	n := 0
	for i := range view {
		if view[i].Free() {
			n++
		}
	}
	if n == 0 {
		return -1
	}
	k := p.rng.IntN(n)
	for i := range view {
		if view[i].Free() {
			if k == 0 {
				return i
			}
			k--
		}
	}
	return -1
}

// boundedHash is consistent hashing with bounded loads on the request's
// leading bytes, what HAProxy's `balance hash` with `hash-balance-factor
// 125` (or KubeAI's CHWBL) gives today: walk the replicas in the key's
// rendezvous order and take the first whose load+1 fits in
// ceil(factor*(total+1)/n). HAProxy allots ceil(factor*(served+1)) slots
// spread over the servers, so the per-server bound rounds up. Load is the
// router's own in-flight count: a load balancer knows nothing of the
// engine's queue.
type boundedHash struct {
	factor float64
	order  []int // scratch
}

func (p *boundedHash) pick(f *flight, view []policies.Replica) int {
	n, total := 0, 0
	for i := range view {
		if view[i].Free() {
			n++
			total += view[i].InFlight
		}
	}
	if n == 0 {
		return -1
	}
	bound := int(math.Ceil(p.factor * float64(total+1) / float64(n)))
	best, bestScore := -1, uint64(0)
	// One pass: the highest-ranked replica within the bound. Walking the
	// rendezvous order and stopping at the first eligible one is the same.
	for i := range view {
		r := &view[i]
		if !r.Free() || r.InFlight+1 > bound {
			continue
		}
		if sc := policies.Rendezvous(f.req.HashKey, r.Addr); best < 0 || sc > bestScore {
			best, bestScore = i, sc
		}
	}
	if best < 0 { // unreachable: the least-loaded Free replica is within the bound
		for i := range view {
			if view[i].Free() {
				return i
			}
		}
	}
	return best
}

// oracle is prefix_load with perfect knowledge: the policies package's own
// prefix_load (same bound, slack, detours, rendezvous ties and cold
// path), asked about the true cached prefix of every replica
// (engine.CachedPrefixTokens) instead of the router's index. It is the
// upper bound of what a better residency hint can give prefix_load; it is
// not an upper bound of every conceivable policy (it is greedy).
type oracle struct {
	s       policies.Strategy
	engines []*simengine.Engine
	cur     *flight // the request being decided (the sim is single-threaded)
	// truth answers for each replica in place of its index, and view is
	// the decision's view with them.
	truth []trueCache
	view  []policies.Replica
}

// trueCache is a replica's true cached prefix, as prefix_load's residency
// answer (policies.Resident).
type trueCache struct {
	o *oracle
	i int
}

// Match answers in blocks of the request's rendering, at its own bytes per
// token, from the engine's cached tokens.
func (t *trueCache) Match([]uint64) int {
	f := t.o.cur
	keys := f.req.Keys
	cached := t.o.engines[t.i].CachedPrefixTokens(f.tokens)
	if cached == 0 || keys.BlockBytes <= 0 || len(f.tokens) == 0 {
		return 0
	}
	return policies.ChainBlocks(cached*keys.Bytes/len(f.tokens), keys.BlockBytes)
}

func newOracle(opts policies.Options, engines []*simengine.Engine) (*oracle, error) {
	o := &oracle{engines: engines, truth: make([]trueCache, len(engines))}
	for i := range o.truth {
		o.truth[i] = trueCache{o: o, i: i}
	}
	s, err := policies.NewStrategy("prefix_load", opts)
	o.s = s
	return o, err
}

func (p *oracle) pick(f *flight, view []policies.Replica) int {
	p.cur = f
	defer func() { p.cur = nil }()
	p.view = append(p.view[:0], view...)
	for i := range p.view {
		p.view[i].Index = &p.truth[i]
	}
	return p.s.Pick(f.req.Keys, p.view)
}

// newPicker builds the named policy for one router instance.
func newPicker(name string, opts policies.Options, coldChoices int, seed uint64, engines []*simengine.Engine) (picker, error) {
	switch {
	case name == "prefix_load" && coldChoices > 0:
		o := opts
		o.Seed = seed
		return newColdRules(o, coldChoices)
	}
	switch name {
	case "random":
		return randomPicker{rng: rand.New(rand.NewPCG(seed, 0x72616e64))}, nil
	case "bounded_hash":
		return &boundedHash{factor: 1.25}, nil // HAProxy hash-balance-factor 125, as users configure it today
	case "oracle":
		o := opts
		o.Seed = seed
		return newOracle(o, engines)
	}
	o := opts
	o.Seed = seed
	s, err := policies.NewStrategy(name, o)
	if err != nil {
		return nil, fmt.Errorf("sim: unknown policy %q (valid: %s)", name, strings.Join(Policies, ", "))
	}
	return strategyPicker{s: s}, nil
}
