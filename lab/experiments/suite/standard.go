package suite

import (
	"fmt"
	"path/filepath"

	"github.com/llmroute/caddy-llmroute/lab/experiments/sim"
	"github.com/llmroute/caddy-llmroute/lab/experiments/workload"
)

// StandardRecord is standard.json: every workload under every policy at
// the standard point.
type StandardRecord struct {
	Experiment string                     `json:"experiment"`
	Commit     string                     `json:"commit"`
	Seed       uint64                     `json:"seed"`
	Quick      bool                       `json:"quick"`
	Standard   Standard                   `json:"standard"`
	Engine     any                        `json:"engine"`
	Workloads  map[string]*WorkloadRecord `json:"workloads"`
	Targets    []Target                   `json:"targets,omitempty"`
}

// WorkloadRecord is one workload's parameters and results per policy.
type WorkloadRecord struct {
	Params           workload.Params        `json:"params"`
	Sessions         int                    `json:"sessions"`
	MeanPromptTokens float64                `json:"mean_prompt_tokens"`
	MeanOutputTokens float64                `json:"mean_output_tokens"`
	Policies         map[string]*sim.Result `json:"policies"`
}

// RunStandard runs the standard point for the given workloads (all when
// kinds is empty) and returns the record.
func RunStandard(o Options, kinds []string) (*StandardRecord, error) {
	o.defaults()
	return runPlans(newRunner(&o), func(r *runner) (*plan[*StandardRecord], error) { return planStandard(&o, r, kinds) })
}

// plan is an experiment ready to run: its tasks, and how to fill its
// record once they ran.
type plan[R any] struct {
	rec     R
	tasks   []*task
	collect func() error
}

// runPlans plans one experiment, runs it and collects its record.
func runPlans[R any](r *runner, mk func(*runner) (*plan[R], error)) (R, error) {
	var zero R
	p, err := mk(r)
	if err != nil {
		return zero, err
	}
	if err := r.run(p.tasks); err != nil {
		return zero, err
	}
	if err := p.collect(); err != nil {
		return zero, err
	}
	return p.rec, nil
}

func planStandard(o *Options, r *runner, kinds []string) (*plan[*StandardRecord], error) {
	if len(kinds) == 0 {
		kinds = workload.Kinds
	}
	st := StandardPoint(o.Quick)
	if o.Requests > 0 {
		st.Requests = o.Requests
	}
	rec := &StandardRecord{Experiment: "standard", Commit: o.Commit, Seed: o.Seed, Quick: o.Quick, Standard: st,
		Engine: EngineConfig(st.KVBlocks), Workloads: map[string]*WorkloadRecord{}}
	r.note("standard: generating %d workloads of %d requests", len(kinds), st.Requests)
	var reqs []buildReq
	for _, kind := range kinds {
		reqs = append(reqs, buildReq{WorkloadParams(kind, st.Requests, o.Seed), StandardFor(kind, st)})
	}
	ws, err := r.buildAll(reqs)
	if err != nil {
		return nil, err
	}
	var tasks []*task
	for i, kind := range kinds {
		w := ws[i]
		rec.Workloads[kind] = &WorkloadRecord{Params: w.Params, Sessions: len(w.Sessions),
			MeanPromptTokens: w.MeanPromptTokens, MeanOutputTokens: w.MeanOutputTokens, Policies: map[string]*sim.Result{}}
		for _, p := range sim.Policies {
			tasks = append(tasks, &task{phase: "standard", label: kind + " " + p, cfg: SimConfig(p, reqs[i].st, o.Seed), w: w})
		}
	}
	collect := func() error {
		for _, t := range tasks {
			rec.Workloads[t.w.Params.Kind].Policies[t.cfg.Policy] = t.res
		}
		if len(kinds) == len(workload.Kinds) {
			rec.Targets = CheckTargets(rec)
		}
		return nil
	}
	return &plan[*StandardRecord]{rec: rec, tasks: tasks, collect: collect}, nil
}

// WriteStandard writes standard.json, summary.json, summary.md and the
// standard plots under dir.
func WriteStandard(dir string, rec *StandardRecord, sweep *SweepRecord) error {
	if err := writeJSON(filepath.Join(dir, "standard.json"), rec); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(dir, "summary.json"), Summarize(rec)); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, "summary.md"), []byte(SummaryMarkdown(rec, sweep))); err != nil {
		return err
	}
	return PlotStandard(filepath.Join(dir, "plots"), rec)
}

// Summary is summary.json: {"workloads": {workload: {policy: figures}}}.
type Summary struct {
	Workloads map[string]map[string]SummaryEntry `json:"workloads"`
}

// SummaryEntry is one policy's figures on one workload.
type SummaryEntry struct {
	TokenHitRate    float64 `json:"token_hit_rate"`
	TTFTP50Ms       float64 `json:"ttft_p50_ms"`
	TTFTP99Ms       float64 `json:"ttft_p99_ms"`
	ThroughputTokS  float64 `json:"throughput_tok_s"`
	MaxMinLoadRatio float64 `json:"max_min_load_ratio"`
}

// Summarize extracts summary.json from the standard record.
func Summarize(rec *StandardRecord) Summary {
	s := Summary{Workloads: map[string]map[string]SummaryEntry{}}
	for kind, wr := range rec.Workloads {
		m := map[string]SummaryEntry{}
		for p, res := range wr.Policies {
			m[p] = SummaryEntry{TokenHitRate: round(res.TokenHitRate, 4), TTFTP50Ms: round(res.TTFT.P50, 2),
				TTFTP99Ms: round(res.TTFT.P99, 2), ThroughputTokS: round(res.ThroughputTokS, 1),
				MaxMinLoadRatio: round(res.MaxMinLoadRatio, 3)}
		}
		s.Workloads[kind] = m
	}
	return s
}

// Target is one of the targets and whether the standard point met
// it.
type Target struct {
	Name   string  `json:"name"`
	Met    bool    `json:"met"`
	Value  float64 `json:"value"`
	Need   string  `json:"need"`
	Detail string  `json:"detail"`
}

// CheckTargets evaluates the targets on the standard record.
func CheckTargets(rec *StandardRecord) []Target {
	get := func(w, p string) *sim.Result { return rec.Workloads[w].Policies[p] }
	var ts []Target
	for _, w := range []string{workload.SharedPrefix, workload.MultiTurn} {
		pl, or := get(w, "prefix_load"), get(w, "oracle")
		v := pl.TokenHitRate / or.TokenHitRate
		ts = append(ts, Target{Name: "prefix_load hit rate >= 0.90x oracle on " + w, Met: v >= 0.9, Value: round(v, 3), Need: ">= 0.90",
			Detail: fmt.Sprintf("prefix_load %.3f, oracle %.3f", pl.TokenHitRate, or.TokenHitRate)})
	}
	{
		pl, rr := get(workload.SharedPrefix, "prefix_load"), get(workload.SharedPrefix, "round_robin")
		v := rr.TTFT.P50 / pl.TTFT.P50
		ts = append(ts, Target{Name: "prefix_load TTFT p50 >= 2x better than round_robin on shared_prefix", Met: v >= 2, Value: round(v, 2), Need: ">= 2",
			Detail: fmt.Sprintf("round_robin %.1f ms, prefix_load %.1f ms", rr.TTFT.P50, pl.TTFT.P50)})
	}
	for _, w := range []string{workload.NoSharedPrefix, workload.Skewed} {
		pl, ll := get(w, "prefix_load"), get(w, "least_load")
		v := pl.TTFT.P99 / ll.TTFT.P99
		ts = append(ts, Target{Name: "prefix_load TTFT p99 <= 1.1x least_load on " + w, Met: v <= 1.1, Value: round(v, 3), Need: "<= 1.10",
			Detail: fmt.Sprintf("prefix_load %.1f ms, least_load %.1f ms", pl.TTFT.P99, ll.TTFT.P99)})
	}
	{
		pl, bh := get(workload.Skewed, "prefix_load"), get(workload.Skewed, "bounded_hash")
		v := pl.TTFT.P99 / bh.TTFT.P99
		ts = append(ts, Target{Name: "prefix_load beats bounded_hash on TTFT p99 in skewed", Met: v < 1, Value: round(v, 3), Need: "< 1",
			Detail: fmt.Sprintf("prefix_load %.1f ms, bounded_hash %.1f ms", pl.TTFT.P99, bh.TTFT.P99)})
	}
	return ts
}

// WriteWorkload writes one workload's standard-point record
// (workload_<kind>.json) and its TTFT CDF and load-share plots; it leaves
// summary.json alone, which covers every workload.
func WriteWorkload(dir, kind string, rec *StandardRecord) error {
	if err := writeJSON(filepath.Join(dir, "workload_"+kind+".json"), rec); err != nil {
		return err
	}
	return plotWorkloads(filepath.Join(dir, "plots"), rec, []string{kind})
}
