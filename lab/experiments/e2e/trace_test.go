package e2e

import (
	"testing"

	"github.com/llmroute/caddy-llmroute/lab/experiments/sim"
	"github.com/llmroute/caddy-llmroute/lab/experiments/workload"
)

func TestTraceGoals(t *testing.T) {
	res := func(hit, p99 float64) *PolicyResult {
		return &PolicyResult{TokenHitRate: hit, TTFT: sim.Dist{P99: p99}}
	}
	run := func(n int, pol string, r *PolicyResult) Cell {
		return Cell{Workload: workload.Trace, Routers: n, Policy: pol, Result: r}
	}
	rec := &Record{SimOracle: map[int]*SimPoint{1: {TokenHitRate: 0.50}, 2: {TokenHitRate: 0.50}}, Runs: []Cell{
		run(1, "round_robin", res(0.1, 1000)), run(1, "least_load", res(0.1, 800)), run(1, "prefix_load", res(0.49, 850)),
		run(1, haproxyPolicy.Name, res(0.30, 2000)),
		run(2, "round_robin", res(0.1, 1000)), run(2, "least_load", res(0.1, 800)), run(2, "prefix_load", res(0.40, 900)),
		run(2, directoryPolicy.Name, res(0.48, 700)), run(2, haproxyPolicy.Name, res(0.45, 600)),
		run(1, "prefix_load", res(0.9, 1)), // another workload's: ignored
	}}
	rec.Runs[len(rec.Runs)-1].Workload = workload.SharedPrefix
	want := map[string]bool{
		"1 hit rate / simulated oracle's":                                            true, // 0.98
		"1 TTFT p99 / best of round_robin, least_load (prefix_load)":                 true, // 1.0625
		"1 better than HAProxy on hit rate and p99 (prefix_load)":                    true,
		"2 hit rate / one router's":                                                  false, // 0.816 and 0.98: see below
		"2 TTFT p99 / best of round_robin, least_load (prefix_load)":                 false, // 1.125
		"2 better than HAProxy on hit rate and p99 (prefix_load)":                    false,
		"2 TTFT p99 / best of round_robin, least_load (prefix_load homes_directory)": true,
		"2 better than HAProxy on hit rate and p99 (prefix_load homes_directory)":    false, // p99 700 > 600
	}
	goals := TraceGoals(rec)
	seen := 0
	for _, g := range goals {
		key := string(rune('0'+g.Routers)) + " " + g.Name
		if g.Name == "hit rate / one router's" {
			// 0.40/0.49 misses 0.85; 0.48/0.49 meets 0.95.
			if wantMet := g.Need == ">= 0.95"; g.Met != wantMet {
				t.Errorf("%s (%s): met %v, value %v", key, g.Need, g.Met, g.Value)
			}
			seen++
			continue
		}
		w, ok := want[key]
		if !ok {
			t.Errorf("unexpected goal %q", key)
			continue
		}
		if g.Met != w {
			t.Errorf("%s: met %v, want %v (value %v, %s)", key, g.Met, w, g.Value, g.Detail)
		}
		seen++
	}
	if seen != 9 || len(goals) != 9 {
		t.Fatalf("checked %d of %d goals, want 9", seen, len(goals))
	}
}
