package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmroute/caddy-llmroute/lab/experiments/trace"
	"github.com/llmroute/caddy-llmroute/lab/realengine/client"
)

// tiny is a trace of three prefix families: 1 (three turns, each
// extending the last), 5 (one request) and 7 (two).
const tiny = `{"timestamp": 0, "input_length": 600, "output_length": 64, "hash_ids": [1, 2]}
{"timestamp": 1000, "input_length": 900, "output_length": 32, "hash_ids": [5, 6]}
{"timestamp": 2000, "input_length": 1100, "output_length": 16, "hash_ids": [1, 2, 3]}
{"timestamp": 3000, "input_length": 300, "output_length": 8, "hash_ids": [7]}
{"timestamp": 4000, "input_length": 1500, "output_length": 48, "hash_ids": [1, 2, 3]}
{"timestamp": 8000, "input_length": 700, "output_length": 8, "hash_ids": [7, 8]}
`

// TestTracePlan: the plan holds the sample's requests in order, each
// family's turns sharing their text's prefix, answers scaled with the
// prompts, and arrivals compressed to Util of the two servers' cold
// capacity as the calibration measured it.
func TestTracePlan(t *testing.T) {
	recs, err := trace.Read(strings.NewReader(tiny))
	if err != nil {
		t.Fatal(err)
	}
	cal := Calibration{PrefillMsPerToken: 0.5, DecodeMsPerToken: 4}
	c := config{BlockTokens: 32, Requests: 6, Util: 0.5}
	plan, smp, err := tracePlan(c, recs, 1, cal)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != 6 || smp.Stats.Requests != 6 || smp.Stats.Families != 3 {
		t.Fatalf("%d requests, sample %+v", len(plan), smp.Stats)
	}
	for i, r := range plan {
		if r.Index != i || r.Prev != -1 || r.System != "" || r.User == "" {
			t.Fatalf("request %d: %+v", i, r)
		}
		if i > 0 && r.At < plan[i-1].At {
			t.Fatalf("request %d arrives before %d", i, i-1)
		}
	}
	if !strings.HasPrefix(plan[2].User, plan[0].User) || !strings.HasPrefix(plan[4].User, plan[2].User) || strings.HasPrefix(plan[1].User, plan[0].User[:20]) {
		t.Error("family 1's turns do not extend each other, or family 5 shares their text")
	}
	// 64 trace tokens at 32 a block: 4; 8 scale to 1.
	if plan[0].MaxTokens != 4 || plan[3].MaxTokens != 1 {
		t.Errorf("answer lengths %d, %d, want 4, 1", plan[0].MaxTokens, plan[3].MaxTokens)
	}
	w, err := trace.Workload(recs, trace.Options{BlockTokens: 32, Sample: 6, Seed: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := c.Util * 2 / cal.coldSeconds(w.MeanPromptTokens, w.MeanOutputTokens)
	if math.Abs(smp.Rate-want) > 1e-9*want || w.MeanPromptTokens < smp.Stats.MeanInputTokens {
		t.Errorf("rate %.3f/s, want %.3f (prompts of %.0f tokens)", smp.Rate, want, w.MeanPromptTokens)
	}
	// Six requests over the trace's 8 s, at its own 0.75/s; compressed,
	// the last comes 6/Rate after the first.
	if want := time.Duration(6 / smp.Rate * float64(time.Second)); plan[5].At < want-time.Millisecond || plan[5].At > want+time.Millisecond {
		t.Errorf("last arrival %v, want %v", plan[5].At, want)
	}
}

// TestLoadSpread: most over fewest of the replicas that served, "-" when
// one of two served nothing or there is one.
func TestLoadSpread(t *testing.T) {
	for _, tc := range []struct {
		per  map[string]int
		want string
	}{
		{map[string]int{"a": 30, "b": 10}, "3.00"},
		{map[string]int{"a": 10, "b": 10}, "1.00"},
		{map[string]int{"a": 10}, "-"},
		{map[string]int{"a": 10, "b": 0}, "-"},
	} {
		if got := loadSpread(tc.per); got != tc.want {
			t.Errorf("%v: %s, want %s", tc.per, got, tc.want)
		}
	}
}

// TestMarkdownGoal: the goal table checks prefix_load against least_load
// per seed, and the hit rate is read against the sample's bound.
func TestMarkdownGoal(t *testing.T) {
	r := Record{Workload: "trace", Samples: []Sample{{Seed: 1, Stats: trace.Stats{Requests: 200, Bound: 0.5}}}, Runs: []Run{
		{Policy: "prefix_load", Seed: 1, Summary: client.Summary{TTFTP50: 40, TTFTP99: 1000, CachedTokenRate: 0.45}, TTFTsMs: []float64{40, 40, 1000}},
		{Policy: "least_load", Seed: 1, Summary: client.Summary{TTFTP50: 100, TTFTP99: 1000, CachedTokenRate: 0.3}, TTFTsMs: []float64{100, 100, 1000}},
	}}
	md := markdown(r)
	for _, want := range []string{"| 1 | 1 / 1 | 0.40 | 1.00 | true | 0.40 / 1.00 |", "| 0.450 | 0.90 |", "| 0.300 | 0.60 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

// TestMergePoolsRuns: records merged number their runs per seed and
// policy, and a seed's goal pools its runs' TTFTs (prefix_load's runs
// read 0.20x and 2.00x least_load's median; pooled, 1.15x), listing each
// pair's own ratios.
func TestMergePoolsRuns(t *testing.T) {
	dir := t.TempDir()
	one := func(name string, pl []float64, plSum client.Summary) string {
		r := Record{Workload: "trace", Runs: []Run{
			{Policy: "prefix_load", Seed: 1, Summary: plSum, TTFTsMs: pl},
			{Policy: "least_load", Seed: 1, Summary: client.Summary{TTFTP50: 100, TTFTP99: 100}, TTFTsMs: []float64{100, 100, 100}},
		}}
		if err := write(r, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
		return filepath.Join(dir, name, "realserver.json")
	}
	a := one("a", []float64{10, 20, 30}, client.Summary{TTFTP50: 20, TTFTP99: 30})
	b := one("b", []float64{200, 200, 200}, client.Summary{TTFTP50: 200, TTFTP99: 200})
	r, err := mergeRecords([]string{a, b})
	if err != nil {
		t.Fatal(err)
	}
	var reps []int
	for _, run := range r.Runs {
		reps = append(reps, run.Rep)
	}
	if len(r.Runs) != 4 || fmt.Sprint(reps) != "[1 1 2 2]" {
		t.Fatalf("runs %d, reps %v", len(r.Runs), reps)
	}
	md := markdown(r)
	if want := "| 1 | 2 / 2 | 1.15 | 2.00 | false | 0.20 / 0.30, 2.00 / 2.00 |"; !strings.Contains(md, want) {
		t.Errorf("markdown lacks %q:\n%s", want, md)
	}
	if _, err := mergeRecords([]string{a, filepath.Join(dir, "missing.json")}); err == nil {
		t.Error("a missing record merged")
	}
}

// TestPlotSeeds: the TTFTs kept are those of requests that got a first
// token, sorted, and each seed gets its distribution plot.
func TestPlotSeeds(t *testing.T) {
	ts := sortedTTFTs([]client.Result{{TTFTMs: 30}, {TTFTMs: -1}, {TTFTMs: 10}, {TTFTMs: 20}})
	if len(ts) != 3 || ts[0] != 10 || ts[2] != 30 {
		t.Fatalf("ttfts %v", ts)
	}
	dir := t.TempDir()
	r := Record{Workload: "trace", Runs: []Run{
		{Policy: "prefix_load", Seed: 1, TTFTsMs: ts}, {Policy: "least_load", Seed: 1, TTFTsMs: []float64{40, 50}},
		{Policy: "prefix_load", Seed: 2, TTFTsMs: ts},
	}}
	if err := plotSeeds(r, dir); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ttft_cdf_seed1.png", "ttft_cdf_seed2.png"} {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Size() < 1000 {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestCacheMiB: the RAM prompt cache is the share of a server's half of
// the working set, in engine tokens at the calibration's ratio, at the
// model's KV bytes a token, rounded up, and never 0 (which would turn
// llama-server's cache off).
func TestCacheMiB(t *testing.T) {
	smp := Sample{Stats: trace.Stats{WorkingSetTokens: 75616}}
	cal := Calibration{EngineTokensPerToken: 1.9}
	for _, tc := range []struct {
		share float64
		want  int
	}{
		// 75,616 x 1.9 / 2 = 71,835 tokens x 4 KiB = 280.6 MiB.
		{1, 281},
		{0.25, 71},
		{1e-9, 1},
	} {
		if got := cacheMiB(config{CacheShare: tc.share, KVBytes: 4096}, smp, cal); got != tc.want {
			t.Errorf("share %g: %d MiB, want %d", tc.share, got, tc.want)
		}
	}
}
