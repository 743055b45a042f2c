// Command serverbench measures llmroute's strategies in front of two real
// llama.cpp servers (llama-server, built by realengine/build-llama-server.sh)
// on CPU: for each seed and strategy it starts both servers fresh (empty
// caches), caddy with llm_route and the strategy (slot_hold on, as the
// README recommends for llama.cpp's per-slot cache; engine_metrics with the
// servers' key), replays the same workload, and records TTFT and the
// cached-token rate the servers reported. The workload is shared_prefix
// (groups of requests under one system prompt) or trace: a sample of a
// Mooncake-format trace's prefix families, its tokens scaled to the CPU
// and its arrivals compressed to a share of the two servers' cold
// capacity, which serverbench measures on a server of its own first. Run
// it from lab/:
//
//	go run ./realengine/cmd/serverbench -server ~/.cache/llmroute/llama-server-3.21.1/llama-server \
//	    -model realengine/out/qwen3.gguf -caddy ../caddy -seeds 1,2,3 [-workload trace]
//
// Everything listens on 127.0.0.1; every process it starts is stopped when
// it ends. Progress goes to stderr.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmroute/caddy-llmroute/internal/testrig/caddyproc"
	"github.com/llmroute/caddy-llmroute/internal/testrig/netx"
	"github.com/llmroute/caddy-llmroute/internal/testrig/proc"
	"github.com/llmroute/caddy-llmroute/lab/experiments/trace"
	"github.com/llmroute/caddy-llmroute/lab/realengine/client"
	"github.com/llmroute/caddy-llmroute/lab/realengine/plots"
)

type config struct {
	Server, Model, Caddy, Out, Logs string
	Workload, Trace                 string
	Policies                        []string
	Seeds                           []uint64
	Requests, Groups, Slots, Ctx    int
	SystemChars, MaxTokens          int
	Threads, BlockTokens            int
	Rate, Util                      float64
	SlotHold                        time.Duration
	// CacheShare sizes each server's RAM prompt cache (--cache-ram) as a
	// share of its half of the sample's working set; 0 leaves
	// llama-server's default (8 GiB: the whole working set here).
	// KVBytes is the model's KV cache bytes per engine token, which
	// turns the working set into MiB.
	CacheShare float64
	KVBytes    int
	// IndexBlocks is the policy's index_blocks (0: its default).
	IndexBlocks int
	// Repeat is how many runs of each policy a seed has, in turn (the
	// policies one after the other, then again).
	Repeat int
	// cacheMiB is --cache-ram for the seed being run (0: the default).
	cacheMiB int
}

// Run is one strategy on one seed.
type Run struct {
	Policy string `json:"policy"`
	Seed   uint64 `json:"seed"`
	// Rep numbers the runs of one policy on one seed from 1 (-repeat,
	// -merge).
	Rep     int            `json:"rep,omitempty"`
	Summary client.Summary `json:"summary"`
	// TTFTsMs holds the TTFT of every request that got a first token,
	// sorted, for the distribution plots.
	TTFTsMs []float64 `json:"ttfts_ms_sorted,omitempty"`
	// Router is the router's own account at the end of the run: its
	// predictions' verdicts against the servers' cached tokens and each
	// replica's index (read from the admin endpoint; nil if that failed).
	Router *client.Prediction `json:"router,omitempty"`
}

// Sample is the trace a seed replays: what it holds (at the replay's
// scale, in the trace generator's tokens) and the rate it arrives at.
type Sample struct {
	Seed  uint64      `json:"seed"`
	Stats trace.Stats `json:"trace"`
	Rate  float64     `json:"rate_per_s"`
	// CacheRAMMiB is each server's --cache-ram for this seed (0: the
	// server's default).
	CacheRAMMiB int `json:"cache_ram_mib,omitempty"`
}

// Record is serverbench's output.
type Record struct {
	Experiment  string       `json:"experiment"`
	Workload    string       `json:"workload"`
	Server      string       `json:"server"`
	Setup       string       `json:"setup"`
	Calibration *Calibration `json:"calibration,omitempty"`
	Samples     []Sample     `json:"samples,omitempty"`
	Runs        []Run        `json:"runs"`
}

const key = "sk-serverbench"

func main() {
	var c config
	var pols, seeds string
	flag.StringVar(&c.Server, "server", "", "llama-server binary (realengine/build-llama-server.sh prints it)")
	flag.StringVar(&c.Model, "model", "realengine/out/qwen3.gguf", "GGUF model (realengine/cmd/ggufqwen3)")
	flag.StringVar(&c.Caddy, "caddy", "../caddy", "caddy with llmroute")
	flag.StringVar(&c.Out, "out", "", "records directory (realserver.json, realserver.md; default experiments/results/realserver, realserver_trace for the trace)")
	flag.StringVar(&c.Logs, "logs", "realengine/out/serverbench", "the servers' logs")
	flag.StringVar(&c.Workload, "workload", "shared_prefix", "shared_prefix or trace")
	flag.StringVar(&c.Trace, "trace", "../../shared/traces/mooncake_synthetic_trace.jsonl", "trace: the Mooncake-format trace")
	flag.IntVar(&c.BlockTokens, "block-tokens", 32, "trace: tokens of one 512-token trace block (prompts and answers scaled by it/512)")
	flag.Float64Var(&c.Util, "util", 0.7, "trace: arrivals as a share of the two servers' measured cold capacity")
	flag.IntVar(&c.Ctx, "ctx", 0, "context per slot in tokens (default 4096; trace 16384, which its longest prompts need)")
	flag.StringVar(&pols, "policies", "prefix_load,least_load,round_robin", "strategies")
	flag.StringVar(&seeds, "seeds", "1,2,3", "workload seeds")
	flag.IntVar(&c.Requests, "requests", 200, "requests per run (trace: at least, in whole prefix families)")
	flag.IntVar(&c.Groups, "groups", 8, "system prompts shared by the requests")
	flag.IntVar(&c.Slots, "slots", 2, "slots per server (-np)")
	flag.IntVar(&c.SystemChars, "system-chars", 6000, "system prompt length in characters (about 1,300 Qwen3 tokens)")
	flag.IntVar(&c.MaxTokens, "max-tokens", 8, "answer length")
	flag.IntVar(&c.Threads, "threads", 1, "threads per server")
	flag.Float64Var(&c.Rate, "rate", 4, "shared_prefix: Poisson arrivals per second")
	flag.DurationVar(&c.SlotHold, "slot-hold", 2*time.Second, "slot_hold (0: off)")
	flag.Float64Var(&c.CacheShare, "cache-share", 0, "trace: each server's RAM prompt cache (--cache-ram) as a share of its half of the sample's working set (0: llama-server's default, 8 GiB)")
	flag.IntVar(&c.IndexBlocks, "index-blocks", 0, "the policy's index_blocks, its belief of each server's cache in 128-byte blocks (0: the default, 16384)")
	flag.IntVar(&c.Repeat, "repeat", 1, "runs of each policy a seed, in turn; the goal pools a seed's runs")
	merge := flag.String("merge", "", "records to merge into -out instead of running (realserver.json files of the same setup, comma-separated)")
	flag.IntVar(&c.KVBytes, "kv-bytes", 4096, "trace: the model's KV cache bytes per token (ggufqwen3's defaults: 2 x 4 layers x 4 KV heads x 64 x 2 bytes)")
	flag.Parse()
	if *merge != "" {
		rec, err := mergeRecords(strings.Split(*merge, ","))
		if err == nil && c.Out == "" {
			err = fmt.Errorf("-merge needs -out")
		}
		if err == nil {
			err = write(rec, c.Out)
		}
		if err != nil {
			fatal(err)
		}
		return
	}
	c.Policies = strings.Split(pols, ",")
	switch c.Workload {
	case "shared_prefix":
		c.Out, c.Ctx = cmp.Or(c.Out, "experiments/results/realserver"), cmp.Or(c.Ctx, 4096)
	case "trace":
		c.Out, c.Ctx = cmp.Or(c.Out, "experiments/results/realserver_trace"), cmp.Or(c.Ctx, 16384)
	default:
		fatal(fmt.Errorf("unknown workload %q (shared_prefix or trace)", c.Workload))
	}
	for _, s := range strings.Split(seeds, ",") {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			fatal(err)
		}
		c.Seeds = append(c.Seeds, n)
	}
	if err := run(c); err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "serverbench:", err)
	os.Exit(1)
}

func run(c config) error {
	for _, d := range []string{c.Out, c.Logs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	ver, _ := exec.Command(c.Server, "--version").CombinedOutput()
	rec := Record{Experiment: "realserver", Workload: c.Workload, Server: strings.TrimSpace(lastLine(string(ver)))}
	servers := fmt.Sprintf("two llama-server replicas, -np %d, -c %d a slot, -t %d, random-weight Qwen3-tokenizer GGUF", c.Slots, c.Ctx, c.Threads)
	var recs []trace.Record
	ctx := context.Background()
	if c.Workload == "trace" {
		var err error
		if recs, err = trace.Load(c.Trace); err != nil {
			return err
		}
		fmt.Fprintln(os.Stderr, "calibrating: cold prefill and decode on one server")
		cal, err := calibrate(ctx, c, recs)
		if err != nil {
			return fmt.Errorf("calibration: %w", err)
		}
		rec.Calibration = &cal
		fmt.Fprintf(os.Stderr, "calibration: prefill %.3f ms a token, decode %.2f ms a token\n", cal.PrefillMsPerToken, cal.DecodeMsPerToken)
		rec.Setup = fmt.Sprintf("%s; %s sampled by whole prefix families (at least %d requests a seed), %d tokens per 512-token block (prompts and answers scaled by 1/%d), "+
			"arrivals compressed to %.2f of the two servers' measured cold capacity; slot_hold %v; index_blocks %s; %s",
			servers, filepath.Base(c.Trace), c.Requests, c.BlockTokens, trace.TraceBlockTokens/c.BlockTokens, c.Util, c.SlotHold, indexSetup(c), cacheSetup(c))
	} else {
		rec.Setup = fmt.Sprintf("%s; %d requests per run over %d shared system prompts of %d chars, %d output tokens, Poisson %.1f/s; slot_hold %v",
			servers, c.Requests, c.Groups, c.SystemChars, c.MaxTokens, c.Rate, c.SlotHold)
	}
	for _, seed := range c.Seeds {
		var plan []client.Request
		if c.Workload == "trace" {
			p, smp, err := tracePlan(c, recs, seed, *rec.Calibration)
			if err != nil {
				return err
			}
			plan = p
			if c.CacheShare > 0 {
				c.cacheMiB = cacheMiB(c, smp, *rec.Calibration)
				smp.CacheRAMMiB = c.cacheMiB
			}
			rec.Samples = append(rec.Samples, smp)
			fmt.Fprintf(os.Stderr, "seed %d: %d requests, %.0f tokens a prompt, bound %.3f, %.2f/s\n",
				seed, smp.Stats.Requests, smp.Stats.MeanInputTokens, smp.Stats.Bound, smp.Rate)
		} else {
			p, err := client.Plan(client.WorkloadConfig{Name: client.SharedPrefix, Groups: c.Groups, PerGroup: c.Requests / c.Groups,
				SystemChars: c.SystemChars, Rate: c.Rate, MaxTokens: c.MaxTokens, Seed: seed})
			if err != nil {
				return err
			}
			plan = p
		}
		for rep := 1; rep <= max(c.Repeat, 1); rep++ {
			for _, pol := range c.Policies {
				res, router, err := runOne(ctx, c, pol, seed, plan)
				if err != nil {
					return fmt.Errorf("%s seed %d: %w", pol, seed, err)
				}
				s := client.Summarize(res)
				rec.Runs = append(rec.Runs, Run{Policy: pol, Seed: seed, Rep: rep, Summary: s, TTFTsMs: sortedTTFTs(res), Router: router})
				fmt.Fprintf(os.Stderr, "seed %d run %d %-12s ttft p50 %7.0f p99 %7.0f ms, cached %.3f, %d/%d complete; router %s\n",
					seed, rep, pol, s.TTFTP50, s.TTFTP99, s.CachedTokenRate, s.Completed, s.Requests, routerLine(router))
			}
		}
	}
	return write(rec, c.Out)
}

// write writes the record's files into dir.
func write(rec Record, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(rec, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "realserver.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := plotSeeds(rec, dir); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "realserver.md"), []byte(markdown(rec)), 0o644)
}

// sortedTTFTs is the TTFTs of the results that got a first token, sorted.
func sortedTTFTs(res []client.Result) []float64 {
	var out []float64
	for _, r := range res {
		if r.TTFTMs >= 0 {
			out = append(out, r.TTFTMs)
		}
	}
	slices.Sort(out)
	return out
}

// plotSeeds draws each seed's TTFT distribution per policy, its runs
// pooled (ttft_cdf_seed<N>.png).
func plotSeeds(r Record, dir string) error {
	var pols []string
	for _, run := range r.Runs {
		if !slices.Contains(pols, run.Policy) {
			pols = append(pols, run.Policy)
		}
	}
	by := pooledTTFTs(r)
	for _, seed := range slices.Sorted(maps.Keys(by)) {
		title := fmt.Sprintf("TTFT on two llama-server replicas, %s, seed %d", r.Workload, seed)
		if err := plots.TTFTCDF(filepath.Join(dir, fmt.Sprintf("ttft_cdf_seed%d.png", seed)), title, pols, by[seed]); err != nil {
			return err
		}
	}
	return nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// startServer starts one fresh llama-server and waits until it is healthy.
func startServer(ctx context.Context, c config, logName string) (*proc.Proc, string, error) {
	port, err := netx.FreePort()
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(c.Server, "-m", c.Model, "--host", "127.0.0.1", "--port", strconv.Itoa(port),
		"--metrics", "--api-key", key, "-np", strconv.Itoa(c.Slots), "-c", strconv.Itoa(c.Slots*c.Ctx),
		"-t", strconv.Itoa(c.Threads), "--jinja", "--cache-reuse", "256")
	if c.cacheMiB > 0 {
		cmd.Args = append(cmd.Args, "--cache-ram", strconv.Itoa(c.cacheMiB))
	}
	p, err := proc.Start(cmd, filepath.Join(c.Logs, logName))
	if err != nil {
		return nil, "", err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if err := waitHealth(ctx, addr, 60*time.Second); err != nil {
		p.Stop(3 * time.Second)
		return nil, "", fmt.Errorf("%s: %w\n%s", addr, err, p.LogTail(10))
	}
	return p, addr, nil
}

// routerLine is a run's router account in a few words.
func routerLine(p *client.Prediction) string {
	if p == nil {
		return "unread"
	}
	return fmt.Sprintf("%d hits, %d partials, %d misses, %d cold; index capacity %s", p.Hits, p.Partials, p.Misses, p.Cold, indexCapacities(p, "/"))
}

// indexCapacities is each replica's index capacity at the run's end,
// joined by sep.
func indexCapacities(p *client.Prediction, sep string) string {
	idx := make([]string, 0, len(p.PerReplica))
	for _, r := range p.PerReplica {
		idx = append(idx, strconv.Itoa(r.IndexCapacity))
	}
	return strings.Join(idx, sep)
}

// runOne starts two fresh servers and caddy with pol, replays plan and
// returns what each request saw and the router's account of it (nil when
// it could not be read).
func runOne(ctx context.Context, c config, pol string, seed uint64, plan []client.Request) ([]client.Result, *client.Prediction, error) {
	var addrs []string
	var procs []*proc.Proc
	defer func() {
		for _, p := range procs {
			p.Stop(3 * time.Second)
		}
	}()
	for i := range 2 {
		p, addr, err := startServer(ctx, c, fmt.Sprintf("server-%s-%s-%d-%d.log", c.Workload, pol, seed, i))
		if err != nil {
			return nil, nil, err
		}
		procs = append(procs, p)
		addrs = append(addrs, addr)
	}
	admin, err := netx.FreePort()
	if err != nil {
		return nil, nil, err
	}
	listen, err := netx.FreePort()
	if err != nil {
		return nil, nil, err
	}
	hold := ""
	if c.SlotHold > 0 {
		hold = "\n\t\t\tslot_hold " + c.SlotHold.String()
	}
	if c.IndexBlocks > 0 {
		hold += fmt.Sprintf("\n\t\t\tindex_blocks %d", c.IndexBlocks)
	}
	cf := fmt.Sprintf(`{
	admin 127.0.0.1:%d
	auto_https off
	log {
		level ERROR
	}
}
http://127.0.0.1:%d {
	llm_route {
		upstream_api_key %s
		request_usage
		replica_header X-LLMRoute-Replica
	}
	reverse_proxy %s {
		lb_policy llm %s {
			max_in_flight %d%s
			engine_metrics {
				api_key %s
			}
		}
		transport http {
			response_header_timeout 5m
		}
	}
}
`, admin, listen, key, strings.Join(addrs, " "), pol, c.Slots, hold, key)
	dir, err := os.MkdirTemp("", "serverbench-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(dir)
	cd, err := caddyproc.StartCaddy(ctx, c.Caddy, dir, cf, fmt.Sprintf("127.0.0.1:%d", admin), fmt.Sprintf("127.0.0.1:%d", listen))
	if err != nil {
		return nil, nil, err
	}
	defer cd.Stop()
	cl := &client.Client{URL: fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", listen), Model: "tiny", MaxTokens: c.MaxTokens, ReplicaHeader: "X-LLMRoute-Replica",
		HTTP: &http.Client{Timeout: 10 * time.Minute}}
	res := cl.Run(ctx, plan, 20*time.Minute)
	var router *client.Prediction
	// The handler checks a prediction as its request ends, which may be
	// just after the client read the last byte.
	time.Sleep(500 * time.Millisecond)
	if p, err := client.ReadPrediction(ctx, &http.Client{Timeout: 10 * time.Second}, fmt.Sprintf("http://127.0.0.1:%d", admin)); err == nil {
		router = &p
	} else {
		fmt.Fprintf(os.Stderr, "%s seed %d: router state: %v\n", pol, seed, err)
	}
	return res, router, nil
}

func waitHealth(ctx context.Context, addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/health", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("no healthy answer within %v", within)
}

// markdown renders the record as a table per seed and the goal check:
// prefix_load's TTFT p50 at most half least_load's and p99 at most 1.1x,
// on every seed.
func markdown(r Record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Real llama.cpp servers: %s\n\n%s. Server: %s. Generated by lab/realengine/cmd/serverbench.\n\n", r.Workload, r.Setup, r.Server)
	if cal := r.Calibration; cal != nil {
		fmt.Fprintf(&b, "Calibration (%d cold prompts on a server of its own): %.2f server tokens per generator token, prefill %.3f ms and decode %.2f ms a token.\n\n",
			cal.Prompts, cal.EngineTokensPerToken, cal.PrefillMsPerToken, cal.DecodeMsPerToken)
	}
	if len(r.Samples) > 0 {
		b.WriteString("| seed | requests | prefix families | mean prompt tokens | mean answer tokens | reusable share (bound) | rate /s | --cache-ram MiB |\n|---|---|---|---|---|---|---|---|\n")
		for _, s := range r.Samples {
			st := s.Stats
			ram := "default"
			if s.CacheRAMMiB > 0 {
				ram = strconv.Itoa(s.CacheRAMMiB)
			}
			fmt.Fprintf(&b, "| %d | %d | %d | %.0f | %.1f | %.3f | %.2f | %s |\n", s.Seed, st.Requests, st.Families, st.MeanInputTokens, st.MeanOutputTokens, st.Bound, s.Rate, ram)
		}
		b.WriteString("\nPrompt tokens are the trace generator's; the server's are the calibration's ratio times these. The bound is the share of prompt tokens in blocks an earlier request of the sample held: what one unbounded cache shared by both servers would serve.\n\n")
	}
	b.WriteString("Incomplete requests are answers the random-weight model's output broke (llama.cpp's 500 when the output does not parse in the template's format) or that ended without usage; the TTFTs are of the requests that got a first token.\n\n")
	bound := map[uint64]float64{}
	for _, s := range r.Samples {
		bound[s.Seed] = s.Stats.Bound
	}
	b.WriteString("| seed | run | policy | TTFT p50 ms | TTFT p90 ms | TTFT p99 ms | cached token rate | of the bound | max/min load | complete | router: hit / partial / miss, index capacity |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, run := range r.Runs {
		s := run.Summary
		of := "-"
		if bd := bound[run.Seed]; bd > 0 {
			of = fmt.Sprintf("%.2f", s.CachedTokenRate/bd)
		}
		router := "-"
		if p := run.Router; p != nil {
			router = fmt.Sprintf("%d / %d / %d, %s", p.Hits, p.Partials, p.Misses, indexCapacities(p, " / "))
		}
		fmt.Fprintf(&b, "| %d | %d | %s | %.0f | %.0f | %.0f | %.3f | %s | %s | %d/%d | %s |\n", run.Seed, max(run.Rep, 1), run.Policy, s.TTFTP50, s.TTFTP90, s.TTFTP99, s.CachedTokenRate, of, loadSpread(s.PerReplica), s.Completed, s.Requests, router)
	}
	goalTable(&b, r)
	return b.String()
}

// loadSpread is the most requests one replica served over the fewest, of
// two replicas ("-" when one served none).
func loadSpread(per map[string]int) string {
	if len(per) < 2 {
		return "-"
	}
	lo, hi := -1, 0
	for _, n := range per {
		if lo < 0 || n < lo {
			lo = n
		}
		hi = max(hi, n)
	}
	if lo <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", float64(hi)/float64(lo))
}

// indexSetup is the policy's index_blocks as the setup line says it.
func indexSetup(c config) string {
	if c.IndexBlocks <= 0 {
		return "default"
	}
	return strconv.Itoa(c.IndexBlocks)
}
