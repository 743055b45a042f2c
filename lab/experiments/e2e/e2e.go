// Package e2e runs llmroute's policies end to end: the real caddy binary
// with the llm_route handler and lb_policy llm, in front of simulated
// replicas (cmd/simreplica) on loopback, driven by a streaming load
// generator with open-loop Poisson arrivals. It records time to first
// token, end-to-end latency, cached tokens (usage.prompt_tokens_details,
// requested with stream_options.include_usage) and incomplete streams, and
// runs the simulator on the same scenario so the two can be compared.
//
// Everything is bounded: two replicas, a fixed number of requests sent in
// a fixed time per policy, a client timeout, loopback addresses only, and
// every process it starts is stopped by its own PID before it returns.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/llmroute/caddy-llmroute/internal/stats"
	"github.com/llmroute/caddy-llmroute/internal/testrig/caddyproc"
	"github.com/llmroute/caddy-llmroute/internal/testrig/netx"
	"github.com/llmroute/caddy-llmroute/internal/testrig/proc"
	"github.com/llmroute/caddy-llmroute/lab/experiments/sim"
	"github.com/llmroute/caddy-llmroute/lab/experiments/suite"
	"github.com/llmroute/caddy-llmroute/lab/experiments/workload"
	"github.com/llmroute/caddy-llmroute/policies"
	"github.com/llmroute/caddy-llmroute/simengine"
)

// Config is one end-to-end run.
type Config struct {
	// Caddy is the caddy binary built by ./xcaddy.sh build.
	Caddy string
	Quick bool
	Seed  uint64
	// Duration is how long arrivals last per run (default 20s, 5s
	// quick).
	Duration time.Duration
	Progress io.Writer
	Commit   string
	// Policies to run (default: DefaultPolicies).
	Policies []Policy
	// Workloads to run (default: shared_prefix, mixed, no_shared_prefix).
	Workloads []string
	// Routers are the numbers of caddy instances to run each policy with
	// (default 1 and 4; 1 and 2 quick). Traffic is split at random over
	// the instances, which share nothing.
	Routers []int
	// Trace is the Mooncake-format trace of the trace workload
	// (TraceScenario), which runs alone.
	Trace string
	// TraceSharedHead opens every request of the trace with the same n
	// 512-token blocks, as production traces whose requests share one
	// system prompt (0: the trace as it is).
	TraceSharedHead int
}

// Policy is one lb_policy llm configuration.
type Policy struct {
	// Name labels the runs.
	Name     string `json:"name"`
	Strategy string `json:"strategy"`
	// Options are extra lines for the lb_policy block.
	Options []string `json:"options,omitempty"`
	// Sim is the simulator's equivalent.
	Sim policies.Options `json:"-"`
	// SharedHomes: the policy uses a homes directory, which the run
	// starts (a Valkey or Redis server) and the simulator models as a
	// shared store (sim.Config.SharedHomes).
	SharedHomes bool `json:"shared_homes,omitempty"`
	// HAProxy runs HAProxy instead of caddy (haproxyPolicy).
	HAProxy bool `json:"haproxy,omitempty"`
}

// directoryPolicy is prefix_load with a homes directory, run when a
// valkey-server or redis-server is installed.
var directoryPolicy = Policy{Name: "prefix_load homes_directory", Strategy: "prefix_load", SharedHomes: true,
	Options: []string{"homes_directory {DIRECTORY} {", "\tkey_prefix {RUN}:", "}"}}

// DefaultPolicies are the module's four strategies with their defaults.
var DefaultPolicies = []Policy{
	{Name: "round_robin", Strategy: "round_robin"},
	{Name: "least_load", Strategy: "least_load"},
	{Name: "prefix_affinity", Strategy: "prefix_affinity"},
	{Name: "prefix_load", Strategy: "prefix_load"},
}

// coldRulePolicies are prefix_load with other cold rules, run by name
// only (-e2e-policies): what a new prefix's placement costs with two
// routers and nothing shared (lab/experiments/results/e2e_cold_rules).
var coldRulePolicies = []Policy{
	{Name: "prefix_load peers none", Strategy: "prefix_load", Options: []string{"peers none"}, Sim: policies.Options{Peers: policies.PeersNone}},
}

// PoliciesNamed returns the policies of DefaultPolicies, the homes
// directory's, HAProxy's and coldRulePolicies with the given names, in that order,
// or an error naming one that is none of them.
func PoliciesNamed(names []string) ([]Policy, error) {
	all := append(append(append([]Policy(nil), DefaultPolicies...), directoryPolicy, haproxyPolicy), coldRulePolicies...)
	var out []Policy
	for _, n := range names {
		i := slices.IndexFunc(all, func(p Policy) bool { return p.Name == n })
		if i < 0 {
			return nil, fmt.Errorf("e2e: no policy %q", n)
		}
		out = append(out, all[i])
	}
	return out, nil
}

// Setup is the scenario, recorded with the results.
type Setup struct {
	Replicas      int     `json:"replicas"`
	KVBlocks      int     `json:"kv_blocks"`
	Cap           int     `json:"max_in_flight"`
	Util          float64 `json:"util_of_cold_capacity"`
	DurationS     float64 `json:"duration_s"`
	ClientTimeout float64 `json:"client_timeout_s"`
	Caddyfile     string  `json:"caddyfile"`
	Note          string  `json:"note"`
}

// Record is e2e.json.
type Record struct {
	Experiment string `json:"experiment"`
	// Command is the llmexp command line that wrote the record, when it
	// was given any flag.
	Command  string   `json:"command,omitempty"`
	Commit   string   `json:"commit"`
	Seed     uint64   `json:"seed"`
	Quick    bool     `json:"quick"`
	Setup    Setup    `json:"setup"`
	Policies []Policy `json:"policies"`
	// Workloads are the scenarios' parameters.
	Workloads map[string]workload.Params `json:"workloads"`
	Runs      []Cell                     `json:"runs"`
	// SimOracle is, for the trace workload, the simulator's oracle on the
	// same scenario per router count: the hit-rate reference the client
	// cannot measure.
	SimOracle map[int]*SimPoint `json:"sim_oracle,omitempty"`
}

// Cell is one policy on one workload through n caddy instances, measured by
// the load generator, and the simulator on the same scenario (same
// workload, replicas, cache size, cap, feedback, metrics and routers).
type Cell struct {
	Workload string        `json:"workload"`
	Routers  int           `json:"routers"`
	Policy   string        `json:"policy"`
	Requests int           `json:"requests"`
	Result   *PolicyResult `json:"result"`
	Sim      *SimPoint     `json:"sim"`
}

// PolicyResult is what the load generator measured for one policy.
type PolicyResult struct {
	Sent            int                `json:"sent"`
	OK              int                `json:"ok"`
	Errors          int                `json:"errors"`
	Incomplete      int                `json:"incomplete"`
	TokenHitRate    float64            `json:"token_hit_rate"`
	TTFT            sim.Dist           `json:"ttft_ms"`
	E2E             sim.Dist           `json:"e2e_ms"`
	ThroughputTokS  float64            `json:"throughput_tok_s"`
	LoadShare       map[string]float64 `json:"load_share"`
	MaxMinLoadRatio float64            `json:"max_min_load_ratio"`
	// With several routers: AgreementKeys leading keys reached at least
	// two of them, and Agreement is the fraction of those whose first
	// request at every such router was answered by one replica (the
	// replica header), the simulator's measure (sim.Agreement) on what the
	// client saw.
	AgreementKeys int      `json:"agreement_keys,omitempty"`
	Agreement     float64  `json:"cold_agreement,omitempty"`
	ErrorSamples  []string `json:"error_samples,omitempty"`
}

// SimPoint is the simulator's figures for the same scenario.
type SimPoint struct {
	TokenHitRate    float64 `json:"token_hit_rate"`
	TTFTP50Ms       float64 `json:"ttft_p50_ms"`
	TTFTP99Ms       float64 `json:"ttft_p99_ms"`
	E2EP50Ms        float64 `json:"e2e_p50_ms"`
	ThroughputTokS  float64 `json:"throughput_tok_s"`
	MaxMinLoadRatio float64 `json:"max_min_load_ratio"`
	Agreement       float64 `json:"cold_agreement,omitempty"`
}

const replicaHeader = "X-LLMRoute-Replica"

const caddyfileTmpl = `{
	admin off
	auto_https off
	log {
		level ERROR
	}
}

http://127.0.0.1:{PORT} {
	bind 127.0.0.1
	llm_route {
		deployment e2e
		replica_header ` + replicaHeader + `
		request_usage
	}
	reverse_proxy {UPSTREAMS} {
		lb_policy llm {
			strategy {STRATEGY}
			max_in_flight {CAP}
			queue_size 4096
			queue_timeout 30s
			engine_metrics /metrics {
				interval 1s
			}{OPTIONS}
		}
		flush_interval -1
		transport http {
			dial_timeout 2s
			response_header_timeout 60s
		}
	}
}
`

// workloadParams is the scaled-down scenario of each workload: 48 groups
// of 1,024-token system prompts (3,072 blocks of working set: three times
// one replica's cache, three quarters of all four), 64-token questions,
// 32-token answers; mixed sends half its requests with a unique 1,024-token
// document instead, no_shared_prefix all of them.
func workloadParams(kind string, seed uint64) (workload.Params, error) {
	p := workload.Params{Kind: kind, Requests: 1, Rate: 1, Groups: 48, SystemTokens: 1024,
		QuestionTokens: 64, OutputTokens: 32, Seed: seed, Parse: policies.ParseConfig{Deployment: "e2e"}}
	switch kind {
	case workload.SharedPrefix, workload.NoSharedPrefix:
	case workload.Mixed:
		p.UniqueShare = 0.5
	default:
		return p, fmt.Errorf("e2e: no scenario for workload %q", kind)
	}
	return p, nil
}

// scenarioSetup is the scenario every run and its simulation share.
func scenarioSetup(d time.Duration) Setup {
	return Setup{Replicas: 4, KVBlocks: 1024, Cap: 64, Util: 0.6, ClientTimeout: 60, DurationS: d.Seconds(),
		Note: "Scaled down for wall-clock runs: 4 replicas of 1,024 KV blocks at engine speed 1; 48 groups x 1,024-token system prompts " +
			"(3,072 blocks of working set: 3x one replica's cache, 0.75x all four), 64-token questions, 32-token answers; mixed: half the requests " +
			"carry a unique 1,024-token document instead; no_shared_prefix: all of them. Several routers: that many caddy processes with the " +
			"same Caddyfile, each request sent to one of them at random."}
}

// scenarioEngine is the engine of the scenario's replicas.
func scenarioEngine(setup Setup) simengine.Config {
	ec := simengine.DefaultConfig()
	ec.NumBlocks, ec.MaxModelLen = setup.KVBlocks, 0
	return ec
}

// Scenario returns the workload kind's requests over d at 0.6 of the
// replicas' cold capacity, and that rate (requests per second).
func Scenario(kind string, seed uint64, d time.Duration) (*workload.Workload, float64, error) {
	setup := scenarioSetup(d)
	ec := scenarioEngine(setup)
	wp, err := workloadParams(kind, seed)
	if err != nil {
		return nil, 0, err
	}
	probe, err := workload.Generate(wp)
	if err != nil {
		return nil, 0, err
	}
	cold := 1 / (probe.MeanPromptTokens*ec.PrefillTokenCost.Seconds() + probe.MeanOutputTokens*(ec.SeqCost.Seconds()+ec.StepFixed.Seconds()/float64(setup.Cap)))
	rate := setup.Util * cold * float64(setup.Replicas)
	wp.Requests = max(int(rate*d.Seconds()), 1)
	w, err := workload.Generate(wp)
	if err != nil {
		return nil, 0, err
	}
	w.ScaleRate(rate)
	return w, rate, nil
}

// simConfig is the simulator's configuration of pol on the scenario with
// n routers.
func simConfig(pol Policy, setup Setup, n int, seed uint64) sim.Config {
	return sim.Config{Policy: pol.Strategy, Replicas: setup.Replicas, Routers: n, Seed: seed, Engine: scenarioEngine(setup), Cap: setup.Cap,
		EngineMetrics: true, SampleInterval: time.Second, Feedback: true, IndexAnswers: true, Options: pol.Sim, SharedHomes: pol.SharedHomes}
}

// Run runs the end-to-end comparison.
func Run(cfg Config) (*Record, error) {
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.Seed == 0 {
		cfg.Seed = 1
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 20 * time.Second
		if cfg.Quick {
			cfg.Duration = 5 * time.Second
		}
	}
	if len(cfg.Policies) == 0 {
		cfg.Policies = DefaultPolicies
		if storeBinary() != "" {
			cfg.Policies = append(append([]Policy(nil), DefaultPolicies...), directoryPolicy)
		}
	}
	if len(cfg.Workloads) == 0 {
		cfg.Workloads = []string{workload.SharedPrefix, workload.Mixed, workload.NoSharedPrefix}
	}
	// The trace's goals compare with HAProxy's bounded body hash.
	if slices.Contains(cfg.Workloads, workload.Trace) && haproxyBinary() != "" && !slices.ContainsFunc(cfg.Policies, func(p Policy) bool { return p.HAProxy }) {
		cfg.Policies = append(slices.Clip(cfg.Policies), haproxyPolicy)
	}
	if len(cfg.Routers) == 0 {
		cfg.Routers = []int{1, 4}
		if cfg.Quick {
			cfg.Routers = []int{1, 2}
		}
	}
	caddyBin, err := filepath.Abs(cfg.Caddy)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(caddyBin); err != nil {
		return nil, fmt.Errorf("e2e: caddy binary: %w (build it with ./xcaddy.sh build)", err)
	}
	root, err := caddyproc.RepoRoot()
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "llmexp-e2e-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	logf := func(format string, args ...any) { fmt.Fprintf(cfg.Progress, "e2e: "+format+"\n", args...) }

	logf("building simreplica")
	simBin := filepath.Join(tmp, "simreplica")
	build := exec.Command("go", "build", "-o", simBin, "./cmd/simreplica")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("e2e: go build ./cmd/simreplica: %v\n%s", err, out)
	}

	setup := scenarioSetup(cfg.Duration)
	var traced *workload.Workload
	var traceRate float64
	if slices.Contains(cfg.Workloads, workload.Trace) {
		if len(cfg.Workloads) > 1 {
			return nil, fmt.Errorf("e2e: the trace workload runs alone (its replicas' caches are sized for it)")
		}
		w, rate, kv, err := TraceScenario(cfg.Trace, cfg.Seed, cfg.Duration, setup, cfg.TraceSharedHead)
		if err != nil {
			return nil, err
		}
		traced, traceRate, setup = w, rate, traceSetup(cfg.Duration, kv, filepath.Base(cfg.Trace), cfg.TraceSharedHead)
	}
	rec := &Record{Experiment: "e2e", Commit: cfg.Commit, Seed: cfg.Seed, Quick: cfg.Quick, Setup: setup,
		Policies: cfg.Policies, Workloads: map[string]workload.Params{}}

	var procs []*proc.Proc
	defer func() {
		for _, p := range procs {
			p.Stop(stopGrace)
		}
	}()
	directory := "" // the homes directory's URL, once started
	var upstreams []string
	for i := range setup.Replicas {
		addr, err := netx.FreeAddr()
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(simBin, "-addr", addr, "-name", fmt.Sprintf("r%d", i), "-blocks", fmt.Sprint(setup.KVBlocks), "-quiet")
		cmd.Stdout, cmd.Stderr = cfg.Progress, cfg.Progress
		p, err := proc.Start(cmd, "")
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
		upstreams = append(upstreams, addr)
	}
	replicas := procs[:len(upstreams):len(upstreams)]
	for i, a := range upstreams {
		if err := waitHTTP("http://"+a+"/health", 10*time.Second, replicas[i]); err != nil {
			return nil, fmt.Errorf("e2e: replica %s: %w", a, err)
		}
	}
	for _, pol := range cfg.Policies {
		if !pol.SharedHomes || directory != "" {
			continue
		}
		bin := storeBinary()
		if bin == "" {
			return nil, fmt.Errorf("e2e: policy %q needs valkey-server or redis-server on PATH", pol.Name)
		}
		addr, err := netx.FreeAddr()
		if err != nil {
			return nil, err
		}
		host, port, _ := net.SplitHostPort(addr)
		cmd := exec.Command(bin, "--port", port, "--bind", host, "--save", "", "--appendonly", "no")
		cmd.Stdout, cmd.Stderr = io.Discard, cfg.Progress
		p, err := proc.Start(cmd, "")
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
		if err := waitTCP(addr, 10*time.Second, p); err != nil {
			return nil, fmt.Errorf("e2e: %s: %w", bin, err)
		}
		directory = "redis://" + addr
		logf("homes directory at %s (%s)", directory, filepath.Base(bin))
	}

	runs := 0
	for _, kind := range cfg.Workloads {
		w, rate := traced, traceRate
		if w == nil {
			if w, rate, err = Scenario(kind, cfg.Seed, cfg.Duration); err != nil {
				return nil, err
			}
		}
		rec.Workloads[kind] = w.Params
		arrivals := make([]Arrival, len(w.Sessions))
		for i := range w.Sessions {
			req, err := w.Request(i, 0)
			if err != nil {
				return nil, err
			}
			arrivals[i] = Arrival{At: w.Sessions[i].Arrival, Body: req.Body(w.Params.Model), OutputTokens: req.OutputTokens, Leading: req.Keys.Leading}
		}
		logf("%s: %d requests over %s per run at %.1f req/s", kind, len(arrivals), cfg.Duration, rate)
		for _, n := range cfg.Routers {
			for _, pol := range cfg.Policies {
				runs++
				run, err := runOne(cfg, rec, tmp, caddyBin, upstreams, replicas, kind, n, pol, arrivals, w, logf, &procs,
					strings.NewReplacer("{DIRECTORY}", directory, "{RUN}", fmt.Sprintf("run%d", runs)))
				if err != nil {
					return nil, err
				}
				rec.Runs = append(rec.Runs, *run)
			}
			if kind == workload.Trace {
				sr, err := sim.Run(simConfig(Policy{Name: "oracle", Strategy: "oracle"}, rec.Setup, n, cfg.Seed), w)
				if err != nil {
					return nil, err
				}
				if rec.SimOracle == nil {
					rec.SimOracle = map[int]*SimPoint{}
				}
				rec.SimOracle[n] = simPoint(sr)
			}
		}
	}
	return rec, nil
}

// storeBinary returns a Valkey or Redis server on PATH, or "".
func storeBinary() string {
	for _, b := range []string{"valkey-server", "redis-server"} {
		if p, err := exec.LookPath(b); err == nil {
			return p
		}
	}
	return ""
}

// runOne runs pol through n caddy instances on one workload's arrivals,
// from cold replica caches, and the simulator on the same scenario.
func runOne(cfg Config, rec *Record, tmp, caddyBin string, upstreams []string, replicas []*proc.Proc, kind string, n int, pol Policy,
	arrivals []Arrival, w *workload.Workload, logf func(string, ...any), procs *[]*proc.Proc, vars *strings.Replacer) (*Cell, error) {
	for i, a := range upstreams {
		// Start each run from cold caches and zeroed counters.
		if err := post("http://"+a+"/sim/restart", `{"down_ms":0}`); err != nil {
			return nil, err
		}
		if err := waitHTTP("http://"+a+"/health", 5*time.Second, replicas[i]); err != nil {
			return nil, err
		}
	}
	var opts strings.Builder
	for _, o := range pol.Options {
		opts.WriteString("\n\t\t\t" + vars.Replace(o))
	}
	var urls []string
	var started []*proc.Proc
	stop := func() {
		for _, cp := range started {
			cp.Stop(stopGrace)
		}
		*procs = (*procs)[:len(*procs)-len(started)]
	}
	for k := range n {
		if pol.HAProxy {
			hp, url, err := startHAProxy(tmp, k, upstreams, rec.Setup.Cap, cfg.Progress)
			if err != nil {
				stop()
				return nil, err
			}
			started = append(started, hp)
			*procs = append(*procs, hp)
			urls = append(urls, url)
			continue
		}
		port, err := netx.FreeAddr()
		if err != nil {
			stop()
			return nil, err
		}
		_, p, _ := net.SplitHostPort(port)
		cf := strings.NewReplacer("{PORT}", p, "{UPSTREAMS}", strings.Join(upstreams, " "), "{STRATEGY}", pol.Strategy,
			"{CAP}", fmt.Sprint(rec.Setup.Cap), "{OPTIONS}", opts.String()).Replace(caddyfileTmpl)
		masked := cf
		for i, u := range upstreams {
			masked = strings.ReplaceAll(masked, u, fmt.Sprintf("REPLICA_%c", 'A'+i))
		}
		rec.Setup.Caddyfile = strings.ReplaceAll(masked, p, "PORT")
		cfPath := filepath.Join(tmp, fmt.Sprintf("Caddyfile.%d", k))
		if err := os.WriteFile(cfPath, []byte(cf), 0o644); err != nil {
			stop()
			return nil, err
		}
		cmd := exec.Command(caddyBin, "run", "--config", cfPath, "--adapter", "caddyfile")
		cmd.Stdout, cmd.Stderr = io.Discard, cfg.Progress
		cp, err := proc.Start(cmd, "")
		if err != nil {
			stop()
			return nil, err
		}
		started = append(started, cp)
		*procs = append(*procs, cp)
		if err := waitTCP("127.0.0.1:"+p, 15*time.Second, cp); err != nil {
			stop()
			return nil, fmt.Errorf("e2e: caddy (%s) did not listen: %w", pol.Name, err)
		}
		urls = append(urls, "http://127.0.0.1:"+p+"/v1/chat/completions")
	}
	// Each request goes to one instance at random (seeded: every policy
	// sees the same split).
	split := rand.New(rand.NewPCG(cfg.Seed, uint64(n)))
	sent := make([]Arrival, len(arrivals))
	for i, a := range arrivals {
		a.Router = split.IntN(n)
		a.URL = urls[a.Router]
		sent[i] = a
	}
	logf("%s, %d router(s), %s: sending", kind, n, pol.Name)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Duration+10*time.Second)
	t0 := time.Now()
	outs := Generate(ctx, "", sent, time.Duration(rec.Setup.ClientTimeout)*time.Second, replicaHeader)
	cancel()
	res := summarize(outs, time.Since(t0))
	if n > 1 {
		res.AgreementKeys, res.Agreement = firstAgreement(sent, outs, n)
	}
	logf("%s, %d router(s), %s: %d ok, %d errors, %d incomplete, hit %.3f, ttft p50 %.1f p99 %.1f ms", kind, n, pol.Name, res.OK, res.Errors,
		res.Incomplete, res.TokenHitRate, res.TTFT.P50, res.TTFT.P99)
	stop()

	sr, err := sim.Run(simConfig(pol, rec.Setup, n, cfg.Seed), w)
	if err != nil {
		return nil, err
	}
	return &Cell{Workload: kind, Routers: n, Policy: pol.Name, Requests: len(arrivals), Result: res,
		Sim: simPoint(sr)}, nil
}

// simPoint is what the record keeps of a simulation.
func simPoint(sr *sim.Result) *SimPoint {
	return &SimPoint{TokenHitRate: sr.TokenHitRate, TTFTP50Ms: sr.TTFT.P50, TTFTP99Ms: sr.TTFT.P99, E2EP50Ms: sr.E2E.P50,
		ThroughputTokS: sr.ThroughputTokS, MaxMinLoadRatio: sr.MaxMinLoadRatio, Agreement: sr.Agreement}
}

// firstAgreement is sim.Agreement over what the client saw: per leading
// key, the replica that answered each router's first request of it (in
// arrival order; requests without a replica header are left out). It
// returns the keys that reached two routers or more and the fraction of
// them every router sent to one replica.
func firstAgreement(sent []Arrival, outs []Outcome, routers int) (int, float64) {
	replica := map[string]int{}
	places := map[uint64][]int{}
	var order []uint64
	for i, a := range sent {
		o := outs[i]
		if a.Leading == 0 || o.Replica == "" {
			continue
		}
		r, ok := replica[o.Replica]
		if !ok {
			r = len(replica)
			replica[o.Replica] = r
		}
		p := places[a.Leading]
		if p == nil {
			p = slices.Repeat([]int{-1}, routers)
			places[a.Leading] = p
			order = append(order, a.Leading)
		}
		if p[a.Router] < 0 {
			p[a.Router] = r
		}
	}
	all := make([][]int, 0, len(order))
	for _, k := range order {
		all = append(all, places[k])
	}
	keys, agreed := sim.Agreement(all)
	if keys == 0 {
		return 0, 0
	}
	return keys, float64(agreed) / float64(keys)
}

// summarize turns outcomes into a PolicyResult.
func summarize(outs []Outcome, wall time.Duration) *PolicyResult {
	r := &PolicyResult{Sent: len(outs), LoadShare: map[string]float64{}}
	var ttft, lat []float64
	var prompt, cached, output int
	perReplica := map[string]int{}
	for _, o := range outs {
		switch {
		case o.Err != "":
			r.Errors++
			if len(r.ErrorSamples) < 5 {
				r.ErrorSamples = append(r.ErrorSamples, o.Err)
			}
			continue
		case o.Incomplete:
			r.Incomplete++
			continue
		}
		r.OK++
		ttft = append(ttft, float64(o.TTFT)/1e6)
		lat = append(lat, float64(o.Latency)/1e6)
		prompt += o.PromptTokens
		cached += o.CachedTokens
		output += o.OutputTokens
		perReplica[o.Replica]++
	}
	if prompt > 0 {
		r.TokenHitRate = float64(cached) / float64(prompt)
	}
	r.TTFT, r.E2E = dist(ttft), dist(lat)
	if wall > 0 {
		r.ThroughputTokS = float64(output) / wall.Seconds()
	}
	mx, mn := 0, -1
	for k, n := range perReplica {
		r.LoadShare[k] = float64(n) / float64(max(r.OK, 1))
		mx = max(mx, n)
		if mn < 0 || n < mn {
			mn = n
		}
	}
	if mx > 0 {
		r.MaxMinLoadRatio = float64(mx) / float64(max(mn, 1))
	}
	return r
}

func dist(xs []float64) sim.Dist {
	d := sim.Dist{N: len(xs)}
	if len(xs) == 0 {
		return d
	}
	sort.Float64s(xs)
	s := 0.0
	for _, x := range xs {
		s += x
	}
	d.Mean = s / float64(len(xs))
	d.P50, d.P90, d.P99, d.Max = stats.Percentile(xs, .50), stats.Percentile(xs, .90), stats.Percentile(xs, .99), xs[len(xs)-1]
	return d
}

// Write writes e2e.json and e2e.md.
func Write(jsonPath, mdPath string, rec *Record) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(jsonPath), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(jsonPath, append(b, '\n'), 0o644); err != nil {
		return err
	}
	var m strings.Builder
	cmd := rec.Command
	if cmd == "" {
		cmd = "e2e"
	}
	fmt.Fprintf(&m, "# End-to-end runs: caddy + simulated replicas\n\nGenerated by `go -C lab run ./cmd/llmexp %s`. Commit `%s`, seed %d%s. %s "+
		"Open-loop Poisson arrivals over %.0f s per run at %.1f of cold capacity, streaming with include_usage; each run starts from cold replica caches. "+
		"Figures in parentheses: the simulator on the same scenario.\n",
		cmd, rec.Commit, rec.Seed, map[bool]string{true: " (quick)", false: ""}[rec.Quick], rec.Setup.Note, rec.Setup.DurationS, rec.Setup.Util)
	var kinds []string
	seen := map[string]bool{}
	for _, r := range rec.Runs {
		if !seen[r.Workload] {
			seen[r.Workload] = true
			kinds = append(kinds, r.Workload)
		}
	}
	for _, kind := range kinds {
		fmt.Fprintf(&m, "\n## %s\n\n", kind)
		m.WriteString("| routers | policy | requests | ok | errors | incomplete | hit rate (sim) | TTFT p50 ms (sim) | TTFT p99 ms (sim) | e2e p50 ms (sim) | max/min load (sim) | agreement on new prefixes (sim) |\n")
		m.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range rec.Runs {
			if r.Workload != kind {
				continue
			}
			p, s := r.Result, r.Sim
			agree := "-"
			if p.AgreementKeys > 0 {
				agree = fmt.Sprintf("%.3f (%.3f) of %d", p.Agreement, s.Agreement, p.AgreementKeys)
			}
			fmt.Fprintf(&m, "| %d | %s | %d | %d | %d | %d | %.3f (%.3f) | %.1f (%.1f) | %.1f (%.1f) | %.0f (%.0f) | %.2f (%.2f) | %s |\n",
				r.Routers, r.Policy, r.Requests, p.OK, p.Errors, p.Incomplete, p.TokenHitRate, s.TokenHitRate, p.TTFT.P50, s.TTFTP50Ms,
				p.TTFT.P99, s.TTFTP99Ms, p.E2E.P50, s.E2EP50Ms, p.MaxMinLoadRatio, s.MaxMinLoadRatio, agree)
		}
	}
	m.WriteString(goalsMarkdown(rec))
	m.WriteString(traceGoalsMarkdown(rec))
	return os.WriteFile(mdPath, []byte(m.String()), 0o644)
}

// goalPolicies are the policies whose runs Goals checks: prefix_load as
// shipped, told it is alone, and with the homes directory.
var goalPolicies = []string{"prefix_load", "prefix_load peers none", directoryPolicy.Name}

// Goals checks issue 18's goals (suite.GoalsOf, the simulator suite's own
// rule) on what the client saw, per workload and router count, for the
// goalPolicies that ran: each
// against the same workload and router count's round_robin, least_load
// and prefix_affinity (the e2e has no oracle), and with several routers
// against its own hit rate with one.
func Goals(rec *Record) map[string][]suite.Goal {
	points := make([]suite.SweepPoint, 0, len(rec.Runs))
	for _, r := range rec.Runs {
		if r.Workload == workload.Trace {
			continue // issue 39's goals (TraceGoals)
		}
		p := r.Result
		points = append(points, suite.SweepPoint{Workload: r.Workload, Policy: r.Policy, Routers: r.Routers, TokenHitRate: p.TokenHitRate,
			TTFTP50Ms: p.TTFT.P50, TTFTP90Ms: p.TTFT.P90, TTFTP99Ms: p.TTFT.P99, Agreement: p.Agreement, AgreementKeys: p.AgreementKeys})
	}
	figs, cells := suite.CellFigures(points, func(p suite.SweepPoint) suite.GoalCell {
		return suite.GoalCell{Workload: p.Workload, Routers: p.Routers}
	})
	out := map[string][]suite.Goal{}
	for _, c := range cells {
		f := figs[c]
		if _, ok := f["round_robin"]; !ok {
			continue
		}
		for _, name := range goalPolicies {
			pt, ok := f[name]
			if !ok {
				continue
			}
			one, hasOne := figs[suite.GoalCell{Workload: c.Workload, Routers: 1}][name]
			out[name] = append(out[name], suite.GoalsOf(c.Workload, c.Routers, pt, f, one, hasOne)...)
		}
	}
	return out
}

// goalsMarkdown is the record's section of goal checks.
func goalsMarkdown(rec *Record) string {
	goals := Goals(rec)
	var b strings.Builder
	for _, name := range goalPolicies {
		checks, missed := suite.Tally(goals[name])
		if checks == 0 {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("\n## Issue 18's goals\n\nThe goals of the simulator's goals.md on what the client saw (suite.GoalsOf), per workload and router count: " +
				"TTFT p99 against the better of round_robin and least_load, p50 against the best policy run, hit rate against prefix_affinity's (no oracle end to end), " +
				"and with several routers agreement on new prefixes and the hit rate against the same policy's with one router.\n")
		}
		fmt.Fprintf(&b, "\n`%s`: %d checks, %d missed.\n", name, checks, len(missed))
		if len(missed) > 0 {
			b.WriteString("\n")
		}
		for _, g := range missed {
			fmt.Fprintf(&b, "- %s, %d routers: %s %.3f (%s); %s\n", g.Workload, g.Routers, g.Name, g.Value, g.Need, g.Detail)
		}
	}
	return b.String()
}

// waitHTTP is netx.WaitHTTP bounded by d, for a process this package
// started.
func waitHTTP(url string, d time.Duration, p *proc.Proc) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return netx.WaitHTTP(ctx, nil, url, p.Done())
}

// waitTCP is netx.WaitTCP bounded by d, for a process this package
// started.
func waitTCP(addr string, d time.Duration, p *proc.Proc) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return netx.WaitTCP(ctx, addr, p.Done())
}

func post(url, body string) error {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: status %d", url, resp.StatusCode)
	}
	return nil
}

// stopGrace is how long a process this package started gets between
// SIGTERM and SIGKILL.
const stopGrace = 5 * time.Second
