package e2e

import (
	"math"
	"strings"
	"testing"

	"github.com/llmroute/caddy-llmroute/lab/experiments/sim"
	"github.com/llmroute/caddy-llmroute/lab/experiments/suite"
)

// TestFirstAgreement: per leading key, each router's first answered
// request counts, later ones and requests without a replica header do
// not, and a key seen by one router is left out.
func TestFirstAgreement(t *testing.T) {
	sent := []Arrival{
		{Router: 0, Leading: 1}, // key 1: router 0 first at a
		{Router: 1, Leading: 1}, // router 1 first at a: agree
		{Router: 1, Leading: 1}, // a later request at b: not a first
		{Router: 0, Leading: 2}, // key 2: router 0 at a
		{Router: 1, Leading: 2}, // no replica header: left out
		{Router: 1, Leading: 2}, // router 1's first answered at b: disagree
		{Router: 0, Leading: 3}, // key 3: one router only
		{Router: 2, Leading: 0}, // no key
	}
	outs := []Outcome{{Replica: "a"}, {Replica: "a"}, {Replica: "b"}, {Replica: "a"}, {}, {Replica: "b"}, {Replica: "c"}, {Replica: "a"}}
	if keys, agreement := firstAgreement(sent, outs, 3); keys != 2 || math.Abs(agreement-0.5) > 1e-9 {
		t.Errorf("firstAgreement = %d keys, %.3f; want 2, 0.500", keys, agreement)
	}
	if keys, agreement := firstAgreement(sent[:1], outs[:1], 3); keys != 0 || agreement != 0 {
		t.Errorf("one router's key: %d keys, %.3f; want none", keys, agreement)
	}
}

// TestGoals checks the record's goal checks on made-up runs: prefix_load
// meets every goal with one and two routers, the directory's policy
// misses agreement with two; a workload without round_robin is not
// checked.
func TestGoals(t *testing.T) {
	run := func(w string, n int, policy string, hit, p50, p99, agree float64) Cell {
		r := &PolicyResult{TokenHitRate: hit, TTFT: sim.Dist{P50: p50, P99: p99}}
		if n > 1 {
			r.Agreement, r.AgreementKeys = agree, 48
		}
		return Cell{Workload: w, Routers: n, Policy: policy, Result: r}
	}
	rec := &Record{}
	for _, n := range []int{1, 2} {
		rec.Runs = append(rec.Runs,
			run("mixed", n, "round_robin", 0.07, 86, 200, 0.3),
			run("mixed", n, "least_load", 0.07, 87, 230, 0.3),
			run("mixed", n, "prefix_affinity", 0.22, 90, 400, 1),
			run("mixed", n, "prefix_load", 0.215, 85, 190, 0.98),
			run("mixed", n, directoryPolicy.Name, 0.218, 85.5, 195, 0.9),
			run("no_reference", n, "prefix_load", 0.2, 80, 100, 0.1))
	}
	goals := Goals(rec)
	count := func(name string) (int, int) {
		checks, missed := suite.Tally(goals[name])
		return checks, len(missed)
	}
	if c, m := count("prefix_load"); c != 8 || m != 0 {
		t.Errorf("prefix_load: %d checks, %d missed; want 8, 0", c, m)
	}
	if c, m := count(directoryPolicy.Name); c != 8 || m != 1 {
		t.Errorf("%s: %d checks, %d missed; want 8, 1 (agreement)", directoryPolicy.Name, c, m)
	}
	if md := goalsMarkdown(rec); !strings.Contains(md, "mixed, 2 routers: "+suite.GoalAgreement+" 0.900") {
		t.Errorf("goal section lacks the miss:\n%s", md)
	}
}
