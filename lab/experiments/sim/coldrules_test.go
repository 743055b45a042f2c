package sim

import (
	"fmt"
	"sort"
	"testing"

	"github.com/llmroute/caddy-llmroute/policies"
)

// TestColdRules proves the lab's cold rules (coldRules):
// with cold_choices 2 a cold prefix goes home unless the second-ranked
// replica is less loaded, and never further down the ranking; 1 always
// home; 3 the least loaded, ties to the home.
func TestColdRules(t *testing.T) {
	s, err := newColdRules(policies.Options{}, 2)
	if err != nil {
		t.Fatal(err)
	}
	keys := policies.Keys{Leading: 42, Blocks: []uint64{1, 2}}
	rs := make([]policies.Replica, 5)
	for i := range rs {
		rs[i] = policies.Replica{Addr: fmt.Sprintf("10.0.0.%d:8000", i), EngineWaiting: -1, EngineRunning: -1, KVUsage: -1}
	}
	rank := make([]int, len(rs))
	for i := range rank {
		rank[i] = i
	}
	sort.Slice(rank, func(a, b int) bool {
		return policies.Rendezvous(keys.Leading, rs[rank[a]].Addr) > policies.Rendezvous(keys.Leading, rs[rank[b]].Addr)
	})
	if got := s.decide(keys, rs); got != rank[0] {
		t.Errorf("%s: got %d, want %d", "equal load: home", got, rank[0])
	}
	rs[rank[0]].Prefilling = 1
	rs[rank[0]].InFlight = 1
	if got := s.decide(keys, rs); got != rank[1] {
		t.Errorf("%s: got %d, want %d", "home busier than the second choice", got, rank[1])
	}
	rs[rank[1]].InFlight = 2
	if got := s.decide(keys, rs); got != rank[0] {
		t.Errorf("%s: got %d, want %d", "second choice busier: home", got, rank[0])
	}

	rs[rank[1]].InFlight = 0
	home, err := newColdRules(policies.Options{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := home.decide(keys, rs); got != rank[0] {
		t.Errorf("%s: got %d, want %d", "cold_choices 1: always home", got, rank[0])
	}
	rs[rank[2]].PendingPrefill = 0
	rs[rank[0]].PendingPrefill = 1 << 20
	if got := home.decide(keys, rs); got != rank[0] {
		t.Errorf("%s: got %d, want %d", "cold_choices 1: home whatever its pending prefill", got, rank[0])
	}

	all, err := newColdRules(policies.Options{}, 3)
	if err != nil {
		t.Fatal(err)
	}
	for i := range rs {
		rs[i].InFlight, rs[i].Prefilling = 2, 0
	}
	rs[rank[3]].InFlight = 1
	if got := all.decide(keys, rs); got != rank[3] {
		t.Errorf("%s: got %d, want %d", "cold_choices 3: least loaded", got, rank[3])
	}
	rs[rank[3]].InFlight = 2
	if got := all.decide(keys, rs); got != rank[0] {
		t.Errorf("%s: got %d, want %d", "cold_choices 3: ties to the home", got, rank[0])
	}
}
