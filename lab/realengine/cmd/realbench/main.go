// Command realbench runs llmroute's real-engine cache measurement: two
// llama.cpp replicas (realengine/server.mjs over node-llama-cpp, CPU, one
// thread each) behind Caddy with llmroute, the shared_prefix,
// no_shared_prefix and multi_turn workloads under each routing strategy, on
// each engine configuration in turn (the byte-vocabulary model with a plain
// template, and the model with Qwen3's BPE tokenizer and chat template), and
// the results in JSON with plots and per-seed tables. realengine/run.sh
// prepares everything and calls it.
//
// Everything listens on 127.0.0.1 only, and every process it starts is
// stopped before it returns, also on SIGINT/SIGTERM.
package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/llmroute/caddy-llmroute/caddymodule/stateapi"
	"github.com/llmroute/caddy-llmroute/internal/testrig/netx"
	"github.com/llmroute/caddy-llmroute/internal/testrig/proc"
	"github.com/llmroute/caddy-llmroute/lab/realengine/client"
	"github.com/llmroute/caddy-llmroute/policies"
)

// engineSpec is one engine configuration: a model and the template its
// replicas render prompts with (server.mjs --template).
type engineSpec struct {
	Name     string `json:"name"`
	Model    string `json:"model"`
	Template string `json:"template"`
}

// parseEngines reads -engines: name=model.gguf:template, comma-separated.
func parseEngines(s string) ([]engineSpec, error) {
	var out []engineSpec
	seen := map[string]bool{}
	for _, f := range split(s) {
		name, rest, ok := strings.Cut(f, "=")
		i := strings.LastIndex(rest, ":")
		if !ok || name == "" || i <= 0 || seen[name] {
			return nil, fmt.Errorf("bad -engines entry %q (want name=model.gguf:plain|model, names unique)", f)
		}
		e := engineSpec{Name: name, Model: rest[:i], Template: rest[i+1:]}
		if e.Template != "plain" && e.Template != "model" {
			return nil, fmt.Errorf("-engines %s: template %q is neither plain nor model", name, e.Template)
		}
		seen[name] = true
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, errors.New("-engines is empty")
	}
	return out, nil
}

type config struct {
	Engines     []engineSpec `json:"engines"`
	TokCheck    string       `json:"-"`
	Node        string       `json:"-"`
	Server      string       `json:"-"`
	Caddy       string       `json:"-"`
	OutDir      string       `json:"-"`
	Results     string       `json:"-"`
	PlotDir     string       `json:"-"`
	Policies    []string     `json:"policies"`
	Workloads   []string     `json:"workloads"`
	Groups      int          `json:"groups"`
	PerGroup    int          `json:"prompts_per_group"`
	SystemChars int          `json:"system_prompt_chars"`
	Mode        string       `json:"mode"`
	Concurrency int          `json:"concurrency,omitempty"`
	Rate        float64      `json:"arrival_rate_per_s,omitempty"`
	MaxTokens   int          `json:"max_tokens"`
	// MultiTurnMaxTokens is max_tokens in multi_turn: long enough that
	// the answers repeated in the next turn span engine blocks.
	MultiTurnMaxTokens int `json:"multi_turn_max_tokens"`
	Slots              int `json:"slots_per_replica"`
	Ctx                int `json:"tokens_per_slot"`
	Threads            int `json:"threads_per_replica"`
	BlockTokens        int `json:"reuse_block_tokens"`
	MaxInFlight        int `json:"router_max_in_flight"`
	// PolicyOptions are extra lines of the lb_policy llm block
	// (-policy-options, ';'-separated), e.g. "peers none".
	PolicyOptions string        `json:"policy_options,omitempty"`
	Seed          uint64        `json:"seed"`
	Repeat        int           `json:"repeat"`
	ReplicaPorts  []int         `json:"replica_ports"`
	RunTimeout    time.Duration `json:"-"`
	RunTimeoutS   float64       `json:"run_timeout_s"`
}

func main() {
	var c config
	var policies, workloads string
	var plotOnly bool
	var ports, engines string
	flag.StringVar(&engines, "engines", "byte=realengine/out/tiny.gguf:plain,bpe=realengine/out/qwen3.gguf:model",
		"engine configurations, name=model.gguf:template (plain: the byte model's own template; model: the GGUF's chat template), run in turn within each repetition")
	flag.StringVar(&c.TokCheck, "tokcheck", "experiments/results/realengine/tokenization.json", "tokcheck's record, copied into the results when present")
	flag.StringVar(&c.Node, "node", "node", "node binary")
	flag.StringVar(&c.Server, "server", "realengine/server.mjs", "replica server script")
	flag.StringVar(&c.Caddy, "caddy", "realengine/out/caddy", "caddy binary with llmroute")
	flag.StringVar(&c.OutDir, "out", "realengine/out", "scratch directory (logs, per-request records)")
	flag.StringVar(&c.Results, "results", "experiments/results/realengine.json", "results file")
	flag.StringVar(&c.PlotDir, "plots", "experiments/results/realengine", "plot directory")
	flag.StringVar(&policies, "policies", "round_robin,prefix_affinity,least_load,prefix_load", "strategies")
	flag.StringVar(&workloads, "workloads", client.SharedPrefix+","+client.NoSharedPrefix+","+client.MultiTurn, "workloads")
	flag.IntVar(&c.Groups, "groups", 6, "shared system prompts (multi_turn: conversations)")
	flag.IntVar(&c.PerGroup, "per-group", 6, "requests per group (multi_turn: turns per conversation)")
	flag.IntVar(&c.SystemChars, "system-chars", 1800, "system prompt length in characters (≈ tokens with the byte vocabulary; Qwen3's BPE packs about 5.2 a token: 9000 gives it as many tokens)")
	flag.StringVar(&c.Mode, "mode", "closed", "closed (a fixed number of clients, each sending its next request when the last ends) or poisson (open loop)")
	flag.IntVar(&c.Concurrency, "concurrency", 2, "clients in closed mode")
	flag.Float64Var(&c.Rate, "rate", 1.0, "arrival rate in poisson mode, requests/s")
	flag.IntVar(&c.MaxTokens, "max-tokens", 8, "tokens generated per request")
	flag.IntVar(&c.MultiTurnMaxTokens, "multi-turn-max-tokens", 24, "tokens generated per multi_turn request")
	flag.IntVar(&c.Slots, "slots", 4, "context sequences (slots) per replica")
	flag.IntVar(&c.Ctx, "ctx", 4096, "tokens per slot")
	flag.IntVar(&c.Threads, "threads", 1, "threads per replica")
	flag.IntVar(&c.BlockTokens, "block-tokens", 16, "prefix reuse granularity in tokens")
	flag.IntVar(&c.MaxInFlight, "max-in-flight", 2, "router max_in_flight per replica")
	flag.StringVar(&c.PolicyOptions, "policy-options", "", "extra lines of the lb_policy llm block, separated by ';' (e.g. \"peers none\")")
	flag.Uint64Var(&c.Seed, "seed", 1, "workload seed")
	flag.StringVar(&ports, "replica-ports", "18301,18302", "loopback ports of the two replicas (fixed, because rendezvous homes depend on the addresses); 0 picks free ports")
	flag.IntVar(&c.Repeat, "repeat", 3, "runs per engine, workload and policy (interleaved; requests pooled)")
	flag.DurationVar(&c.RunTimeout, "run-timeout", 120*time.Second, "bound on one policy run")
	flag.BoolVar(&plotOnly, "plot-only", false, "redraw the plots and tables.md from the results file (and copy in a newer tokcheck record), and exit")
	flag.Parse()
	for _, p := range split(ports) {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 65535 {
			fatal(fmt.Errorf("bad -replica-ports %q", ports))
		}
		c.ReplicaPorts = append(c.ReplicaPorts, n)
	}
	if len(c.ReplicaPorts) != 2 {
		fatal(fmt.Errorf("-replica-ports needs two ports"))
	}
	c.Policies = split(policies)
	c.Workloads = split(workloads)
	var err error
	if c.Engines, err = parseEngines(engines); err != nil {
		fatal(err)
	}
	c.RunTimeoutS = c.RunTimeout.Seconds()
	switch c.Mode {
	case "closed":
		c.Rate = 0
	case "poisson":
		c.Concurrency = 0
		for _, wl := range c.Workloads {
			if wl == client.MultiTurn {
				fatal(fmt.Errorf("multi_turn needs -mode closed: a turn waits for the answer before it"))
			}
		}
	default:
		fatal(fmt.Errorf("-mode must be closed or poisson"))
	}

	if plotOnly {
		var out Output
		b, err := os.ReadFile(c.Results)
		if err == nil {
			err = json.Unmarshal(b, &out)
		}
		if err == nil {
			err = plotAll(out, c.PlotDir)
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(c.PlotDir, "tables.md"), []byte(markdownTables(out)), 0o644)
		}
		// tokcheck is deterministic and runs in seconds: a newer record
		// replaces the copy in the results.
		if tc, rerr := os.ReadFile(c.TokCheck); err == nil && rerr == nil && json.Valid(tc) && string(tc) != string(out.Tokenization) {
			out.Tokenization = tc
			err = writeJSON(c.Results, out)
		}
		if err != nil {
			fatal(err)
		}
		return
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out, err := run(ctx, c)
	if err != nil {
		fatal(err)
	}
	if err := writeJSON(c.Results, out); err != nil {
		fatal(err)
	}
	if err := plotAll(out, c.PlotDir); err != nil {
		fatal(err)
	}
	tables := markdownTables(out)
	if err := os.WriteFile(filepath.Join(c.PlotDir, "tables.md"), []byte(tables), 0o644); err != nil {
		fatal(err)
	}
	fmt.Print(tables)
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "realbench:", err)
	os.Exit(1)
}

// Output is the results file.
type Output struct {
	Description string                   `json:"description"`
	GeneratedAt string                   `json:"generated_at"`
	Config      config                   `json:"config"`
	Environment map[string]any           `json:"environment"`
	Engines     map[string]*EngineResult `json:"engines"`
	// Tokenization is tokcheck's record (checks against the reference
	// tokenizer and rendering, and the static probes), when it was run.
	Tokenization json.RawMessage `json:"tokenization,omitempty"`
	Notes        []string        `json:"notes"`
}

// EngineResult is every workload and strategy on one engine configuration.
type EngineResult struct {
	Model       string                              `json:"model"`
	Template    string                              `json:"template"`
	Description string                              `json:"description"`
	Workloads   map[string]map[string]*PolicyResult `json:"workloads"`
}

// PolicyResult is one workload under one strategy on one engine, pooled
// over the repetitions; Runs holds each repetition (seed) apart.
type PolicyResult struct {
	client.Summary
	Router  client.Prediction `json:"router"`
	Engine  map[string]Engine `json:"engine"`
	TTFTsMs []float64         `json:"ttfts_ms_sorted"`
	Runs    []RunSummary      `json:"runs"`
	Errors  []string          `json:"errors,omitempty"`
}

// RunSummary is one run of a workload under a policy (PolicyResult pools
// the requests of all runs).
type RunSummary struct {
	TTFTP50         float64 `json:"ttft_p50_ms"`
	TTFTP99         float64 `json:"ttft_p99_ms"`
	TTFTP50Hit      float64 `json:"ttft_p50_hit_ms,omitempty"`
	TTFTP50Miss     float64 `json:"ttft_p50_miss_ms,omitempty"`
	CachedTokenRate float64 `json:"cached_token_rate"`
	Precision       float64 `json:"router_precision"`
	// The router's verdicts and token totals of this run.
	Hits                  int     `json:"hits"`
	Misses                int     `json:"misses"`
	Concurrent            int     `json:"concurrent"`
	Cold                  int     `json:"cold"`
	Purges                int     `json:"index_purges"`
	PredictedOverReported float64 `json:"predicted_over_reported"`
	RouterBytesPerToken   float64 `json:"router_bytes_per_engine_token"`
	PromptTokens          int     `json:"prompt_tokens"`
	CachedTokens          int     `json:"cached_tokens"`
	// Answers is multi_turn's reuse of the engine's own answers.
	Answers    *client.AnswerReuse `json:"answer_reuse,omitempty"`
	Completed  int                 `json:"completed"`
	DurationS  float64             `json:"duration_s"`
	LoadStart  string              `json:"loadavg_start"`
	LoadEnd    string              `json:"loadavg_end"`
	Outcomes   map[string]int      `json:"cache_outcomes,omitempty"`
	GroupHomes map[string]int      `json:"groups_by_main_replica,omitempty"`
	GroupSplit float64             `json:"replicas_per_group,omitempty"`
	Seed       uint64              `json:"seed"`
}

// runOut is what one run produced.
type runOut struct {
	results []client.Result
	pred    client.Prediction
	engine  map[string]Engine
	load    [2]string
}

// Engine is what one replica's own /metrics counted during the run.
type Engine struct {
	PromptTokens float64 `json:"prompt_tokens"`
	CachedTokens float64 `json:"cached_tokens"`
	Requests     float64 `json:"requests"`
	TTFTMeanMs   float64 `json:"server_ttft_mean_ms"`
}

// byName rekeys a per-replica map from addresses to replica names.
func byName(m map[string]int) map[string]int {
	if m == nil {
		return nil
	}
	out := map[string]int{}
	for addr, v := range m {
		name := replicaNames[addr]
		if name == "" {
			name = addr
		}
		out[name] += v
	}
	return out
}

// planRate is the arrival rate the plan is drawn with: closed mode ignores
// the planned times, so any positive rate gives the same request order.
func planRate(r float64) float64 {
	if r <= 0 {
		return 1
	}
	return r
}

// replicaNames maps a replica's address to its name.
var replicaNames = map[string]string{}

// child is a started process with its name.
type child struct {
	name string
	*proc.Proc
}

func start(name, logPath string, env []string, bin string, args ...string) (*child, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	p, err := proc.Start(cmd, logPath)
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	return &child{name: name, Proc: p}, nil
}

// stop sends SIGTERM, then SIGKILL after a grace period, and waits.
func (p *child) stop() {
	if p != nil {
		p.Stop(5 * time.Second)
	}
}

// waitHTTP waits, at most timeout, until url answers 200 (netx.WaitHTTP),
// naming p and its log when it exits first.
func waitHTTP(ctx context.Context, hc *http.Client, url string, timeout time.Duration, p *child) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := netx.WaitHTTP(ctx, hc, url, p.Done())
	if errors.Is(err, netx.ErrExited) {
		return fmt.Errorf("%s exited; see %s", p.name, p.LogPath)
	}
	return err
}

func post(ctx context.Context, hc *http.Client, url string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %s", url, resp.Status)
	}
	return nil
}

// deployment is the router's deployment identity, the same for every
// engine so that both see the same leading keys and rendezvous homes.
const deployment = "realengine-tiny"

// policyLines renders -policy-options as lines of the lb_policy block.
func policyLines(opts string) string {
	var b strings.Builder
	for _, l := range strings.Split(opts, ";") {
		if l = strings.TrimSpace(l); l != "" {
			b.WriteString("\n\t\t\t" + l)
		}
	}
	return b.String()
}

const caddyfileTmpl = `{
	admin 127.0.0.1:%[1]d
	metrics
	persist_config off
	auto_https off
}

http://127.0.0.1:%[2]d {
	bind 127.0.0.1
	llm_route {
		deployment %[6]s
		replica_header X-LLMRoute-Replica
		request_usage
	}
	reverse_proxy %[3]s {
		lb_policy llm {
			strategy %[4]s
			max_in_flight %[5]d
			queue_size 256
			queue_timeout 60s
			seed 1%[7]s
			engine_metrics /metrics {
				interval 500ms
				timeout 400ms
			}
		}
		transport http {
			dial_timeout 2s
			response_header_timeout 120s
		}
	}
}
`

func run(ctx context.Context, c config) (out Output, err error) {
	if err := os.MkdirAll(c.OutDir, 0o755); err != nil {
		return out, err
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	var procs []*child
	var mu sync.Mutex
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for i := len(procs) - 1; i >= 0; i-- {
			procs[i].stop()
		}
	}()
	track := func(p *child) {
		mu.Lock()
		procs = append(procs, p)
		mu.Unlock()
	}

	out = Output{
		Description: "llmroute through Caddy in front of two llama.cpp replicas (node-llama-cpp, CPU, tiny random GGUFs), " +
			"on two engine configurations (a byte vocabulary with a plain template; Qwen3's BPE tokenizer and chat template); " +
			"TTFT measured by the client, cached tokens reported by the engine, predictions read from llmroute's admin state and metrics.",
		GeneratedAt: time.Now().UTC().Format(time.RFC3339),
		Config:      c,
		Environment: environment(c),
		Engines:     map[string]*EngineResult{},
		Notes: []string{
			"p99 over ~72 requests is close to the maximum: read it as the tail, not a precise quantile (linear interpolation between ranks).",
			"Each policy run starts with empty engine caches (POST /reset on both replicas) and a fresh Caddy process (empty residency index).",
			"Repetition r uses workload seed seed+r (new prompts, so a new split of the groups over the replicas); within a repetition every policy and every engine replays the same request order.",
			"Both engines get the same requests (same model name and deployment, so the same leading keys and rendezvous homes); within a repetition the engines run one after the other on the same replica ports.",
			"cached_tokens are the engine's own tokens, rounded down to 16-token blocks (vLLM's block size); engine_lcp in the per-request records is the token-exact common prefix.",
		},
	}
	if b, err := os.ReadFile(c.TokCheck); err == nil && json.Valid(b) {
		out.Tokenization = b
	}
	var records [][]string
	pooled := map[string][]client.Result{}
	for _, e := range c.Engines {
		er := &EngineResult{Model: e.Model, Template: e.Template, Description: engineDescription(e),
			Workloads: map[string]map[string]*PolicyResult{}}
		for _, wl := range c.Workloads {
			er.Workloads[wl] = map[string]*PolicyResult{}
		}
		out.Engines[e.Name] = er
	}
	for rep := 0; rep < max(c.Repeat, 1); rep++ {
		for _, e := range c.Engines {
			replicas, reps, err := startReplicas(ctx, c, e, hc, track)
			if err != nil {
				return out, err
			}
			for _, wl := range c.Workloads {
				maxTokens := c.MaxTokens
				if wl == client.MultiTurn {
					maxTokens = c.MultiTurnMaxTokens
				}
				// Each repetition draws its own prompts and order (seed+rep),
				// so that results average over how the prompts hash onto the
				// replicas; within a repetition every policy sees the same plan.
				plan, err := client.Plan(client.WorkloadConfig{Name: wl, Groups: c.Groups, PerGroup: c.PerGroup,
					SystemChars: c.SystemChars, Rate: planRate(c.Rate), MaxTokens: maxTokens, Seed: c.Seed + uint64(rep)})
				if err != nil {
					return out, err
				}
				for _, pol := range c.Policies {
					if ctx.Err() != nil {
						return out, ctx.Err()
					}
					ro, err := runPolicy(ctx, c, hc, replicas, e.Name, wl, pol, rep, maxTokens, plan, track)
					if err != nil {
						return out, fmt.Errorf("%s/%s/%s: %w", e.Name, wl, pol, err)
					}
					pr := out.Engines[e.Name].Workloads[wl][pol]
					if pr == nil {
						pr = &PolicyResult{Engine: map[string]Engine{}}
						out.Engines[e.Name].Workloads[wl][pol] = pr
					}
					key := e.Name + "/" + wl + "/" + pol
					pooled[key] = append(pooled[key], ro.results...)
					pr.Router.Add(ro.pred)
					for addr, en := range ro.engine {
						t := pr.Engine[addr]
						t.PromptTokens += en.PromptTokens
						t.CachedTokens += en.CachedTokens
						t.TTFTMeanMs = (t.TTFTMeanMs*t.Requests + en.TTFTMeanMs*en.Requests) / max(t.Requests+en.Requests, 1)
						t.Requests += en.Requests
						pr.Engine[addr] = t
					}
					one := client.Summarize(ro.results)
					pr.Runs = append(pr.Runs, RunSummary{TTFTP50: one.TTFTP50, TTFTP99: one.TTFTP99,
						TTFTP50Hit: one.TTFTP50Hit, TTFTP50Miss: one.TTFTP50Miss,
						CachedTokenRate: one.CachedTokenRate, Precision: ro.pred.Precision,
						Hits: ro.pred.Hits, Misses: ro.pred.Misses, Concurrent: ro.pred.Concurrent, Cold: ro.pred.Cold,
						Purges: ro.pred.Purges, PredictedOverReported: ro.pred.PredictedOverReported,
						RouterBytesPerToken: one.RouterBytesPerToken, PromptTokens: one.PromptTokens, CachedTokens: one.CachedTokens,
						Answers: one.Answers, Completed: one.Completed,
						DurationS: one.DurationS, LoadStart: ro.load[0], LoadEnd: ro.load[1], Outcomes: one.Misses,
						GroupHomes: byName(one.GroupHomes), GroupSplit: one.GroupSplit, Seed: c.Seed + uint64(rep)})
					for _, r := range ro.results {
						records = append(records, record(e.Name, wl, pol, rep, r))
						if !r.Complete && len(pr.Errors) < 10 {
							pr.Errors = append(pr.Errors, fmt.Sprintf("run %d #%d: status %d finish %q done %v usage %v: %s",
								rep, r.Index, r.Status, r.Finish, r.Done, r.HasUsage, r.Error))
						}
					}
					fmt.Fprintf(os.Stderr, "run %d %-4s %-16s %-15s ttft p50 %7.1f ms p99 %7.1f ms  cached %.3f  precision %.3f  pred/rep %.2f  complete %d/%d  (%.0fs, load %s) %v\n",
						rep, e.Name, wl, pol, one.TTFTP50, one.TTFTP99, one.CachedTokenRate, ro.pred.Precision, ro.pred.PredictedOverReported,
						one.Completed, one.Requests, one.DurationS, ro.load[1], byName(one.GroupHomes))
				}
			}
			for _, p := range reps {
				p.stop()
			}
		}
	}
	for en, er := range out.Engines {
		for wl, byPol := range er.Workloads {
			for pol, pr := range byPol {
				rs := pooled[en+"/"+wl+"/"+pol]
				pr.Summary = client.Summarize(rs)
				pr.PerReplica = byName(pr.PerReplica)
				// Group ids name different prompts in each repetition, send
				// times restart and plan indexes repeat: group spread, cache
				// outcomes and answer reuse are per run, pooled here as a
				// mean and sums.
				pr.GroupHomes, pr.GroupSplit, pr.Summary.Misses, pr.Summary.Answers = nil, 0, nil, nil
				for _, run := range pr.Runs {
					pr.GroupSplit += run.GroupSplit / float64(len(pr.Runs))
					for k, v := range run.Outcomes {
						if pr.Summary.Misses == nil {
							pr.Summary.Misses = map[string]int{}
						}
						pr.Summary.Misses[k] += v
					}
					if run.Answers != nil {
						if pr.Summary.Answers == nil {
							pr.Summary.Answers = &client.AnswerReuse{}
						}
						pr.Summary.Answers.Add(run.Answers)
					}
				}
				for _, r := range rs {
					if r.Complete {
						pr.TTFTsMs = append(pr.TTFTsMs, r.TTFTMs)
					}
				}
				sort.Float64s(pr.TTFTsMs)
			}
		}
	}
	if err := writeCSV(filepath.Join(c.PlotDir, "requests.csv"), records); err != nil {
		return out, err
	}
	return out, nil
}

// startReplicas starts engine e's two replicas on the configured ports,
// waits until they answer and warms each with one request (page in the
// model, JIT the server), then forgets what they cached.
func startReplicas(ctx context.Context, c config, e engineSpec, hc *http.Client, track func(*child)) ([]string, []*child, error) {
	var replicas []string
	var started []*child
	fail := func(err error) ([]string, []*child, error) {
		for _, p := range started {
			p.stop()
		}
		return nil, nil, err
	}
	for i, name := range []string{"replica-a", "replica-b"} {
		port := c.ReplicaPorts[i]
		if port == 0 {
			var err error
			if port, err = netx.FreePort(); err != nil {
				return fail(err)
			}
		} else if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
			return fail(fmt.Errorf("replica port %d is taken (pick others with -replica-ports): %w", port, err))
		} else {
			l.Close()
		}
		p, err := start(name+" ("+e.Name+")", filepath.Join(c.OutDir, e.Name+"-"+name+".log"), nil, c.Node, c.Server,
			"--model", e.Model, "--template", e.Template, "--port", strconv.Itoa(port), "--name", name,
			"--slots", strconv.Itoa(c.Slots), "--ctx", strconv.Itoa(c.Ctx),
			"--threads", strconv.Itoa(c.Threads), "--block-tokens", strconv.Itoa(c.BlockTokens), "--log")
		if err != nil {
			return fail(err)
		}
		track(p)
		started = append(started, p)
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		if err := waitHTTP(ctx, hc, "http://"+addr+"/health", 60*time.Second, p); err != nil {
			return fail(err)
		}
		replicas = append(replicas, addr)
		replicaNames[addr] = name
	}
	fmt.Fprintf(os.Stderr, "%s replicas up: %v\n", e.Name, replicas)
	warm, _ := client.Plan(client.WorkloadConfig{Name: client.NoSharedPrefix, Groups: 1, PerGroup: 1,
		SystemChars: 200, Rate: 1, MaxTokens: c.MaxTokens, Seed: 999})
	for _, addr := range replicas {
		cl := &client.Client{URL: "http://" + addr + "/v1/chat/completions", Model: "tiny", MaxTokens: c.MaxTokens, HTTP: &http.Client{}}
		if r := cl.Do(ctx, warm[0], time.Now()); !r.Complete {
			return fail(fmt.Errorf("warm-up request to %s (%s) failed: %+v", addr, e.Name, r))
		}
	}
	return replicas, started, nil
}

// routerBytes is the size of llmroute's canonical rendering of a chat body,
// as the router's Caddyfile configures it.
func routerBytes(body []byte) int {
	r, err := policies.Parse("/v1/chat/completions", body, policies.ParseConfig{Deployment: deployment})
	if err != nil {
		return 0
	}
	return r.PromptBytes
}

// engineDescription says what an engine configuration is.
func engineDescription(e engineSpec) string {
	if e.Template == "model" {
		return "random-weight qwen3 GGUF from realengine/cmd/ggufqwen3: 4 layers, width 256, ff 512, 4 heads of 64, " +
			"Qwen3's BPE tokenizer (151,936 rows, F16 embedding tied to the output) and its Jinja chat template, rendered as apply_chat_template does"
	}
	return "random-weight llama GGUF from realengine/cmd/gguftiny: 4 layers, width 256, ff 512, 4 heads, 260-token byte vocabulary, F32, " +
		"plain template <|role|>\\ncontent\\n"
}

func runPolicy(ctx context.Context, c config, hc *http.Client, replicas []string, eng, wl, pol string, rep, maxTokens int,
	plan []client.Request, track func(*child)) (runOut, error) {
	var ro runOut
	for _, addr := range replicas {
		if err := post(ctx, hc, "http://"+addr+"/reset"); err != nil {
			return ro, err
		}
	}
	before := map[string]Engine{}
	for _, addr := range replicas {
		e, err := engineCounters(ctx, hc, addr)
		if err != nil {
			return ro, err
		}
		before[addr] = e
	}

	adminPort, err := netx.FreePort()
	if err != nil {
		return ro, err
	}
	proxyPort, err := netx.FreePort()
	if err != nil {
		return ro, err
	}
	tag := fmt.Sprintf("%s-%s-%s-%d", eng, wl, pol, rep)
	cfgPath, _ := filepath.Abs(filepath.Join(c.OutDir, "Caddyfile."+tag))
	cfg := fmt.Sprintf(caddyfileTmpl, adminPort, proxyPort, strings.Join(replicas, " "), pol, c.MaxInFlight, deployment, policyLines(c.PolicyOptions))
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return ro, err
	}
	home, _ := filepath.Abs(filepath.Join(c.OutDir, "caddy-home"))
	cp, err := start("caddy "+tag, filepath.Join(c.OutDir, "caddy-"+tag+".log"),
		[]string{"XDG_CONFIG_HOME=" + home, "XDG_DATA_HOME=" + home, "HOME=" + home},
		c.Caddy, "run", "--config", cfgPath, "--adapter", "caddyfile")
	if err != nil {
		return ro, err
	}
	track(cp)
	defer cp.stop()
	admin := fmt.Sprintf("http://127.0.0.1:%d", adminPort)
	if err := waitHTTP(ctx, hc, admin+stateapi.Path, 30*time.Second, cp); err != nil {
		return ro, err
	}
	// The admin endpoint answers before the HTTP app has bound its
	// listener: wait for that too, or the run's first request may be
	// refused.
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	err = netx.WaitTCP(wctx, fmt.Sprintf("127.0.0.1:%d", proxyPort), cp.Done())
	wcancel()
	if err != nil {
		return ro, fmt.Errorf("caddy's proxy port %d: %w", proxyPort, err)
	}

	cl := &client.Client{
		URL: fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", proxyPort), Model: "tiny",
		MaxTokens: maxTokens, ReplicaHeader: "X-LLMRoute-Replica",
		HTTP:        &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}},
		RouterBytes: routerBytes,
	}
	ro.load[0] = loadavg()
	var rs []client.Result
	if c.Mode == "poisson" {
		rs = cl.Run(ctx, plan, c.RunTimeout)
	} else {
		rs = cl.RunClosed(ctx, plan, c.Concurrency, c.RunTimeout)
	}
	ro.load[1] = loadavg()
	if ctx.Err() != nil {
		return ro, ctx.Err()
	}
	// Let the router finish its bookkeeping of the last responses (at
	// most 5 s; the prediction is read whatever the state then).
	_, _ = client.Admin(hc, admin).WaitState(ctx, 5*time.Second, func(st stateapi.State) bool { return st.TotalInFlight == 0 })
	pred, err := client.ReadPrediction(ctx, hc, admin)
	if err != nil {
		return ro, err
	}
	ro.results, ro.pred, ro.engine = rs, pred, map[string]Engine{}
	for _, addr := range replicas {
		e, err := engineCounters(ctx, hc, addr)
		if err != nil {
			return ro, err
		}
		b := before[addr]
		d := Engine{PromptTokens: e.PromptTokens - b.PromptTokens, CachedTokens: e.CachedTokens - b.CachedTokens,
			Requests: e.Requests - b.Requests}
		if d.Requests > 0 {
			d.TTFTMeanMs = (e.TTFTMeanMs - b.TTFTMeanMs) * 1000 / d.Requests
		}
		ro.engine[replicaNames[addr]] = d
	}
	if err := writeJSONL(filepath.Join(c.OutDir, "requests-"+tag+".jsonl"), rs); err != nil {
		return ro, err
	}
	return ro, nil
}

// engineCounters reads a replica's cumulative counters. TTFTMeanMs holds the
// raw TTFT sum in seconds here; the caller turns differences into a mean.
func engineCounters(ctx context.Context, hc *http.Client, addr string) (Engine, error) {
	m, err := client.Scrape(ctx, hc, "http://"+addr+"/metrics", "vllm:")
	if err != nil {
		return Engine{}, err
	}
	return Engine{
		PromptTokens: client.Sum(m, "vllm:prefix_cache_queries_total", nil),
		CachedTokens: client.Sum(m, "vllm:prefix_cache_hits_total", nil),
		Requests:     client.Sum(m, "vllm:time_to_first_token_seconds_count", nil),
		TTFTMeanMs:   client.Sum(m, "vllm:time_to_first_token_seconds_sum", nil),
	}, nil
}

func environment(c config) map[string]any {
	engines := map[string]string{}
	for _, e := range c.Engines {
		engines[e.Name] = engineDescription(e)
	}
	env := map[string]any{
		"replicas":       []string{"replica-a", "replica-b"},
		"cpus":           runtime.NumCPU(),
		"goos_goarch":    runtime.GOOS + "/" + runtime.GOARCH,
		"engine":         "llama.cpp via node-llama-cpp 3.22.1 (prebuilt CPU binaries), one context per replica with slots as sequences",
		"models":         engines,
		"router":         "Caddy v2.11.9 + llmroute (go build ./cmd/caddy from this repository)",
		"load_generator": "realengine/cmd/realbench (streaming chat completions on 127.0.0.1; closed loop or open-loop Poisson, see config.mode)",
	}
	if b, err := exec.Command(c.Node, "--version").Output(); err == nil {
		env["node"] = strings.TrimSpace(string(b))
	}
	if b, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		env["git_commit"] = strings.TrimSpace(string(b))
	}
	if b, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil {
		env["git_tracked_changes"] = len(strings.Fields(string(b))) > 0
	}
	env["loadavg_at_start"] = loadavg()
	return env
}

// loadavg returns the 1, 5 and 15 minute load averages: the machine is
// shared, and a busy one inflates every TTFT.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func record(eng, wl, pol string, rep int, r client.Result) []string {
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', 2, 64) }
	return []string{eng, wl, pol, strconv.Itoa(rep), strconv.Itoa(r.Index), strconv.Itoa(r.Group), strconv.Itoa(r.Turn), f(r.SentAtMs),
		strconv.Itoa(r.Status), r.Replica, f(r.TTFTMs), f(r.E2EMs), strconv.Itoa(r.PromptTokens), strconv.Itoa(r.CachedTokens),
		strconv.Itoa(r.EngineLCP), strconv.Itoa(r.CompletionTokens), strconv.Itoa(r.RouterPromptBytes), strconv.FormatBool(r.Complete), r.Error}
}

func writeCSV(path string, rows [][]string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	w.Write([]string{"engine", "workload", "policy", "run", "index", "group", "turn", "sent_at_ms", "status", "replica", "ttft_ms", "e2e_ms",
		"prompt_tokens", "cached_tokens", "engine_lcp", "completion_tokens", "router_prompt_bytes", "complete", "error"})
	w.WriteAll(rows)
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func writeJSONL(path string, rs []client.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, r := range rs {
		if err := enc.Encode(r); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

func writeJSON(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
