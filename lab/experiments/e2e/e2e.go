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
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/llmroute/caddy-llmroute/internal/caddyproc"
	"github.com/llmroute/caddy-llmroute/internal/netx"
	"github.com/llmroute/caddy-llmroute/internal/proc"
	"github.com/llmroute/caddy-llmroute/internal/stats"
	"github.com/llmroute/caddy-llmroute/lab/experiments/sim"
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
	// Duration is how long arrivals last per policy (default 12s, 5s
	// quick).
	Duration time.Duration
	Progress io.Writer
	Commit   string
	// Policies to run (default: the module's four strategies).
	Policies []string
}

// Setup is the scenario, recorded with the results.
type Setup struct {
	Replicas      int             `json:"replicas"`
	KVBlocks      int             `json:"kv_blocks"`
	Cap           int             `json:"max_in_flight"`
	Util          float64         `json:"util_of_cold_capacity"`
	Workload      workload.Params `json:"workload"`
	Requests      int             `json:"requests"`
	DurationS     float64         `json:"duration_s"`
	ClientTimeout float64         `json:"client_timeout_s"`
	Caddyfile     string          `json:"caddyfile"`
	Note          string          `json:"note"`
}

// Record is e2e.json.
type Record struct {
	Experiment string                   `json:"experiment"`
	Commit     string                   `json:"commit"`
	Seed       uint64                   `json:"seed"`
	Quick      bool                     `json:"quick"`
	Setup      Setup                    `json:"setup"`
	Policies   map[string]*PolicyResult `json:"policies"`
	// Sim is the simulator on the same scenario (same workload, replicas,
	// cache size, cap, feedback and metrics), for comparison.
	Sim map[string]*SimPoint `json:"sim"`
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
	ErrorSamples    []string           `json:"error_samples,omitempty"`
}

// SimPoint is the simulator's figures for the same scenario.
type SimPoint struct {
	TokenHitRate    float64 `json:"token_hit_rate"`
	TTFTP50Ms       float64 `json:"ttft_p50_ms"`
	TTFTP99Ms       float64 `json:"ttft_p99_ms"`
	E2EP50Ms        float64 `json:"e2e_p50_ms"`
	ThroughputTokS  float64 `json:"throughput_tok_s"`
	MaxMinLoadRatio float64 `json:"max_min_load_ratio"`
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
			}
		}
		flush_interval -1
		transport http {
			dial_timeout 2s
			response_header_timeout 60s
		}
	}
}
`

// Run runs the end-to-end comparison.
func Run(cfg Config) (*Record, error) {
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.Seed == 0 {
		cfg.Seed = 1
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 12 * time.Second
		if cfg.Quick {
			cfg.Duration = 5 * time.Second
		}
	}
	if len(cfg.Policies) == 0 {
		cfg.Policies = policies.StrategyNames
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

	// The scenario: a scaled-down shared prefix, two replicas whose caches
	// each hold about half of the prefixes' working set plus the running
	// requests' blocks.
	setup := Setup{Replicas: 2, KVBlocks: 1024, Cap: 64, Util: 0.6, ClientTimeout: 60,
		Note: "shared_prefix scaled down for wall-clock runs: 24 groups x 1024-token system prompts (1,536 blocks of working set: 1.5x one replica's cache, 0.75x both), 64-token questions, 32-token answers; 2 replicas of 1,024 KV blocks at engine speed 1."}
	wp := workload.Params{Kind: workload.SharedPrefix, Requests: 1, Rate: 1, Groups: 24, SystemTokens: 1024,
		QuestionTokens: 64, OutputTokens: 32, Seed: cfg.Seed, Parse: policies.ParseConfig{Deployment: "e2e"}}
	ec := simengine.DefaultConfig()
	ec.NumBlocks, ec.MaxModelLen = setup.KVBlocks, 0
	probe, err := workload.Generate(wp)
	if err != nil {
		return nil, err
	}
	cold := 1 / (probe.MeanPromptTokens*ec.PrefillTokenCost.Seconds() + probe.MeanOutputTokens*(ec.SeqCost.Seconds()+ec.StepFixed.Seconds()/float64(setup.Cap)))
	rate := setup.Util * cold * float64(setup.Replicas)
	wp.Requests = max(int(rate*cfg.Duration.Seconds()), 1)
	w, err := workload.Generate(wp)
	if err != nil {
		return nil, err
	}
	w.ScaleRate(rate)
	setup.Workload, setup.Requests, setup.DurationS = w.Params, wp.Requests, cfg.Duration.Seconds()
	arrivals := make([]Arrival, len(w.Sessions))
	for i := range w.Sessions {
		req, err := w.Request(i, 0)
		if err != nil {
			return nil, err
		}
		arrivals[i] = Arrival{At: w.Sessions[i].Arrival, Body: req.Body(w.Params.Model), OutputTokens: req.OutputTokens}
	}

	var procs []*proc.Proc
	defer func() {
		for _, p := range procs {
			p.Stop(stopGrace)
		}
	}()
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
	for i, a := range upstreams {
		if err := waitHTTP("http://"+a+"/health", 10*time.Second, procs[i]); err != nil {
			return nil, fmt.Errorf("e2e: replica %s: %w", a, err)
		}
	}
	logf("replicas up at %s; %d requests over %s per policy at %.1f req/s", strings.Join(upstreams, ", "), len(arrivals), cfg.Duration, rate)

	rec := &Record{Experiment: "e2e", Commit: cfg.Commit, Seed: cfg.Seed, Quick: cfg.Quick, Setup: setup,
		Policies: map[string]*PolicyResult{}, Sim: map[string]*SimPoint{}}
	for _, pol := range cfg.Policies {
		for i, a := range upstreams {
			// Start each policy from cold caches and zeroed counters.
			if err := post("http://"+a+"/sim/restart", `{"down_ms":0}`); err != nil {
				return nil, err
			}
			if err := waitHTTP("http://"+a+"/health", 5*time.Second, procs[i]); err != nil {
				return nil, err
			}
		}
		port, err := netx.FreeAddr()
		if err != nil {
			return nil, err
		}
		_, p, _ := net.SplitHostPort(port)
		cf := strings.NewReplacer("{PORT}", p, "{UPSTREAMS}", strings.Join(upstreams, " "), "{STRATEGY}", pol,
			"{CAP}", fmt.Sprint(setup.Cap)).Replace(caddyfileTmpl)
		rec.Setup.Caddyfile = strings.ReplaceAll(strings.ReplaceAll(cf, upstreams[0], "REPLICA_A"), upstreams[1], "REPLICA_B")
		cfPath := filepath.Join(tmp, "Caddyfile."+pol)
		if err := os.WriteFile(cfPath, []byte(cf), 0o644); err != nil {
			return nil, err
		}
		cmd := exec.Command(caddyBin, "run", "--config", cfPath, "--adapter", "caddyfile")
		cmd.Stdout, cmd.Stderr = io.Discard, cfg.Progress
		cp, err := proc.Start(cmd, "")
		if err != nil {
			return nil, err
		}
		procs = append(procs, cp)
		url := "http://127.0.0.1:" + p + "/v1/chat/completions"
		if err := waitTCP("127.0.0.1:"+p, 15*time.Second, cp); err != nil {
			return nil, fmt.Errorf("e2e: caddy (%s) did not listen: %w", pol, err)
		}
		logf("%s: sending", pol)
		ctx, cancel := context.WithTimeout(context.Background(), cfg.Duration+10*time.Second)
		t0 := time.Now()
		outs := Generate(ctx, url, arrivals, time.Duration(setup.ClientTimeout)*time.Second, replicaHeader)
		cancel()
		res := summarize(outs, time.Since(t0))
		rec.Policies[pol] = res
		logf("%s: %d ok, %d errors, %d incomplete, hit %.3f, ttft p50 %.1f p99 %.1f ms", pol, res.OK, res.Errors, res.Incomplete,
			res.TokenHitRate, res.TTFT.P50, res.TTFT.P99)
		cp.Stop(stopGrace)
		procs = procs[:len(procs)-1]

		// The simulator on the same scenario.
		sc := sim.Config{Policy: pol, Replicas: setup.Replicas, Routers: 1, Seed: cfg.Seed, Engine: ec, Cap: setup.Cap,
			EngineMetrics: true, SampleInterval: time.Second, Feedback: true}
		sr, err := sim.Run(sc, w)
		if err != nil {
			return nil, err
		}
		rec.Sim[pol] = &SimPoint{TokenHitRate: sr.TokenHitRate, TTFTP50Ms: sr.TTFT.P50, TTFTP99Ms: sr.TTFT.P99,
			E2EP50Ms: sr.E2E.P50, ThroughputTokS: sr.ThroughputTokS, MaxMinLoadRatio: sr.MaxMinLoadRatio}
	}
	return rec, nil
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
	fmt.Fprintf(&m, "# End-to-end run: caddy + simulated replicas\n\nGenerated by `go -C lab run ./cmd/llmexp e2e`. Commit `%s`, seed %d%s. %s "+
		"%d requests per policy, open-loop Poisson arrivals over %.0f s, streaming with include_usage.\n\n",
		rec.Commit, rec.Seed, map[bool]string{true: " (quick)", false: ""}[rec.Quick], rec.Setup.Note, rec.Setup.Requests, rec.Setup.DurationS)
	m.WriteString("| policy | ok | errors | incomplete | hit rate (sim) | TTFT p50 ms (sim) | TTFT p99 ms (sim) | e2e p50 ms (sim) | max/min load (sim) |\n")
	m.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range policies.StrategyNames {
		r, s := rec.Policies[p], rec.Sim[p]
		if r == nil || s == nil {
			continue
		}
		fmt.Fprintf(&m, "| %s | %d | %d | %d | %.3f (%.3f) | %.1f (%.1f) | %.1f (%.1f) | %.0f (%.0f) | %.2f (%.2f) |\n",
			p, r.OK, r.Errors, r.Incomplete, r.TokenHitRate, s.TokenHitRate, r.TTFT.P50, s.TTFTP50Ms, r.TTFT.P99, s.TTFTP99Ms,
			r.E2E.P50, s.E2EP50Ms, r.MaxMinLoadRatio, s.MaxMinLoadRatio)
	}
	return os.WriteFile(mdPath, []byte(m.String()), 0o644)
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
