// Package sim is a discrete-event simulator of llmroute in virtual time: a
// workload's requests arrive at one or more router instances, each of which
// runs the policies package's decision code (keys from policies.Parse, a
// Replica view per replica, Pick, then Index.Insert of the chosen replica's
// blocks, in-flight released on completion) in front of replicas that run
// the engine package's model, the same engine the simulated HTTP replica
// runs. Engines advance by the durations their steps return; nothing sleeps.
//
// What the simulator shares with the Caddy module (caddymodule/): the
// strategies, and the residency belief (policies.Belief), whose rules both
// call rather than copy:
//   - optimistic indexing: the chosen replica's belief is told of the
//     request at decision time (Belief.Place), which also counts it as
//     pending until its first token;
//   - engine metrics (optional): every router samples each engine's queue,
//     running count, KV usage, cache size and prefix-cache counters every
//     SampleInterval; the queue and KV usage feed Replica.EngineWaiting and
//     KVUsage, and the belief sizes its index from the cache and purges it
//     when the counters go backwards (Belief.Engine);
//   - feedback (optional): on each completion the prediction is held
//     against the cached tokens the engine reported (Belief.Check).
//
// What it models the way the module does, with code of its own because the
// module's is tied to HTTP and wall-clock time: a per-replica in-flight cap
// per router, with a router-side FIFO queue when every replica is full.
//
// Several router instances each keep their own indexes, in-flight counts,
// queues and samples; the engines are the shared truth.
//
// Runs are deterministic: the same Config and workload give the same
// Result, event for event.
package sim

import (
	"fmt"
	"github.com/llmroute/caddy-llmroute/lab/experiments/eventq"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/llmroute/caddy-llmroute/lab/experiments/workload"
	"github.com/llmroute/caddy-llmroute/policies"
	"github.com/llmroute/caddy-llmroute/simengine"
)

// Config is one simulated deployment and policy.
type Config struct {
	Policy   string `json:"policy"`
	Replicas int    `json:"replicas"`
	// Routers is the number of router instances; each request goes to one
	// of them at random.
	Routers int    `json:"routers"`
	Seed    uint64 `json:"seed"`
	// Engine configures every replica's engine.
	Engine simengine.Config `json:"engine"`
	// Cap is each router's in-flight cap per replica (max_in_flight).
	Cap int `json:"cap"`
	// IndexBlocks is the configured index capacity per replica in router
	// blocks (index_blocks); 0 selects policies.DefaultIndexCapacity.
	IndexBlocks int `json:"index_blocks"`
	// EngineMetrics turns on sampling of the engines' metrics every
	// SampleInterval (default 1s, the module's default).
	EngineMetrics  bool          `json:"engine_metrics"`
	SampleInterval time.Duration `json:"sample_interval_ns"`
	// UnsizedCache makes the sampled metrics carry no cache size, as
	// llama.cpp's server's do: each belief then sizes its index from
	// IndexBlocks and the cached-token feedback alone.
	UnsizedCache bool `json:"unsized_cache,omitempty"`
	// Feedback turns on the cached-token feedback (request_usage).
	Feedback bool `json:"feedback"`
	// Restarts crash-restart engines mid-run (engine.Restart): the cache
	// is wiped and the requests it held fail.
	Restarts []Restart `json:"restarts,omitempty"`
	// Options tune the policies package's strategies.
	Options policies.Options `json:"options"`
	// ColdChoices, 1 to 3, runs prefix_load with the cold rules it had
	// before it placed new prefixes by load (coldRules); 0 as shipped.
	ColdChoices int `json:"cold_choices,omitempty"`
	// IgnorePrefilling leaves Replica.Prefilling at 0, as the module did
	// before it counted requests awaiting their first byte as load: the
	// ablation of that signal.
	IgnorePrefilling bool `json:"ignore_prefilling,omitempty"`
	// KeepSamples keeps every request's TTFT and latency in the Result.
	KeepSamples bool `json:"-"`
	// SharedHomes gives the routers' prefix_load one shared store of
	// homes, as the module's homes_directory does with Valkey: each
	// router has its own policies.StoreDirectory (Home answers what its
	// own claims were told) over one exact store (homeStore; a TTL past
	// the run). The reference for what shared state adds.
	SharedHomes bool `json:"shared_homes,omitempty"`
	// IndexAnswers adds what each answer streamed to the index of the
	// replica that generated it (policies.NewAnswer), as the module's
	// index_answers does.
	IndexAnswers bool `json:"index_answers,omitempty"`
	// RuleStats measures, per rule of a strategy that names its rules
	// (policies.Reasoner), what the engines held of the prompts it
	// placed (Result.Rules). It reads every engine's cache per
	// decision, which costs the run time.
	RuleStats bool `json:"rule_stats,omitempty"`
}

// Restart is one engine crash-restart.
type Restart struct {
	At      time.Duration `json:"at_ns"`
	Replica int           `json:"replica"`
}

// flight is one request in the simulation.
type flight struct {
	id      uint64
	req     *workload.Request
	tokens  []uint32 // set while deciding (the oracle reads it)
	router  int
	replica int

	arrival, firstTok time.Duration
	predicted         int // blocks the index believed resident at decision
	reach             int // the prediction's reach (policies.Placement)
	trueTok           int // tokens the chosen engine had cached at decision
	answer            []uint32
	wantAnswer        bool
	done              bool
	firstSeen         bool
	// head is the first block of the prompt while counted as pending on
	// its replica's belief; concurrent is set when another flight of that
	// head was pending there at dispatch (policies.Placement).
	head       uint64
	concurrent bool
	uncached   int
	// why is the rule that placed it (Reasoner strategies); bestTok and
	// homeTok what the best engine and its home had cached (RuleStats).
	why              policies.Reason
	bestTok, homeTok int
}

// replicaView is one router's state for one replica.
type replicaView struct {
	inFlight int
	prefills int // dispatched, first token not yet seen
	pending  int // believed-uncached prompt bytes of those
	belief   *policies.Belief
	// last engine sample
	sampled bool
	waiting int
	running int
	kvUsage float64
	// sampledInFlight is inFlight at the sample.
	sampledInFlight int
}

type router struct {
	picker picker
	// sensor is the picker's strategy when it infers peers, and peers
	// what it believed at its last placement.
	sensor policies.PeerSensor
	peers  bool
	reps   []replicaView
	queue  []*flight
	view   []policies.Replica
}

type replica struct {
	addr           string
	eng            *simengine.Engine
	stepping       bool
	pending        []simengine.Event
	pendingRestart bool
	dispatched     int
	restarts       int
}

// Sim is one run. Use Run.
type Sim struct {
	cfg  Config
	w    *workload.Workload
	now  time.Duration
	evq  eventq.Queue[event]
	rng  *rand.Rand
	reps []*replica
	rts  []*router

	flights   map[uint64]*flight
	nextID    uint64
	nextSess  int
	tokensBuf []uint32
	res       *Result
	blockSize int // router block bytes
	// firstPlace holds, per leading key, the replica each router sent
	// that key to the first time it saw it (-1: not yet), then the second
	// time; kept only with several routers, to measure how often they
	// agree.
	firstPlace map[uint64][]int
}

// Run simulates the workload under cfg and returns the measurements.
func Run(cfg Config, w *workload.Workload) (*Result, error) {
	s, err := newSim(cfg, w)
	if err != nil {
		return nil, err
	}
	if err := s.loop(); err != nil {
		return nil, err
	}
	return s.finish(), nil
}

func newSim(cfg Config, w *workload.Workload) (*Sim, error) {
	if cfg.Replicas < 1 {
		return nil, fmt.Errorf("sim: need at least one replica")
	}
	if cfg.Routers < 1 {
		cfg.Routers = 1
	}
	if cfg.SampleInterval <= 0 {
		cfg.SampleInterval = time.Second
	}
	s := &Sim{cfg: cfg, w: w, rng: rand.New(rand.NewPCG(cfg.Seed, 0x73696d)), flights: map[uint64]*flight{}}
	if cfg.Routers > 1 {
		s.firstPlace = map[uint64][]int{}
	}
	s.blockSize = w.Params.Parse.BlockSize
	if s.blockSize <= 0 {
		s.blockSize = policies.DefaultBlockSize
	}
	engines := make([]*simengine.Engine, cfg.Replicas)
	for i := range cfg.Replicas {
		e, err := simengine.New(cfg.Engine)
		if err != nil {
			return nil, err
		}
		engines[i] = e
		s.reps = append(s.reps, &replica{addr: fmt.Sprintf("replica-%02d:8000", i), eng: e})
	}
	opts := cfg.Options
	var store *homeStore
	if cfg.SharedHomes {
		store = &homeStore{homes: map[uint64]string{}}
	}
	for r := range cfg.Routers {
		if store != nil {
			opts.Directory = policies.NewStoreDirectory(store)
		}
		p, err := newPicker(cfg.Policy, opts, cfg.ColdChoices, cfg.Seed+uint64(r)*0x9e3779b97f4a7c15, engines)
		if err != nil {
			return nil, err
		}
		rt := &router{picker: p, reps: make([]replicaView, cfg.Replicas), view: make([]policies.Replica, cfg.Replicas)}
		if _, ok := p.(*oracle); !ok {
			if ps, ok := strategyOf(p).(policies.PeerSensor); ok && ps.Peers() {
				rt.sensor, rt.peers = ps, true
			}
		}
		for i := range rt.reps {
			rt.reps[i].belief = policies.NewBelief(cfg.IndexBlocks)
		}
		s.rts = append(s.rts, rt)
		if cfg.EngineMetrics {
			// Routers scrape on their own phases.
			s.evq.Push(time.Duration(r)*cfg.SampleInterval/time.Duration(cfg.Routers), event{kind: evSample, a: r})
		}
	}
	for _, rs := range cfg.Restarts {
		if rs.Replica < 0 || rs.Replica >= cfg.Replicas {
			return nil, fmt.Errorf("sim: restart of replica %d out of range", rs.Replica)
		}
		s.evq.Push(rs.At, event{kind: evRestart, a: rs.Replica})
	}
	s.res = newResult(cfg, w)
	s.scheduleNextSession()
	return s, nil
}

// outstanding reports whether anything is left to happen besides sampling.
func (s *Sim) outstanding() bool {
	return s.nextSess < len(s.w.Sessions) || len(s.flights) > 0 || s.res.thinking > 0
}

func (s *Sim) scheduleNextSession() {
	if s.nextSess < len(s.w.Sessions) {
		s.evq.Push(s.w.Sessions[s.nextSess].Arrival, event{kind: evArrival, a: s.nextSess})
		s.nextSess++
	}
}

func (s *Sim) loop() error {
	for s.evq.Len() > 0 {
		var ev event
		s.now, ev = s.evq.Pop()
		switch ev.kind {
		case evArrival:
			s.scheduleNextSession()
			if err := s.issue(ev.a, 0); err != nil {
				return err
			}
		case evTurn:
			s.res.thinking--
			if err := s.issue(ev.a, ev.b); err != nil {
				return err
			}
		case evStepEnd:
			if err := s.stepEnd(ev.a); err != nil {
				return err
			}
		case evSample:
			if s.outstanding() {
				s.sample(ev.a)
				s.evq.Push(s.now+s.cfg.SampleInterval, event{kind: evSample, a: ev.a})
			}
		case evRestart:
			rp := s.reps[ev.a]
			if rp.stepping {
				rp.pendingRestart = true
			} else {
				s.restart(ev.a)
			}
		}
	}
	if len(s.flights) > 0 {
		return fmt.Errorf("sim: %d requests never completed", len(s.flights))
	}
	return nil
}

// issue sends turn k of session si to a router.
func (s *Sim) issue(si, k int) error {
	req, err := s.w.Request(si, k)
	if err != nil {
		return err
	}
	s.nextID++
	f := &flight{id: s.nextID, req: req, router: s.rng.IntN(len(s.rts)), replica: -1, arrival: s.now,
		wantAnswer: k+1 < len(s.w.Sessions[si].Turns) || s.cfg.IndexAnswers}
	s.flights[f.id] = f
	s.res.Requests++
	rt := s.rts[f.router]
	if len(rt.queue) > 0 || !s.dispatch(rt, f) {
		rt.queue = append(rt.queue, f)
		s.res.Queued++
		s.res.MaxQueue = max(s.res.MaxQueue, len(rt.queue))
	}
	return nil
}

// buildView describes every replica as router rt sees it now, as the
// module's trySelect does.
func (s *Sim) buildView(rt *router) []policies.Replica {
	for i, rp := range s.reps {
		v := &rt.reps[i]
		r := policies.Replica{Addr: rp.addr, InFlight: v.inFlight, Cap: s.cfg.Cap,
			EngineWaiting: -1, EngineRunning: -1, KVUsage: -1, Index: v.belief.Index()}
		if s.cfg.EngineMetrics && v.sampled {
			r.EngineWaiting, r.EngineRunning, r.KVUsage = v.waiting, v.running, v.kvUsage
			r.InFlightSinceSample = v.inFlight - v.sampledInFlight
		}
		if !s.cfg.IgnorePrefilling {
			r.Prefilling = v.prefills
		}
		r.PendingPrefill = v.pending
		rt.view[i] = r
	}
	return rt.view
}

// dispatch asks rt's policy for a replica and sends f there. It reports
// false when no replica can take f now.
func (s *Sim) dispatch(rt *router, f *flight) bool {
	s.tokensBuf = f.req.Tokens(s.tokensBuf)
	f.tokens = s.tokensBuf
	defer func() { f.tokens = nil }()
	view := s.buildView(rt)
	i := rt.picker.pick(f, view)
	if i < 0 {
		return false
	}
	rp, v := s.reps[i], &rt.reps[i]
	f.replica = i
	if rt.sensor != nil {
		s.notePeers(rt)
	}
	s.placeFirst(f, i)
	f.trueTok = rp.eng.CachedPrefixTokens(f.tokens)
	if s.cfg.RuleStats {
		s.survey(f, i)
	}
	pl := v.belief.Place(f.req.Keys) // optimistic, as the module is
	f.predicted, f.concurrent, f.head, f.reach = pl.Predicted, pl.Concurrent, pl.Head, pl.Reach
	f.uncached = policies.UncachedBytes(f.req.Keys, pl.Predicted)
	v.inFlight++
	v.prefills++
	v.pending += f.uncached
	rp.dispatched++
	if f.arrival != s.now {
		s.res.queueWait = append(s.res.queueWait, (s.now-f.arrival).Seconds()*1000)
	}
	err := rp.eng.Submit(simengine.Request{ID: f.id, Prompt: f.tokens, MaxTokens: f.req.OutputTokens, OutputTokens: f.req.OutputTokens})
	if err != nil {
		s.res.SubmitErrors++
		s.complete(f, false, simengine.Usage{})
		return true
	}
	if !rp.stepping {
		s.step(i)
	}
	return true
}

// survey measures, for RuleStats, what the engines have cached of f's
// prompt: the most any has, and what its home has (the highest
// rendezvous rank of policies.HomeKey, where a router that knows nothing
// of the prompt would look). sent is the replica f went to, whose cache
// f.trueTok holds already.
func (s *Sim) survey(f *flight, sent int) {
	hk, top := policies.HomeKey(f.req.Keys), uint64(0)
	f.bestTok, f.homeTok = 0, 0
	for i, rp := range s.reps {
		cached := f.trueTok
		if i != sent {
			cached = rp.eng.CachedPrefixTokens(f.tokens)
		}
		f.bestTok = max(f.bestTok, cached)
		if r := policies.Rendezvous(hk, rp.addr); i == 0 || r > top {
			top, f.homeTok = r, cached
		}
	}
}

// notePeers records what rt's strategy believed about peers at a
// placement.
func (s *Sim) notePeers(rt *router) {
	peers := rt.sensor.Peers()
	s.res.peerPicks++
	if peers {
		s.res.peerTrue++
	}
	if peers != rt.peers {
		rt.peers = peers
		s.res.PeerFlips++
		if !peers && s.res.FirstAloneS == 0 {
			s.res.FirstAloneS = max(s.now.Seconds(), 1e-3)
		}
	}
}

// step runs one engine step starting now; its events are delivered at its
// end.
func (s *Sim) step(i int) {
	rp := s.reps[i]
	dt, evs := rp.eng.Step()
	if dt == 0 {
		rp.stepping = false
		return
	}
	rp.stepping = true
	rp.pending = evs
	s.evq.Push(s.now+dt, event{kind: evStepEnd, a: i})
}

func (s *Sim) stepEnd(i int) error {
	rp := s.reps[i]
	evs := rp.pending
	rp.pending = nil
	// The step is over. Completions below may dispatch to this replica,
	// which starts its next step at once (stepping turns true again).
	rp.stepping = false
	for _, ev := range evs {
		f := s.flights[ev.ID]
		if f == nil {
			return fmt.Errorf("sim: event for unknown request %d", ev.ID)
		}
		switch ev.Kind {
		case simengine.EventFirstToken:
			f.firstTok = s.now
			f.firstSeen = true
			s.rts[f.router].reps[f.replica].endPrefill(f)
			if f.wantAnswer {
				f.answer = append(f.answer, ev.Token)
			}
		case simengine.EventToken:
			if f.wantAnswer {
				f.answer = append(f.answer, ev.Token)
			}
		case simengine.EventFinished:
			s.complete(f, true, ev.Usage)
		}
	}
	if rp.pendingRestart {
		rp.pendingRestart = false
		s.restart(i)
	}
	if !rp.stepping {
		s.step(i)
	}
	return nil
}

// restart crash-restarts replica i: its cache is wiped and the requests it
// held fail (their streams are cut).
func (s *Sim) restart(i int) {
	rp := s.reps[i]
	rp.restarts++
	s.res.Restarts++
	ids := rp.eng.Restart()
	// A step started since the last step end belongs to dropped requests:
	// its events are void (its end event still fires, delivering none).
	rp.pending = nil
	for _, id := range ids {
		s.complete(s.flights[id], false, simengine.Usage{})
	}
}

// complete finishes f: success with the engine's usage, or failure.
func (s *Sim) complete(f *flight, ok bool, u simengine.Usage) {
	if f.done {
		panic(fmt.Sprintf("sim: request %d completed twice", f.id))
	}
	f.done = true
	delete(s.flights, f.id)
	rt := s.rts[f.router]
	v := &rt.reps[f.replica]
	v.inFlight--
	if !f.firstSeen {
		v.endPrefill(f)
	}
	s.res.record(s, f, ok, u)
	if ok && s.cfg.Feedback {
		s.observe(rt, f.replica, f, u)
	}
	if ok && s.cfg.IndexAnswers {
		s.indexAnswer(v, f)
	}
	ss := &s.w.Sessions[f.req.Session]
	if next := f.req.Turn + 1; next < len(ss.Turns) {
		if ok {
			s.w.SetAnswer(f.req.Session, f.req.Turn, f.answer)
			s.res.thinking++
			s.evq.Push(s.now+ss.Turns[next].Think, event{kind: evTurn, a: f.req.Session, b: next})
		} else {
			s.res.Abandoned += len(ss.Turns) - next
		}
	}
	// A slot freed on this router: serve its queue in order.
	for len(rt.queue) > 0 {
		if !s.dispatch(rt, rt.queue[0]) {
			break
		}
		rt.queue[0] = nil
		rt.queue = rt.queue[1:]
	}
}

// sample is router r's scrape of every engine's metrics: the load figures
// for the strategies, and the cache size and counters for the belief, as
// the module's scraper hands them on.
func (s *Sim) sample(r int) {
	rt := s.rts[r]
	for i, rp := range s.reps {
		st := rp.eng.Stats()
		v := &rt.reps[i]
		v.sampled = true
		v.waiting, v.running, v.kvUsage = st.Waiting, st.Running, st.KVUsage
		v.sampledInFlight = v.inFlight
		ec := policies.EngineCache{NumBlocks: st.NumBlocks, BlockTokens: st.BlockSize, PrefixQueries: float64(st.PrefixCacheQueries)}
		if s.cfg.UnsizedCache {
			ec.NumBlocks, ec.BlockTokens = 0, 0
		}
		if v.belief.Engine(ec) {
			s.res.Residency.PurgesCounters++
		}
	}
}

// observe holds f's prediction against the engine's usage, as the
// module's feedback does.
func (s *Sim) observe(rt *router, i int, f *flight, u simengine.Usage) {
	ck := policies.Check{PredictedBlocks: f.predicted, Concurrent: f.concurrent, Reach: f.reach,
		CachedTokens: u.CachedTokens, PromptTokens: u.PromptTokens, PromptBytes: f.req.PromptBytes, Reason: f.why}
	c := rt.reps[i].belief.Check(ck)
	if c.Purged {
		s.res.Residency.PurgesMisses++
	}
	if o := observerOf(rt.picker); o != nil {
		o.Observe(ck, c.Result)
	}
}

// indexAnswer adds f's streamed answer to v's index, as the module does
// when the stream ends: the text the client saw, rendered as the next turn
// will carry it.
func (s *Sim) indexAnswer(v *replicaView, f *flight) {
	a := policies.NewAnswer(f.req.Keys)
	if a == nil {
		return
	}
	for _, t := range f.answer {
		txt, _ := simengine.TokenText(t)
		a.WriteString(txt)
	}
	if chain := a.Chain(); chain != nil {
		v.belief.Index().Insert(chain)
	}
}

// endPrefill ends f's prefilling on v: at its first token or its end.
func (v *replicaView) endPrefill(f *flight) {
	v.prefills--
	v.pending -= f.uncached
	v.belief.EndPending(f.head)
	f.head = 0
}

// placeFirst records where f's router sends f's leading key the first
// time that router sees it.
func (s *Sim) placeFirst(f *flight, i int) {
	if s.firstPlace == nil || f.req.Keys.Leading == 0 {
		return
	}
	n := len(s.rts)
	p := s.firstPlace[f.req.Keys.Leading]
	if p == nil {
		p = make([]int, 2*n)
		for j := range p {
			p[j] = -1
		}
		s.firstPlace[f.req.Keys.Leading] = p
	}
	switch {
	case p[f.router] < 0:
		p[f.router] = i
	case p[n+f.router] < 0:
		p[n+f.router] = i
	}
}

// Agreement counts the keys seen (at that rank: first or second time) by
// at least two routers, and those every such router sent to one replica:
// places holds, per key, the replica each router sent it to (-1: none).
// The e2e harness applies it to what the client saw.
func Agreement(places [][]int) (keys, agreed int) {
	for _, p := range places {
		seen, agree, at := 0, true, -1
		for _, i := range p {
			if i < 0 {
				continue
			}
			if seen++; at >= 0 && i != at {
				agree = false
			}
			at = i
		}
		if seen >= 2 {
			keys++
			if agree {
				agreed++
			}
		}
	}
	return keys, agreed
}

// finish sorts the samples and computes the summary figures.
func (s *Sim) finish() *Result {
	r := s.res
	var first, second [][]int
	n := len(s.rts)
	for _, p := range s.firstPlace {
		first, second = append(first, p[:n]), append(second, p[n:])
	}
	r.AgreementKeys, r.agreed = Agreement(first)
	r.SecondAgreementKeys, r.secondAgreed = Agreement(second)
	for _, rp := range s.reps {
		st := rp.eng.Stats()
		r.Preemptions += st.Preemptions
		r.Evictions += st.Evictions
		r.Dispatched = append(r.Dispatched, rp.dispatched)
	}
	for _, rt := range s.rts {
		for i := range rt.reps {
			r.Residency.finalIndexCap += rt.reps[i].belief.Index().Capacity()
			r.Residency.finalIndexN++
		}
	}
	r.summarize()
	return r
}

// sortFloat sorts in place and returns xs.
func sortFloat(xs []float64) []float64 { sort.Float64s(xs); return xs }
