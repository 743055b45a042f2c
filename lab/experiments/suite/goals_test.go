package suite

import (
	"strings"
	"testing"
)

// TestMixedSweepGoals checks the mixed sweep's goal checks on a made-up
// record: one router passes, eight routers without shared homes miss
// agreement and the hit rate against one router, with shared homes
// nothing; a share where nothing is shared has no hit-rate check.
func TestMixedSweepGoals(t *testing.T) {
	pt := func(u float64, routers int, policy string, hit, p50, p99, agree float64) SweepPoint {
		p := SweepPoint{Workload: "mixed", Value: u, Policy: policy, Routers: routers, Seed: 1, TokenHitRate: hit, TTFTP50Ms: p50, TTFTP99Ms: p99}
		if routers > 1 && agree > 0 && u < 1 { // nothing shared: no keys to agree on
			p.Agreement, p.SecondAgreement, p.AgreementKeys = agree, agree, 64
		}
		return p
	}
	rec := &SweepRecord{Experiment: "mixed_sweep"}
	for _, u := range []float64{0.5, 1} {
		hit := 0.3
		if u == 1 {
			hit = 0
		}
		for _, r := range []int{1, 8} {
			rec.Points = append(rec.Points,
				pt(u, r, "round_robin", hit/3, 100, 200, 0),
				pt(u, r, "least_load", hit/3, 100, 220, 0),
				pt(u, r, "prefix_affinity", hit, 100, 400, 1),
				pt(u, r, "oracle", hit, 100, 200, 0.8))
		}
		rec.Points = append(rec.Points,
			pt(u, 1, "prefix_load", hit, 100, 210, 0),
			pt(u, 8, "prefix_load", hit*0.9, 100, 210, 0.5),
			pt(u, 8, SharedHomesPolicy, hit, 102, 215, 1))
	}
	goals := MixedSweepGoals(rec)
	count := func(name string) (int, int, []string) {
		checks, missed := Tally(goals[name])
		var names []string
		for _, g := range missed {
			names = append(names, g.Name)
		}
		return checks, len(missed), names
	}
	// prefix_load: share 0.5: 3 checks alone, 5 with eight; share 1
	// (tail and median only): 2 and 2.
	checks, missed, names := count("prefix_load")
	if checks != 12 || missed != 3 {
		t.Errorf("prefix_load: %d checks, %d missed (%v); want 12, 3 (hit, agreement, hit vs one router at share 0.5)", checks, missed, names)
	}
	checks, missed, names = count(SharedHomesPolicy)
	if checks != 7 || missed != 0 {
		t.Errorf("shared homes: %d checks, %d missed (%v); want 7, 0", checks, missed, names)
	}
	md := RoutersMarkdown(rec)
	if !strings.Contains(md, "| prefix_load | 12 | 3 |") || !strings.Contains(md, "0.5 unique, 8 routers, seed 1: "+GoalAgreement) {
		t.Errorf("mixed_sweep.md lacks the goal section:\n%s", md[strings.Index(md, "## Issue"):])
	}
}
