// Package tenancy is a discrete-event simulator of llmroute's admission in
// virtual time: tenants' requests arrive at one router in front of
// replicas that run simengine's model (the engine the simulated HTTP
// replica runs), with a per-replica in-flight cap (max_in_flight) and a
// bounded wait queue in front of it. Nothing sleeps; runs are
// deterministic for a seed.
//
// What it shares with the Caddy module: every admission decision, called,
// not copied, from package admission (caddymodule/waitqueue.go and
// budgets.go call the same code): the queue's order (admission.Queue:
// bands, virtual token counters by weight, FIFO within a tenant, tenant
// caps), who is displaced from a full queue (Queue.Victim), whether a
// sheddable request may take a slot (admission.SheddableAllowed), and the
// token estimate charged at admission and corrected at the end
// (admission.Estimate, Queue.Settle).
//
// What it models with code of its own, because the module's is tied to
// HTTP and Caddy: the plumbing around those decisions. An arrival is
// admitted at once when nobody waits and a replica has a free slot (the
// least loaded); else it waits, and whenever a slot frees the queue is
// walked in its order, as the module's dispatcher does (one pool here, so
// a walk stops at the first waiter that finds no room).
//
// FIFO mode puts every request in one flow and one band: the wait queue
// llmroute had before tenants.
package tenancy

import (
	"fmt"
	"github.com/llmroute/caddy-llmroute/lab/experiments/eventq"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/llmroute/caddy-llmroute/admission"
	"github.com/llmroute/caddy-llmroute/policies"
	"github.com/llmroute/caddy-llmroute/simengine"
)

// Tenant is one tenant's configuration and offered load.
type Tenant struct {
	Name     string             `json:"name"`
	Weight   float64            `json:"weight"`
	Priority admission.Priority `json:"-"`
	// Band names Priority in records.
	Band string `json:"priority"`
	// Rate is the mean arrival rate in requests per second (Poisson).
	Rate float64 `json:"rate"`
	// PromptTokens and OutputTokens are drawn uniformly from [Min, Max].
	PromptMin int `json:"prompt_min"`
	PromptMax int `json:"prompt_max"`
	OutputMin int `json:"output_min"`
	OutputMax int `json:"output_max"`
	// SLO is the time to first token under which a completed request
	// counts as goodput.
	SLO time.Duration `json:"slo_ns"`
}

// Config is one simulated deployment.
type Config struct {
	Replicas       int           `json:"replicas"`
	Cap            int           `json:"max_in_flight"`
	QueueSize      int           `json:"queue_size"`
	QueueTimeout   time.Duration `json:"queue_timeout_ns"`
	SheddableShare float64       `json:"sheddable_share"`
	// Fair selects the fair queue (tenants as flows, their bands); false
	// is one FIFO.
	Fair     bool             `json:"fair"`
	Tenants  []Tenant         `json:"tenants"`
	Duration time.Duration    `json:"duration_ns"`
	Seed     uint64           `json:"seed"`
	Engine   simengine.Config `json:"engine"`
}

// TenantResult is what one tenant got.
type TenantResult struct {
	Sent      int `json:"sent"`
	Completed int `json:"completed"`
	// Refused counts requests refused by the queue: full, displaced or
	// timed out.
	Refused   int `json:"refused"`
	Displaced int `json:"displaced"`
	TimedOut  int `json:"timed_out"`
	// TTFT is the time to first token of completed requests (queue wait
	// included), in ms; Wait the queue wait alone.
	TTFTp50 float64 `json:"ttft_p50_ms"`
	TTFTp99 float64 `json:"ttft_p99_ms"`
	Waitp50 float64 `json:"wait_p50_ms"`
	Waitp99 float64 `json:"wait_p99_ms"`
	// Goodput is completed requests within the tenant's SLO per second.
	Goodput float64 `json:"goodput_rps"`
	// TokenShare is the tenant's share of the tokens (prompt + output) of
	// the requests admitted while the run was saturated.
	TokenShare float64 `json:"token_share"`
}

// Result is one run.
type Result struct {
	Config  Config                   `json:"config"`
	Tenants map[string]*TenantResult `json:"tenants"`
}

// request is one request in the simulation.
type request struct {
	id          uint64
	tenant      int
	arrival     time.Duration
	prompt      int
	output      int
	cost        float64
	entry       *admission.Entry[*request]
	counted     bool
	admitted    bool
	admittedAt  time.Duration
	firstTok    time.Duration
	replica     int
	gone        bool // refused or timed out
	promptBytes int
}

type replica struct {
	eng      *simengine.Engine
	inFlight int
	stepping bool
	// pending are the events of the step in progress, delivered at its end.
	pending []simengine.Event
}

// Event kinds.
const (
	evArrival uint8 = iota + 1
	evStepEnd
	evTimeout
)

// event is one scheduled happening; its time is the queue's (eventq).
type event struct {
	kind uint8
	a    int
	r    *request
}

// run is one simulation's state.
type run struct {
	cfg     Config
	rng     *rand.Rand
	now     time.Duration
	events  eventq.Queue[event]
	q       *admission.Queue[*request]
	queued  int
	reps    []*replica
	reqs    map[uint64]*request
	est     []admission.Estimate
	results []*TenantResult
	ttft    [][]float64
	waits   [][]float64
	tokens  []float64 // admitted tokens while saturated, per tenant
	nextID  uint64
}

// Run simulates cfg and returns what each tenant got.
func Run(cfg Config) (*Result, error) {
	if cfg.Replicas < 1 || cfg.Cap < 1 || len(cfg.Tenants) == 0 {
		return nil, fmt.Errorf("tenancy: need replicas, a cap and tenants")
	}
	if cfg.SheddableShare == 0 {
		cfg.SheddableShare = 0.8
	}
	rn := &run{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		q: admission.NewQueue[*request](), reqs: map[uint64]*request{}}
	for range cfg.Replicas {
		eng, err := simengine.New(cfg.Engine)
		if err != nil {
			return nil, err
		}
		rn.reps = append(rn.reps, &replica{eng: eng})
	}
	rn.est = make([]admission.Estimate, len(cfg.Tenants))
	rn.results = make([]*TenantResult, len(cfg.Tenants))
	rn.ttft = make([][]float64, len(cfg.Tenants))
	rn.waits = make([][]float64, len(cfg.Tenants))
	rn.tokens = make([]float64, len(cfg.Tenants))
	for i, t := range cfg.Tenants {
		rn.results[i] = &TenantResult{}
		if cfg.Fair {
			rn.q.Configure(t.Name, admission.Flow{Weight: t.Weight})
		}
		if t.Rate > 0 {
			rn.events.Push(rn.interarrival(t.Rate), event{kind: evArrival, a: i})
		}
	}
	// Bounded: every event is an arrival before Duration, a step of an
	// engine holding requests, or a timeout of a waiting request.
	for rn.events.Len() > 0 {
		var ev event
		rn.now, ev = rn.events.Pop()
		switch ev.kind {
		case evArrival:
			rn.arrive(ev.a)
			if next := rn.now + rn.interarrival(cfg.Tenants[ev.a].Rate); next < cfg.Duration {
				rn.events.Push(next, event{kind: evArrival, a: ev.a})
			}
		case evStepEnd:
			rn.stepEnd(ev.a)
		case evTimeout:
			rn.timeout(ev.r)
		}
	}
	res := &Result{Config: cfg, Tenants: map[string]*TenantResult{}}
	total := 0.0
	for _, x := range rn.tokens {
		total += x
	}
	for i, t := range cfg.Tenants {
		tr := rn.results[i]
		sort.Float64s(rn.ttft[i])
		sort.Float64s(rn.waits[i])
		tr.TTFTp50, tr.TTFTp99 = percentile(rn.ttft[i], 0.5), percentile(rn.ttft[i], 0.99)
		tr.Waitp50, tr.Waitp99 = percentile(rn.waits[i], 0.5), percentile(rn.waits[i], 0.99)
		tr.Goodput /= cfg.Duration.Seconds()
		if total > 0 {
			tr.TokenShare = rn.tokens[i] / total
		}
		res.Tenants[t.Name] = tr
	}
	return res, nil
}

// percentile is linear between ranks (internal/stats's definition).
func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	pos := q * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(sorted)-1)
	return sorted[lo] + (sorted[hi]-sorted[lo])*(pos-float64(lo))
}

func (rn *run) interarrival(rate float64) time.Duration {
	return time.Duration(rn.rng.ExpFloat64() / rate * float64(time.Second))
}

func (rn *run) draw(lo, hi int) int {
	if hi <= lo {
		return lo
	}
	return lo + rn.rng.IntN(hi-lo+1)
}

// flowOf is the request's flow and band: its tenant's, or the one FIFO.
func (rn *run) flowOf(r *request) (string, admission.Priority) {
	if !rn.cfg.Fair {
		return "all", admission.Standard
	}
	t := rn.cfg.Tenants[r.tenant]
	return t.Name, t.Priority
}

// arrive admits a new request of tenant i at once or queues it.
func (rn *run) arrive(i int) {
	t := rn.cfg.Tenants[i]
	rn.nextID++
	r := &request{id: rn.nextID, tenant: i, arrival: rn.now,
		prompt: rn.draw(t.PromptMin, t.PromptMax), output: rn.draw(t.OutputMin, t.OutputMax)}
	r.promptBytes = r.prompt * policies.BytesPerToken
	r.cost = rn.est[i].Tokens(r.promptBytes)
	rn.reqs[r.id] = r
	rn.results[i].Sent++
	flow, band := rn.flowOf(r)
	if rn.q.Len() == 0 {
		if rep := rn.room(band); rep >= 0 && rn.q.Acquire(flow) {
			rn.q.Charge(flow, r.cost)
			rn.start(r, rep)
			return
		}
	}
	r.entry = rn.q.Push(flow, band, r.cost, false, r)
	rn.dispatch()
	if r.admitted {
		return
	}
	// Not admitted by the walk it triggered: take a place in the queue,
	// or another's (Victim), or be refused.
	if rn.queued >= rn.cfg.QueueSize {
		v := rn.q.Victim(r.entry, func(e *admission.Entry[*request]) bool { return e.Value.counted })
		if v == nil {
			rn.q.Remove(r.entry)
			rn.refuse(r, "full")
			return
		}
		rn.q.Remove(v)
		v.Value.counted = false
		rn.queued--
		rn.refuse(v.Value, "displaced")
	}
	r.counted = true
	rn.queued++
	rn.events.Push(rn.now+rn.cfg.QueueTimeout, event{kind: evTimeout, r: r})
}

// room returns the least-loaded replica with a free slot for a request
// of band (a sheddable one only within the sheddable share), -1 if none.
func (rn *run) room(band admission.Priority) int {
	best, used := -1, 0
	for i, rp := range rn.reps {
		used += rp.inFlight
		if rp.inFlight < rn.cfg.Cap && (best < 0 || rp.inFlight < rn.reps[best].inFlight) {
			best = i
		}
	}
	if best >= 0 && band == admission.Sheddable && !admission.SheddableAllowed(used, rn.cfg.Cap*len(rn.reps), rn.cfg.SheddableShare) {
		return -1
	}
	return best
}

// dispatch walks the queue in its order and admits while there is room,
// skipping sheddable waiters once the share refused one.
func (rn *run) dispatch() {
	shedBlocked := false
	for range rn.q.Len() {
		e := rn.q.Pick(func(e *admission.Entry[*request]) bool {
			return !(shedBlocked && e.Band() == admission.Sheddable)
		})
		if e == nil {
			return
		}
		rep := rn.room(e.Band())
		if rep < 0 {
			if e.Band() == admission.Sheddable && rn.room(admission.Standard) >= 0 {
				shedBlocked = true
				continue
			}
			return
		}
		r := e.Value
		rn.q.Admit(e)
		if r.counted {
			r.counted = false
			rn.queued--
		}
		rn.start(r, rep)
	}
}

// start sends r to replica i.
func (rn *run) start(r *request, i int) {
	r.admitted, r.admittedAt, r.replica = true, rn.now, i
	rp := rn.reps[i]
	rp.inFlight++
	prompt := make([]uint32, r.prompt)
	for k := range prompt {
		prompt[k] = uint32(r.id*7919+uint64(k)) | 1 // distinct per request: no shared prefix
	}
	if err := rp.eng.Submit(simengine.Request{ID: r.id, Prompt: prompt, MaxTokens: r.output, OutputTokens: r.output}); err != nil {
		panic(err) // the workloads fit the model length
	}
	rn.waits[r.tenant] = append(rn.waits[r.tenant], float64(rn.now-r.arrival)/float64(time.Millisecond))
	if rn.saturated() {
		rn.tokens[r.tenant] += float64(r.prompt + r.output)
	}
	rn.kick(i)
}

// saturated reports whether the run is past its warm-up and before its
// drain, the window in which shares are measured.
func (rn *run) saturated() bool {
	return rn.now > rn.cfg.Duration/10 && rn.now < rn.cfg.Duration
}

// kick starts replica i's next step if it is idle.
func (rn *run) kick(i int) {
	rp := rn.reps[i]
	if rp.stepping || rp.eng.Idle() {
		return
	}
	rp.stepping = true
	dt, evs := rp.eng.Step()
	rp.pending = evs
	rn.events.Push(rn.now+dt, event{kind: evStepEnd, a: i})
}

// stepEnd delivers replica i's step: first tokens, completions (which
// free slots and walk the queue), then its next step.
func (rn *run) stepEnd(i int) {
	rp := rn.reps[i]
	evs := rp.pending
	rp.pending = nil
	rp.stepping = false
	freed := false
	for _, ev := range evs {
		r := rn.reqs[ev.ID]
		switch ev.Kind {
		case simengine.EventFirstToken:
			r.firstTok = rn.now
			rn.ttft[r.tenant] = append(rn.ttft[r.tenant], float64(rn.now-r.arrival)/float64(time.Millisecond))
		case simengine.EventFinished:
			rp.inFlight--
			freed = true
			tr := rn.results[r.tenant]
			tr.Completed++
			if t := rn.cfg.Tenants[r.tenant]; t.SLO == 0 || r.firstTok-r.arrival <= t.SLO {
				tr.Goodput++
			}
			used := float64(ev.Usage.PromptTokens + ev.Usage.CompletionTokens)
			flow, _ := rn.flowOf(r)
			rn.q.Settle(flow, used-r.cost)
			rn.q.Release(flow)
			rn.est[r.tenant].Observe(r.promptBytes, used)
			delete(rn.reqs, r.id)
		}
	}
	rn.kick(i)
	if freed {
		rn.dispatch()
	}
}

// timeout refuses r if it still waits.
func (rn *run) timeout(r *request) {
	if r.admitted || r.gone {
		return
	}
	rn.q.Remove(r.entry)
	if r.counted {
		r.counted = false
		rn.queued--
	}
	rn.refuse(r, "timeout")
}

func (rn *run) refuse(r *request, why string) {
	r.gone = true
	tr := rn.results[r.tenant]
	tr.Refused++
	switch why {
	case "displaced":
		tr.Displaced++
	case "timeout":
		tr.TimedOut++
	}
	delete(rn.reqs, r.id)
}
