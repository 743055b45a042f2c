package e2e

import (
	"testing"

	"github.com/llmroute/caddy-llmroute/lab/experiments/sim"
)

// tableRun is one run of a synthetic record.
func tableRun(kind string, routers int, policy string, p99, hit, agreement float64) Cell {
	r := &PolicyResult{TokenHitRate: hit, TTFT: sim.Dist{P50: 80, P99: p99}}
	if routers > 1 && agreement > 0 {
		r.Agreement, r.AgreementKeys = agreement, 48
	}
	return Cell{Workload: kind, Routers: routers, Policy: policy, Result: r}
}

func testRecord() *Record {
	return &Record{Runs: []Cell{
		tableRun("shared_prefix", 1, "round_robin", 100, 0.3, 0),
		tableRun("shared_prefix", 1, "least_load", 120, 0.3, 0),
		tableRun("shared_prefix", 1, "prefix_affinity", 200, 0.8, 0),
		tableRun("shared_prefix", 1, "prefix_load", 111, 0.76, 0),
		tableRun("shared_prefix", 2, "round_robin", 200, 0.3, 0.3),
		tableRun("shared_prefix", 2, "least_load", 180, 0.3, 0.3),
		tableRun("shared_prefix", 2, "prefix_affinity", 200, 0.8, 1),
		tableRun("shared_prefix", 2, "prefix_load", 90, 0.79, 0.625),
		tableRun("no_shared_prefix", 1, "round_robin", 150, 0, 0),
		tableRun("no_shared_prefix", 1, "least_load", 160, 0, 0),
		tableRun("no_shared_prefix", 1, "prefix_affinity", 600, 0, 0),
		tableRun("no_shared_prefix", 1, "prefix_load", 160, 0, 0),
	}}
}

func TestTables(t *testing.T) {
	cols := []Column{{Title: "prefix_load", Policy: "prefix_load"}, {Title: "other", Policy: "prefix_load other"}}
	cases := []struct {
		name, got, want string
	}{
		{"CompareTable: bold where missed, hit labelled once, - where a policy did not run", CompareTable(testRecord(), cols),
			"| workload | routers | round_robin p99 | prefix_load | other |\n|---|---:|---:|---|---|\n" +
				"| shared_prefix | 1 | 100.0 | 111.0 (**1.11**), hit 0.760 (**0.95**) | - |\n" +
				"| shared_prefix | 2 | 200.0 | 90.0 (0.50), 0.790 (0.99) | - |\n" +
				"| no_shared_prefix | 1 | 150.0 | 160.0 (1.07) | - |\n"},
		{"GoalRatiosTable: agreement with several routers", GoalRatiosTable(testRecord(), cols[:1]),
			"| workload | routers | prefix_load |\n|---|---:|---|\n" +
				"| shared_prefix | 1 | **1.11**, hit **0.950** |\n" +
				"| shared_prefix | 2 | 0.50, 0.988, agree **0.625** |\n" +
				"| no_shared_prefix | 1 | 1.07 |\n"},
		{"TailTable: records in turn", TailTable(cols[:1], testRecord(), &Record{Runs: testRecord().Runs[8:]}),
			"| workload | routers | round_robin | least_load | prefix_load | ratio | prefix_load hit rate (round_robin) |\n|---|---:|---:|---:|---:|---:|---|\n" +
				"| shared_prefix | 1 | 100.0 | 120.0 | 111.0 | **1.11** | 0.760 (0.300) |\n" +
				"| shared_prefix | 2 | 200.0 | 180.0 | 90.0 | 0.50 | 0.790 (0.300) |\n" +
				"| no_shared_prefix | 1 | 150.0 | 160.0 | 160.0 | 1.07 | 0 |\n" +
				"| no_shared_prefix | 1 | 150.0 | 160.0 | 160.0 | 1.07 | 0 |\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.got != c.want {
				t.Errorf("got\n%s\nwant\n%s", c.got, c.want)
			}
		})
	}
}
