package docgen

import (
	"fmt"
	"sort"

	"github.com/llmroute/caddy-llmroute/lab/experiments/e2e"
	"github.com/llmroute/caddy-llmroute/lab/experiments/suite"
	"github.com/llmroute/caddy-llmroute/lab/experiments/tenancy"
	"github.com/llmroute/caddy-llmroute/lab/experiments/workload"
)

// renderer renders a section's content from the records.
type renderer func(*Records) (string, error)

// sections are the sections the docs may mark, by name. Where a doc
// copies a table of a generated .md file, the renderer is the one that
// file's generator uses, so that the two agree byte for byte.
var sections = map[string]renderer{
	// trace.json: every policy per case, router count and seed; issue
	// 39's goals; the chain caps.
	"trace/summary": func(r *Records) (string, error) {
		tr, err := r.Trace()
		if err != nil {
			return "", err
		}
		return suite.TraceSummaryTable(tr), nil
	},
	"trace/goals": func(r *Records) (string, error) {
		tr, err := r.Trace()
		if err != nil {
			return "", err
		}
		return suite.TraceGoalsTable(tr), nil
	},
	"trace/chain": func(r *Records) (string, error) {
		tr, err := r.Trace()
		if err != nil {
			return "", err
		}
		return suite.TraceChainTable(tr), nil
	},
	// summary.md's table of targets.
	"standard/targets": func(r *Records) (string, error) {
		std, err := r.Standard()
		if err != nil {
			return "", err
		}
		return suite.TargetsMarkdown(std.Targets), nil
	},
	// goals.md's table, from standard.json and routers.json as goals.md.
	"goals/table": func(r *Records) (string, error) {
		std, err := r.Standard()
		if err != nil {
			return "", err
		}
		rt, err := r.Sweep("routers")
		if err != nil {
			return "", err
		}
		return suite.GoalsTable(suite.CheckGoals(std, rt)), nil
	},
	"kv_sweep/table": func(r *Records) (string, error) {
		kv, err := r.Sweep("kv_sweep")
		if err != nil {
			return "", err
		}
		return suite.SweepRowsTable(kv, "KV blocks / replica", KVSweepRows, func(p suite.SweepPoint) string {
			return fmt.Sprintf("%.2f (%s)", p.TokenHitRate, suite.Thousands(p.TTFTP50Ms))
		}), nil
	},
	"mixed_sweep/ratios": func(r *Records) (string, error) {
		mx, err := r.Sweep("mixed_sweep")
		if err != nil {
			return "", err
		}
		return suite.MixedRatiosTable(mx), nil
	},
	"variants/ratios": func(r *Records) (string, error) {
		vr, err := r.Variants()
		if err != nil {
			return "", err
		}
		return suite.VariantRatiosTable(vr, VariantColumns), nil
	},
	"variants/unique_run": func(r *Records) (string, error) {
		vr, err := r.Variants()
		if err != nil {
			return "", err
		}
		return suite.VariantChangeTable(vr, workload.NoSharedPrefix, suite.TailRatio, "unique_run -1", "prefix_load"), nil
	},
	// e2e_seeds.md's table.
	"e2e_seeds/table": func(r *Records) (string, error) {
		rec, err := r.Seeds()
		if err != nil {
			return "", err
		}
		return e2e.SeedsTable(rec), nil
	},
	"e2e/compare": func(r *Records) (string, error) {
		rec, err := r.E2E("e2e")
		if err != nil {
			return "", err
		}
		return e2e.CompareTable(rec, E2EColumns), nil
	},
	"e2e_goals/ratios": func(r *Records) (string, error) {
		rec, err := r.E2E("e2e_goals")
		if err != nil {
			return "", err
		}
		return e2e.GoalRatiosTable(rec, E2EGoalColumns), nil
	},
	"e2e_unique_run+e2e_unique_run_8/tails": func(r *Records) (string, error) {
		a, err := r.E2E("e2e_unique_run")
		if err != nil {
			return "", err
		}
		b, err := r.E2E("e2e_unique_run_8")
		if err != nil {
			return "", err
		}
		return e2e.TailTable(UniqueRunColumns, a, b), nil
	},
	"residency/kv":       residency(suite.ResidencyKVTable),
	"residency/prefixes": residency(suite.ResidencyPrefixesTable),
	"residency/restarts": residency(suite.ResidencyRestartsTable),
	"residency/blocks":   residency(suite.ResidencyBlocksTable),
	"residency/answers":  residency(suite.ResidencyAnswersTable),
	"residency/routers":  residency(suite.ResidencyRoutersTable),
	// docs/tenants.md's two tables of the simulator's record: digests of
	// tenancy.md's noisy-neighbour and goodput tables, rendered next to
	// them (tenancy/docs.go).
	"tenancy/noisy": func(r *Records) (string, error) {
		rec, err := r.Tenancy()
		if err != nil {
			return "", err
		}
		return tenancy.NoisyTable(rec, TenancyNoisyRows)
	},
	"tenancy/goodput": func(r *Records) (string, error) {
		rec, err := r.Tenancy()
		if err != nil {
			return "", err
		}
		return tenancy.GoodputTable(rec, TenancyGoodputRows, TenancyGoodputColumns)
	},
}

func init() {
	// One section per workload of summary.md: its line and its table.
	for _, kind := range workload.Kinds {
		sections["standard/"+kind] = func(r *Records) (string, error) {
			std, err := r.Standard()
			if err != nil {
				return "", err
			}
			if std.Workloads[kind] == nil {
				return "", fmt.Errorf("standard.json has no workload %s", kind)
			}
			return suite.StandardWorkloadMarkdown(std, kind), nil
		}
	}
}

func residency(f func(*suite.ResidencyRecord) string) renderer {
	return func(r *Records) (string, error) {
		rec, err := r.Residency()
		if err != nil {
			return "", err
		}
		return f(rec), nil
	}
}

// KVSweepRows are the rows of docs/experiments.md's KV sweep table: the
// cache-blind baseline, prefix_load and, on shared_prefix, the oracle.
var KVSweepRows = []suite.SweepRow{
	{Workload: "shared_prefix", Policy: "round_robin"}, {Workload: "shared_prefix", Policy: "prefix_load"}, {Workload: "shared_prefix", Policy: "oracle"},
	{Workload: "multi_turn", Policy: "round_robin"}, {Workload: "multi_turn", Policy: "prefix_load"},
	{Workload: "skewed", Policy: "round_robin"}, {Workload: "skewed", Policy: "prefix_load"},
}

// VariantColumns are the columns of docs/experiments.md's table of the
// variants: where the candidate cold rules differ.
var VariantColumns = []suite.VariantColumn{
	{Title: "no_shared p99/best, 1 router", Workload: "no_shared_prefix", Routers: 1, Ratio: suite.TailRatio},
	{Title: "no_shared, 8 routers", Workload: "no_shared_prefix", Routers: 8, Ratio: suite.TailRatio},
	{Title: "mixed p99/best, 1", Workload: "mixed", Routers: 1, Ratio: suite.TailRatio},
	{Title: "mixed, 8", Workload: "mixed", Routers: 8, Ratio: suite.TailRatio},
	{Title: "multi_turn hit/best, 1", Workload: "multi_turn", Routers: 1, Ratio: suite.HitRatio},
	{Title: "multi_turn, 8", Workload: "multi_turn", Routers: 8, Ratio: suite.HitRatio},
	{Title: "mixed hit/best, 8", Workload: "mixed", Routers: 8, Ratio: suite.HitRatio},
	{Title: "large hit/best, 8", Workload: "large", Routers: 8, Ratio: suite.HitRatio},
	{Title: "agreement shared_prefix, 8", Workload: "shared_prefix", Routers: 8, Ratio: suite.AgreementRatio},
	{Title: "agreement mixed, 8", Workload: "mixed", Routers: 8, Ratio: suite.AgreementRatio},
}

// E2EColumns are the policies of docs/experiments.md's table of e2e.json.
var E2EColumns = []e2e.Column{
	{Title: "prefix_load", Policy: "prefix_load"},
	{Title: "previous default (`cold_choices 1`)", Policy: "prefix_load cold_choices 1"},
	{Title: "prefix_load + `homes_directory`", Policy: "prefix_load homes_directory"},
}

// E2EGoalColumns are the policies of docs/experiments.md's table of
// e2e_goals.json.
var E2EGoalColumns = []e2e.Column{
	{Title: "prefix_load", Policy: "prefix_load"},
	{Title: "prefix_load + `homes_directory`", Policy: "prefix_load homes_directory"},
}

// UniqueRunColumns are the policies of docs/experiments.md's table of
// the unique_run records.
var UniqueRunColumns = []e2e.Column{
	{Title: "prefix_load", Policy: "prefix_load"},
	{Title: "`unique_run -1`", Policy: "prefix_load unique_run -1"},
}

// TenancyNoisyRows are the rows of docs/tenants.md's noisy-neighbour
// table.
var TenancyNoisyRows = []tenancy.ModeRow{
	{Title: "FIFO", Mode: tenancy.NoisyFIFO},
	{Title: "fair queue", Mode: tenancy.NoisyFair},
}

// TenancyGoodputRows and TenancyGoodputColumns are the rows (queues) and
// columns (sheddable loads) of docs/tenants.md's critical goodput table.
var (
	TenancyGoodputRows = []tenancy.ModeRow{
		{Title: "FIFO (one queue)", Mode: tenancy.ModeFIFO},
		{Title: "bands, sheddable_share 1", Mode: tenancy.ModeBands},
		{Title: "bands, sheddable_share 0.8 (default)", Mode: tenancy.ModeBandsCap},
	}
	TenancyGoodputColumns = []tenancy.RateColumn{
		{Title: "no sheddable", Rate: 0},
		{Title: "sheddable 4 req/s", Rate: 4},
		{Title: "16 req/s", Rate: 16},
		{Title: "32 req/s", Rate: 32},
	}
)

// Names returns the name of every section a doc may mark, sorted.
func Names() []string {
	names := make([]string, 0, len(sections))
	for n := range sections {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Render renders the named section's content from recs. An unknown name
// is an error.
func Render(name string, recs *Records) (string, error) {
	f, ok := sections[name]
	if !ok {
		return "", fmt.Errorf("no section %q (known: %v)", name, Names())
	}
	return f(recs)
}
