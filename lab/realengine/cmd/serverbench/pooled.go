package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/llmroute/caddy-llmroute/internal/stats"
)

// A seed's ratio of one run moves by half or more between runs of the
// same code on a shared 2-core machine (which requests queue behind a
// long prefill decides a median of 200), so a seed's verdict pools its
// runs: each policy's TTFTs of every run of that seed, one distribution.

// pooledTTFTs is, per seed and policy, the sorted TTFTs of all its runs.
func pooledTTFTs(r Record) map[uint64]map[string][]float64 {
	out := map[uint64]map[string][]float64{}
	for _, run := range r.Runs {
		if out[run.Seed] == nil {
			out[run.Seed] = map[string][]float64{}
		}
		out[run.Seed][run.Policy] = append(out[run.Seed][run.Policy], run.TTFTsMs...)
	}
	for _, per := range out {
		for _, ts := range per {
			slices.Sort(ts)
		}
	}
	return out
}

// goalTable renders the goal per seed over the pooled runs, and each
// pair of runs' own ratios (run k of prefix_load against run k of
// least_load) when there are several.
func goalTable(b *strings.Builder, r Record) {
	pooled := pooledTTFTs(r)
	b.WriteString("\nGoal (issue 39): prefix_load's TTFT p50 <= 0.5x least_load's and p99 <= 1.1x, every seed; a seed run several times is judged on its runs' TTFTs pooled.\n\n" +
		"| seed | runs | p50 ratio | p99 ratio | met | per run: p50 / p99 ratio |\n|---|---|---|---|---|---|\n")
	for _, seed := range slices.Sorted(maps.Keys(pooled)) {
		pl, ll := pooled[seed]["prefix_load"], pooled[seed]["least_load"]
		if len(pl) == 0 || len(ll) == 0 {
			continue
		}
		p50 := stats.Percentile(pl, .5) / stats.Percentile(ll, .5)
		p99 := stats.Percentile(pl, .99) / stats.Percentile(ll, .99)
		var per []string
		pls, lls := runsFor(r, seed, "prefix_load"), runsFor(r, seed, "least_load")
		for i := range min(len(pls), len(lls)) {
			a, c := pls[i].Summary, lls[i].Summary
			if c.TTFTP50 > 0 && c.TTFTP99 > 0 {
				per = append(per, fmt.Sprintf("%.2f / %.2f", a.TTFTP50/c.TTFTP50, a.TTFTP99/c.TTFTP99))
			}
		}
		fmt.Fprintf(b, "| %d | %d / %d | %.2f | %.2f | %v | %s |\n", seed, len(pls), len(lls), p50, p99, p50 <= 0.5 && p99 <= 1.1, strings.Join(per, ", "))
	}
}

// runsFor is the runs of policy on seed, in the record's order.
func runsFor(r Record, seed uint64, policy string) []Run {
	var out []Run
	for _, run := range r.Runs {
		if run.Seed == seed && run.Policy == policy {
			out = append(out, run)
		}
	}
	return out
}

// mergeRecords reads serverbench records of the same setup and returns one
// holding all their runs, numbered per seed and policy in the files'
// order; the setup, calibration and samples are the first file's.
func mergeRecords(paths []string) (Record, error) {
	var out Record
	for i, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return Record{}, err
		}
		var r Record
		if err := json.Unmarshal(data, &r); err != nil {
			return Record{}, fmt.Errorf("%s: %w", p, err)
		}
		if i == 0 {
			out = r
			out.Runs = nil
		} else if r.Workload != out.Workload {
			return Record{}, fmt.Errorf("%s: workload %q, not %q", p, r.Workload, out.Workload)
		}
		for _, run := range r.Runs {
			run.Rep = len(runsFor(out, run.Seed, run.Policy)) + 1
			out.Runs = append(out.Runs, run)
		}
	}
	return out, nil
}
