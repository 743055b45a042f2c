package suite

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/llmroute/caddy-llmroute/lab/experiments/workload"
	"github.com/llmroute/caddy-llmroute/policies"
)

// Variant is one candidate cold-placement rule for prefix_load (issue
// 18's directions), or a reference policy, run on every workload with 1,
// 2, 4 and 8 routers and several seeds.
type Variant struct {
	Name    string           `json:"name"`
	Policy  string           `json:"policy"`
	Options policies.Options `json:"options"`
	// ColdChoices runs prefix_load with the cold rules it had before it
	// placed new prefixes by load (sim.Config.ColdChoices).
	ColdChoices int `json:"cold_choices,omitempty"`
	// SharedHomes gives the routers one shared store of homes, as a
	// Valkey/Redis homes_directory does (sim.Config.SharedHomes).
	SharedHomes bool `json:"shared_homes,omitempty"`
	// NoAnswers leaves answers out of the index.
	NoAnswers bool   `json:"no_answers,omitempty"`
	Doc       string `json:"doc"`
}

// Variants are the candidates, prefix_load as shipped first.
var Variants = []Variant{
	{Name: "prefix_load", Policy: "prefix_load", Doc: "as shipped: a new prefix to the least pending prefill (placement by load), which becomes its home; " +
		"peers inferred from engine metrics; with peers the rendezvous home unless it has more pending prefill than the least by over " +
		"half the prompt's own (cold_slack 0.5), unless 64 requests in a row found nothing seen before (unique_run 64: then by load); leading-run matches go home; a request leaves its prefix's replica for the cheapest when it " +
		"would wait there behind 1.5 prompts more prefill, its own uncached part included (detour_slack 1.5); answers indexed"},
	{Name: "cold_choices 1", Policy: "prefix_load", ColdChoices: 1,
		Doc: "the previous default: a cold prefix to its rendezvous home within the cold bound (c = 3), whatever its queue"},
	{Name: "cold_choices 2", Policy: "prefix_load", ColdChoices: 2,
		Doc: "two choices: the home or the second rendezvous rank when that one's load (in flight, pending first bytes, engine queue) is lower"},
	{Name: "cold_choices 3", Policy: "prefix_load", ColdChoices: 3,
		Doc: "the previous single-router setting: the least-loaded candidate by request counts"},
	{Name: "peers none", Policy: "prefix_load", Options: policies.Options{Peers: policies.PeersNone},
		Doc: "placement by pending prefill and own homes, never the peer rules (what a router that cannot tell it has peers does)"},
	{Name: "peers some", Policy: "prefix_load", Options: policies.Options{Peers: policies.PeersSome},
		Doc: "the peer rules always, also alone: rendezvous homes, new prefixes home within cold_slack"},
	{Name: "unique_run -1", Policy: "prefix_load", Options: policies.Options{UniqueRun: -1},
		Doc: "with peers, new prefixes go to their rendezvous home whatever the traffic, also when a long run of requests found nothing seen before (the rule before unique_run)"},
	{Name: "cold_slack 0", Policy: "prefix_load", Options: policies.Options{ColdSlack: -1},
		Doc: "with peers, a new prefix goes home only when that has no more prefill pending than the least"},
	{Name: "cold_slack 2", Policy: "prefix_load", Options: policies.Options{ColdSlack: 2},
		Doc: "with peers, a new prefix goes home unless that has two of its own prompts' more prefill pending"},
	{Name: "detour_slack 0.5", Policy: "prefix_load", Options: policies.Options{DetourSlack: 0.5},
		Doc: "a request takes a detour when its prefix's replica queues half a prompt more than the cheapest"},
	{Name: "no detours", Policy: "prefix_load", Options: policies.Options{DetourSlack: 1e6},
		Doc: "a request always goes where its prefix belongs (within the load bound), however much prefill is queued there: the rule before detours"},
	{Name: "no answers", Policy: "prefix_load", NoAnswers: true, Doc: "answers not indexed"},
	{Name: "shared homes", Policy: "prefix_load", SharedHomes: true,
		Doc: "one store of homes shared by the routers, each learning a prefix's home from its own claim (policies.StoreDirectory, as homes_directory with Valkey/Redis): what shared state adds"},
	{Name: "round_robin", Policy: "round_robin", Doc: "reference"},
	{Name: "least_load", Policy: "least_load", Doc: "reference"},
	{Name: "prefix_affinity", Policy: "prefix_affinity", Doc: "reference"},
	{Name: "oracle", Policy: "oracle", Doc: "reference: prefix_load's rules on the true cache"},
}

// VariantsRecord is variants.json.
type VariantsRecord struct {
	Experiment string       `json:"experiment"`
	Commit     string       `json:"commit"`
	Seed       uint64       `json:"seed"`
	Seeds      []uint64     `json:"seeds"`
	Quick      bool         `json:"quick"`
	Standard   Standard     `json:"standard"`
	Requests   int          `json:"requests"`
	Routers    []int        `json:"routers"`
	Variants   []Variant    `json:"variants"`
	Points     []SweepPoint `json:"points"`
}

// variantRouters are the router counts of the variants run.
func variantRouters(quick bool) []int {
	if quick {
		return []int{1, 8}
	}
	return []int{1, 2, 4, 8}
}

func planVariants(o *Options, r *runner) (*plan[*VariantsRecord], error) {
	st := StandardPoint(o.Quick)
	n := sweepRequests(o.Quick)
	rec := &VariantsRecord{Experiment: "variants", Commit: o.Commit, Seed: o.Seed, Seeds: seedsOf(o), Quick: o.Quick, Standard: st,
		Requests: n, Routers: variantRouters(o.Quick), Variants: Variants}
	type cell struct {
		kind string
		seed uint64
	}
	var cells []cell
	var reqs []buildReq
	for _, seed := range rec.Seeds {
		for _, kind := range workload.Kinds {
			cells = append(cells, cell{kind, seed})
			reqs = append(reqs, buildReq{WorkloadParams(kind, n, seed), StandardFor(kind, st)})
		}
	}
	r.note("variants: generating %d workloads of %d requests", len(reqs), n)
	ws, err := r.buildAll(reqs)
	if err != nil {
		return nil, err
	}
	var tasks []*task
	meta := map[*task]Variant{}
	for i, w := range ws {
		for _, routers := range rec.Routers {
			s := reqs[i].st
			s.Routers = routers
			for _, v := range Variants {
				cfg := SimConfig(v.Policy, s, cells[i].seed)
				cfg.Options, cfg.ColdChoices, cfg.SharedHomes, cfg.IndexAnswers = v.Options, v.ColdChoices, v.SharedHomes, !v.NoAnswers
				t := &task{phase: "variants", label: fmt.Sprintf("%s r=%d seed=%d %s", cells[i].kind, routers, cells[i].seed, v.Name), cfg: cfg, w: w}
				meta[t] = v
				tasks = append(tasks, t)
			}
		}
	}
	collect := func() error {
		for _, t := range tasks {
			pt := cellPoint(t.w.Params.Kind, float64(t.cfg.Routers), t.cfg, t.res)
			pt.Policy = meta[t].Name
			rec.Points = append(rec.Points, pt)
		}
		return nil
	}
	return &plan[*VariantsRecord]{rec: rec, tasks: tasks, collect: collect}, nil
}

// RunVariants runs the prefix_load variants.
func RunVariants(o Options) (*VariantsRecord, error) {
	o.defaults()
	return runPlans(newRunner(&o), func(r *runner) (*plan[*VariantsRecord], error) { return planVariants(&o, r) })
}

// WriteVariants writes variants.json and variants.md.
func WriteVariants(dir string, rec *VariantsRecord) error {
	if err := writeJSON(filepath.Join(dir, "variants.json"), rec); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, "variants.md"), []byte(VariantsMarkdown(rec)))
}

// VariantsMarkdown renders variants.md: per workload, one table of TTFT
// p99, one of hit rate and one of agreement, each cell listing the seeds'
// figures in seed order, so that a difference smaller than the seeds'
// spread shows as such.
func VariantsMarkdown(rec *VariantsRecord) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# prefix_load variants\n\nGenerated by `go -C lab run ./cmd/llmexp variants`. Commit `%s`, seeds %v, %d requests per run%s, "+
		"standard point otherwise (large on 8 replicas). The candidates for issue 18 and the references, run with the policies package's own code.\n\n",
		rec.Commit, rec.Seeds, rec.Requests, map[bool]string{true: " (quick run)", false: ""}[rec.Quick])
	for _, v := range rec.Variants {
		fmt.Fprintf(&b, "- `%s`: %s\n", v.Name, v.Doc)
	}
	type key struct {
		w, v string
		r    int
	}
	pts := map[key][]SweepPoint{}
	for _, p := range rec.Points {
		k := key{p.Workload, p.Policy, p.Routers}
		pts[k] = append(pts[k], p)
	}
	for k := range pts {
		sort.Slice(pts[k], func(i, j int) bool { return pts[k][i].Seed < pts[k][j].Seed })
	}
	cell := func(ps []SweepPoint, f func(SweepPoint) string) string {
		var s []string
		for _, p := range ps {
			s = append(s, f(p))
		}
		return strings.Join(s, " / ")
	}
	tables := []struct {
		title string
		f     func(SweepPoint) string
		multi bool
	}{
		{"TTFT p99 ms", func(p SweepPoint) string { return fmt.Sprintf("%.0f", p.TTFTP99Ms) }, false},
		{"TTFT p50 ms", func(p SweepPoint) string { return fmt.Sprintf("%.1f", p.TTFTP50Ms) }, false},
		{"token hit rate", func(p SweepPoint) string { return fmt.Sprintf("%.3f", p.TokenHitRate) }, false},
		{"agreement on first placements (second)", func(p SweepPoint) string {
			if p.AgreementKeys == 0 {
				return "-"
			}
			return fmt.Sprintf("%.2f (%.2f)", p.Agreement, p.SecondAgreement)
		}, true},
	}
	for _, kind := range workload.Kinds {
		fmt.Fprintf(&b, "\n## %s\n", kind)
		for _, tb := range tables {
			if tb.multi && kind == workload.NoSharedPrefix {
				continue // nothing is seen by two routers
			}
			fmt.Fprintf(&b, "\n%s, per seed:\n\n| variant |", tb.title)
			var rs []int
			for _, r := range rec.Routers {
				if tb.multi && r == 1 {
					continue
				}
				rs = append(rs, r)
				fmt.Fprintf(&b, " %d router%s |", r, map[bool]string{true: "", false: "s"}[r == 1])
			}
			b.WriteString("\n|---|")
			for range rs {
				b.WriteString("---|")
			}
			b.WriteString("\n")
			for _, v := range rec.Variants {
				fmt.Fprintf(&b, "| %s |", v.Name)
				for _, r := range rs {
					fmt.Fprintf(&b, " %s |", cell(pts[key{kind, v.Name, r}], tb.f))
				}
				b.WriteString("\n")
			}
		}
	}
	b.WriteString(variantGoalsMarkdown(rec))
	return b.String()
}

// VariantGoals evaluates issue 18's goals (GoalsOf) per seed for every
// variant: each variant's figures against the reference policies' of the
// same workload, router count and seed, and with several routers against
// its own with one.
func VariantGoals(rec *VariantsRecord) map[string][]Goal {
	figs, _ := CellFigures(rec.Points, func(p SweepPoint) GoalCell { return GoalCell{Workload: p.Workload, Routers: p.Routers, Seed: p.Seed} })
	out := map[string][]Goal{}
	for _, v := range rec.Variants {
		for _, seed := range rec.Seeds {
			for _, kind := range workload.Kinds {
				for _, r := range rec.Routers {
					f := figs[GoalCell{Workload: kind, Routers: r, Seed: seed}]
					pt, ok := f[v.Name]
					if !ok {
						continue
					}
					one, hasOne := figs[GoalCell{Workload: kind, Routers: 1, Seed: seed}][v.Name]
					for _, g := range GoalsOf(kind, r, pt, f, one, hasOne) {
						g.Seed = seed
						out[v.Name] = append(out[v.Name], g)
					}
				}
			}
		}
	}
	return out
}

// variantGoalsMarkdown counts, per variant, the per-seed goal checks it
// misses (second-request agreement is reported, not a goal), and lists
// the misses of the shipped rule and of shared homes.
func variantGoalsMarkdown(rec *VariantsRecord) string {
	goals := VariantGoals(rec)
	names := []string{GoalTail, GoalMedian, GoalHit, GoalAgreement, GoalScale}
	var b strings.Builder
	b.WriteString("\n## Issue 18's goals per seed\n\nEvery goal of goals.md, per workload, router count and seed, with each variant in prefix_load's place " +
		"(the references are the same cell's round_robin, least_load, prefix_affinity, oracle and prefix_load). Checks missed:\n\n")
	writeHead(&b, "| variant | checks | missed |", "|---|---:|---:|", names)
	for _, v := range rec.Variants {
		checks, missed := Tally(goals[v.Name])
		by := map[string]int{}
		for _, g := range missed {
			by[g.Name]++
		}
		fmt.Fprintf(&b, "| %s | %d | %d |", v.Name, checks, len(missed))
		for _, n := range names {
			fmt.Fprintf(&b, " %d |", by[n])
		}
		b.WriteString("\n")
	}
	for _, name := range []string{"prefix_load", "shared homes"} {
		fmt.Fprintf(&b, "\nMisses of `%s`:\n\n", name)
		none := true
		for _, g := range goals[name] {
			if !g.Met {
				none = false
				fmt.Fprintf(&b, "- %s, %d routers, seed %d: %s %.3f (%s); %s\n", g.Workload, g.Routers, g.Seed, g.Name, g.Value, g.Need, g.Detail)
			}
		}
		if none {
			b.WriteString("- none\n")
		}
	}
	return b.String()
}
