package suite

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/llmroute/caddy-llmroute/lab/experiments/sim"
	"github.com/llmroute/caddy-llmroute/lab/experiments/trace"
	"github.com/llmroute/caddy-llmroute/policies"
)

// The trace variants are the diagnosis of the trace experiment's
// several-router misses: prefix_load with four routers and nothing shared,
// at KV 0.25x where it misses, with one of its rules or its chain changed,
// against one router's prefix_load as shipped. A variant here is a
// measurement, not a rule: the rules are policies'.

// TraceVariant is one prefix_load configuration of the trace variants.
type TraceVariant struct {
	Name    string           `json:"name"`
	Options policies.Options `json:"options"`
	// MaxBlocks, when set, is the router chain's cap (128-byte blocks).
	MaxBlocks int `json:"max_blocks,omitempty"`
	// ColdChoices runs the lab's old cold rules (sim.Config.ColdChoices).
	ColdChoices int `json:"cold_choices,omitempty"`
}

// TraceVariants are the configurations compared: as shipped, the cold
// rule of always the rendezvous home within the cold bound (cold_choices
// 1), the peer rule's unique-traffic gate off (unique_run -1), a looser
// slack for a new prefix's rendezvous home (cold_slack 4), no detours, a
// the 256-block chain of 32 KiB, and that chain without detours.
var TraceVariants = []TraceVariant{
	{Name: "prefix_load"},
	{Name: "cold_choices 1", ColdChoices: 1},
	{Name: "unique_run -1", Options: policies.Options{UniqueRun: -1}},
	{Name: "cold_slack 4", Options: policies.Options{ColdSlack: 4}},
	{Name: "no detours", Options: policies.Options{DetourSlack: 1e6}},
	{Name: "max_blocks 256", MaxBlocks: 256},
	{Name: "max_blocks 256, no detours", Options: policies.Options{DetourSlack: 1e6}, MaxBlocks: 256},
}

// TraceVariantRouters is the router count the variants run with.
const TraceVariantRouters = 4

// TraceVariantsRecord is trace_variants.json.
type TraceVariantsRecord struct {
	Experiment string         `json:"experiment"`
	Commit     string         `json:"commit"`
	Seeds      []uint64       `json:"seeds"`
	Trace      TraceConfig    `json:"trace"`
	Variants   []TraceVariant `json:"variants"`
	Cases      []TraceCase    `json:"cases"`
	// Points hold one router's prefix_load as shipped (Routers 1) and
	// every variant with TraceVariantRouters routers, Policy naming it.
	Points []TracePoint `json:"points"`
}

// RunTraceVariants runs the variants on tc's trace at KV 0.25x, seed
// after seed.
func RunTraceVariants(o Options, tc TraceConfig) (*TraceVariantsRecord, error) {
	recs, err := loadTrace(&o, &tc)
	if err != nil {
		return nil, err
	}
	st := StandardPoint(false)
	st.Util = TraceUtil
	stats := trace.Describe(recs, tc.Options)
	rec := &TraceVariantsRecord{Experiment: "trace_variants", Commit: o.Commit, Seeds: seedsOf(&o), Trace: tc, Variants: TraceVariants}
	for _, c := range TraceCases(false, stats.WorkingSetTokens, EngineConfig(1).BlockSize) {
		if c.KVShare < 1 {
			rec.Cases = append(rec.Cases, c)
		}
	}
	r := newRunner(&o)
	for _, seed := range rec.Seeds {
		base, err := seedWorkload(&o, r, "trace_variants", recs, tc.Options, seed, stats.Requests)
		if err != nil {
			return nil, err
		}
		var tasks []*task
		caseOf, nameOf := map[*task]int{}, map[*task]string{}
		for ci := range rec.Cases {
			c := &rec.Cases[ci]
			w := base.WithParse(base.Params.Parse)
			s := st
			s.Replicas, s.KVBlocks = c.Replicas, c.KVBlocks
			c.RatePerS = round(TraceUtil*ColdCapacity(EngineConfig(c.KVBlocks), w.MeanPromptTokens, w.MeanOutputTokens, s.Cap)*float64(c.Replicas), 3)
			w.ScaleRate(c.RatePerS)
			s.Routers = 1
			// Where the hits go is measured as shipped, alone and with
			// the variants' routers (TraceRulesMarkdown).
			cfg := SimConfig("prefix_load", s, seed)
			cfg.RuleStats = true
			t := &task{phase: "variants", label: fmt.Sprintf("%s routers=1 seed=%d prefix_load", c.file(), seed), cfg: cfg, w: w}
			tasks, caseOf[t], nameOf[t] = append(tasks, t), ci, "prefix_load"
			s.Routers = TraceVariantRouters
			for _, v := range TraceVariants {
				wv := w
				if v.MaxBlocks > 0 {
					wv = w.WithParse(policies.ParseConfig{Deployment: "sim", MaxBlocks: v.MaxBlocks})
				}
				cfg := SimConfig("prefix_load", s, seed)
				cfg.Options, cfg.ColdChoices = v.Options, v.ColdChoices
				cfg.RuleStats = v.Name == "prefix_load"
				t := &task{phase: "variants", label: fmt.Sprintf("%s routers=%d seed=%d %s", c.file(), s.Routers, seed, v.Name), cfg: cfg, w: wv}
				tasks, caseOf[t], nameOf[t] = append(tasks, t), ci, v.Name
			}
		}
		if err := r.run(tasks); err != nil {
			return nil, err
		}
		for _, t := range tasks {
			pt := tracePoint(rec.Cases[caseOf[t]], t, stats.Bound, false)
			pt.Policy = nameOf[t]
			rec.Points = append(rec.Points, pt)
		}
	}
	return rec, nil
}

// TraceVariantsMarkdown renders trace_variants.md: per case, each
// variant's hit rate with four routers against one router's prefix_load
// (the goal: >= 0.85), and its TTFT p50 and p99, each seed's figure in
// seed order.
func TraceVariantsMarkdown(rec *TraceVariantsRecord) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Trace variants: %s\n\nGenerated by `go -C lab run ./cmd/llmexp trace_variants`. Commit `%s`, seeds %v. "+
		"prefix_load with %d routers and nothing shared at KV 0.25x, where the trace experiment's several-router hit goal misses, with one rule "+
		"or the chain changed; the reference is one router's prefix_load as shipped (same case and seed). Figures per seed, in seed order.\n\n",
		rec.Trace.Name, rec.Commit, rec.Seeds, TraceVariantRouters)
	b.WriteString("| case | variant | hit rate | hit / one router's (>= 0.85) | TTFT p50 ms | TTFT p99 ms |\n|---|---|---:|---:|---:|---:|\n")
	for _, c := range rec.Cases {
		one := map[uint64]float64{}
		for _, p := range rec.Points {
			if p.Workload == c.Label() && p.Routers == 1 {
				one[p.Seed] = p.TokenHitRate
			}
		}
		for _, v := range TraceVariants {
			var hit, ratio, p50, p99 []string
			for _, s := range rec.Seeds {
				for _, p := range rec.Points {
					if p.Workload != c.Label() || p.Routers != TraceVariantRouters || p.Policy != v.Name || p.Seed != s {
						continue
					}
					hit = append(hit, fmt.Sprintf("%.3f", p.TokenHitRate))
					r := fmt.Sprintf("%.3f", p.TokenHitRate/one[s])
					if p.TokenHitRate/one[s] < 0.85 {
						r = "**" + r + "**"
					}
					ratio = append(ratio, r)
					p50, p99 = append(p50, Thousands(p.TTFTP50Ms)), append(p99, Thousands(p.TTFTP99Ms))
				}
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", c.Label(), v.Name, strings.Join(hit, " / "), strings.Join(ratio, " / "),
				strings.Join(p50, " / "), strings.Join(p99, " / "))
		}
	}
	b.WriteString(TraceRulesMarkdown(rec))
	return b.String()
}

// TraceRulesMarkdown renders where the hits go: per case and router
// count, prefix_load as shipped, summed over the seeds, each rule's share
// of the requests and of the prompt tokens, and what the engines had
// cached of its prompts at the decision: where the rule sent them, on the
// engine that had the most, and on their home (sim.RuleStat).
func TraceRulesMarkdown(rec *TraceVariantsRecord) string {
	var b strings.Builder
	b.WriteString("\n## Where the hits go\n\nprefix_load as shipped, seeds summed: per rule that placed a request, its share of the requests and of the prompt tokens, " +
		"and the share of those prompts' tokens the engines had cached when it decided: where the rule sent them, on the engine that had the most, " +
		"and on the prompt's home (the highest rendezvous rank of its home key, where a router that had seen none of it would look).\n\n")
	b.WriteString("| case | routers | rule | requests | prompt tokens | cached where sent | on the best engine | at the home |\n|---|---:|---|---:|---:|---:|---:|---:|\n")
	for _, c := range rec.Cases {
		for _, routers := range []int{1, TraceVariantRouters} {
			rules := map[policies.Reason]sim.RuleStat{}
			var all sim.RuleStat
			for _, p := range rec.Points {
				if p.Workload != c.Label() || p.Routers != routers || p.Policy != "prefix_load" {
					continue
				}
				for why, st := range p.Rules {
					rules[why] = rules[why].Merge(st)
					all = all.Merge(st)
				}
			}
			if all.Requests == 0 {
				continue
			}
			share := func(n, of int64) string { return fmt.Sprintf("%.3f", float64(n)/float64(max(of, 1))) }
			for _, name := range append(slices.Sorted(maps.Keys(rules)), "all") {
				st := all
				if name != "all" {
					st = rules[name]
				}
				fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %s |\n", c.Label(), routers, name,
					share(int64(st.Requests), int64(all.Requests)), share(st.PromptTokens, all.PromptTokens),
					share(st.SentTokens, st.PromptTokens), share(st.BestTokens, st.PromptTokens), share(st.HomeTokens, st.PromptTokens))
			}
		}
	}
	return b.String()
}

// WriteTraceVariants writes trace_variants.json and trace_variants.md.
func WriteTraceVariants(dir string, rec *TraceVariantsRecord) error {
	if err := writeJSON(filepath.Join(dir, "trace_variants.json"), rec); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, "trace_variants.md"), []byte(TraceVariantsMarkdown(rec)))
}
