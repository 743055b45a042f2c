package suite

import (
	"fmt"
	"slices"
	"time"

	"github.com/llmroute/caddy-llmroute/lab/experiments/sim"
	"github.com/llmroute/caddy-llmroute/lab/experiments/workload"
	"github.com/llmroute/caddy-llmroute/policies"
)

// Modes of the router's residency machinery compared in the analysis.
var Modes = []string{"none", "feedback", "metrics", "both", "unsized"}

// ModeDoc says what each mode turns on.
var ModeDoc = map[string]string{
	"none":     "optimistic index only (index_blocks 16384, no request_usage, no engine_metrics)",
	"feedback": "cached-token feedback (request_usage): shrink on miss, grow on hit, purge after 3 large misses",
	"metrics":  "engine metrics every 1s (engine_metrics): queue and KV usage to the policy, index capped at the engine's cache size, purge when counters go backwards",
	"both":     "feedback and engine metrics (the standard point)",
	"unsized":  "feedback and engine metrics that give no cache size, as llama.cpp's server's do: queue and KV usage to the policy, the index sized by index_blocks and the feedback alone (a partial shrinks it to its reach)",
}

func withMode(st Standard, mode string) Standard {
	st.Feedback = mode == "feedback" || mode == "both" || mode == "unsized"
	st.EngineMetrics = mode == "metrics" || mode == "both" || mode == "unsized"
	return st
}

// modeConfig is SimConfig in a mode.
func modeConfig(policy string, st Standard, mode string, seed uint64) sim.Config {
	cfg := SimConfig(policy, withMode(st, mode), seed)
	cfg.UnsizedCache = mode == "unsized"
	return cfg
}

// ResidencyRecord is residency.json.
type ResidencyRecord struct {
	Experiment string            `json:"experiment"`
	Commit     string            `json:"commit"`
	Seed       uint64            `json:"seed"`
	Quick      bool              `json:"quick"`
	Standard   Standard          `json:"standard"`
	Requests   int               `json:"requests"`
	Modes      map[string]string `json:"modes"`
	Rows       []ResidencyRow    `json:"rows"`
}

// ResidencyRow is one run of the analysis.
type ResidencyRow struct {
	Scenario string  `json:"scenario"`
	Workload string  `json:"workload"`
	Knob     string  `json:"knob"`
	Value    float64 `json:"value"`
	Mode     string  `json:"mode"`
	Policy   string  `json:"policy"`

	TokenHitRate      float64 `json:"token_hit_rate"`
	TTFTP50Ms         float64 `json:"ttft_p50_ms"`
	TTFTP99Ms         float64 `json:"ttft_p99_ms"`
	Precision         float64 `json:"precision"`
	Recall            float64 `json:"recall"`
	PrecisionReported float64 `json:"precision_reported"`
	RecallReported    float64 `json:"recall_reported"`
	ModulePrecision   float64 `json:"module_precision"`
	Hits              int     `json:"hits"`
	Misses            int     `json:"misses"`
	Cold              int     `json:"cold"`
	PurgesCounters    int     `json:"purges_counters_reset"`
	PurgesMisses      int     `json:"purges_hits_collapsed"`
	BoundaryMeanTok   float64 `json:"boundary_mean_tokens"`
	BoundaryAbsTok    float64 `json:"boundary_mean_abs_tokens"`
	MeanIndexCap      float64 `json:"mean_final_index_capacity"`
	Errors            int     `json:"errors"`
	Restarts          int     `json:"restarts"`
	// ColdAgreement (several routers) is the fraction of leading keys
	// seen by at least two routers that every router first sent to the
	// same replica; AgreementKeys is how many there were.
	ColdAgreement float64 `json:"cold_agreement,omitempty"`
	AgreementKeys int     `json:"agreement_keys,omitempty"`
}

func residencyRow(scn, kind, knob string, v float64, mode string, res *sim.Result) ResidencyRow {
	rs := &res.Residency
	return ResidencyRow{Scenario: scn, Workload: kind, Knob: knob, Value: v, Mode: mode, Policy: res.Policy,
		TokenHitRate: round(res.TokenHitRate, 4), TTFTP50Ms: round(res.TTFT.P50, 2), TTFTP99Ms: round(res.TTFT.P99, 2),
		Precision: round(rs.Precision, 4), Recall: round(rs.Recall, 4),
		PrecisionReported: round(rs.PrecisionReported, 4), RecallReported: round(rs.RecallReported, 4),
		ModulePrecision: round(rs.ModulePrecision, 4), Hits: rs.Hits, Misses: rs.Misses, Cold: rs.Cold,
		PurgesCounters: rs.PurgesCounters, PurgesMisses: rs.PurgesMisses,
		BoundaryMeanTok: round(rs.BoundaryMeanTok, 1), BoundaryAbsTok: round(rs.BoundaryAbsTok, 1),
		MeanIndexCap: round(rs.MeanIndexCap, 0), Errors: res.Errors, Restarts: res.Restarts,
		ColdAgreement: round(res.Agreement, 4), AgreementKeys: res.AgreementKeys}
}

// residencyRequests is the request count of each run.
func residencyRequests(quick bool) int {
	if quick {
		return sweepRequests(quick)
	}
	return 6000
}

// RunResidency runs the cache-residency analysis.
func RunResidency(o Options) (*ResidencyRecord, error) {
	o.defaults()
	return runPlans(newRunner(&o), func(r *runner) (*plan[*ResidencyRecord], error) { return planResidency(&o, r) })
}

// resTask is a task with its row's coordinates.
type resTask struct {
	*task
	scn, knob, mode string
	v               float64
}

func planResidency(o *Options, r *runner) (*plan[*ResidencyRecord], error) {
	st := StandardPoint(o.Quick)
	n := residencyRequests(o.Quick)
	rec := &ResidencyRecord{Experiment: "residency", Commit: o.Commit, Seed: o.Seed, Quick: o.Quick, Standard: st,
		Requests: n, Modes: ModeDoc}
	var rts []resTask
	add := func(scn, knob string, v float64, mode string, cfg sim.Config, w *workload.Workload) {
		label := fmt.Sprintf("%s %s %s=%g %s %s", scn, w.Params.Kind, knob, v, mode, cfg.Policy)
		rts = append(rts, resTask{task: &task{phase: "residency", label: label, cfg: cfg, w: w}, scn: scn, knob: knob, mode: mode, v: v})
	}
	kvs := []float64{16384, 8192, 4096, 2048, 1024}
	restartEvery := []float64{0, 60, 20}
	groups := []float64{16, 64, 256, 1024}
	blockSizes := []float64{64, 128, 256, 512}
	routers := []float64{1, 2, 4, 8}
	if o.Quick {
		kvs, restartEvery, groups, blockSizes, routers = []float64{8192, 2048}, []float64{0, 20}, []float64{16, 256}, []float64{64, 256}, []float64{1, 4}
	}
	reqs := []buildReq{{WorkloadParams(workload.SharedPrefix, n, o.Seed), st}, {WorkloadParams(workload.MultiTurn, n, o.Seed), st}}
	for _, g := range groups {
		p := WorkloadParams(workload.SharedPrefix, n, o.Seed)
		p.Groups = int(g)
		reqs = append(reqs, buildReq{p, st})
	}
	r.note("residency: generating %d workloads of %d requests", len(reqs), n)
	ws, err := r.buildAll(reqs)
	if err != nil {
		return nil, err
	}
	base := map[string]*workload.Workload{workload.SharedPrefix: ws[0], workload.MultiTurn: ws[1]}

	// 1. KV capacity shrinks.
	for _, kind := range []string{workload.SharedPrefix, workload.MultiTurn} {
		for _, kv := range kvs {
			for _, m := range Modes {
				s := st
				s.KVBlocks = int(kv)
				add("kv", "kv_blocks", kv, m, modeConfig("prefix_load", s, m, o.Seed), base[kind])
			}
		}
	}
	// 2. Prefixes multiply (more groups at the same load and cache).
	for i, g := range groups {
		w := ws[2+i]
		for _, m := range []string{"none", "both"} {
			add("prefixes", "groups", g, m, SimConfig("prefix_load", withMode(st, m), o.Seed), w)
		}
	}
	// 3. Replicas restart: one engine crash-restart every interval,
	// replicas in turn.
	for _, kind := range []string{workload.SharedPrefix, workload.MultiTurn} {
		w := base[kind]
		end := w.Sessions[len(w.Sessions)-1].Arrival
		for _, every := range restartEvery {
			for _, m := range Modes {
				cfg := modeConfig("prefix_load", st, m, o.Seed)
				if every > 0 {
					step := time.Duration(every * float64(time.Second))
					for i, t := 0, step; t < end; i, t = i+1, t+step {
						cfg.Restarts = append(cfg.Restarts, sim.Restart{At: t, Replica: i % st.Replicas})
					}
				}
				add("restarts", "restart_every_s", every, m, cfg, w)
			}
		}
	}
	// 4. Tokenization moves block boundaries: the router's block size.
	for _, kind := range []string{workload.SharedPrefix, workload.MultiTurn} {
		for _, bs := range blockSizes {
			w := base[kind].WithParse(policies.ParseConfig{Deployment: "sim", BlockSize: int(bs)})
			add("blocks", "router_block_bytes", bs, "both", SimConfig("prefix_load", st, o.Seed), w)
		}
	}
	// 5. Routers multiply, each with its own index; traffic split at random.
	for _, kind := range []string{workload.SharedPrefix, workload.MultiTurn} {
		for _, nr := range routers {
			for _, m := range []string{"none", "both"} {
				s := withMode(st, m)
				s.Routers = int(nr)
				add("routers", "routers", nr, m, SimConfig("prefix_load", s, o.Seed), base[kind])
			}
			s := st
			s.Routers = int(nr)
			add("routers", "routers", nr, "both", SimConfig("prefix_affinity", s, o.Seed), base[kind])
			add("routers", "routers", nr, "both", SimConfig("oracle", s, o.Seed), base[kind])
		}
	}

	// 6. Routers agree on where a new prefix goes: 256 groups, so that
	// the agreement is measured over enough keys; as shipped, the previous
	// default (always the rendezvous home), no cold slack, a shared table
	// of homes, and the previous single-router setting.
	for _, nr := range []float64{2, 4, 8} {
		s := st
		s.Routers = int(nr)
		w := ws[2+slices.Index(groups, 256)]
		if w.Params.Groups != 256 {
			continue // quick runs have no 256-group workload
		}
		add("agreement", "routers", nr, "both", SimConfig("prefix_load", s, o.Seed), w)
		for _, setting := range agreementSettings {
			c := SimConfig("prefix_load", s, o.Seed)
			switch setting {
			case "cold_choices 1":
				c.ColdChoices = 1
			case "cold_slack 0":
				c.Options.ColdSlack = -1
			case "shared homes":
				c.SharedHomes = true
			case "cold_choices 3":
				c.ColdChoices = 3
			}
			add("agreement", "routers", nr, setting, c, w)
		}
	}
	// 7. Answers indexed or not (index_answers): multi_turn, where the
	// next turn repeats the answer, from 1 to 8 routers.
	for _, nr := range routers {
		for _, on := range []bool{true, false} {
			s := st
			s.Routers = int(nr)
			c := SimConfig("prefix_load", s, o.Seed)
			c.IndexAnswers = on
			add("answers", "routers", nr, map[bool]string{true: "answers", false: "no answers"}[on], c, base[workload.MultiTurn])
		}
	}

	tasks := make([]*task, len(rts))
	for i := range rts {
		tasks[i] = rts[i].task
	}
	collect := func() error {
		for _, t := range rts {
			rec.Rows = append(rec.Rows, residencyRow(t.scn, t.w.Params.Kind, t.knob, t.v, t.mode, t.res))
		}
		return nil
	}
	return &plan[*ResidencyRecord]{rec: rec, tasks: tasks, collect: collect}, nil
}
