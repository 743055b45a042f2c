package e2e

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestRunSeeds runs the scenario in the simulator for two seeds and three
// policies: every cell has a point per seed, the seeds differ, a rerun
// gives the same figures, and the markdown has a row per cell.
func TestRunSeeds(t *testing.T) {
	cfg := SeedsConfig{Seeds: 2, Duration: 3 * time.Second, Routers: []int{1}, Workloads: []string{"mixed"},
		Policies: []Policy{SeedPolicies[0], SeedPolicies[1], SeedPolicies[3]}}
	rec, err := RunSeeds(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Cells) != 3 {
		t.Fatalf("%d cells, want 3", len(rec.Cells))
	}
	for _, c := range rec.Cells {
		if len(c.Points) != 2 || c.Points[0] == nil || c.Points[1] == nil {
			t.Fatalf("%s: points %v", c.Policy, c.Points)
		}
		if c.Points[0].TTFTP99Ms <= 0 {
			t.Errorf("%s: p99 %v", c.Policy, c.Points[0].TTFTP99Ms)
		}
		if *c.Points[0] == *c.Points[1] {
			t.Errorf("%s: seeds 1 and 2 gave the same figures", c.Policy)
		}
	}
	again, err := RunSeeds(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rec.Cells, again.Cells) {
		t.Error("a rerun differs")
	}
	md := SeedsMarkdown(rec)
	if n := strings.Count(md, "| mixed | 1 |"); n != 3 || !strings.Contains(md, "| mixed | 1 | round_robin |") {
		t.Errorf("markdown rows %d:\n%s", n, md)
	}
}
