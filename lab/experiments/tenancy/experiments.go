package tenancy

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/llmroute/caddy-llmroute/admission"
	"github.com/llmroute/caddy-llmroute/simengine"
)

// The experiments: a noisy neighbour (FIFO against the fair queue),
// weighted shares, and the goodput of critical traffic under overload
// with and without sheddable traffic. Every deployment is two replicas of
// simengine's default engine (an 8B model on one GPU) behind one router
// with max_in_flight 16, queue_size 256, queue_timeout 30s; prompts are
// 500-1,500 tokens and answers 100-300, so the pool completes about 11
// requests a second (measured: the FIFO noisy-neighbour run's completions).

// base is the deployment every experiment starts from.
func base(seed uint64, d time.Duration) Config {
	return Config{Replicas: 2, Cap: 16, QueueSize: 256, QueueTimeout: 30 * time.Second, SheddableShare: 0.8,
		Duration: d, Seed: seed, Engine: simengine.DefaultConfig()}
}

// tenant returns a tenant with the experiments' request shape.
func tenant(name string, band admission.Priority, weight, rate float64, slo time.Duration) Tenant {
	return Tenant{Name: name, Weight: weight, Priority: band, Band: band.String(), Rate: rate,
		PromptMin: 500, PromptMax: 1500, OutputMin: 100, OutputMax: 300, SLO: slo}
}

// Record is what the experiments write (tenancy.json).
type Record struct {
	Seeds    []uint64          `json:"seeds"`
	Duration time.Duration     `json:"duration_ns"`
	Noisy    []NoisyRow        `json:"noisy_neighbour"`
	Weighted []WeightedRow     `json:"weighted"`
	Goodput  []GoodputRow      `json:"goodput"`
	Configs  map[string]Config `json:"configs"`
}

// NoisyRow is one tenant's figures in one mode of the noisy-neighbour run.
type NoisyRow struct {
	Mode   string `json:"mode"`
	Tenant string `json:"tenant"`
	TenantResult
}

// WeightedRow is one tenant's share in the weighted run.
type WeightedRow struct {
	Tenant string  `json:"tenant"`
	Weight float64 `json:"weight"`
	Share  float64 `json:"token_share"`
	Ideal  float64 `json:"ideal_share"`
}

// GoodputRow is the critical tenant's goodput at one sheddable load in one
// mode.
type GoodputRow struct {
	Mode          string  `json:"mode"`
	SheddableRate float64 `json:"sheddable_rps"`
	Goodput       float64 `json:"critical_goodput_rps"`
	TTFTp50       float64 `json:"critical_ttft_p50_ms"`
	TTFTp99       float64 `json:"critical_ttft_p99_ms"`
	Refused       int     `json:"critical_refused"`
	SheddableDone float64 `json:"sheddable_completed_rps"`
}

// Modes of the goodput experiment.
const (
	ModeFIFO     = "fifo (one queue)"
	ModeBands    = "bands, sheddable_share 1"
	ModeBandsCap = "bands, sheddable_share 0.8"
)

// Modes of the noisy-neighbour experiment.
const (
	NoisyFIFO = "fifo"
	NoisyFair = "fair"
)

// noisyConfigKey and goodputConfigKey name a run's config in
// Record.Configs.
func noisyConfigKey(mode string) string { return "noisy_" + mode }

func goodputConfigKey(mode string, shed float64) string {
	return fmt.Sprintf("goodput %s shed %g", mode, shed)
}

// average runs cfg once per seed and averages each tenant's figures.
func average(cfg Config, seeds []uint64) (map[string]*TenantResult, error) {
	out := map[string]*TenantResult{}
	for _, s := range seeds {
		cfg.Seed = s
		res, err := Run(cfg)
		if err != nil {
			return nil, err
		}
		for name, tr := range res.Tenants {
			a, ok := out[name]
			if !ok {
				a = &TenantResult{}
				out[name] = a
			}
			a.Sent += tr.Sent
			a.Completed += tr.Completed
			a.Refused += tr.Refused
			a.Displaced += tr.Displaced
			a.TimedOut += tr.TimedOut
			a.TTFTp50 += tr.TTFTp50 / float64(len(seeds))
			a.TTFTp99 += tr.TTFTp99 / float64(len(seeds))
			a.Waitp50 += tr.Waitp50 / float64(len(seeds))
			a.Waitp99 += tr.Waitp99 / float64(len(seeds))
			a.Goodput += tr.Goodput / float64(len(seeds))
			a.TokenShare += tr.TokenShare / float64(len(seeds))
		}
	}
	return out, nil
}

// RunAll runs the three experiments over seeds, each simulating d.
func RunAll(seeds []uint64, d time.Duration) (*Record, error) {
	rec := &Record{Seeds: seeds, Duration: d, Configs: map[string]Config{}}

	// A noisy neighbour at 2.5x the pool's capacity and a quiet tenant at
	// 1 request a second, both standard, weight 1.
	for _, fair := range []bool{false, true} {
		cfg := base(0, d)
		cfg.Fair = fair
		cfg.Tenants = []Tenant{tenant("noisy", admission.Standard, 1, 32, 0), tenant("quiet", admission.Standard, 1, 1, 0)}
		mode := NoisyFIFO
		if fair {
			mode = NoisyFair
		}
		rec.Configs[noisyConfigKey(mode)] = cfg
		got, err := average(cfg, seeds)
		if err != nil {
			return nil, err
		}
		for _, n := range []string{"noisy", "quiet"} {
			rec.Noisy = append(rec.Noisy, NoisyRow{Mode: mode, Tenant: n, TenantResult: *got[n]})
		}
	}

	// Three tenants backlogged at once, weights 3, 2 and 1.
	cfg := base(0, d)
	cfg.Fair = true
	cfg.Tenants = []Tenant{tenant("w3", admission.Standard, 3, 16, 0), tenant("w2", admission.Standard, 2, 16, 0),
		tenant("w1", admission.Standard, 1, 16, 0)}
	rec.Configs["weighted"] = cfg
	got, err := average(cfg, seeds)
	if err != nil {
		return nil, err
	}
	for _, t := range cfg.Tenants {
		rec.Weighted = append(rec.Weighted, WeightedRow{Tenant: t.Name, Weight: t.Weight, Share: got[t.Name].TokenShare, Ideal: t.Weight / 6})
	}

	// Critical traffic at about 60% of the pool, TTFT SLO 1 s, under
	// sheddable load from none to 2.5x the pool.
	for _, mode := range []string{ModeFIFO, ModeBands, ModeBandsCap} {
		for _, shed := range []float64{0, 4, 8, 16, 32} {
			cfg := base(0, d)
			cfg.Fair = mode != ModeFIFO
			if mode == ModeBands {
				cfg.SheddableShare = 1
			}
			cfg.Tenants = []Tenant{tenant("critical", admission.Critical, 1, 8, time.Second), tenant("batch", admission.Sheddable, 1, shed, 0)}
			rec.Configs[goodputConfigKey(mode, shed)] = cfg
			got, err := average(cfg, seeds)
			if err != nil {
				return nil, err
			}
			c, b := got["critical"], got["batch"]
			rec.Goodput = append(rec.Goodput, GoodputRow{Mode: mode, SheddableRate: shed, Goodput: c.Goodput,
				TTFTp50: c.TTFTp50, TTFTp99: c.TTFTp99, Refused: c.Refused, SheddableDone: float64(b.Completed) / d.Seconds() / float64(len(seeds))})
		}
	}
	return rec, nil
}

// Write writes the record (tenancy.json), its summary (tenancy.md) and its
// plots (plots/tenancy_*.png) under dir.
func Write(dir string, rec *Record) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, "plots"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "tenancy.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "tenancy.md"), []byte(Markdown(rec)), 0o644); err != nil {
		return err
	}
	return Plot(filepath.Join(dir, "plots"), rec)
}

// Markdown renders the record's tables.
func Markdown(rec *Record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Tenants: fair queueing, priorities (simulator)\n\n")
	fmt.Fprintf(&b, "`go -C lab run ./cmd/llmtenancy`: %d seeds x %s simulated each; two replicas of simengine's default engine, max_in_flight 16,\n", len(rec.Seeds), rec.Duration)
	fmt.Fprintf(&b, "queue_size 256, queue_timeout 30s, prompts 500-1,500 tokens, answers 100-300 (the pool completes about 11 requests/s).\n")
	fmt.Fprintf(&b, "The admission decisions are package admission's, as in the module. Raw figures: tenancy.json.\n\n")
	fmt.Fprintf(&b, "## Noisy neighbour (noisy 32 req/s, quiet 1 req/s, both standard, weight 1)\n\n")
	fmt.Fprintf(&b, "| queue | tenant | sent | completed | refused | TTFT p50 ms | TTFT p99 ms | wait p50 ms | wait p99 ms |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rec.Noisy {
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %.0f | %.0f | %.0f | %.0f |\n", r.Mode, r.Tenant, r.Sent, r.Completed, r.Refused, r.TTFTp50, r.TTFTp99, r.Waitp50, r.Waitp99)
	}
	fmt.Fprintf(&b, "\n## Weighted shares (three tenants at 16 req/s each, all backlogged)\n\n| tenant | weight | token share | ideal |\n|---|---:|---:|---:|\n")
	for _, r := range rec.Weighted {
		fmt.Fprintf(&b, "| %s | %g | %.3f | %.3f |\n", r.Tenant, r.Weight, r.Share, r.Ideal)
	}
	fmt.Fprintf(&b, "\n## Critical goodput under overload (critical 8 req/s, SLO TTFT 1 s; sheddable from 0 to 32 req/s)\n\n")
	fmt.Fprintf(&b, "| queue | sheddable req/s | critical goodput req/s | critical TTFT p50 ms | p99 ms | critical refused | sheddable completed req/s |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rec.Goodput {
		fmt.Fprintf(&b, "| %s | %g | %.2f | %.0f | %.0f | %d | %.2f |\n", r.Mode, r.SheddableRate, r.Goodput, r.TTFTp50, r.TTFTp99, r.Refused, r.SheddableDone)
	}
	return b.String()
}
