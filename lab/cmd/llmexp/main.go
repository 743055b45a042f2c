// Command llmexp runs llmroute's policy experiments and writes their
// records, summary and plots (see docs/experiments.md). Run it from lab/:
//
//	go run ./cmd/llmexp all            # everything, ~12 min on 2 cores
//	go run ./cmd/llmexp -quick all     # scaled down, under a minute
//	go run ./cmd/llmexp standard       # the standard point: summary.json, summary.md, plots
//	go run ./cmd/llmexp shared_prefix  # one workload at the standard point
//	go run ./cmd/llmexp sweep          # KV sweep, load sweep, scale run
//	go run ./cmd/llmexp residency      # the cache-residency analysis
//	go run ./cmd/llmexp variants       # candidate cold rules for prefix_load
//	go run ./cmd/llmexp routers        # every workload with 2, 4 and 8 routers, and the goals
//	go run ./cmd/llmexp mixed_sweep    # mixed traffic from 0 to 100% unique documents
//	go run ./cmd/llmexp e2e            # caddy + simulated replicas over loopback
//	go run ./cmd/llmexp e2e_seeds      # the e2e scenario in the simulator, 8 seeds x 120 s
//	go run ./cmd/llmexp plots          # redraw plots and summary.md from the records
//
// Results go under experiments/results (experiments/results-quick with
// -quick) unless -out says otherwise. Progress goes to stderr.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmroute/caddy-llmroute/lab/experiments/e2e"
	"github.com/llmroute/caddy-llmroute/lab/experiments/suite"
	"github.com/llmroute/caddy-llmroute/lab/experiments/workload"
)

const usage = `usage: llmexp [flags] <command>

commands:
  all                 standard point, sweeps, residency analysis, then e2e (skipped if ./caddy is missing)
  standard            the standard point for every workload: standard.json, summary.json, summary.md, plots
  shared_prefix | multi_turn | no_shared_prefix | skewed
                      one workload at the standard point: workload_<name>.json and its plots
  sweep               KV-capacity sweep, load sweep and replica scale run
  kv_sweep | load_sweep | scale
                      one of those
  residency           the cache-residency analysis: residency.json, residency.md, plots
  variants            candidate cold rules for prefix_load, every workload, 1-8 routers, per seed: variants.json, variants.md
  routers             every workload at the standard point with 2, 4 and 8 routers: routers.json, routers.md
                      (with standard.json: goals.json, goals.md)
  mixed_sweep         the mixed workload's unique share from 0 to 1, one and eight routers, per seed
  e2e                 real caddy + simulated replicas over loopback: e2e.json
  e2e_seeds           the e2e scenario in the simulator only, per seed (-e2e-seeds, -e2e-duration, default 8 x 120s): e2e_seeds.json, e2e_seeds.md
  plots               redraw every plot and summary.md from the records

flags:
`

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "llmexp:", err)
		os.Exit(1)
	}
}

func run(args []string, logw io.Writer) error {
	fs := flag.NewFlagSet("llmexp", flag.ContinueOnError)
	fs.SetOutput(logw)
	fs.Usage = func() { fmt.Fprint(logw, usage); fs.PrintDefaults() }
	var (
		quick = fs.Bool("quick", false, "scaled-down run (fewer requests and points) for a quick check")
		seed  = fs.Uint64("seed", 1, "seed of every workload and simulation")
		jobs  = fs.Int("j", 2, "simulations run at once")
		out   = fs.String("out", "", "results directory (default experiments/results, or experiments/results-quick with -quick)")
		caddy = fs.String("caddy", "../caddy", "caddy binary for e2e (built by ./xcaddy.sh build at the repository root)")
		e2eS  = fs.Duration("e2e-duration", 0, "e2e: arrivals per run for this long (default 20s, 5s with -quick; e2e_seeds 120s, 10s with -quick)")
		e2eR  = fs.String("e2e-routers", "", "e2e, e2e_seeds: comma-separated router (caddy instance) counts (default 1,4; e2e with -quick 1,2)")
		e2eW  = fs.String("e2e-workloads", "", "e2e: comma-separated workloads (default shared_prefix,mixed,no_shared_prefix)")
		e2eN  = fs.Int("e2e-seeds", 8, "e2e_seeds: seeds 1..n")
		e2eP  = fs.String("e2e-policies", "", "e2e: comma-separated policy names (default every one: round_robin, least_load, prefix_affinity, prefix_load, \"prefix_load cold_choices 1\", \"prefix_load homes_directory\" when a server is installed)")
		e2eO  = fs.String("e2e-record", "e2e", "e2e: the record's file name, without .json and .md")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return fmt.Errorf("expected one command, got %q", fs.Args())
	}
	dir := *out
	if dir == "" {
		dir = "experiments/results"
		if *quick {
			dir = "experiments/results-quick"
		}
	}
	o := suite.Options{Quick: *quick, Seed: *seed, Jobs: *jobs, Out: dir, Progress: logw}
	start := time.Now()
	defer func() { fmt.Fprintf(logw, "llmexp: done in %s\n", time.Since(start).Round(time.Second)) }()
	e2eRouters, err := routerCounts(*e2eR)
	if err != nil {
		return err
	}
	var e2eWorkloads []string
	if *e2eW != "" {
		e2eWorkloads = strings.Split(*e2eW, ",")
	}
	e2eRun := func() error {
		cfg := e2e.Config{Caddy: *caddy, Quick: *quick, Seed: *seed, Duration: *e2eS, Progress: logw, Commit: suite.GitCommit()}
		cfg.Routers, cfg.Workloads = e2eRouters, e2eWorkloads
		if *e2eP != "" {
			if cfg.Policies, err = e2e.PoliciesNamed(strings.Split(*e2eP, ",")); err != nil {
				return err
			}
		}
		rec, err := e2e.Run(cfg)
		if err != nil {
			return err
		}
		if fs.NFlag() > 0 { // not the plain `llmexp e2e`: say how it was made
			rec.Command = shellWords(args)
		}
		return e2e.Write(filepath.Join(dir, *e2eO+".json"), filepath.Join(dir, *e2eO+".md"), rec)
	}
	switch cmd := fs.Arg(0); {
	case cmd == "all":
		if err := suite.All(o); err != nil {
			return err
		}
		if _, err := os.Stat(*caddy); err != nil {
			fmt.Fprintf(logw, "llmexp: e2e skipped: %s not found (build it with ./xcaddy.sh build)\n", *caddy)
			return nil
		}
		return e2eRun()
	case cmd == "standard":
		rec, err := suite.RunStandard(o, nil)
		if err != nil {
			return err
		}
		if err := suite.WriteStandard(dir, rec, nil); err != nil {
			return err
		}
		return suite.WriteGoalsFrom(dir)
	case slices.Contains(workload.Kinds, cmd):
		rec, err := suite.RunStandard(o, []string{cmd})
		if err != nil {
			return err
		}
		return suite.WriteWorkload(dir, cmd, rec)
	case cmd == "sweep":
		return suite.Sweeps(o)
	case cmd == "kv_sweep":
		rec, err := suite.RunKVSweep(o)
		if err != nil {
			return err
		}
		return suite.WriteSweep(dir, rec)
	case cmd == "load_sweep":
		rec, err := suite.RunLoadSweep(o)
		if err != nil {
			return err
		}
		return suite.WriteSweep(dir, rec)
	case cmd == "scale":
		rec, err := suite.RunScale(o)
		if err != nil {
			return err
		}
		return suite.WriteSweep(dir, rec)
	case cmd == "variants":
		rec, err := suite.RunVariants(o)
		if err != nil {
			return err
		}
		return suite.WriteVariants(dir, rec)
	case cmd == "routers":
		rec, err := suite.RunRouters(o)
		if err != nil {
			return err
		}
		if err := suite.WriteRouters(dir, rec); err != nil {
			return err
		}
		return suite.WriteGoalsFrom(dir) // goals.md needs standard.json too
	case cmd == "mixed_sweep":
		rec, err := suite.RunMixedSweep(o)
		if err != nil {
			return err
		}
		return suite.WriteRouters(dir, rec)
	case cmd == "residency":
		rec, err := suite.RunResidency(o)
		if err != nil {
			return err
		}
		return suite.WriteResidency(dir, rec)
	case cmd == "e2e":
		return e2eRun()
	case cmd == "e2e_seeds":
		sc := e2e.SeedsConfig{Seeds: *e2eN, Duration: *e2eS, Jobs: *jobs, Progress: logw, Commit: suite.GitCommit()}
		if *quick {
			sc.Seeds = min(sc.Seeds, 2)
			if sc.Duration <= 0 || sc.Duration > 10*time.Second {
				sc.Duration = 10 * time.Second
			}
		}
		sc.Routers, sc.Workloads = e2eRouters, e2eWorkloads
		rec, err := e2e.RunSeeds(sc)
		if err != nil {
			return err
		}
		return e2e.WriteSeeds(filepath.Join(dir, "e2e_seeds.json"), filepath.Join(dir, "e2e_seeds.md"), rec)
	case cmd == "plots":
		return suite.Replot(dir)
	default:
		fs.Usage()
		return fmt.Errorf("unknown command %q (valid: all, standard, %s, sweep, kv_sweep, load_sweep, scale, residency, variants, routers, mixed_sweep, e2e, e2e_seeds, plots)",
			cmd, strings.Join(workload.Kinds, ", "))
	}
}

// routerCounts parses -e2e-routers: comma-separated counts from 1 to 16
// (none: the command's default).
func routerCounts(s string) ([]int, error) {
	var counts []int
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' }) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 16 {
			return nil, fmt.Errorf("-e2e-routers: %q is not a count from 1 to 16", f)
		}
		counts = append(counts, n)
	}
	return counts, nil
}

// shellWords joins args as a shell would read them back: an argument with
// white space or quotes in single quotes.
func shellWords(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = a
		if a == "" || strings.ContainsAny(a, " \t'\"") {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}
