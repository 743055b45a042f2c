// Package suite defines llmroute's policy experiments (the standard point,
// the sweeps and the cache-residency analysis), runs them on the
// simulator, and writes their records, summary and plots. cmd/llmexp is its
// command line.
package suite

import (
	"errors"
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/llmroute/caddy-llmroute/lab/experiments/sim"
	"github.com/llmroute/caddy-llmroute/lab/experiments/workload"
	"github.com/llmroute/caddy-llmroute/policies"
	"github.com/llmroute/caddy-llmroute/simengine"
)

// Options control a suite run.
type Options struct {
	// Quick scales every experiment down (fewer requests, fewer points)
	// for a check in well under a minute.
	Quick bool
	// Seed seeds every workload and simulation.
	Seed uint64
	// Jobs is how many simulations run at once (default 2).
	Jobs int
	// Out is the results directory.
	Out string
	// Progress receives one line per finished simulation; nil is quiet.
	Progress io.Writer
	// Commit is recorded in every record; empty asks git.
	Commit string
	// Requests, when set, overrides the standard point's request count
	// (tests use it to run the whole standard point in a second).
	Requests int
}

func (o *Options) defaults() {
	if o.Jobs <= 0 {
		o.Jobs = min(2, runtime.NumCPU())
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Out == "" {
		o.Out = "experiments/results"
	}
	if o.Commit == "" {
		o.Commit = GitCommit()
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// GitCommit returns `git rev-parse HEAD`, or "unknown".
func GitCommit() string {
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// Standard is the standard point of every experiment: the deployment and
// load that the summary reports, and around which the sweeps move one knob
// at a time.
type Standard struct {
	Replicas int `json:"replicas"`
	// Cap is each router's in-flight cap per replica.
	Cap int `json:"cap_per_replica"`
	// KVBlocks is each engine's KV cache in 16-token blocks. 4096 blocks
	// (65,536 tokens) is in the band where routing matters for every
	// workload: the shared-prefix working set (64 system prompts x 128
	// blocks = 8,192 blocks) is twice one replica's cache and half of all
	// four together; see the KV sweep.
	KVBlocks int `json:"kv_blocks"`
	// Util is the offered load as a fraction of the cold capacity: what the
	// replicas could serve if nothing were ever cached (ColdCapacity). At
	// 0.6 even a policy that never hits stays out of overload, so latency
	// differences come from prefill saved, not from a queue collapse.
	Util float64 `json:"util_of_cold_capacity"`
	// Requests per workload and policy.
	Requests int `json:"requests"`
	// EngineMetrics and Feedback are on, as the example Caddyfile
	// configures the module (engine_metrics every 1s, request_usage).
	EngineMetrics  bool          `json:"engine_metrics"`
	SampleInterval time.Duration `json:"sample_interval_ns"`
	Feedback       bool          `json:"feedback"`
	Routers        int           `json:"routers"`
}

// StandardPoint returns the standard parameters (scaled down when quick).
func StandardPoint(quick bool) Standard {
	st := Standard{Replicas: 4, Cap: 64, KVBlocks: 4096, Util: 0.6, Requests: 20000,
		EngineMetrics: true, SampleInterval: time.Second, Feedback: true, Routers: 1}
	if quick {
		st.Requests = 2500
	}
	return st
}

// EngineConfig is the engine of every replica: the engine package's
// defaults (an 8B model on one GPU) with kvBlocks of cache.
func EngineConfig(kvBlocks int) simengine.Config {
	ec := simengine.DefaultConfig()
	ec.NumBlocks = kvBlocks
	ec.MaxModelLen = 0 // the whole cache
	return ec
}

// ColdCapacity estimates the requests per second one replica serves when
// nothing is cached and it runs batch sequences at once: each request
// costs its whole prompt's prefill, and each of its output tokens one
// sequence slot of a decode step whose fixed cost the batch shares.
func ColdCapacity(ec simengine.Config, promptTokens, outputTokens float64, batch int) float64 {
	speed := ec.Speed
	if speed <= 0 {
		speed = 1
	}
	per := promptTokens*ec.PrefillTokenCost.Seconds() + outputTokens*(ec.SeqCost.Seconds()+ec.StepFixed.Seconds()/float64(batch))
	return speed / per
}

// WorkloadParams returns the standard parameters of a workload kind, at an
// arrival rate of 1/s (Build rescales it).
func WorkloadParams(kind string, requests int, seed uint64) workload.Params {
	p := workload.Params{Kind: kind, Requests: requests, Rate: 1, Seed: seed, Parse: policies.ParseConfig{Deployment: "sim"}}
	switch kind {
	case workload.SharedPrefix:
		// SGLang's generated-shared-prefix: 64 groups, 2048-token system
		// prompt, 128-token question, 256-token output. Questions are
		// fresh per request, so a group has requests/64 prompts (312 at
		// 20,000 requests) instead of 16.
		p.Groups, p.SystemTokens, p.QuestionTokens, p.OutputTokens = 64, 2048, 128, 256
	case workload.Skewed:
		// The same shapes, tenants drawn by Zipf(1.1): the top tenant
		// takes 25% of the traffic, the top 4 about half.
		p.Groups, p.SystemTokens, p.QuestionTokens, p.OutputTokens, p.ZipfS = 64, 2048, 128, 256, 1.1
	case workload.NoSharedPrefix:
		// A unique 2048-token document per request, then a question.
		p.SystemTokens, p.QuestionTokens, p.OutputTokens = 2048, 128, 256
	case workload.Mixed:
		// Half the requests carry a unique 2048-token document, half one
		// of shared_prefix's 64 system prompts, interleaved at random;
		// the mixed sweep moves the unique share from 0 to 1.
		p.Groups, p.SystemTokens, p.QuestionTokens, p.OutputTokens, p.UniqueShare = 64, 2048, 128, 256, 0.5
	case workload.Large:
		// Eight replicas (StandardFor) and 256 groups of 1024-token system
		// prompts: the working set (256 x 64 = 16,384 blocks) is four
		// times one replica's cache and half of all eight, the standard
		// point's band at twice the scale, with four times the groups.
		p.Groups, p.SystemTokens, p.QuestionTokens, p.OutputTokens = 256, 1024, 128, 256
	case workload.MultiTurn:
		// Conversations of 2-8 turns on one of 16 applications (512-token
		// system prompts); user messages 32-256 tokens, answers 64-256,
		// think time 6 s on average. Each turn carries the whole history,
		// previous answers included.
		p.Groups, p.SystemTokens = 16, 512
		p.TurnsMin, p.TurnsMax, p.UserMin, p.UserMax, p.OutputMin, p.OutputMax = 2, 8, 32, 256, 64, 256
		p.Think = 6 * time.Second
	}
	return p
}

// StandardFor returns the standard point as kind runs it: large runs on 8
// replicas, every other workload on st's.
func StandardFor(kind string, st Standard) Standard {
	if kind == workload.Large {
		st.Replicas = 8
	}
	return st
}

// Build generates a workload and sets its rate to util of the cold
// capacity of replicas engines.
func Build(p workload.Params, st Standard, kvBlocks int) (*workload.Workload, error) {
	w, err := workload.Generate(p)
	if err != nil {
		return nil, err
	}
	capacity := ColdCapacity(EngineConfig(kvBlocks), w.MeanPromptTokens, w.MeanOutputTokens, st.Cap)
	w.ScaleRate(st.Util * capacity * float64(st.Replicas))
	return w, nil
}

// SimConfig is the simulator configuration of the standard point. Answers
// are indexed, as the module does by default (index_answers).
func SimConfig(policy string, st Standard, seed uint64) sim.Config {
	return sim.Config{Policy: policy, Replicas: st.Replicas, Routers: st.Routers, Seed: seed,
		Engine: EngineConfig(st.KVBlocks), Cap: st.Cap, EngineMetrics: st.EngineMetrics,
		SampleInterval: st.SampleInterval, Feedback: st.Feedback, IndexAnswers: true}
}

// task is one simulation.
type task struct {
	phase string
	label string
	cfg   sim.Config
	w     *workload.Workload
	res   *sim.Result
	err   error
}

// runner runs tasks Jobs at a time and reports progress. It also builds
// workloads, in parallel and once for every experiment that shares them.
type runner struct {
	o     *Options
	mu    sync.Mutex
	done  int
	total int
	start time.Time

	wmu    sync.Mutex
	wcache map[string]*workload.Workload
}

func newRunner(o *Options) *runner {
	return &runner{o: o, start: time.Now(), wcache: map[string]*workload.Workload{}}
}

// buildReq asks for a workload at util of the cold capacity of st.
type buildReq struct {
	p  workload.Params
	st Standard
}

func (b buildReq) key() string {
	return fmt.Sprintf("%+v|%d|%g|%d", b.p, b.st.Replicas, b.st.Util, b.st.Cap)
}

// buildAll generates the workloads, Jobs at a time, reusing any built
// before, and derives every single-turn request's keys up front (the
// multi-turn ones depend on answers and are derived during the runs).
func (r *runner) buildAll(reqs []buildReq) ([]*workload.Workload, error) {
	out := make([]*workload.Workload, len(reqs))
	errs := make([]error, len(reqs))
	sem := make(chan struct{}, r.o.Jobs)
	var wg sync.WaitGroup
	for i, b := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			k := b.key()
			r.wmu.Lock()
			w := r.wcache[k]
			r.wmu.Unlock()
			if w == nil {
				var err error
				if w, err = Build(b.p, b.st, b.st.KVBlocks); err != nil {
					errs[i] = err
					return
				}
				if b.p.Kind != workload.MultiTurn {
					for s := range w.Sessions {
						if _, err := w.Request(s, 0); err != nil {
							errs[i] = err
							return
						}
					}
				}
				r.wmu.Lock()
				if old := r.wcache[k]; old != nil {
					w = old
				} else {
					r.wcache[k] = w
				}
				r.wmu.Unlock()
			}
			out[i] = w
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// run executes tasks and returns the first error. Longer runs start first
// (by requests times replicas), so that the last ones to finish are short.
func (r *runner) run(tasks []*task) error {
	order := append([]*task(nil), tasks...)
	sort.SliceStable(order, func(i, j int) bool { return cost(order[i]) > cost(order[j]) })
	tasks = order
	r.mu.Lock()
	r.total += len(tasks)
	r.mu.Unlock()
	cfgs, ws := make([]sim.Config, len(tasks)), make([]*workload.Workload, len(tasks))
	for i, t := range tasks {
		cfgs[i], ws[i] = t.cfg, t.w
	}
	sim.RunAll(cfgs, ws, r.o.Jobs, func(i int, res *sim.Result, err error, d time.Duration) {
		tasks[i].res, tasks[i].err = res, err
		r.report(tasks[i], d)
	})
	for _, t := range tasks {
		if t.err != nil {
			return fmt.Errorf("%s %s: %w", t.phase, t.label, t.err)
		}
	}
	return nil
}

// cost estimates a task's run time for scheduling.
func cost(t *task) float64 {
	c := float64(t.w.Requests()) * float64(t.cfg.Replicas)
	if t.cfg.Policy == "oracle" {
		c *= 1.5
	}
	if t.cfg.Engine.NumBlocks <= 2048 {
		c *= 2 // small caches overload: long queues, many steps
	}
	return c
}

func (r *runner) report(t *task, d time.Duration) {
	name := t.phase
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done++
	if t.err != nil {
		fmt.Fprintf(r.o.Progress, "[%4d/%d] %-10s %-44s ERROR %v\n", r.done, r.total, name, t.label, t.err)
		return
	}
	res := t.res
	fmt.Fprintf(r.o.Progress, "[%4d/%d] %-10s %-44s hit %.3f  ttft p50 %7.1f p99 %8.1f ms  %5d req  %5.1fs  (%s)\n",
		r.done, r.total, name, t.label, res.TokenHitRate, res.TTFT.P50, res.TTFT.P99, res.Requests, d.Seconds(),
		time.Since(r.start).Round(time.Second))
}

// note prints a progress line.
func (r *runner) note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.o.Progress, format+"\n", args...)
}
