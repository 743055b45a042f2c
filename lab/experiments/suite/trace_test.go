package suite

import (
	"strings"
	"testing"

	"github.com/llmroute/caddy-llmroute/lab/experiments/sim"
	"github.com/llmroute/caddy-llmroute/policies"
)

func TestTraceCasesSizeTheCache(t *testing.T) {
	// 1.6M tokens of working set over 8 replicas: 200K tokens each,
	// 12,500 blocks of 16 at 1x, a quarter of that at 0.25x.
	cs := TraceCases(false, 1_600_000, 16)
	if len(cs) != 4 {
		t.Fatalf("%d cases", len(cs))
	}
	want := []TraceCase{{8, 0.25, 3125, 0}, {8, 1, 12500, 0}, {16, 0.25, 1563, 0}, {16, 1, 6250, 0}}
	for i, c := range cs {
		if c != want[i] {
			t.Errorf("case %d: %+v, want %+v", i, c, want[i])
		}
	}
	if q := TraceCases(true, 1_600_000, 16); len(q) != 2 || q[0].Replicas != 8 {
		t.Errorf("quick cases %+v", q)
	}
}

func TestTraceGoals(t *testing.T) {
	c := TraceCase{Replicas: 8, KVShare: 1}
	pt := func(routers int, seed uint64, policy string, hit, p50, p99 float64) TracePoint {
		return TracePoint{SweepPoint: SweepPoint{Workload: c.Label(), Policy: policy, Routers: routers, Seed: seed,
			TokenHitRate: hit, TTFTP50Ms: p50, TTFTP99Ms: p99}}
	}
	rec := &TraceRecord{Points: []TracePoint{
		// Seed 1: prefix_load meets every goal with one router.
		pt(1, 1, "round_robin", 0.1, 1000, 5000), pt(1, 1, "least_load", 0.1, 900, 4000),
		pt(1, 1, "prefix_affinity", 0.05, 50, 90000), // lowest p50, but not keeping the tail
		pt(1, 1, "bounded_hash", 0.3, 800, 4300),
		pt(1, 1, "prefix_load", 0.49, 100, 4200), pt(1, 1, "oracle", 0.5, 90, 4000),
		// Seed 2: bounded_hash keeps the tail with a lower median; the
		// hit rate falls short of the oracle's.
		pt(1, 2, "round_robin", 0.1, 1000, 5000), pt(1, 2, "least_load", 0.1, 900, 4000),
		pt(1, 2, "bounded_hash", 0.3, 80, 4300), pt(1, 2, "prefix_load", 0.45, 100, 4500), pt(1, 2, "oracle", 0.5, 90, 4000),
		// Two routers, seed 1: shared homes keep 0.96 of one router's
		// hit rate, nothing shared 0.80 and a tail 1.25x.
		pt(2, 1, "round_robin", 0.1, 1000, 5000), pt(2, 1, "least_load", 0.1, 900, 4000),
		pt(2, 1, "prefix_load", 0.392, 200, 5000), pt(2, 1, SharedHomesPolicy, 0.4704, 150, 4100),
	}}
	goals := TraceGoals(rec)
	type key struct {
		routers int
		seed    uint64
		name    string
	}
	want := map[key]bool{
		{1, 1, GoalTraceHit}: true, {1, 1, GoalTail + " (prefix_load)"}: true, {1, 1, GoalTraceMedian}: true,
		{1, 2, GoalTraceHit}: false, {1, 2, GoalTail + " (prefix_load)"}: false, {1, 2, GoalTraceMedian}: false,
		{2, 1, GoalTraceShared}: true, {2, 1, GoalTail + " (" + SharedHomesPolicy + ")"}: true,
		{2, 1, GoalTraceAlone}: false, {2, 1, GoalTail + " (prefix_load)"}: false,
	}
	if len(goals) != len(want) {
		t.Fatalf("%d goals, want %d: %+v", len(goals), len(want), goals)
	}
	for _, g := range goals {
		w, ok := want[key{g.Routers, g.Seed, g.Name}]
		if !ok {
			t.Errorf("unexpected goal %+v", g)
			continue
		}
		if g.Met != w {
			t.Errorf("%d routers seed %d %s: met %v, want %v (%v, %s)", g.Routers, g.Seed, g.Name, g.Met, w, g.Value, g.Detail)
		}
	}
	md := TraceMarkdown(&TraceRecord{Cases: []TraceCase{c}, Points: rec.Points, Goals: goals, Seeds: []uint64{1, 2}})
	if !strings.Contains(md, "**5 of 10 checks missed.**") {
		t.Errorf("markdown does not count the misses:\n%s", md)
	}
}

func TestTraceVariantsMarkdownRatios(t *testing.T) {
	c := TraceCase{Replicas: 8, KVShare: 0.25}
	pt := func(routers int, seed uint64, name string, hit float64) TracePoint {
		return TracePoint{SweepPoint: SweepPoint{Workload: c.Label(), Policy: name, Routers: routers, Seed: seed, TokenHitRate: hit}}
	}
	rec := &TraceVariantsRecord{Seeds: []uint64{1, 2}, Cases: []TraceCase{c}, Points: []TracePoint{
		pt(1, 1, "prefix_load", 0.4), pt(1, 2, "prefix_load", 0.5),
		pt(TraceVariantRouters, 1, "cold_choices 1", 0.36), pt(TraceVariantRouters, 2, "cold_choices 1", 0.4),
	}}
	md := TraceVariantsMarkdown(rec)
	// 0.36/0.4 meets 0.85, 0.4/0.5 misses: each seed against its own
	// one-router figure.
	if want := "| 8 replicas, KV 0.25x | cold_choices 1 | 0.360 / 0.400 | 0.900 / **0.800** |"; !strings.Contains(md, want) {
		t.Errorf("want a row starting %q in:\n%s", want, md)
	}
}

// TestTraceRulesMarkdown: the rules table sums the seeds per rule and
// router count, each rule's cached shares of its own prompt tokens.
func TestTraceRulesMarkdown(t *testing.T) {
	c := TraceCase{Replicas: 8, KVShare: 0.25}
	pt := func(routers int, seed uint64, rules map[policies.Reason]sim.RuleStat) TracePoint {
		return TracePoint{SweepPoint: SweepPoint{Workload: c.Label(), Policy: "prefix_load", Routers: routers, Seed: seed}, Rules: rules}
	}
	rec := &TraceVariantsRecord{Seeds: []uint64{1, 2}, Cases: []TraceCase{c}, Points: []TracePoint{
		pt(TraceVariantRouters, 1, map[policies.Reason]sim.RuleStat{
			policies.ReasonLoad:    {Requests: 3, PromptTokens: 100, SentTokens: 10, BestTokens: 40, HomeTokens: 30},
			policies.ReasonHistory: {Requests: 1, PromptTokens: 100, SentTokens: 90, BestTokens: 90, HomeTokens: 50}}),
		pt(TraceVariantRouters, 2, map[policies.Reason]sim.RuleStat{
			policies.ReasonLoad: {Requests: 1, PromptTokens: 100, SentTokens: 10, BestTokens: 20, HomeTokens: 10}}),
	}}
	md := TraceRulesMarkdown(rec)
	for _, want := range []string{
		"| 8 replicas, KV 0.25x | 4 | load | 0.800 | 0.667 | 0.100 | 0.300 | 0.200 |",
		"| 8 replicas, KV 0.25x | 4 | history | 0.200 | 0.333 | 0.900 | 0.900 | 0.500 |",
		"| 8 replicas, KV 0.25x | 4 | all | 1.000 | 1.000 | 0.367 | 0.500 | 0.300 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("want %q in:\n%s", want, md)
		}
	}
	if strings.Contains(md, "| 8 replicas, KV 0.25x | 1 |") {
		t.Errorf("a router count without rule figures has rows:\n%s", md)
	}
}
