// Command llmtenancy runs the tenant admission experiments in the
// simulator (lab/experiments/tenancy): FIFO against the fair queue under
// a noisy neighbour, weighted shares, and critical goodput under overload
// with and without sheddable traffic. It writes tenancy.json, tenancy.md
// and plots/tenancy_*.png under -out.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/llmroute/caddy-llmroute/lab/experiments/tenancy"
)

func main() {
	out := flag.String("out", "experiments/results", "directory for the records and plots")
	quick := flag.Bool("quick", false, "one seed, 60 s simulated per run (instead of 3 seeds of 180 s)")
	flag.Parse()
	seeds, d := []uint64{1, 2, 3}, 180*time.Second
	if *quick {
		seeds, d = []uint64{1}, 60*time.Second
	}
	start := time.Now()
	rec, err := tenancy.RunAll(seeds, d)
	if err == nil {
		err = tenancy.Write(*out, rec)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "llmtenancy:", err)
		os.Exit(1)
	}
	fmt.Print(tenancy.Markdown(rec))
	fmt.Fprintf(os.Stderr, "llmtenancy: wrote %s/tenancy.{json,md} and plots in %s; "+
		"docs/tenants.md's tables follow with `go -C lab run ./cmd/llmexp docs`\n", *out, time.Since(start).Round(time.Millisecond))
}
