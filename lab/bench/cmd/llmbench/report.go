package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"strings"

	"github.com/llmroute/caddy-llmroute/internal/stats"
)

// Targets of issues #9 and #20.
const (
	targetCPURatio = 1.10 // prefix_load CPU per request vs stock Caddy, 4 KiB (issue #20; #9 had 1.25)
	targetP99Added = 1.0  // ms of p99 time to first byte added vs stock Caddy, 4 KiB
	targetP50Added = 0.05 // ms of median time to first byte added vs stock Caddy, 4 KiB (issue #20)
	targetMemRatio = 1.1  // memory per held stream vs stock Caddy
)

// targetCPUBySize is issue #20's bound on CPU per request vs stock Caddy
// at each prompt size, for every llm strategy, JSON and SSE alike.
var targetCPUBySize = map[int]float64{4 << 10: 1.10, 64 << 10: 1.25, 512 << 10: 1.40}

// targetCPUAgent is issue #41's bound on CPU per request vs stock Caddy
// for agent-shaped requests (-prompts agent-tools), at every size.
const targetCPUAgent = 1.30

// sizeVerdict is the CPU target at one prompt size over every llm target
// of the run's own build (not <target>@<binary>) and both answer modes.
type sizeVerdict struct {
	// Endpoint is chat or messages.
	Endpoint    string  `json:"endpoint"`
	PromptBytes int     `json:"prompt_bytes"`
	Max         float64 `json:"cpu_per_req_ratio_max"`
	// Worst is the highest ratio (median of per-round pairs), at
	// WorstTarget in WorstMode; its rounds ranged over WorstRange.
	Worst       float64   `json:"worst_ratio"`
	WorstTarget string    `json:"worst_target"`
	WorstMode   string    `json:"worst_mode"`
	WorstRange  []float64 `json:"worst_ratio_round_range"`
	// WorstPairs is the worst cell's slice pairs: their median and the
	// 95% interval of it (cell.CPUPairCI).
	WorstPairs      int       `json:"worst_slice_pairs,omitempty"`
	WorstPairMedian *float64  `json:"worst_slice_pairs_median,omitempty"`
	WorstPairCI     []float64 `json:"worst_slice_pairs_ci95,omitempty"`
	Met             bool      `json:"met"`
	// Conclusive is set when the worst cell's interval lies wholly on
	// the side of the bound that Met says (absent without slice pairs).
	Conclusive *bool `json:"conclusive,omitempty"`
	// Ratios are every llm target's, by "target/mode".
	Ratios map[string]float64 `json:"ratios"`
}

// cellRound is one target on one workload in one round.
type cellRound struct {
	Round          int     `json:"round"`
	Requests       int     `json:"requests"`
	RPS            float64 `json:"rps"`
	CPUPer1k       float64 `json:"cpu_s_per_1k"`    // proxy CPU seconds per 1,000 requests, throughput phase
	ProxyCPUShare  float64 `json:"proxy_cpu_cores"` // proxy CPU seconds per wall second, throughput phase
	TTFBP50        float64 `json:"ttfb_p50_ms"`     // fixed-rate phase
	TTFBP99        float64 `json:"ttfb_p99_ms"`
	SatP50         float64 `json:"sat_ttfb_p50_ms"` // throughput (saturated) phase
	SatP99         float64 `json:"sat_ttfb_p99_ms"`
	LatencySamples int     `json:"latency_samples"`
	LatencySkipped int     `json:"latency_skipped,omitempty"`
	PeakRSSMiB     float64 `json:"peak_rss_mib"`
	HWMReset       bool    `json:"hwm_reset"`
	ForeignCPU     float64 `json:"foreign_cpu_frac"` // CPU used by other processes during the throughput phase, fraction of all CPUs
	Errors         int     `json:"errors"`
	FirstErr       string  `json:"first_error,omitempty"`

	TTFBSamplesMs []float64 `json:"-"` // sorted, fixed-rate phase

	// Proxy CPU over the fixed-rate phase and the requests it served.
	FixedCPUSeconds float64 `json:"fixed_rate_cpu_s"`
	FixedRequests   int     `json:"fixed_rate_requests"`

	// Go heap allocations per request in the throughput phase (the
	// runtime's Mallocs and TotalAlloc, read from the admin API's
	// /debug/vars around each slice; Caddy targets only): a count that
	// noise does not move, beside the CPU that it does.
	AllocsPerReq   float64 `json:"allocs_per_req,omitempty"`
	AllocKiBPerReq float64 `json:"alloc_kib_per_req,omitempty"`

	// SliceCPUUs is the proxy's CPU microseconds per request in each
	// throughput slice, in slice order: slice s of every target ran in
	// the same pass, seconds apart (the pairs of CPUPairCI).
	SliceCPUUs []float64 `json:"slice_cpu_us_per_req,omitempty"`
}

// cell is one target on one workload, medians over rounds.
type cell struct {
	Target string `json:"target"`
	// Endpoint is the workload's endpoint: chat or messages.
	Endpoint  string  `json:"endpoint"`
	PromptKiB int     `json:"prompt_kib"`
	Stream    bool    `json:"stream"`
	RPS       float64 `json:"rps"`
	CPUPer1k  float64 `json:"cpu_s_per_1k"`
	// TTFB at a fixed rate, percentiles of every round's samples pooled.
	TTFBP50     float64 `json:"ttfb_p50_ms"`
	TTFBP90     float64 `json:"ttfb_p90_ms"`
	TTFBP99     float64 `json:"ttfb_p99_ms"`
	TTFBSamples int     `json:"ttfb_samples"`
	// The same, median over rounds of each round's percentile.
	TTFBP99RoundMedian float64 `json:"ttfb_p99_ms_round_median"`
	SatP50             float64 `json:"sat_ttfb_p50_ms"`
	SatP99             float64 `json:"sat_ttfb_p99_ms"`
	PeakRSSMiB         float64 `json:"peak_rss_mib"`
	Errors             int     `json:"errors"`
	// CPU per 1,000 requests at the fixed rate of the latency phase (every
	// round's CPU over every round's requests), and its ratio to stock
	// Caddy's at the same rate.
	FixedCPUPer1k float64  `json:"fixed_rate_cpu_s_per_1k"`
	FixedCPURatio *float64 `json:"fixed_rate_cpu_per_req_ratio_vs_caddy,omitempty"`
	// Heap allocations (count and KiB) per request, medians over rounds,
	// and the count's ratio to stock Caddy's.
	AllocsPerReq   float64  `json:"allocs_per_req,omitempty"`
	AllocKiBPerReq float64  `json:"alloc_kib_per_req,omitempty"`
	AllocsRatio    *float64 `json:"allocs_per_req_ratio_vs_caddy,omitempty"`

	// Against stock Caddy on the same workload: medians of the per-round
	// paired values (each round measured both within seconds).
	RPSRatio   *float64 `json:"rps_ratio_vs_caddy,omitempty"`
	CPURatio   *float64 `json:"cpu_per_req_ratio_vs_caddy,omitempty"`
	P50AddedMs *float64 `json:"ttfb_p50_added_ms_vs_caddy,omitempty"`
	P90AddedMs *float64 `json:"ttfb_p90_added_ms_vs_caddy,omitempty"`
	P99AddedMs *float64 `json:"ttfb_p99_added_ms_vs_caddy,omitempty"`
	// 95% bootstrap interval of the pooled p99 difference (samples
	// resampled with replacement, 500 times).
	P99AddedCI []float64 `json:"ttfb_p99_added_ms_vs_caddy_ci95,omitempty"`
	// Median over rounds of the per-round p99 difference.
	P99AddedRoundMedian *float64 `json:"ttfb_p99_added_ms_vs_caddy_round_median,omitempty"`
	// The CPU ratio's interval: each throughput slice's CPU per request
	// over stock Caddy's slice of the same pass (seconds apart), every
	// round's pairs together; their median and the 95% bootstrap
	// interval of that median (pairs resampled, 1,000 times).
	CPUPairs      int       `json:"cpu_ratio_slice_pairs,omitempty"`
	CPUPairMedian *float64  `json:"cpu_ratio_slice_pairs_median,omitempty"`
	CPUPairCI     []float64 `json:"cpu_ratio_slice_pairs_ci95,omitempty"`

	// Noise: (max - min) / median over rounds.
	RPSSpread float64 `json:"rps_spread"`
	CPUSpread float64 `json:"cpu_spread"`

	Rounds []cellRound `json:"rounds"`
}

type envInfo struct {
	CPUs             int    `json:"cpus"`
	ProxyCPUs        []int  `json:"proxy_cpus"`
	ClientCPUs       []int  `json:"client_cpus"`
	GOMAXPROCSProxy  int    `json:"gomaxprocs_proxy"`
	GOMAXPROCSClient int    `json:"gomaxprocs_client"`
	GoVersion        string `json:"go"`
	Caddy            string `json:"caddy"`
	HAProxy          string `json:"haproxy,omitempty"`
	HAProxyBalance   string `json:"haproxy_balance,omitempty"`
	Kernel           string `json:"kernel"`
	GitRev           string `json:"git_rev"`
	LoadAvgStart     string `json:"loadavg_start"`
	LoadAvgEnd       string `json:"loadavg_end"`
	NoFile           uint64 `json:"nofile"`
}

type runConfig struct {
	Quick          bool     `json:"quick"`
	Rounds         int      `json:"rounds"`
	WarmupS        float64  `json:"warmup_s"`
	ThroughputS    float64  `json:"throughput_phase_s"`
	LatencyS       float64  `json:"latency_phase_s"`
	LatencyRate    int      `json:"latency_rate_rps_per_target"`
	Slices         int      `json:"throughput_slices"`
	Concurrency    int      `json:"concurrency"`
	Upstreams      int      `json:"upstreams"`
	Targets        []string `json:"targets"`
	Sizes          []int    `json:"prompt_bytes"`
	MaxInFlight    int      `json:"max_in_flight"`
	Streams        int      `json:"streams"`
	StreamInterval string   `json:"stream_interval"`
	StreamHold     string   `json:"stream_hold"`
	StreamPrompt   int      `json:"stream_prompt_bytes"`
	Tenants        int      `json:"tenants"`
	BodiesPerShape int      `json:"bodies_per_workload"`
	// Prompts is the prompt shape (-prompts: plain, agent or agent-tools;
	// absent from results recorded before it existed, which are plain).
	Prompts string `json:"prompts,omitempty"`
	// Endpoints are the matrix's endpoints (-endpoints: chat, messages;
	// absent from results recorded before it existed, which are chat).
	Endpoints        []string `json:"endpoints,omitempty"`
	StreamChunksFast int      `json:"sse_content_chunks"`
	// Percentiles names the percentile definition of every TTFB figure
	// (absent from results recorded before it changed from nearest rank).
	Percentiles string `json:"percentiles"`
}

// percentileMethod is runConfig.Percentiles.
const percentileMethod = "linear interpolation between closest ranks (internal/stats.Percentile)"

type releaseCheck struct {
	Target        string `json:"target"`
	TotalInFlight int    `json:"total_in_flight"`
	Queued        int    `json:"queued"`
	OK            bool   `json:"ok"`
}

type noise struct {
	ForeignCPUMedian float64 `json:"foreign_cpu_frac_median"`
	ForeignCPUMax    float64 `json:"foreign_cpu_frac_max"`
	CPUSpreadMedian  float64 `json:"cpu_spread_median"`
	CPUSpreadMax     float64 `json:"cpu_spread_max"`
	RPSSpreadMedian  float64 `json:"rps_spread_median"`
	RPSSpreadMax     float64 `json:"rps_spread_max"`
	Note             string  `json:"note"`
}

type verdict struct {
	CPURatioMax   float64 `json:"cpu_per_req_ratio_max"`
	P99AddedMaxMs float64 `json:"ttfb_p99_added_ms_max"`
	MemRatioMax   float64 `json:"mem_per_stream_ratio_max"`
	P50AddedMaxMs float64 `json:"ttfb_p50_added_ms_max"`
	CPUMet        *bool   `json:"cpu_met,omitempty"`
	P50Met        *bool   `json:"ttfb_p50_met,omitempty"`
	// CPUBySize is issue #20's CPU target at each prompt size.
	CPUBySize []sizeVerdict `json:"cpu_by_size,omitempty"`
	P99Met    *bool         `json:"ttfb_met,omitempty"`
	// P99Conclusive: the upper end of the 95% interval of the added p99
	// (worse mode) is within the target too, so noise cannot hide a miss.
	P99Conclusive   *bool  `json:"ttfb_met_conclusively,omitempty"`
	MemMet          *bool  `json:"mem_met,omitempty"`
	ReleasedMet     *bool  `json:"released_met,omitempty"`
	NoErrors        bool   `json:"no_errors"`
	ConcurrencyNote string `json:"concurrency_note,omitempty"`
}

type report struct {
	// Headline: llm_prefix_load at 4 KiB against stock Caddy, the worse
	// of streamed and non-streamed answers.
	CPURatio        *float64             `json:"cpu_per_req_ratio_vs_caddy"`
	P99Added        *float64             `json:"ttfb_p99_added_ms_vs_caddy"`
	P99AddedCI      map[string][]float64 `json:"ttfb_p99_added_ms_vs_caddy_ci95_by_mode"`
	P50AddedBy      map[string]float64   `json:"ttfb_p50_added_ms_vs_caddy_by_mode"`
	CPURatioBy      map[string]float64   `json:"cpu_per_req_ratio_vs_caddy_by_mode"`
	P99AddedBy      map[string]float64   `json:"ttfb_p99_added_ms_vs_caddy_by_mode"`
	FixedCPURatioBy map[string]float64   `json:"cpu_per_req_ratio_vs_caddy_fixed_rate_by_mode"`
	MemRatio        *float64             `json:"mem_per_stream_ratio_vs_caddy,omitempty"`
	LiveMemRatio    *float64             `json:"live_heap_per_stream_ratio_vs_caddy,omitempty"`
	Targets         verdict              `json:"targets"`
	GeneratedAt     string               `json:"generated_at"`
	WallSeconds     float64              `json:"wall_seconds"`
	Notes           []string             `json:"notes,omitempty"`
	Env             envInfo              `json:"env"`
	Config          runConfig            `json:"config"`
	Noise           noise                `json:"noise"`
	Table           []*cell              `json:"table"`

	MatrixReleased []releaseCheck `json:"matrix_released,omitempty"`
	Concurrency    []concResult   `json:"concurrency,omitempty"`

	index map[string]*cell
}

func cellKey(target, endpoint string, size int, stream bool) string {
	return fmt.Sprintf("%s|%s|%d|%v", target, endpoint, size, stream)
}

func (r *report) addRound(target string, w workload, cr cellRound) {
	if r.index == nil {
		r.index = map[string]*cell{}
	}
	endpoint := w.endpoint
	if endpoint == "" {
		endpoint = "chat"
	}
	k := cellKey(target, endpoint, w.size, w.stream)
	c := r.index[k]
	if c == nil {
		c = &cell{Target: target, Endpoint: endpoint, PromptKiB: w.size >> 10, Stream: w.stream}
		r.index[k] = c
		r.Table = append(r.Table, c)
	}
	c.Rounds = append(c.Rounds, cr)
}

func spread(xs []float64) float64 {
	if len(xs) < 2 {
		return 0
	}
	lo, hi := xs[0], xs[0]
	for _, x := range xs {
		lo, hi = min(lo, x), max(hi, x)
	}
	m := stats.Median(xs)
	if m == 0 {
		return 0
	}
	return (hi - lo) / m
}

func ptr[T any](v T) *T { return &v }

// order sorts the table by prompt size, mode, then the run's target order.
func (r *report) order() {
	pos := map[string]int{}
	for i, t := range r.Config.Targets {
		pos[t] = i
	}
	sort.SliceStable(r.Table, func(i, j int) bool {
		a, b := r.Table[i], r.Table[j]
		if a.Endpoint != b.Endpoint {
			return a.Endpoint < b.Endpoint
		}
		if a.PromptKiB != b.PromptKiB {
			return a.PromptKiB < b.PromptKiB
		}
		if a.Stream != b.Stream {
			return !a.Stream
		}
		return pos[a.Target] < pos[b.Target]
	})
}

func (r *report) finish() {
	r.order()
	get := func(c *cell, f func(cellRound) float64) []float64 {
		var xs []float64
		for _, cr := range c.Rounds {
			xs = append(xs, f(cr))
		}
		return xs
	}
	var foreign, cpuSpreads, rpsSpreads []float64
	errorsSeen := false
	for _, c := range r.Table {
		c.RPS = stats.Median(get(c, func(x cellRound) float64 { return x.RPS }))
		c.CPUPer1k = stats.Median(get(c, func(x cellRound) float64 { return x.CPUPer1k }))
		var pooled []float64
		for _, cr := range c.Rounds {
			pooled = append(pooled, cr.TTFBSamplesMs...)
		}
		sort.Float64s(pooled)
		c.TTFBP50, c.TTFBP90, c.TTFBP99 = stats.Percentile(pooled, 0.50), stats.Percentile(pooled, 0.90), stats.Percentile(pooled, 0.99)
		c.TTFBSamples = len(pooled)
		c.TTFBP99RoundMedian = stats.Median(get(c, func(x cellRound) float64 { return x.TTFBP99 }))
		c.SatP50 = stats.Median(get(c, func(x cellRound) float64 { return x.SatP50 }))
		c.SatP99 = stats.Median(get(c, func(x cellRound) float64 { return x.SatP99 }))
		c.PeakRSSMiB = stats.Median(get(c, func(x cellRound) float64 { return x.PeakRSSMiB }))
		c.AllocsPerReq = stats.Median(get(c, func(x cellRound) float64 { return x.AllocsPerReq }))
		c.AllocKiBPerReq = stats.Median(get(c, func(x cellRound) float64 { return x.AllocKiBPerReq }))
		var fcpu float64
		var freq int
		for _, cr := range c.Rounds {
			fcpu += cr.FixedCPUSeconds
			freq += cr.FixedRequests
		}
		if freq > 0 && fcpu > 0 {
			c.FixedCPUPer1k = fcpu / float64(freq) * 1000
		}
		c.RPSSpread = spread(get(c, func(x cellRound) float64 { return x.RPS }))
		c.CPUSpread = spread(get(c, func(x cellRound) float64 { return x.CPUPer1k }))
		for _, cr := range c.Rounds {
			c.Errors += cr.Errors
			foreign = append(foreign, cr.ForeignCPU)
		}
		errorsSeen = errorsSeen || c.Errors > 0
		if c.Target != "direct" {
			cpuSpreads = append(cpuSpreads, c.CPUSpread)
		}
		rpsSpreads = append(rpsSpreads, c.RPSSpread)

		base := r.index[cellKey("caddy", c.Endpoint, c.PromptKiB<<10, c.Stream)]
		if base == nil || c.Target == "caddy" {
			continue
		}
		byRound := map[int]cellRound{}
		for _, cr := range base.Rounds {
			byRound[cr.Round] = cr
		}
		var rps, cpu, p99 []float64
		for _, cr := range c.Rounds {
			b, ok := byRound[cr.Round]
			if !ok {
				continue
			}
			if b.RPS > 0 {
				rps = append(rps, cr.RPS/b.RPS)
			}
			if b.CPUPer1k > 0 && c.Target != "direct" {
				cpu = append(cpu, cr.CPUPer1k/b.CPUPer1k)
			}
			p99 = append(p99, cr.TTFBP99-b.TTFBP99)
		}
		if len(rps) > 0 {
			c.RPSRatio = ptr(stats.Median(rps))
			c.P99AddedRoundMedian = ptr(stats.Median(p99))
		}
		if len(cpu) > 0 {
			c.CPURatio = ptr(stats.Median(cpu))
		}
		if pairs := slicePairs(c, base); len(pairs) > 0 && c.Target != "direct" {
			c.CPUPairs = len(pairs)
			c.CPUPairMedian = ptr(stats.Median(pairs))
			c.CPUPairCI = bootstrapMedian(pairs, 1000)
		}
		if base.AllocsPerReq > 0 && c.AllocsPerReq > 0 {
			c.AllocsRatio = ptr(c.AllocsPerReq / base.AllocsPerReq)
		}
	}
	// Pooled TTFB differences need every cell's pooled percentiles first.
	for _, c := range r.Table {
		base := r.index[cellKey("caddy", c.Endpoint, c.PromptKiB<<10, c.Stream)]
		if base == nil || c.Target == "caddy" || c.TTFBSamples == 0 || base.TTFBSamples == 0 {
			continue
		}
		if base.FixedCPUPer1k > 0 && c.FixedCPUPer1k > 0 {
			c.FixedCPURatio = ptr(c.FixedCPUPer1k / base.FixedCPUPer1k)
		}
		c.P50AddedMs = ptr(c.TTFBP50 - base.TTFBP50)
		c.P90AddedMs = ptr(c.TTFBP90 - base.TTFBP90)
		c.P99AddedMs = ptr(c.TTFBP99 - base.TTFBP99)
		c.P99AddedCI = bootstrapDiff(pooledOf(c), pooledOf(base), 0.99, 500)
	}
	r.Noise = noise{
		ForeignCPUMedian: stats.Median(foreign), ForeignCPUMax: maxOf(foreign),
		CPUSpreadMedian: stats.Median(cpuSpreads), CPUSpreadMax: maxOf(cpuSpreads),
		RPSSpreadMedian: stats.Median(rpsSpreads), RPSSpreadMax: maxOf(rpsSpreads),
		Note: "foreign_cpu_frac: CPU time other processes on the machine used during throughput phases, as a fraction of all CPUs; spreads: (max-min)/median over rounds",
	}
	if len(foreign) == 0 {
		// Pooled TTFB differences need every cell's pooled percentiles first.
		for _, c := range r.Table {
			base := r.index[cellKey("caddy", c.Endpoint, c.PromptKiB<<10, c.Stream)]
			if base == nil || c.Target == "caddy" || c.TTFBSamples == 0 || base.TTFBSamples == 0 {
				continue
			}
			if base.FixedCPUPer1k > 0 && c.FixedCPUPer1k > 0 {
				c.FixedCPURatio = ptr(c.FixedCPUPer1k / base.FixedCPUPer1k)
			}
			c.P50AddedMs = ptr(c.TTFBP50 - base.TTFBP50)
			c.P99AddedMs = ptr(c.TTFBP99 - base.TTFBP99)
		}
		r.Noise = noise{Note: "no matrix run"}
	}

	// Headline.
	r.CPURatioBy, r.P99AddedBy = map[string]float64{}, map[string]float64{}
	r.P99AddedCI, r.P50AddedBy = map[string][]float64{}, map[string]float64{}
	r.FixedCPURatioBy = map[string]float64{}
	for _, stream := range []bool{false, true} {
		c := r.index[cellKey("llm_prefix_load", "chat", 4096, stream)]
		if c == nil {
			continue
		}
		mode := map[bool]string{false: "json", true: "sse"}[stream]
		if c.CPURatio != nil {
			r.CPURatioBy[mode] = *c.CPURatio
			if r.CPURatio == nil || *c.CPURatio > *r.CPURatio {
				r.CPURatio = ptr(*c.CPURatio)
			}
		}
		if c.P50AddedMs != nil {
			r.P50AddedBy[mode] = *c.P50AddedMs
		}
		if c.FixedCPURatio != nil {
			r.FixedCPURatioBy[mode] = *c.FixedCPURatio
		}
		if c.P99AddedCI != nil {
			r.P99AddedCI[mode] = c.P99AddedCI
		}
		if c.P99AddedMs != nil {
			r.P99AddedBy[mode] = *c.P99AddedMs
			if r.P99Added == nil || *c.P99AddedMs > *r.P99Added {
				r.P99Added = ptr(*c.P99AddedMs)
			}
		}
	}
	r.Targets = verdict{CPURatioMax: targetCPURatio, P99AddedMaxMs: targetP99Added, P50AddedMaxMs: targetP50Added, MemRatioMax: targetMemRatio, NoErrors: !errorsSeen}
	if r.CPURatio != nil {
		r.Targets.CPUMet = ptr(*r.CPURatio <= targetCPURatio)
	}
	if len(r.P50AddedBy) > 0 {
		worst := math.Inf(-1)
		for _, v := range r.P50AddedBy {
			worst = max(worst, v)
		}
		r.Targets.P50Met = ptr(worst <= targetP50Added)
	}
	r.Targets.CPUBySize = r.cpuBySize()
	if r.P99Added != nil {
		r.Targets.P99Met = ptr(*r.P99Added <= targetP99Added)
		hi, n := math.Inf(-1), 0
		for _, ci := range r.P99AddedCI {
			if len(ci) == 2 {
				hi, n = max(hi, ci[1]), n+1
			}
		}
		if n > 0 {
			r.Targets.P99Conclusive = ptr(hi <= targetP99Added)
		}
	}
	var cc, cl *concResult
	for i := range r.Concurrency {
		switch r.Concurrency[i].Target {
		case "caddy":
			cc = &r.Concurrency[i]
		case "llm_prefix_load":
			cl = &r.Concurrency[i]
		}
		if r.Concurrency[i].Errors > 0 {
			r.Targets.NoErrors = false
		}
	}
	if cc != nil && cl != nil && cc.KiBPerStream > 0 {
		r.MemRatio = ptr(cl.KiBPerStream / cc.KiBPerStream)
		if cc.LiveKiBPerStream > 0 {
			r.LiveMemRatio = ptr(cl.LiveKiBPerStream / cc.LiveKiBPerStream)
		}
		r.Targets.MemMet = ptr(*r.MemRatio <= targetMemRatio)
	}
	released := true
	seen := false
	for _, rc := range r.MatrixReleased {
		seen = true
		released = released && rc.OK
	}
	if cl != nil && cl.Released != nil {
		seen = true
		released = released && *cl.Released
	}
	if seen {
		r.Targets.ReleasedMet = ptr(released)
	}
}

// cpuBySize judges the CPU target at each endpoint and prompt size of the
// run: targetCPUBySize, or targetCPUAgent for -prompts agent-tools.
func (r *report) cpuBySize() []sizeVerdict {
	var out []sizeVerdict
	endpoints := r.Config.Endpoints
	if len(endpoints) == 0 {
		endpoints = []string{"chat"}
	}
	for _, endpoint := range endpoints {
		out = append(out, r.cpuAt(endpoint)...)
	}
	return out
}

// cpuAt is cpuBySize at one endpoint.
func (r *report) cpuAt(endpoint string) []sizeVerdict {
	var out []sizeVerdict
	for _, size := range r.Config.Sizes {
		bound, ok := targetCPUBySize[size]
		if r.Config.Prompts == "agent-tools" {
			bound, ok = targetCPUAgent, true
		}
		if !ok {
			continue
		}
		v := sizeVerdict{Endpoint: endpoint, PromptBytes: size, Max: bound, Worst: math.Inf(-1), Ratios: map[string]float64{}}
		var worst *cell
		for _, c := range r.Table {
			if c.Endpoint != endpoint || c.PromptKiB<<10 != size || !strings.HasPrefix(c.Target, "llm_") || strings.Contains(c.Target, "@") || c.CPURatio == nil {
				continue
			}
			mode := map[bool]string{false: "json", true: "sse"}[c.Stream]
			v.Ratios[c.Target+"/"+mode] = *c.CPURatio
			if *c.CPURatio > v.Worst {
				v.Worst, v.WorstTarget, v.WorstMode, worst = *c.CPURatio, c.Target, mode, c
			}
		}
		if worst == nil {
			continue
		}
		base := r.index[cellKey("caddy", endpoint, size, worst.Stream)]
		lo, hi := math.Inf(1), math.Inf(-1)
		sameRounds(worst, base, func(cr, b cellRound) {
			if b.CPUPer1k > 0 {
				x := cr.CPUPer1k / b.CPUPer1k
				lo, hi = min(lo, x), max(hi, x)
			}
		})
		if lo <= hi {
			v.WorstRange = []float64{lo, hi}
		}
		v.Met = v.Worst <= bound
		if ci := worst.CPUPairCI; len(ci) == 2 {
			v.WorstPairs, v.WorstPairMedian, v.WorstPairCI = worst.CPUPairs, worst.CPUPairMedian, ci
			v.Conclusive = ptr((v.Met && ci[1] <= bound) || (!v.Met && ci[0] > bound))
		}
		out = append(out, v)
	}
	return out
}

// slicePairs returns c's CPU per request over base's, slice by slice of
// the same round (the slices of one pass ran seconds apart).
func slicePairs(c, base *cell) []float64 {
	var out []float64
	sameRounds(c, base, func(cr, b cellRound) {
		for s := range min(len(cr.SliceCPUUs), len(b.SliceCPUUs)) {
			if b.SliceCPUUs[s] > 0 {
				out = append(out, cr.SliceCPUUs[s]/b.SliceCPUUs[s])
			}
		}
	})
	return out
}

// sameRounds calls f with each round of c and base's round of the same
// number.
func sameRounds(c, base *cell, f func(cr, b cellRound)) {
	for _, cr := range c.Rounds {
		for _, b := range base.Rounds {
			if b.Round == cr.Round {
				f(cr, b)
			}
		}
	}
}

// bootstrapMedian returns the 2.5th and 97.5th percentiles of the median
// of xs over n resamplings with replacement.
func bootstrapMedian(xs []float64, n int) []float64 {
	if len(xs) == 0 {
		return nil
	}
	rs := make([]float64, len(xs))
	return bootstrap(n, rand.NewPCG(3, 4), func(r *rand.Rand) float64 {
		resample(r, rs, xs)
		return stats.Median(rs)
	})
}

// bootstrap returns the 2.5th and 97.5th percentiles of stat over n
// resamplings drawn from src.
func bootstrap(n int, src rand.Source, stat func(r *rand.Rand) float64) []float64 {
	r := rand.New(src)
	vals := make([]float64, n)
	for i := range vals {
		vals[i] = stat(r)
	}
	sort.Float64s(vals)
	return []float64{stats.Percentile(vals, 0.025), stats.Percentile(vals, 0.975)}
}

// resample fills dst with draws, with replacement, from xs.
func resample(r *rand.Rand, dst, xs []float64) {
	for j := range dst {
		dst[j] = xs[r.IntN(len(xs))]
	}
}

func pooledOf(c *cell) []float64 {
	var xs []float64
	for _, cr := range c.Rounds {
		xs = append(xs, cr.TTFBSamplesMs...)
	}
	return xs
}

// bootstrapDiff returns the 2.5th and 97.5th percentiles of the
// difference of the q-th percentiles of a and b over n resamplings.
func bootstrapDiff(a, b []float64, q float64, n int) []float64 {
	if len(a) == 0 || len(b) == 0 {
		return nil
	}
	ra, rb := make([]float64, len(a)), make([]float64, len(b))
	return bootstrap(n, rand.NewPCG(1, 2), func(r *rand.Rand) float64 {
		resample(r, ra, a)
		resample(r, rb, b)
		sort.Float64s(ra)
		sort.Float64s(rb)
		return stats.Percentile(ra, q) - stats.Percentile(rb, q)
	})
}

func maxOf(xs []float64) float64 {
	m := 0.0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

func (r *report) write(jsonPath, mdPath string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(jsonPath, append(b, '\n'), 0o644); err != nil {
		return err
	}
	var sb strings.Builder
	r.markdown(&sb)
	return os.WriteFile(mdPath, []byte(sb.String()), 0o644)
}

func (r *report) print(w io.Writer) {
	var sb strings.Builder
	r.markdown(&sb)
	fmt.Fprint(w, sb.String())
}

func fnum(v float64, prec int) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.*f", prec, v)
}

func fptr(v *float64, prec int, suffix string, sign bool) string {
	if v == nil {
		return "-"
	}
	if sign {
		return fmt.Sprintf("%+.*f%s", prec, *v, suffix)
	}
	return fmt.Sprintf("%.*f%s", prec, *v, suffix)
}

func yesNo(b *bool) string {
	switch {
	case b == nil:
		return "not measured"
	case *b:
		return "met"
	}
	return "NOT met"
}

// markdown writes the summary and the table.
func (r *report) markdown(w io.Writer) {
	e := r.Env
	fmt.Fprintf(w, "Run %s (tree %s), %.0f s: %d CPUs (proxy pinned to %v with GOMAXPROCS=%d; load generator + fake upstream on %v), %s, %s",
		r.GeneratedAt, e.GitRev, r.WallSeconds, e.CPUs, e.ProxyCPUs, e.GOMAXPROCSProxy, e.ClientCPUs, e.GoVersion, e.Caddy)
	if e.HAProxy != "" {
		fmt.Fprintf(w, ", %s (`balance %s`)", e.HAProxy, e.HAProxyBalance)
	}
	fmt.Fprintf(w, ".\n%d round(s). Per round and workload: %.1f s per target at concurrency %d in %d slices alternating between targets (req/s, CPU, peak RSS; medians over rounds, ratios = medians of per-round pairs with stock Caddy), then %.0f s of a fixed-rate stream, %d req/s per target (fewer above 16 KiB prompts: %d at 64 KiB), sent to all targets in turn (TTFB percentiles over all rounds' samples, interpolated linearly between ranks; CI = bootstrap).\n\n",
		r.Config.Rounds, r.Config.ThroughputS, r.Config.Concurrency, r.Config.Slices, r.Config.LatencyS, r.Config.LatencyRate, latencyRate(r.Config.LatencyRate, 64<<10))
	switch r.Config.Prompts {
	case "agent":
		fmt.Fprintf(w, "Prompts: agent (-prompts agent): a coding agent's chat bodies, the tenant's system prompt (half the size), a task, then rounds of an assistant tool call and a tool message carrying Go source (an escape every 20 bytes or so).\n\n")
	case "agent-tools":
		fmt.Fprintf(w, "Prompts: agent-tools (-prompts agent-tools, internal/agentbody): a coding agent's bodies with the tenant's 6 KiB system prompt and %d tool definitions (27 KB), then rounds of a tool call and its result (Go source, an escape every 20 bytes or so) to the size; endpoints %s (messages: Anthropic's /v1/messages, answered with an Anthropic stream).\n\n", agentTools, strings.Join(r.Config.Endpoints, ", "))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "Note: %s\n\n", n)
	}
	if len(r.Table) > 0 {
		fmt.Fprintln(w, "| endpoint | prompt | answer | target | req/s | × caddy | CPU s / 1k req | × caddy | CPU s / 1k at fixed rate | × caddy | TTFB p50 ms | p90 ms | p99 ms | p50 vs caddy | p99 vs caddy [95% CI] | peak RSS MiB | allocs / req | × caddy | KiB alloc / req | CPU spread |")
		fmt.Fprintln(w, "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		for _, c := range r.Table {
			mode := map[bool]string{false: "json", true: "sse"}[c.Stream]
			cpu, fcpu, rss := fnum(c.CPUPer1k, 3), fnum(c.FixedCPUPer1k, 3), fnum(c.PeakRSSMiB, 1)
			if c.Target == "direct" {
				cpu, fcpu, rss = "-", "-", "-"
			}
			errs := ""
			if c.Errors > 0 {
				errs = fmt.Sprintf(" (%d errors)", c.Errors)
			}
			ci := ""
			if len(c.P99AddedCI) == 2 {
				ci = fmt.Sprintf(" [%+.1f, %+.1f]", c.P99AddedCI[0], c.P99AddedCI[1])
			}
			allocs, akib := fnum(c.AllocsPerReq, 1), fnum(c.AllocKiBPerReq, 1)
			if c.AllocsPerReq == 0 {
				allocs, akib = "-", "-"
			}
			fmt.Fprintf(w, "| %s | %d KiB | %s | %s%s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s%s | %s | %s | %s | %s | %s |\n",
				c.Endpoint, c.PromptKiB, mode, c.Target, errs, fnum(c.RPS, 0), fptr(c.RPSRatio, 2, "", false), cpu, fptr(c.CPURatio, 2, "", false),
				fcpu, fptr(c.FixedCPURatio, 2, "", false),
				fnum(c.TTFBP50, 3), fnum(c.TTFBP90, 3), fnum(c.TTFBP99, 3), fptr(c.P50AddedMs, 3, " ms", true), fptr(c.P99AddedMs, 2, " ms", true), ci, rss,
				allocs, fptr(c.AllocsRatio, 2, "", false), akib, fnum(100*c.CPUSpread, 0)+"%")
		}
		fmt.Fprintln(w)
	}
	if len(r.Concurrency) > 0 {
		fmt.Fprintf(w, "Concurrency: %d SSE streams (%d-byte prompts, a chunk every %s), all held open %s once open, one fresh proxy each:\n\n", r.Config.Streams, r.Config.StreamPrompt, r.Config.StreamInterval, r.Config.StreamHold)
		fmt.Fprintln(w, "| proxy | streams ok | open at once (after) | RSS before → while open | KiB per stream (RSS) | peak KiB per stream | live heap+stacks KiB per stream | CPU s | reservations after |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---|")
		for _, c := range r.Concurrency {
			rel := "-"
			if c.Released != nil {
				rel = fmt.Sprintf("total_in_flight=%d queued=%d", *c.InFlightAfter, *c.QueuedAfter)
			}
			fmt.Fprintf(w, "| %s | %d/%d | %d (%.1f s) | %.1f → %.1f MiB | %.1f | %.1f | %.1f | %.2f | %s |\n",
				c.Target, c.OK, c.Streams, c.OpenAtOnce, c.AllOpenSeconds, c.BaselineRSSMiB, c.PlateauRSSMiB, c.KiBPerStream, c.PeakKiBPerStr, c.LiveKiBPerStream, c.CPUSeconds, rel)
		}
		fmt.Fprintln(w)
	}
	t := r.Targets
	fmt.Fprintln(w, "Targets (llm_prefix_load vs stock Caddy; headline = worse of json and sse at 4 KiB):")
	fmt.Fprintf(w, "- CPU per request ≤ %.2f× (at saturation): %s (json %s, sse %s) → %s; at the fixed rate of the latency phase: json %s, sse %s\n", t.CPURatioMax, fptr(r.CPURatio, 2, "×", false),
		fmtMap(r.CPURatioBy, "json", 2, "×"), fmtMap(r.CPURatioBy, "sse", 2, "×"), yesNo(t.CPUMet),
		fmtMap(r.FixedCPURatioBy, "json", 2, "×"), fmtMap(r.FixedCPURatioBy, "sse", 2, "×"))
	fmt.Fprintf(w, "- p99 TTFB added ≤ %.1f ms: %s (json %s %s, sse %s %s; p50 added: json %s, sse %s) → %s\n", t.P99AddedMaxMs, fptr(r.P99Added, 3, " ms", true),
		fmtMap(r.P99AddedBy, "json", 3, " ms"), fmtCI(r.P99AddedCI["json"]), fmtMap(r.P99AddedBy, "sse", 3, " ms"), fmtCI(r.P99AddedCI["sse"]),
		fmtMap(r.P50AddedBy, "json", 3, " ms"), fmtMap(r.P50AddedBy, "sse", 3, " ms"), yesNo(t.P99Met)+conclusive(t.P99Met, t.P99Conclusive))
	for _, v := range t.CPUBySize {
		rng := ""
		if len(v.WorstRange) == 2 {
			rng = fmt.Sprintf(", rounds %.2f-%.2f×", v.WorstRange[0], v.WorstRange[1])
		}
		pairs, sure := "", ""
		if len(v.WorstPairCI) == 2 && v.WorstPairMedian != nil {
			pairs = fmt.Sprintf("; its %d slice pairs: median %.2f×, 95%% CI %.2f-%.2f×", v.WorstPairs, *v.WorstPairMedian, v.WorstPairCI[0], v.WorstPairCI[1])
			switch {
			case *v.Conclusive:
				sure = " (the whole interval is on that side of the target)"
			case v.Met:
				sure = " on the point estimate only: the interval reaches past the target"
			default:
				sure = " on the point estimate only: the interval reaches below the target, so this machine's noise cannot confirm it"
			}
		}
		issue := "issue #20"
		if r.Config.Prompts == "agent-tools" {
			issue = "issue #41"
		}
		fmt.Fprintf(w, "- CPU per request, %s at %d KiB ≤ %.2f× for every strategy, json and sse (%s): worst %.2f× (%s %s%s%s) → %s%s\n",
			v.Endpoint, v.PromptBytes>>10, v.Max, issue, v.Worst, v.WorstTarget, v.WorstMode, rng, pairs, yesNo(&v.Met), sure)
	}
	fmt.Fprintf(w, "- median TTFB added ≤ %.2f ms at 4 KiB (issue #20): json %s, sse %s → %s\n", t.P50AddedMaxMs,
		fmtMap(r.P50AddedBy, "json", 3, " ms"), fmtMap(r.P50AddedBy, "sse", 3, " ms"), yesNo(t.P50Met))
	fmt.Fprintf(w, "- memory per held stream ≤ %.1f× (RSS delta): %s → %s; live Go heap + stacks per stream: %s\n", t.MemRatioMax, fptr(r.MemRatio, 3, "×", false), yesNo(t.MemMet), fptr(r.LiveMemRatio, 3, "×", false))
	fmt.Fprintf(w, "- every reservation released (total_in_flight == 0): %s\n", yesNo(t.ReleasedMet))
	fmt.Fprintf(w, "- no request errors: %v\n", t.NoErrors)
	if len(r.Table) > 0 {
		n := r.Noise
		fmt.Fprintf(w, "\nNoise: other processes used %.0f%% of the machine's CPU during throughput phases (median; max %.0f%%); CPU-per-request spread over rounds median %.0f%% (max %.0f%%), req/s spread median %.0f%% (max %.0f%%); loadavg %s → %s.\n",
			100*n.ForeignCPUMedian, 100*n.ForeignCPUMax, 100*n.CPUSpreadMedian, 100*n.CPUSpreadMax, 100*n.RPSSpreadMedian, 100*n.RPSSpreadMax, e.LoadAvgStart, e.LoadAvgEnd)
	}
}

func conclusive(met, sure *bool) string {
	if met == nil || sure == nil || !*met {
		return ""
	}
	if *sure {
		return " (the whole 95% interval is within the target)"
	}
	return " on the point estimate only: the 95% interval reaches past the target, so this machine's noise cannot confirm it"
}

func fmtCI(ci []float64) string {
	if len(ci) != 2 {
		return ""
	}
	return fmt.Sprintf("[95%% CI %+.2f, %+.2f]", ci[0], ci[1])
}

func fmtMap(m map[string]float64, k string, prec int, suffix string) string {
	v, ok := m[k]
	if !ok {
		return "-"
	}
	if suffix == " ms" {
		return fmt.Sprintf("%+.*f%s", prec, v, suffix)
	}
	return fmt.Sprintf("%.*f%s", prec, v, suffix)
}
