package e2e

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/llmroute/caddy-llmroute/lab/experiments/suite"
	"github.com/llmroute/caddy-llmroute/lab/experiments/trace"
	"github.com/llmroute/caddy-llmroute/lab/experiments/workload"
	"github.com/llmroute/caddy-llmroute/policies"
	"github.com/llmroute/caddy-llmroute/simengine"
)

// The trace scenario replays the start of a Mooncake-format trace through
// caddy: its tokens scaled by TraceBlockTokens/512 (a 15K-token prompt
// becomes about 1K, the answers likewise), its arrivals compressed to
// TraceUtil of the replicas' cold capacity for the run's duration, and
// each replica's cache sized to its share of the replayed window's
// working set (KV 1x, the trace experiment's larger case). It runs alone:
// its cache size is its own.

// TraceBlockTokens is the engine tokens of one 512-token trace block end
// to end.
const TraceBlockTokens = 32

// TraceUtil is the trace scenario's load, as in the simulator's trace
// experiment.
const TraceUtil = 0.7

// TraceScenario returns the first requests of the trace at path that
// arrive over d at TraceUtil of the cold capacity of setup's replicas,
// that rate, and the KV blocks per replica of the window's working set.
// sharedHead > 0 opens every request with that many shared blocks
// (trace.Options.SharedHead).
func TraceScenario(path string, seed uint64, d time.Duration, setup Setup, sharedHead int) (*workload.Workload, float64, int, error) {
	recs, err := trace.Load(path)
	if err != nil {
		return nil, 0, 0, err
	}
	opts := trace.Options{BlockTokens: TraceBlockTokens, Seed: seed, SharedHead: sharedHead, Parse: policies.ParseConfig{Deployment: "e2e"}}
	full := trace.Describe(recs, opts)
	ec := scenarioEngine(setup)
	rate := TraceUtil * setup.coldRate(ec, full.MeanInputTokens, full.MeanOutputTokens)
	opts.Requests = max(int(rate*d.Seconds()), 1)
	st := trace.Describe(recs, opts)
	w, err := trace.Workload(recs, opts, nil)
	if err != nil {
		return nil, 0, 0, err
	}
	// The window's own lengths set the rate it is compressed to.
	rate = TraceUtil * setup.coldRate(ec, w.MeanPromptTokens, w.MeanOutputTokens)
	w.ScaleRate(rate)
	kv := int(math.Ceil(float64(st.WorkingSetTokens) / float64(setup.Replicas) / float64(ec.BlockSize)))
	return w, rate, kv, nil
}

// coldRate is the requests per second setup's replicas serve when nothing
// is cached.
func (s Setup) coldRate(ec simengine.Config, prompt, output float64) float64 {
	per := prompt*ec.PrefillTokenCost.Seconds() + output*(ec.SeqCost.Seconds()+ec.StepFixed.Seconds()/float64(s.Cap))
	return float64(s.Replicas) / per
}

// traceSetup is the scenario of a trace run: scenarioSetup's replicas and
// cap at TraceUtil, with the cache the window needs.
func traceSetup(d time.Duration, kvBlocks int, name string, sharedHead int) Setup {
	s := scenarioSetup(d)
	s.Util, s.KVBlocks = TraceUtil, kvBlocks
	if sharedHead > 0 {
		name = fmt.Sprintf("%s, every request opened with the same %d blocks (a shared system prompt),", name, sharedHead)
	}
	s.Note = fmt.Sprintf("%s replayed from its start: %d engine tokens per 512-token block (prompts and answers scaled by 1/%d), "+
		"arrivals compressed to %.1f of the cold capacity of 4 replicas at engine speed 1, each replica's cache its share of the window's working set (%d blocks). "+
		"Several routers: that many caddy processes, each request sent to one of them at random.",
		name, TraceBlockTokens, trace.TraceBlockTokens/TraceBlockTokens, TraceUtil, kvBlocks)
	return s
}

// TraceGoals checks issue 39's end-to-end goals on the trace runs, per
// router count, on what the client saw: prefix_load's hit rate >= 0.97x
// the simulator's oracle on the same scenario, its TTFT p99 <= 1.1x
// min(round_robin, least_load), and both better than HAProxy's bounded
// body hash; with several routers, hit rate >= 0.85x one router's without
// shared state and >= 0.95x with the homes directory, same tail.
func TraceGoals(rec *Record) []suite.Goal {
	figs := map[int]map[string]*PolicyResult{}
	for _, r := range rec.Runs {
		if r.Workload != workload.Trace {
			continue
		}
		if figs[r.Routers] == nil {
			figs[r.Routers] = map[string]*PolicyResult{}
		}
		figs[r.Routers][r.Policy] = r.Result
	}
	var out []suite.Goal
	for _, n := range sortedKeys(figs) {
		f := figs[n]
		g := func(name string, v float64, need string, met bool, detail string) {
			out = append(out, suite.Goal{Workload: workload.Trace, Routers: n, Name: name, Value: round3(v), Need: need, Met: met, Detail: detail})
		}
		rr, ll := f["round_robin"], f["least_load"]
		if rr == nil || ll == nil {
			continue
		}
		tail := math.Min(rr.TTFT.P99, ll.TTFT.P99)
		for _, name := range []string{"prefix_load", directoryPolicy.Name} {
			pl := f[name]
			if pl == nil || (n == 1 && name != "prefix_load") {
				continue
			}
			if or := rec.SimOracle[n]; n == 1 && or != nil && or.TokenHitRate > 0 {
				v := pl.TokenHitRate / or.TokenHitRate
				g("hit rate / simulated oracle's", v, ">= 0.97", v >= 0.97, fmt.Sprintf("%s %.3f, oracle (sim) %.3f", name, pl.TokenHitRate, or.TokenHitRate))
			}
			if one := figs[1]["prefix_load"]; n > 1 && one != nil && one.TokenHitRate > 0 {
				need := 0.85
				if name == directoryPolicy.Name {
					need = 0.95
				}
				v := pl.TokenHitRate / one.TokenHitRate
				g("hit rate / one router's", v, fmt.Sprintf(">= %.2f", need), v >= need, fmt.Sprintf("%s %.3f, one router %.3f", name, pl.TokenHitRate, one.TokenHitRate))
			}
			v := pl.TTFT.P99 / tail
			g(suite.GoalTail+" ("+name+")", v, "<= 1.10", v <= 1.1, fmt.Sprintf("%s %.0f ms, round_robin %.0f, least_load %.0f", name, pl.TTFT.P99, rr.TTFT.P99, ll.TTFT.P99))
			if hp := f[haproxyPolicy.Name]; hp != nil {
				better := pl.TokenHitRate > hp.TokenHitRate && pl.TTFT.P99 < hp.TTFT.P99
				g("better than HAProxy on hit rate and p99 ("+name+")", pl.TTFT.P99/hp.TTFT.P99, "hit higher, p99 ratio < 1", better,
					fmt.Sprintf("%s hit %.3f p99 %.0f ms, HAProxy hit %.3f p99 %.0f ms", name, pl.TokenHitRate, pl.TTFT.P99, hp.TokenHitRate, hp.TTFT.P99))
			}
		}
	}
	return out
}

func sortedKeys[V any](m map[int]V) []int {
	var ks []int
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// traceGoalsMarkdown is the record's section of issue 39's goals, when it
// holds trace runs.
func traceGoalsMarkdown(rec *Record) string {
	goals := TraceGoals(rec)
	if len(goals) == 0 {
		return ""
	}
	var b strings.Builder
	checks, missed := suite.Tally(goals)
	fmt.Fprintf(&b, "\n## Issue 39's goals on the trace\n\nWhat the client saw; the hit-rate reference is the simulator's oracle on the same scenario "+
		"(oracle hit rate per router count:")
	for _, n := range sortedKeys(rec.SimOracle) {
		fmt.Fprintf(&b, " %d: %.3f;", n, rec.SimOracle[n].TokenHitRate)
	}
	fmt.Fprintf(&b, "). **%d of %d checks missed.**\n\n| routers | goal | value | need | detail |\n|---:|---|---:|---|---|\n", len(missed), checks)
	for _, g := range goals {
		v := fmt.Sprintf("%.3f", g.Value)
		if !g.Met {
			v = "**" + v + "**"
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s |\n", g.Routers, g.Name, v, g.Need, g.Detail)
	}
	return b.String()
}
