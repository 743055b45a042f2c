package suite

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"

	"github.com/llmroute/caddy-llmroute/lab/experiments/workload"
	"github.com/llmroute/caddy-llmroute/policies"
)

// RouterPolicies are the policies compared across router counts: the
// module's four strategies and the oracle (prefix_load's rules on the true
// cache).
var RouterPolicies = []string{"round_robin", "least_load", "prefix_affinity", "prefix_load", "oracle"}

// RouterCounts are the router-instance counts of the routers experiment;
// one router is the standard point.
func RouterCounts(quick bool) []float64 {
	if quick {
		return []float64{2, 8}
	}
	return []float64{2, 4, 8}
}

// seedsOf returns the seeds an experiment that reports per seed runs.
func seedsOf(o *Options) []uint64 {
	if o.Quick {
		return []uint64{o.Seed}
	}
	return []uint64{o.Seed, o.Seed + 1, o.Seed + 2}
}

// RunRouters runs every workload at the standard point with several
// router instances.
func RunRouters(o Options) (*SweepRecord, error) {
	o.defaults()
	return runPlans(newRunner(&o), func(r *runner) (*plan[*SweepRecord], error) { return planRouters(&o, r) })
}

func planRouters(o *Options, r *runner) (*plan[*SweepRecord], error) {
	st := StandardPoint(o.Quick)
	if o.Requests > 0 {
		st.Requests = o.Requests
	}
	rec := &SweepRecord{Experiment: "routers", Commit: o.Commit, Seed: o.Seed, Quick: o.Quick, Standard: st,
		Knob: "routers", Values: RouterCounts(o.Quick), Requests: st.Requests,
		Note: "Every workload at the standard point (large on 8 replicas) with traffic split at random over several router instances, " +
			"each with its own indexes, in-flight counts, queues and engine samples; one router is the standard point (standard.json)."}
	var reqs []buildReq
	for _, kind := range workload.Kinds {
		reqs = append(reqs, buildReq{WorkloadParams(kind, st.Requests, o.Seed), StandardFor(kind, st)})
	}
	r.note("routers: generating %d workloads of %d requests", len(reqs), st.Requests)
	ws, err := r.buildAll(reqs)
	if err != nil {
		return nil, err
	}
	var tasks []*task
	for i, w := range ws {
		for _, n := range rec.Values {
			s := reqs[i].st
			s.Routers = int(n)
			for _, p := range RouterPolicies {
				tasks = append(tasks, &task{phase: "routers", label: fmt.Sprintf("%s routers=%d %s", w.Params.Kind, s.Routers, p),
					cfg: SimConfig(p, s, o.Seed), w: w})
			}
		}
	}
	collect := func() error {
		for _, t := range tasks {
			rec.Points = append(rec.Points, cellPoint(t.w.Params.Kind, float64(t.cfg.Routers), t.cfg, t.res))
		}
		return nil
	}
	return &plan[*SweepRecord]{rec: rec, tasks: tasks, collect: collect}, nil
}

// UniqueShares are the mixed sweep's fractions of unique-document requests.
func UniqueShares(quick bool) []float64 {
	if quick {
		return []float64{0, 0.5, 1}
	}
	return []float64{0, 0.25, 0.5, 0.75, 1}
}

// SharedHomesPolicy names prefix_load with one store of homes shared by
// the routers (what homes_directory adds: sim.Config.SharedHomes) in the
// mixed sweep's several-router cells.
const SharedHomesPolicy = "prefix_load shared homes"

// AlonePolicy names prefix_load told it is the replicas' only router
// (peers none) in the mixed sweep's one-router cells: what a single
// instance gets by saying so rather than by sensing it.
const AlonePolicy = "prefix_load peers none"

// RunMixedSweep moves the mixed workload's unique share from 0 to 1, with
// one router and with eight, per seed.
func RunMixedSweep(o Options) (*SweepRecord, error) {
	o.defaults()
	return runPlans(newRunner(&o), func(r *runner) (*plan[*SweepRecord], error) { return planMixedSweep(&o, r) })
}

func planMixedSweep(o *Options, r *runner) (*plan[*SweepRecord], error) {
	st := StandardPoint(o.Quick)
	n := sweepRequests(o.Quick)
	rec := &SweepRecord{Experiment: "mixed_sweep", Commit: o.Commit, Seed: o.Seed, Quick: o.Quick, Standard: st,
		Knob: "unique_share", Values: UniqueShares(o.Quick), Requests: n,
		Note: "mixed: a share of requests carry a unique 2,048-token document, the rest one of 64 shared system prompts, interleaved at random; " +
			"0 is shared_prefix, 1 is no_shared_prefix. One router and eight, seeds as listed (plots: the first seed)."}
	type cell struct {
		u    float64
		seed uint64
	}
	var cells []cell
	var reqs []buildReq
	for _, seed := range seedsOf(o) {
		for _, u := range rec.Values {
			p := WorkloadParams(workload.Mixed, n, seed)
			p.UniqueShare = u
			cells = append(cells, cell{u, seed})
			reqs = append(reqs, buildReq{p, st})
		}
	}
	r.note("mixed_sweep: generating %d workloads of %d requests", len(reqs), n)
	ws, err := r.buildAll(reqs)
	if err != nil {
		return nil, err
	}
	var tasks []*task
	share := map[*task]float64{}
	names := map[*task]string{}
	for i, w := range ws {
		for _, routers := range []int{1, 8} {
			s := st
			s.Routers = routers
			for _, p := range RouterPolicies {
				t := &task{phase: "mixed", label: fmt.Sprintf("unique=%.2f routers=%d seed=%d %s", cells[i].u, routers, cells[i].seed, p),
					cfg: SimConfig(p, s, cells[i].seed), w: w}
				share[t] = cells[i].u
				tasks = append(tasks, t)
			}
			// With several routers, what the shared homes directory
			// (homes_directory) adds where they place new prefixes; with
			// one, what peers none adds to a router that would otherwise
			// assume peers until the engines' metrics say.
			cfg := SimConfig("prefix_load", s, cells[i].seed)
			name := SharedHomesPolicy
			if routers > 1 {
				cfg.SharedHomes = true
			} else {
				cfg.Options.Peers, name = policies.PeersNone, AlonePolicy
			}
			t := &task{phase: "mixed", label: fmt.Sprintf("unique=%.2f routers=%d seed=%d %s", cells[i].u, routers, cells[i].seed, name),
				cfg: cfg, w: w}
			share[t] = cells[i].u
			names[t] = name
			tasks = append(tasks, t)
		}
	}
	collect := func() error {
		for _, t := range tasks {
			pt := cellPoint(workload.Mixed, share[t], t.cfg, t.res)
			if n := names[t]; n != "" {
				pt.Policy = n
			}
			rec.Points = append(rec.Points, pt)
		}
		return nil
	}
	return &plan[*SweepRecord]{rec: rec, tasks: tasks, collect: collect}, nil
}

// Goal is one of issue 18's goals at one workload and router count.
type Goal struct {
	Workload string `json:"workload"`
	Routers  int    `json:"routers"`
	// Seed is set where goals are checked per seed (variants.md).
	Seed   uint64  `json:"seed,omitempty"`
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Need   string  `json:"need"`
	Met    bool    `json:"met"`
	Detail string  `json:"detail"`
}

// Goal names.
const (
	GoalTail      = "TTFT p99 / best of round_robin, least_load"
	GoalMedian    = "TTFT p50 / best policy's"
	GoalHit       = "hit rate / best of prefix_affinity, oracle"
	GoalAgreement = "agreement on new prefixes (first request per router)"
	GoalSecond    = "agreement once a prefix came back (second request per router)"
	GoalScale     = "hit rate / one router's"
)

// CheckGoals evaluates issue 18's goals for prefix_load on every workload:
// one router from the standard record, more from the routers record.
func CheckGoals(std *StandardRecord, routers *SweepRecord) []Goal {
	type key struct {
		w string
		n int
	}
	figs := map[key]map[string]SweepPoint{}
	add := func(w string, n int, pt SweepPoint) {
		k := key{w, n}
		if figs[k] == nil {
			figs[k] = map[string]SweepPoint{}
		}
		figs[k][pt.Policy] = pt
	}
	for kind, wr := range std.Workloads {
		for _, p := range RouterPolicies {
			if res := wr.Policies[p]; res != nil {
				add(kind, 1, point(kind, 1, res))
			}
		}
	}
	if routers != nil {
		for _, pt := range routers.Points {
			if pt.Seed == 0 || pt.Seed == routers.Seed {
				add(pt.Workload, pt.Routers, pt)
			}
		}
	}
	var out []Goal
	for _, kind := range workload.Kinds {
		for _, n := range []int{1, 2, 4, 8} {
			f := figs[key{kind, n}]
			pl, ok := f["prefix_load"]
			if !ok {
				continue
			}
			one, hasOne := figs[key{kind, 1}]["prefix_load"]
			out = append(out, GoalsOf(kind, n, pl, f, one, hasOne)...)
		}
	}
	return out
}

// GoalsOf evaluates issue 18's goals for pl, one policy's figures at one
// workload and router count, against the reference policies' figures f
// of the same cell (round_robin, least_load, prefix_affinity, oracle,
// and prefix_load for the best median), and with several routers against
// one, its own figure with one router (when hasOne).
func GoalsOf(kind string, n int, pl SweepPoint, f map[string]SweepPoint, one SweepPoint, hasOne bool) []Goal {
	var out []Goal
	g := func(name string, v float64, need string, met bool, detail string) {
		out = append(out, Goal{Workload: kind, Routers: n, Name: name, Value: round(v, 3), Need: need, Met: met, Detail: detail})
	}
	rr, ll := f["round_robin"], f["least_load"]
	best := math.Min(rr.TTFTP99Ms, ll.TTFTP99Ms)
	v := pl.TTFTP99Ms / best
	g(GoalTail, v, "<= 1.10", v <= 1.1, fmt.Sprintf("%s %.1f ms, round_robin %.1f, least_load %.1f", pl.Policy, pl.TTFTP99Ms, rr.TTFTP99Ms, ll.TTFTP99Ms))
	bestP50, bestName := pl.TTFTP50Ms, pl.Policy
	for _, p := range RouterPolicies {
		if pt, ok := f[p]; ok && pt.TTFTP50Ms < bestP50 {
			bestP50, bestName = pt.TTFTP50Ms, p
		}
	}
	v = pl.TTFTP50Ms / bestP50
	g(GoalMedian, v, "<= 1.05", v <= 1.05, fmt.Sprintf("%s %.1f ms, %s %.1f", pl.Policy, pl.TTFTP50Ms, bestName, bestP50))
	pa, or := f["prefix_affinity"], f["oracle"]
	if bestHit := math.Max(pa.TokenHitRate, or.TokenHitRate); bestHit > 0 {
		v = pl.TokenHitRate / bestHit
		detail := fmt.Sprintf("%s %.3f, prefix_affinity %.3f", pl.Policy, pl.TokenHitRate, pa.TokenHitRate)
		if _, ran := f["oracle"]; ran {
			detail += fmt.Sprintf(", oracle %.3f", or.TokenHitRate)
		}
		g(GoalHit, v, ">= 0.97", v >= 0.97, detail)
	}
	if n == 1 {
		return out
	}
	if pl.AgreementKeys > 0 {
		g(GoalAgreement, pl.Agreement, ">= 0.97", pl.Agreement >= 0.97, fmt.Sprintf("over %d shared prefixes", pl.AgreementKeys))
		g(GoalSecond, pl.SecondAgreement, "(reported)", true, "over the prefixes seen twice by several routers")
	}
	if hasOne && one.TokenHitRate > 0 {
		v = pl.TokenHitRate / one.TokenHitRate
		g(GoalScale, v, ">= 0.95", v >= 0.95, fmt.Sprintf("%d routers %.3f, one %.3f", n, pl.TokenHitRate, one.TokenHitRate))
	}
	return out
}

// GoalsMarkdown renders goals.md: per workload and router count, each goal
// with its value, marked where it is missed.
func GoalsMarkdown(std *StandardRecord, goals []Goal) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Issue 18's goals for prefix_load\n\nGenerated by `go -C lab run ./cmd/llmexp all` from standard.json (one router) and routers.json (2, 4 and 8). "+
		"Commit `%s`, seed %d%s, %d requests per run. **bold** = missed. Per-seed figures at 4,000 requests: variants.md.\n\n",
		std.Commit, std.Seed, map[bool]string{true: ", quick (scaled-down) run", false: ""}[std.Quick], std.Standard.Requests)
	b.WriteString(GoalsTable(goals))
	_, missed := Tally(goals)
	fmt.Fprintf(&b, "\n%d of %d goals missed. Needed: p99 ratio <= 1.10, p50 ratio <= 1.05, hit ratio >= 0.97, agreement >= 0.97, hit vs one router >= 0.95; "+
		"second-request agreement is reported, not a goal.\n\n", len(missed), len(goals))
	b.WriteString("Details of the misses:\n\n")
	for _, g := range missed {
		fmt.Fprintf(&b, "- %s, %d routers, %s: %.3f (%s); %s\n", g.Workload, g.Routers, g.Name, g.Value, g.Need, g.Detail)
	}
	return b.String()
}

// GoalsTable renders goals.md's table: one row per workload and router
// count, one column per goal, each value in bold where it is missed.
func GoalsTable(goals []Goal) string {
	var b strings.Builder
	names := []string{GoalTail, GoalMedian, GoalHit, GoalAgreement, GoalSecond, GoalScale}
	writeHead(&b, "| workload | routers |", "|---|---:|", names)
	type key struct {
		w string
		n int
	}
	rows := map[key]map[string]Goal{}
	var order []key
	for _, g := range goals {
		k := key{g.Workload, g.Routers}
		if rows[k] == nil {
			rows[k] = map[string]Goal{}
			order = append(order, k)
		}
		rows[k][g.Name] = g
	}
	for _, k := range order {
		fmt.Fprintf(&b, "| %s | %d |", k.w, k.n)
		for _, n := range names {
			g, ok := rows[k][n]
			switch {
			case !ok:
				b.WriteString(" - |")
			case g.Met:
				fmt.Fprintf(&b, " %.3f |", g.Value)
			default:
				fmt.Fprintf(&b, " **%.3f** |", g.Value)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// WriteGoals writes goals.json and goals.md.
func WriteGoals(dir string, std *StandardRecord, routers *SweepRecord) error {
	goals := CheckGoals(std, routers)
	if err := writeJSON(filepath.Join(dir, "goals.json"), goals); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, "goals.md"), []byte(GoalsMarkdown(std, goals)))
}

// WriteGoalsFrom writes goals.json and goals.md from the standard and
// routers records in dir, when both are there.
func WriteGoalsFrom(dir string) error {
	var std StandardRecord
	var rt SweepRecord
	if readJSON(filepath.Join(dir, "standard.json"), &std) != nil || readJSON(filepath.Join(dir, "routers.json"), &rt) != nil {
		return nil
	}
	return WriteGoals(dir, &std, &rt)
}

// RoutersMarkdown renders routers.md (and mixed_sweep.md): per workload
// and policy, hit rate, TTFT p50 and p99 and the agreement, per router
// count and seed.
func RoutersMarkdown(rec *SweepRecord) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\nGenerated by `go -C lab run ./cmd/llmexp`. Commit `%s`, %d requests per run%s. %s\n\n",
		rec.Experiment, rec.Commit, rec.Requests, map[bool]string{true: " (quick run)", false: ""}[rec.Quick], rec.Note)
	b.WriteString("| workload | " + rec.Knob + " | routers | seed | policy | hit rate | TTFT p50 | TTFT p90 | TTFT p99 | max/min load | agreement first / second (keys) |\n")
	b.WriteString("|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---|\n")
	for _, pt := range rec.Points {
		agree := ""
		if pt.AgreementKeys > 0 {
			agree = fmt.Sprintf("%.3f / %.3f (%d)", pt.Agreement, pt.SecondAgreement, pt.AgreementKeys)
		}
		fmt.Fprintf(&b, "| %s | %g | %d | %d | %s | %.3f | %.1f | %.1f | %.1f | %.2f | %s |\n", pt.Workload, pt.Value, pt.Routers, pt.Seed, pt.Policy,
			pt.TokenHitRate, pt.TTFTP50Ms, pt.TTFTP90Ms, pt.TTFTP99Ms, pt.MaxMinLoadRatio, agree)
	}
	if rec.Experiment == "mixed_sweep" {
		b.WriteString(mixedGoalsMarkdown(rec))
	}
	return b.String()
}

// Tally counts goal checks (second-request agreement is reported, not a
// goal) and returns those missed.
func Tally(goals []Goal) (checks int, missed []Goal) {
	for _, g := range goals {
		if g.Name == GoalSecond {
			continue
		}
		checks++
		if !g.Met {
			missed = append(missed, g)
		}
	}
	return checks, missed
}

// GoalCell is a cell of goal checks: a workload (or, in the mixed sweep,
// a unique share), a router count and a seed (where seeds vary).
type GoalCell struct {
	Workload string
	Share    float64
	Routers  int
	Seed     uint64
}

// CellFigures groups points by cell (key) and, within a cell, by policy;
// it returns the cells in the order they first appear.
func CellFigures(points []SweepPoint, key func(SweepPoint) GoalCell) (map[GoalCell]map[string]SweepPoint, []GoalCell) {
	figs := map[GoalCell]map[string]SweepPoint{}
	var cells []GoalCell
	for _, p := range points {
		c := key(p)
		if figs[c] == nil {
			figs[c] = map[string]SweepPoint{}
			cells = append(cells, c)
		}
		figs[c][p.Policy] = p
	}
	return figs, cells
}

// MixedSweepGoals evaluates issue 18's goals (GoalsOf) per unique share,
// router count and seed of the mixed sweep, for prefix_load, with one
// router prefix_load peers none and with eight prefix_load with shared
// homes, each against the same
// cell's references and, with eight routers, prefix_load's hit rate with
// one router.
func MixedSweepGoals(rec *SweepRecord) map[string][]Goal {
	figs, cells := CellFigures(rec.Points, func(p SweepPoint) GoalCell { return GoalCell{Share: p.Value, Routers: p.Routers, Seed: p.Seed} })
	out := map[string][]Goal{}
	for _, c := range cells {
		one, hasOne := figs[GoalCell{Share: c.Share, Routers: 1, Seed: c.Seed}]["prefix_load"]
		for _, name := range []string{"prefix_load", AlonePolicy, SharedHomesPolicy} {
			pt, ok := figs[c][name]
			if !ok {
				continue
			}
			for _, g := range GoalsOf(fmt.Sprintf("mixed %g", c.Share), c.Routers, pt, figs[c], one, hasOne) {
				g.Seed = c.Seed
				out[name] = append(out[name], g)
			}
		}
	}
	return out
}

// mixedGoalsMarkdown is mixed_sweep.md's section of goal checks.
func mixedGoalsMarkdown(rec *SweepRecord) string {
	goals := MixedSweepGoals(rec)
	var b strings.Builder
	b.WriteString("\n## Issue 18's goals per seed\n\nThe goals of goals.md per unique share, router count and seed (hit rates against one router's: " +
		"prefix_load with one router on the same share and seed; no hit-rate check where nothing is shared).\n\n")
	b.WriteString("| policy | checks | missed |\n|---|---:|---:|\n")
	names := []string{"prefix_load", AlonePolicy, SharedHomesPolicy}
	misses := map[string][]Goal{}
	for _, name := range names {
		checks, missed := Tally(goals[name])
		misses[name] = missed
		fmt.Fprintf(&b, "| %s | %d | %d |\n", name, checks, len(missed))
	}
	for _, name := range names {
		fmt.Fprintf(&b, "\nMisses of `%s`:\n\n", name)
		missed := misses[name]
		for _, g := range missed {
			fmt.Fprintf(&b, "- %s unique, %d routers, seed %d: %s %.3f (%s); %s\n", strings.TrimPrefix(g.Workload, "mixed "), g.Routers, g.Seed, g.Name, g.Value, g.Need, g.Detail)
		}
		if len(missed) == 0 {
			b.WriteString("- none\n")
		}
	}
	return b.String()
}

// WriteRouters writes <experiment>.json, <experiment>.md and its plots.
func WriteRouters(dir string, rec *SweepRecord) error {
	if err := WriteSweep(dir, rec); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, rec.Experiment+".md"), []byte(RoutersMarkdown(rec)))
}
