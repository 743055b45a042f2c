package suite

import (
	"fmt"

	"github.com/llmroute/caddy-llmroute/lab/experiments/sim"
	"github.com/llmroute/caddy-llmroute/lab/experiments/workload"
)

// SweepRecord is a sweep's record: one knob moved away from the standard
// point, every other parameter held.
type SweepRecord struct {
	Experiment string       `json:"experiment"`
	Commit     string       `json:"commit"`
	Seed       uint64       `json:"seed"`
	Quick      bool         `json:"quick"`
	Standard   Standard     `json:"standard"`
	Knob       string       `json:"knob"`
	Values     []float64    `json:"values"`
	Requests   int          `json:"requests"`
	Note       string       `json:"note"`
	Points     []SweepPoint `json:"points"`
}

// SweepPoint is one policy at one knob value on one workload.
type SweepPoint struct {
	Workload        string  `json:"workload"`
	Value           float64 `json:"value"`
	Policy          string  `json:"policy"`
	TokenHitRate    float64 `json:"token_hit_rate"`
	TTFTP50Ms       float64 `json:"ttft_p50_ms"`
	TTFTP90Ms       float64 `json:"ttft_p90_ms"`
	TTFTP99Ms       float64 `json:"ttft_p99_ms"`
	E2EP50Ms        float64 `json:"e2e_p50_ms"`
	E2EP99Ms        float64 `json:"e2e_p99_ms"`
	ThroughputTokS  float64 `json:"throughput_tok_s"`
	MaxMinLoadRatio float64 `json:"max_min_load_ratio"`
	Errors          int     `json:"errors"`
	RouterQueued    int     `json:"router_queued"`
	Preemptions     uint64  `json:"preemptions"`
	Precision       float64 `json:"precision"`
	Recall          float64 `json:"recall"`
	// Routers and Seed are set where an experiment varies them.
	Routers int    `json:"routers,omitempty"`
	Seed    uint64 `json:"seed,omitempty"`
	// With several routers: how often they agreed on where each shared
	// prefix went, the first time each saw it and the second time
	// (sim.Result.Agreement, SecondAgreement), over AgreementKeys keys.
	Agreement       float64 `json:"cold_agreement,omitempty"`
	SecondAgreement float64 `json:"second_agreement,omitempty"`
	AgreementKeys   int     `json:"agreement_keys,omitempty"`
	// For prefix_load inferring its peers: the share of its placements
	// made believing it had some, and when a router first believed it
	// was alone (seconds into the run; sim.Result.PeersShare,
	// FirstAloneS).
	PeersShare  float64 `json:"peers_share,omitempty"`
	FirstAloneS float64 `json:"first_alone_s,omitempty"`
}

func point(kind string, v float64, res *sim.Result) SweepPoint {
	return SweepPoint{Workload: kind, Value: v, Policy: res.Policy,
		TokenHitRate: round(res.TokenHitRate, 4), TTFTP50Ms: round(res.TTFT.P50, 2), TTFTP90Ms: round(res.TTFT.P90, 2),
		TTFTP99Ms: round(res.TTFT.P99, 2), E2EP50Ms: round(res.E2E.P50, 1), E2EP99Ms: round(res.E2E.P99, 1),
		ThroughputTokS: round(res.ThroughputTokS, 1), MaxMinLoadRatio: round(res.MaxMinLoadRatio, 3),
		Errors: res.Errors, RouterQueued: res.Queued, Preemptions: res.Preemptions,
		Precision: round(res.Residency.Precision, 4), Recall: round(res.Residency.Recall, 4),
		Agreement: round(res.Agreement, 4), SecondAgreement: round(res.SecondAgreement, 4), AgreementKeys: res.AgreementKeys,
		PeersShare: round(res.PeersShare, 4), FirstAloneS: round(res.FirstAloneS, 2)}
}

// cellPoint is point for a run whose routers and seed vary.
func cellPoint(kind string, v float64, cfg sim.Config, res *sim.Result) SweepPoint {
	pt := point(kind, v, res)
	pt.Routers, pt.Seed = cfg.Routers, cfg.Seed
	return pt
}

// sweepRequests is the request count of each sweep run.
func sweepRequests(quick bool) int {
	if quick {
		return 1500
	}
	return 4000
}

// KVValues are the KV capacities of the regime sweep, in blocks per
// replica: from an eighth of the shared-prefix working set per replica
// (all four together hold half of it) to twice all of it in one.
func KVValues(quick bool) []float64 {
	if quick {
		return []float64{1024, 4096, 16384}
	}
	return []float64{1024, 2048, 4096, 8192, 16384}
}

// RunKVSweep moves each engine's KV capacity across the regime band for
// every workload and policy.
func RunKVSweep(o Options) (*SweepRecord, error) {
	o.defaults()
	return runPlans(newRunner(&o), func(r *runner) (*plan[*SweepRecord], error) { return planKVSweep(&o, r) })
}

func planKVSweep(o *Options, r *runner) (*plan[*SweepRecord], error) {
	st := StandardPoint(o.Quick)
	n := sweepRequests(o.Quick)
	rec := &SweepRecord{Experiment: "kv_sweep", Commit: o.Commit, Seed: o.Seed, Quick: o.Quick, Standard: st,
		Knob: "kv_blocks_per_replica", Values: KVValues(o.Quick), Requests: n,
		Note: "Arrival rate fixed at the standard point's (0.6 of cold capacity); only the engines' KV cache changes. " +
			"The cache also holds the running requests' blocks: below 4,096 blocks a replica cannot run the ~16 concurrent " +
			"2,400-token requests this load needs without cache hits, so queues grow without bound there (TTFT in seconds to minutes) " +
			"and what is measured is overload, not routing alone."}
	// no_shared_prefix is left out: nothing is shared, so the cache size
	// only shows where the replicas run out of memory for running requests.
	kinds := []string{workload.SharedPrefix, workload.MultiTurn, workload.Skewed}
	r.note("kv_sweep: generating %d workloads of %d requests", len(kinds), n)
	var reqs []buildReq
	for _, kind := range kinds {
		reqs = append(reqs, buildReq{WorkloadParams(kind, n, o.Seed), st})
	}
	ws, err := r.buildAll(reqs)
	if err != nil {
		return nil, err
	}
	var tasks []*task
	for _, w := range ws {
		for _, kv := range rec.Values {
			for _, p := range sim.Policies {
				s := st
				s.KVBlocks = int(kv)
				tasks = append(tasks, &task{phase: "kv_sweep", label: fmt.Sprintf("%s kv=%d %s", w.Params.Kind, int(kv), p), cfg: SimConfig(p, s, o.Seed), w: w})
			}
		}
	}
	collect := func() error {
		for _, t := range tasks {
			rec.Points = append(rec.Points, point(t.w.Params.Kind, float64(t.cfg.Engine.NumBlocks), t.res))
		}
		return nil
	}
	return &plan[*SweepRecord]{rec: rec, tasks: tasks, collect: collect}, nil
}

// UtilValues are the offered loads of the load sweep, as fractions of the
// cold capacity.
func UtilValues(quick bool) []float64 {
	if quick {
		return []float64{0.3, 0.9}
	}
	return []float64{0.3, 0.9, 1.2} // 0.6 is the standard point
}

// RunLoadSweep moves the offered load for the workloads where load
// balance matters most.
func RunLoadSweep(o Options) (*SweepRecord, error) {
	o.defaults()
	return runPlans(newRunner(&o), func(r *runner) (*plan[*SweepRecord], error) { return planLoadSweep(&o, r) })
}

func planLoadSweep(o *Options, r *runner) (*plan[*SweepRecord], error) {
	st := StandardPoint(o.Quick)
	n := sweepRequests(o.Quick)
	rec := &SweepRecord{Experiment: "load_sweep", Commit: o.Commit, Seed: o.Seed, Quick: o.Quick, Standard: st,
		Knob: "util_of_cold_capacity", Values: UtilValues(o.Quick), Requests: n,
		Note: "Offered load as a fraction of what the replicas could serve with no cache hit at all; above 1 only cache hits keep a policy out of overload."}
	kinds := []string{workload.SharedPrefix, workload.Skewed, workload.NoSharedPrefix}
	var reqs []buildReq
	var utils []float64
	for _, kind := range kinds {
		for _, u := range rec.Values {
			s := st
			s.Util = u
			reqs = append(reqs, buildReq{WorkloadParams(kind, n, o.Seed), s})
			utils = append(utils, u)
		}
	}
	r.note("load_sweep: generating %d workloads of %d requests", len(reqs), n)
	ws, err := r.buildAll(reqs)
	if err != nil {
		return nil, err
	}
	var tasks []*task
	util := map[*task]float64{}
	for i, w := range ws {
		for _, p := range sim.Policies {
			t := &task{phase: "load_sweep", label: fmt.Sprintf("%s util=%.1f %s", w.Params.Kind, utils[i], p), cfg: SimConfig(p, st, o.Seed), w: w}
			util[t] = utils[i]
			tasks = append(tasks, t)
		}
	}
	collect := func() error {
		for _, t := range tasks {
			rec.Points = append(rec.Points, point(t.w.Params.Kind, util[t], t.res))
		}
		return nil
	}
	return &plan[*SweepRecord]{rec: rec, tasks: tasks, collect: collect}, nil
}

// ReplicaValues are the deployment sizes of the scale run.
func ReplicaValues(quick bool) []float64 {
	if quick {
		return []float64{2, 16}
	}
	return []float64{2, 8, 32, 64}
}

// RunScale runs shared_prefix on 2 to 64 replicas with the standard ratio
// of 16 prefix groups per replica and the standard KV per replica.
func RunScale(o Options) (*SweepRecord, error) {
	o.defaults()
	return runPlans(newRunner(&o), func(r *runner) (*plan[*SweepRecord], error) { return planScale(&o, r) })
}

func planScale(o *Options, r *runner) (*plan[*SweepRecord], error) {
	st := StandardPoint(o.Quick)
	n := 6000
	if o.Quick {
		n = 1500
	}
	rec := &SweepRecord{Experiment: "scale", Commit: o.Commit, Seed: o.Seed, Quick: o.Quick, Standard: st,
		Knob: "replicas", Values: ReplicaValues(o.Quick), Requests: n,
		Note: "shared_prefix with 16 groups per replica (the standard ratio), load 0.6 of cold capacity, 6,000 requests whatever the size: " +
			"at 32 and 64 replicas a group gets only 12 and 6 requests, so hit rates there are dominated by each group's first (cold) requests. " +
			"The run shows that the simulator and the policies work at 2-64 replicas; compare policies within a size, not across sizes."}
	var reqs []buildReq
	for _, nr := range rec.Values {
		s := st
		s.Replicas = int(nr)
		p := WorkloadParams(workload.SharedPrefix, n, o.Seed)
		p.Groups = 16 * s.Replicas
		reqs = append(reqs, buildReq{p, s})
	}
	r.note("scale: generating %d workloads of %d requests", len(reqs), n)
	ws, err := r.buildAll(reqs)
	if err != nil {
		return nil, err
	}
	var tasks []*task
	for i, w := range ws {
		for _, pol := range sim.Policies {
			tasks = append(tasks, &task{phase: "scale", label: fmt.Sprintf("replicas=%d %s", reqs[i].st.Replicas, pol), cfg: SimConfig(pol, reqs[i].st, o.Seed), w: w})
		}
	}
	collect := func() error {
		for _, t := range tasks {
			rec.Points = append(rec.Points, point(workload.SharedPrefix, float64(t.cfg.Replicas), t.res))
		}
		return nil
	}
	return &plan[*SweepRecord]{rec: rec, tasks: tasks, collect: collect}, nil
}
