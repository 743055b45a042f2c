// Command serverbench measures llmroute's strategies in front of two real
// llama.cpp servers (llama-server, built by realengine/build-llama-server.sh)
// on CPU: for each seed and strategy it starts both servers fresh (empty
// caches), caddy with llm_route and the strategy (slot_hold on, as the
// README recommends for llama.cpp's per-slot cache; engine_metrics with the
// servers' key), replays the same shared-prefix workload, and records TTFT
// and the cached-token rate the servers reported. Run it from lab/:
//
//	go run ./realengine/cmd/serverbench -server ~/.cache/llmroute/llama-server-3.21.1/llama-server \
//	    -model realengine/out/qwen3.gguf -caddy ../caddy -seeds 1,2,3
//
// Everything listens on 127.0.0.1; every process it starts is stopped when
// it ends. Progress goes to stderr.
package main

import (
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
	"github.com/llmroute/caddy-llmroute/lab/realengine/client"
)

type config struct {
	Server, Model, Caddy, Out string
	Policies                  []string
	Seeds                     []uint64
	Requests, Groups, Slots   int
	SystemChars, MaxTokens    int
	Threads                   int
	Rate                      float64
	SlotHold                  time.Duration
}

// Run is one strategy on one seed.
type Run struct {
	Policy  string         `json:"policy"`
	Seed    uint64         `json:"seed"`
	Summary client.Summary `json:"summary"`
}

// Record is serverbench's output.
type Record struct {
	Experiment string `json:"experiment"`
	Server     string `json:"server"`
	Setup      string `json:"setup"`
	Runs       []Run  `json:"runs"`
}

const key = "sk-serverbench"

func main() {
	var c config
	var pols, seeds string
	flag.StringVar(&c.Server, "server", "", "llama-server binary (realengine/build-llama-server.sh prints it)")
	flag.StringVar(&c.Model, "model", "realengine/out/qwen3.gguf", "GGUF model (realengine/cmd/ggufqwen3)")
	flag.StringVar(&c.Caddy, "caddy", "../caddy", "caddy with llmroute")
	flag.StringVar(&c.Out, "out", "experiments/results/realserver", "records directory (realserver.json, realserver.md)")
	flag.StringVar(&pols, "policies", "prefix_load,least_load,round_robin", "strategies")
	flag.StringVar(&seeds, "seeds", "1,2,3", "workload seeds")
	flag.IntVar(&c.Requests, "requests", 200, "requests per run")
	flag.IntVar(&c.Groups, "groups", 8, "system prompts shared by the requests")
	flag.IntVar(&c.Slots, "slots", 2, "slots per server (-np)")
	flag.IntVar(&c.SystemChars, "system-chars", 6000, "system prompt length in characters (about 1,300 Qwen3 tokens)")
	flag.IntVar(&c.MaxTokens, "max-tokens", 8, "answer length")
	flag.IntVar(&c.Threads, "threads", 1, "threads per server")
	flag.Float64Var(&c.Rate, "rate", 4, "Poisson arrivals per second")
	flag.DurationVar(&c.SlotHold, "slot-hold", 2*time.Second, "slot_hold (0: off)")
	flag.Parse()
	c.Policies = strings.Split(pols, ",")
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
	if err := os.MkdirAll(c.Out, 0o755); err != nil {
		return err
	}
	ver, _ := exec.Command(c.Server, "--version").CombinedOutput()
	rec := Record{Experiment: "realserver", Server: strings.TrimSpace(lastLine(string(ver))),
		Setup: fmt.Sprintf("two llama-server replicas, -np %d, -t %d, random-weight Qwen3-tokenizer GGUF; %d requests per run over %d shared system prompts of %d chars, %d output tokens, Poisson %.1f/s; slot_hold %v",
			c.Slots, c.Threads, c.Requests, c.Groups, c.SystemChars, c.MaxTokens, c.Rate, c.SlotHold)}
	ctx := context.Background()
	for _, seed := range c.Seeds {
		plan, err := client.Plan(client.WorkloadConfig{Name: client.SharedPrefix, Groups: c.Groups, PerGroup: c.Requests / c.Groups,
			SystemChars: c.SystemChars, Rate: c.Rate, MaxTokens: c.MaxTokens, Seed: seed})
		if err != nil {
			return err
		}
		for _, pol := range c.Policies {
			s, err := runOne(ctx, c, pol, seed, plan)
			if err != nil {
				return fmt.Errorf("%s seed %d: %w", pol, seed, err)
			}
			rec.Runs = append(rec.Runs, Run{Policy: pol, Seed: seed, Summary: s})
			fmt.Fprintf(os.Stderr, "seed %d %-12s ttft p50 %7.0f p99 %7.0f ms, cached %.2f, %d/%d complete\n",
				seed, pol, s.TTFTP50, s.TTFTP99, s.CachedTokenRate, s.Completed, s.Requests)
		}
	}
	b, _ := json.MarshalIndent(rec, "", "  ")
	if err := os.WriteFile(filepath.Join(c.Out, "realserver.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.Out, "realserver.md"), []byte(markdown(rec)), 0o644)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// runOne starts two fresh servers and caddy with pol, replays plan and
// returns its summary.
func runOne(ctx context.Context, c config, pol string, seed uint64, plan []client.Request) (client.Summary, error) {
	var addrs []string
	var procs []*proc.Proc
	defer func() {
		for _, p := range procs {
			p.Stop(3 * time.Second)
		}
	}()
	for i := range 2 {
		port, err := netx.FreePort()
		if err != nil {
			return client.Summary{}, err
		}
		cmd := exec.Command(c.Server, "-m", c.Model, "--host", "127.0.0.1", "--port", strconv.Itoa(port),
			"--metrics", "--api-key", key, "-np", strconv.Itoa(c.Slots), "-c", strconv.Itoa(c.Slots*4096),
			"-t", strconv.Itoa(c.Threads), "--jinja", "--cache-reuse", "256")
		p, err := proc.Start(cmd, filepath.Join(c.Out, fmt.Sprintf("server-%s-%d-%d.log", pol, seed, i)))
		if err != nil {
			return client.Summary{}, err
		}
		procs = append(procs, p)
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		if err := waitHealth(ctx, addr, 60*time.Second); err != nil {
			return client.Summary{}, fmt.Errorf("%s: %w\n%s", addr, err, p.LogTail(10))
		}
		addrs = append(addrs, addr)
	}
	admin, err := netx.FreePort()
	if err != nil {
		return client.Summary{}, err
	}
	listen, err := netx.FreePort()
	if err != nil {
		return client.Summary{}, err
	}
	hold := ""
	if c.SlotHold > 0 {
		hold = "\n\t\t\tslot_hold " + c.SlotHold.String()
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
		return client.Summary{}, err
	}
	defer os.RemoveAll(dir)
	cd, err := caddyproc.StartCaddy(ctx, c.Caddy, dir, cf, fmt.Sprintf("127.0.0.1:%d", admin), fmt.Sprintf("127.0.0.1:%d", listen))
	if err != nil {
		return client.Summary{}, err
	}
	defer cd.Stop()
	cl := &client.Client{URL: fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", listen), Model: "tiny", MaxTokens: c.MaxTokens,
		HTTP: &http.Client{Timeout: 10 * time.Minute}}
	res := cl.Run(ctx, plan, 20*time.Minute)
	return client.Summarize(res), nil
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
	fmt.Fprintf(&b, "# Real llama.cpp servers\n\n%s. Server: %s. Generated by lab/realengine/cmd/serverbench.\n\n", r.Setup, r.Server)
	b.WriteString("Incomplete requests are answers the random-weight model's output broke (llama.cpp's 500 when the output does not parse in the template's format) or that ended without usage; the TTFTs are of the requests that got a first token.\n\n")
	b.WriteString("| seed | policy | TTFT p50 ms | TTFT p99 ms | cached token rate | complete |\n|---|---|---|---|---|---|\n")
	by := map[string]map[uint64]client.Summary{}
	for _, run := range r.Runs {
		s := run.Summary
		fmt.Fprintf(&b, "| %d | %s | %.0f | %.0f | %.3f | %d/%d |\n", run.Seed, run.Policy, s.TTFTP50, s.TTFTP99, s.CachedTokenRate, s.Completed, s.Requests)
		if by[run.Policy] == nil {
			by[run.Policy] = map[uint64]client.Summary{}
		}
		by[run.Policy][run.Seed] = s
	}
	b.WriteString("\nGoal (issue 39): prefix_load's TTFT p50 <= 0.5x least_load's and p99 <= 1.1x, every seed.\n\n| seed | p50 ratio | p99 ratio | met |\n|---|---|---|---|\n")
	seeds := slices.Sorted(maps.Keys(by["prefix_load"]))
	for _, seed := range seeds {
		pl := by["prefix_load"][seed]
		ll, ok := by["least_load"][seed]
		if !ok || ll.TTFTP50 == 0 || ll.TTFTP99 == 0 {
			continue
		}
		p50, p99 := pl.TTFTP50/ll.TTFTP50, pl.TTFTP99/ll.TTFTP99
		fmt.Fprintf(&b, "| %d | %.2f | %.2f | %v |\n", seed, p50, p99, p50 <= 0.5 && p99 <= 1.1)
	}
	return b.String()
}
