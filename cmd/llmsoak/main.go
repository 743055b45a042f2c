// Command llmsoak soaks the caddy binary (Caddy with llmroute) against
// in-process fake replicas: it drives requests at an open-loop rate for a
// bounded time, with random faults from the failure matrix (429, 503, 500,
// poisoned inputs every replica answers 500 to, administrative paths,
// stalls, streams cut mid-way, slow streams, clients that leave), then
// checks that no reservation leaked, no request was sent again after its
// first byte reached the client, no cut answer was shown as complete, no
// replica went above its cap, and caddy's goroutines and memory came back
// near where they started. It exits 1 when any of that fails.
//
//	go run ./cmd/llmsoak -duration 60s -rate 50 -caddy ./caddy -json out.json
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/llmroute/caddy-llmroute/internal/testrig/soak"
)

func main() {
	var cfg soak.Config
	var jsonPath, mix string
	var rssMiB int64
	flag.StringVar(&cfg.Caddy, "caddy", "./caddy", "caddy binary built with llmroute (./xcaddy.sh build)")
	flag.DurationVar(&cfg.Duration, "duration", 60*time.Second, "how long to start requests for")
	flag.Float64Var(&cfg.Rate, "rate", 50, "requests per second (open loop)")
	flag.IntVar(&cfg.MaxInFlight, "max-in-flight", 256, "bound on the client's requests in flight")
	flag.IntVar(&cfg.Replicas, "replicas", 3, "number of fake replicas")
	flag.IntVar(&cfg.Cap, "cap", 8, "max_in_flight per replica")
	flag.IntVar(&cfg.QueueSize, "queue-size", 128, "router queue size")
	flag.DurationVar(&cfg.QueueTimeout, "queue-timeout", 3*time.Second, "router queue timeout")
	flag.DurationVar(&cfg.CooldownBase, "cooldown", 100*time.Millisecond, "the policy's first cooldown of a failing replica")
	flag.DurationVar(&cfg.CooldownMax, "cooldown-max", time.Second, "the policy's longest cooldown")
	flag.Uint64Var(&cfg.Seed, "seed", uint64(time.Now().UnixNano()), "random seed for the request mix")
	flag.StringVar(&mix, "mix", "", "fault weights, e.g. ok=60,429=4,503=4,500=2,stall=2,cut=5,slow=15,disconnect=8,poison=3,forbidden=2 (default that)")
	flag.DurationVar(&cfg.ProgressEvery, "progress", 5*time.Second, "progress line interval")
	flag.IntVar(&cfg.MaxGoroutineGrowth, "max-goroutine-growth", 40, "allowed growth of caddy's goroutines")
	flag.Int64Var(&rssMiB, "max-rss-growth-mib", 96, "allowed growth of caddy's RSS, MiB")
	flag.StringVar(&jsonPath, "json", "", "write the result as JSON to this file")
	flag.Parse()
	cfg.MaxRSSGrowth = rssMiB << 20
	cfg.Progress = os.Stderr
	if mix != "" {
		m, err := parseMix(mix)
		if err != nil {
			fmt.Fprintln(os.Stderr, "llmsoak:", err)
			os.Exit(2)
		}
		cfg.Mix = m
	}
	if _, err := os.Stat(cfg.Caddy); err != nil {
		fmt.Fprintf(os.Stderr, "llmsoak: %v (build it with ./xcaddy.sh build)\n", err)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(os.Stderr, "llmsoak: %v at %.0f/s, %d replicas (cap %d), seed %d\n", cfg.Duration, cfg.Rate, cfg.Replicas, cfg.Cap, cfg.Seed)
	res, err := soak.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "llmsoak:", err)
		os.Exit(2)
	}
	fmt.Print(res.Summary())
	if jsonPath != "" {
		if err := res.WriteJSON(jsonPath); err != nil {
			fmt.Fprintln(os.Stderr, "llmsoak:", err)
			os.Exit(2)
		}
	}
	if !res.Pass {
		os.Exit(1)
	}
}

func parseMix(s string) (map[string]float64, error) {
	known := map[string]bool{}
	for k := range soak.DefaultMix {
		known[k] = true
	}
	m := map[string]float64{}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || !known[k] {
			return nil, fmt.Errorf("bad -mix entry %q (kinds: ok 429 503 500 stall cut slow disconnect)", part)
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 {
			return nil, fmt.Errorf("bad -mix weight %q", part)
		}
		m[k] = f
	}
	return m, nil
}
