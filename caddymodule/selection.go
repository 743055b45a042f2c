package caddymodule

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/llmroute/caddy-llmroute/policies"
)

func init() {
	caddy.RegisterModule(new(LLMSelection))
}

// LLMSelection is the `llm` load-balancing policy of reverse_proxy. It picks
// a replica with one of llmroute's strategies, reserves an in-flight slot on
// it atomically, skips replicas that are cooling down or that this request
// already tried, and, when every replica is full, waits in a bounded FIFO
// queue woken by released slots. Use it behind the llm_route handler, which
// parses the request and releases the reservation however the response ends.
type LLMSelection struct {
	// Strategy is one of round_robin, prefix_affinity, least_load or
	// prefix_load (the default): the longest believed-resident prefix,
	// bounded by load, with a deterministic rendezvous home for cold prefixes.
	Strategy string `json:"strategy,omitempty"`

	// MaxInFlight caps the requests this router keeps in flight on each
	// replica. When every replica is at its cap, requests queue. Default 32;
	// an upstream's own max_requests, when lower, wins.
	MaxInFlight int `json:"max_in_flight,omitempty"`

	// QueueSize bounds how many requests may wait for a slot. A request that
	// finds the queue full gets 429 with Retry-After. Default 256.
	QueueSize int `json:"queue_size,omitempty"`

	// QueueTimeout is how long a request waits for a slot before it gets 429
	// with Retry-After. Default 30s.
	QueueTimeout caddy.Duration `json:"queue_timeout,omitempty"`

	// CooldownBase is the first cooldown of a failing replica; each further
	// consecutive failure doubles it up to CooldownMax. After a cooldown one
	// probe request is let through while the others wait; the replica is
	// trusted again as soon as the probe's response headers carry a success
	// status, and cools again if the probe fails before them. Default 1s.
	CooldownBase caddy.Duration `json:"cooldown_base,omitempty"`

	// CooldownMax caps the cooldown, including one asked for by a replica's
	// Retry-After header. Default 30s.
	CooldownMax caddy.Duration `json:"cooldown_max,omitempty"`

	// DialTimeoutFails is how many dial timeouts in a row cool a replica.
	// A dial timeout (no connection within the transport's dial_timeout)
	// is a softer failure than a refused connection, which cools at once:
	// a healthy replica whose accept queue overflows under a burst of new
	// connections drops SYNs, and dials to it time out. So timeouts of
	// dials that overlapped (one burst) count once: a dial timeout counts
	// only if its attempt began after the last counted one. Any connection
	// or success from the replica ends the streak, and so does
	// DialTimeoutWindow without another counted timeout. Each dial timeout
	// is still retried on another replica. 1 cools at every dial timeout.
	// Default 3.
	DialTimeoutFails int `json:"dial_timeout_fails,omitempty"`

	// DialTimeoutWindow is how long a streak of dial timeouts is
	// remembered after its last counted timeout. Default 10s.
	DialTimeoutWindow caddy.Duration `json:"dial_timeout_window,omitempty"`

	// FailStatus lists the upstream status codes, besides 429 and 503 (which
	// always count), that put a replica in cooldown. Default [500, 502, 504].
	FailStatus []int `json:"fail_status,omitempty"`

	// BalanceFactor is prefix_load's load bound: a replica stays a candidate
	// while its load+1 is at most BalanceFactor times the mean load (+1)
	// plus LoadSlack (1.25 is HAProxy's hash-balance-factor 125). Load is
	// in-flight requests, those still awaiting their first byte counted
	// twice, plus the engine's queue when known. Default 1.5.
	BalanceFactor float64 `json:"balance_factor,omitempty"`

	// LoadSlack is the absolute slack, in requests, added to the load bound
	// so that a prefix group is not split while the replicas are nearly
	// idle. Default 2.
	LoadSlack int `json:"load_slack,omitempty"`

	// ColdChoices is where prefix_load may send a cold prefix (one no
	// replica is believed to hold): 1 (default) always its rendezvous home,
	// so that several router instances pick the same replica; 2 the
	// second-ranked replica when that one is less loaded than the home; 3
	// the least-loaded replica, ties to the home. 2 and 3 cut tail latency
	// for traffic that shares no prefix when a single router decides; with
	// several routers they cost hit rate.
	ColdChoices int `json:"cold_choices,omitempty"`

	// ColdBalanceFactor is the looser load bound a cold prefix's home must
	// be within (cold_choices 1): past it the prefix goes to the next
	// rendezvous-ranked replica. It is looser than balance_factor because
	// each router instance judges load from its own requests only, and a
	// new prefix should land where every instance would put it; a prefix
	// already resident on a replica over balance_factor still spills by
	// balance_factor. Default 3 (never below balance_factor).
	ColdBalanceFactor float64 `json:"cold_balance_factor,omitempty"`

	// IndexBlocks is the capacity, in 128-byte blocks, of each replica's
	// residency index until the engine reports its cache size. Default 16384.
	IndexBlocks int `json:"index_blocks,omitempty"`

	// SlowStart ramps the cap of a replica llmroute has just started to see
	// (a scale-up, a new dynamic upstream) from 1 to max_in_flight over this
	// duration, so it takes load gradually. Default 0 (off).
	SlowStart caddy.Duration `json:"slow_start,omitempty"`

	// Seed makes the strategies' random tie-breaks reproducible. Default 0.
	Seed uint64 `json:"seed,omitempty"`

	// EngineMetrics, when set, scrapes each replica's Prometheus metrics
	// (vLLM, SGLang or llama.cpp names) and feeds queue length and cache
	// size to the strategies. Missing or stale metrics mean unknown load.
	EngineMetrics *EngineMetricsConfig `json:"engine_metrics,omitempty"`

	strategy policies.Strategy
	// opts are the strategy's options with their defaults filled in.
	opts       policies.Options
	decision   prometheus.Observer
	cd         cooldownConfig
	failStatus map[int]bool
	queued     atomic.Int64
	logger     *zap.Logger
	warnOnce   sync.Once
	scraper    *scraper

	// states holds this policy's reference on each replica state it has
	// seen, keyed by dial address.
	states sync.Map // string -> *replicaState

	// poolSig fingerprints the last upstream set seen; a change triggers
	// the departure check.
	poolSig  atomic.Uint64
	lastPool atomic.Pointer[*reverseproxy.Upstream] // &pool[0] of the last set seen
	lastLen  atomic.Int64
	poolMu   sync.Mutex
	poolLast map[string]struct{}

	// retired is set by Cleanup: a reload replaced this policy.
	retired atomic.Bool
}

// CaddyModule returns the Caddy module information.
func (*LLMSelection) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.reverse_proxy.selection_policies.llm",
		New: func() caddy.Module { return new(LLMSelection) },
	}
}

// Provision sets defaults and builds the strategy.
func (p *LLMSelection) Provision(ctx caddy.Context) error {
	p.logger = ctx.Logger()
	if p.Strategy == "" {
		p.Strategy = "prefix_load"
	}
	if p.MaxInFlight == 0 {
		p.MaxInFlight = 32
	}
	if p.QueueSize == 0 {
		p.QueueSize = 256
	}
	if p.QueueTimeout == 0 {
		p.QueueTimeout = caddy.Duration(30 * time.Second)
	}
	if p.CooldownBase == 0 {
		p.CooldownBase = caddy.Duration(time.Second)
	}
	if p.CooldownMax == 0 {
		p.CooldownMax = caddy.Duration(30 * time.Second)
	}
	if p.FailStatus == nil {
		p.FailStatus = []int{500, 502, 504}
	}
	if p.DialTimeoutFails == 0 {
		p.DialTimeoutFails = 3
	}
	if p.DialTimeoutWindow == 0 {
		p.DialTimeoutWindow = caddy.Duration(10 * time.Second)
	}
	if p.BalanceFactor == 0 {
		p.BalanceFactor = policies.DefaultBalanceFactor
	}
	if p.LoadSlack == 0 {
		p.LoadSlack = policies.DefaultLoadSlack
	}
	if p.IndexBlocks == 0 {
		p.IndexBlocks = defaultIndexBlocks
	}
	p.cd = cooldownConfig{
		base: time.Duration(p.CooldownBase), max: time.Duration(p.CooldownMax),
		dialFails: p.DialTimeoutFails, dialWindow: time.Duration(p.DialTimeoutWindow),
	}
	p.failStatus = map[int]bool{429: true, 503: true}
	for _, s := range p.FailStatus {
		p.failStatus[s] = true
	}
	opts := policies.Options{
		Seed:              p.Seed,
		BalanceFactor:     p.BalanceFactor,
		LoadSlack:         p.LoadSlack,
		ColdChoices:       p.ColdChoices,
		ColdBalanceFactor: p.ColdBalanceFactor,
	}
	var err error
	// The strategy resolves opts itself (WithDefaults is not idempotent for
	// a negative load_slack); p.opts keeps the same resolution for /state.
	if p.opts, err = opts.WithDefaults(); err != nil {
		return err
	}
	p.strategy, err = policies.NewStrategy(p.Strategy, opts)
	if err != nil {
		return err
	}
	registerMetrics(ctx)
	p.decision = metricDecision.WithLabelValues(p.strategy.Name())
	if p.EngineMetrics != nil {
		p.scraper = newScraper(*p.EngineMetrics, p.logger)
	}
	livePolicies.Lock()
	livePolicies.list = append(livePolicies.list, p)
	livePolicies.Unlock()
	// A reload may have raised a cap: let queued requests look again.
	waiters.wakeAll()
	return nil
}

// Validate checks the configuration.
func (p *LLMSelection) Validate() error {
	if p.MaxInFlight < 0 {
		return fmt.Errorf("max_in_flight must be >= 0, got %d", p.MaxInFlight)
	}
	if p.QueueSize < 0 {
		return fmt.Errorf("queue_size must be >= 0, got %d", p.QueueSize)
	}
	if p.CooldownBase < 0 || p.CooldownMax < p.CooldownBase {
		return fmt.Errorf("cooldown must satisfy 0 <= base <= max")
	}
	if p.DialTimeoutFails < 0 || p.DialTimeoutWindow < 0 {
		return fmt.Errorf("dial_timeout_fails and its window must be >= 0")
	}
	if p.ColdChoices < 0 {
		return fmt.Errorf("cold_choices must be >= 1, got %d", p.ColdChoices)
	}
	if p.BalanceFactor < 1 {
		return fmt.Errorf("balance_factor must be >= 1, got %v", p.BalanceFactor)
	}
	if p.ColdBalanceFactor != 0 && !(p.ColdBalanceFactor >= 1) {
		return fmt.Errorf("cold_balance_factor must be >= 1, got %v", p.ColdBalanceFactor)
	}
	if p.EngineMetrics != nil {
		return p.EngineMetrics.validate()
	}
	return nil
}

// Cleanup drops this policy's references on replica state. It waits a grace
// period first: a reload's new config takes its own references as it sees
// traffic, and state (index, cooldowns) survives when it does so in time.
// Live requests hold their replica state by pointer, so releasing is safe
// while they stream.
func (p *LLMSelection) Cleanup() error {
	p.retired.Store(true)
	livePolicies.Lock()
	for i, q := range livePolicies.list {
		if q == p {
			livePolicies.list = append(livePolicies.list[:i], livePolicies.list[i+1:]...)
			break
		}
	}
	livePolicies.Unlock()
	defer waiters.wakeAll() // queued requests move to the new config's policy
	successors.Range(func(k, v any) bool {
		successors.CompareAndDelete(k, p)
		return true
	})
	if p.scraper != nil {
		p.scraper.stop()
	}
	var addrs []string
	p.states.Range(func(k, _ any) bool {
		addrs = append(addrs, k.(string))
		return true
	})
	time.AfterFunc(stateGracePeriod, func() {
		for _, a := range addrs {
			releaseReplica(a)
		}
	})
	return nil
}

// successors maps an upstream-set signature to the newest policy that has
// routed for that set. Requests queued under a policy that a reload retired
// look here so that they are admitted under the new config's limits (a
// raised cap admits them at once) rather than the old one's.
var successors sync.Map // uint64 -> *LLMSelection

// livePolicies lists the provisioned policies that no reload has retired.
var livePolicies struct {
	sync.Mutex
	list []*LLMSelection
}

// live returns the policy that should decide for a request queued under p:
// p itself until a reload retires it, then the new config's policy for the
// same upstream set, or, before that one has routed anything, the only llm
// policy of the new config (with several, it waits for the first).
func (p *LLMSelection) live() *LLMSelection {
	if !p.retired.Load() {
		return p
	}
	if v, ok := successors.Load(p.poolSig.Load()); ok {
		return v.(*LLMSelection)
	}
	livePolicies.Lock()
	defer livePolicies.Unlock()
	if len(livePolicies.list) == 1 {
		return livePolicies.list[0]
	}
	return p
}

// stateGracePeriod is how long replica state outlives the last config that
// referenced it.
var stateGracePeriod = 2 * time.Minute

// state returns this policy's replica state for addr, taking the policy's
// reference the first time the address is seen.
func (p *LLMSelection) state(addr string) *replicaState {
	if v, ok := p.states.Load(addr); ok {
		return v.(*replicaState)
	}
	st := acquireReplica(addr)
	if v, loaded := p.states.LoadOrStore(addr, st); loaded {
		releaseReplica(addr)
		return v.(*replicaState)
	}
	st.rejoin(time.Now())
	if st.index.Capacity() != p.IndexBlocks && !st.feedback.engineSized {
		st.index.SetCapacity(p.IndexBlocks)
	}
	if p.scraper != nil {
		p.scraper.watch(st)
	}
	return st
}

// Select picks a replica for r and reserves a slot on it. It returns nil
// when the request must be refused; the reason is left in the routing
// context for llm_route to turn into a 429 or 503.
func (p *LLMSelection) Select(pool reverseproxy.UpstreamPool, r *http.Request, _ http.ResponseWriter) *reverseproxy.Upstream {
	start := time.Now()
	rc := getRouteCtx(r)
	if rc == nil {
		p.warnOnce.Do(func() {
			p.logger.Warn("lb_policy llm used without the llm_route handler: no prefix keys, no reservations, no queue")
		})
		return p.selectUntracked(pool)
	}
	rc.mu.Lock()
	retry := rc.current != nil
	rejected := rc.reject != rejectNone
	rc.mu.Unlock()
	if retry {
		// Select runs again only when the attempt in progress failed before
		// anything reached the client: learn from it, then move on.
		o, reason, ra := previousAttempt(r, p.failStatus)
		rc.endAttempt(o, reason, ra)
	}
	if rejected {
		return nil
	}
	if len(pool) == 0 {
		rc.refuse(rejectNoReplicas, time.Second)
		return nil
	}
	var keys policies.Keys
	if rc.req != nil {
		keys = rc.req.Keys
	}

	up, res := p.trySelect(pool, r, rc, keys, start, false)
	if up != nil {
		return up
	}
	if res.cooling == res.total {
		rc.refuse(rejectNoHealthy, res.minCool)
		return nil
	}

	// Every usable replica is full: wait for a slot, in FIFO order.
	if p.queued.Add(1) > int64(p.QueueSize) {
		p.queued.Add(-1)
		rc.refuse(rejectQueueFull, time.Second)
		return nil
	}
	defer p.queued.Add(-1)
	metricQueueDepth.Inc()
	defer metricQueueDepth.Dec()
	addrs := make(map[string]struct{}, len(pool))
	for _, u := range pool {
		addrs[u.String()] = struct{}{}
	}
	w := waiters.add(addrs)
	defer waiters.remove(w)
	timer := time.NewTimer(time.Duration(p.QueueTimeout))
	defer timer.Stop()
	waitStart := time.Now()
	defer func() { metricQueueWait.Observe(time.Since(waitStart).Seconds()) }()
	for {
		up, res = p.live().trySelect(pool, r, rc, keys, start, true)
		if up != nil {
			return up
		}
		if res.cooling == res.total {
			rc.refuse(rejectNoHealthy, res.minCool)
			return nil
		}
		select {
		case <-w.ch:
		case <-timer.C:
			rc.refuse(rejectQueueWait, time.Second)
			return nil
		case <-r.Context().Done():
			return nil
		}
	}
}

// selectResult summarises a failed selection.
type selectResult struct {
	total, cooling int
	minCool        time.Duration
}

// trySelect builds the replicas' view, asks the strategy, and reserves a
// slot on its pick. A lost race for the last slot makes it ask again
// without that replica, at most once per replica. queued says that pool is
// as old as the request's wait in the queue: with dynamic upstreams it may
// predate a join or a departure, so it neither decides departures (that
// would purge and drop a replica that joined since, whose fresh state
// would then forget its slow start and in-flight count) nor brings back a
// replica that left since.
func (p *LLMSelection) trySelect(pool reverseproxy.UpstreamPool, r *http.Request, rc *routeCtx, keys policies.Keys, start time.Time, queued bool) (*reverseproxy.Upstream, selectResult) {
	now := time.Now()
	var buf [16]policies.Replica
	view := buf[:0]
	var sbuf [16]*replicaState
	states := sbuf[:0]
	var res selectResult
	res.total = len(pool)
	var gone map[string]bool
	if queued {
		gone = p.departedOf(pool)
	} else {
		p.checkDepartures(pool)
	}
	for _, u := range pool {
		addr := u.String()
		if gone[addr] {
			res.cooling++
			view = append(view, policies.Replica{Addr: addr, Unavailable: true, EngineWaiting: -1, EngineRunning: -1, KVUsage: -1})
			states = append(states, nil)
			continue
		}
		st := p.state(addr)
		limit := p.MaxInFlight
		if u.MaxRequests > 0 && (limit == 0 || u.MaxRequests < limit) {
			limit = u.MaxRequests
		}
		limit = st.slowStartLimit(now, limit, time.Duration(p.SlowStart))
		v := st.snapshot(now, limit)
		down := v.avail == availCooling || !u.Healthy() || rc.wasTried(addr)
		unavailable := down || v.avail == availProbing
		if down {
			res.cooling++
			if v.coolLeft > 0 && (res.minCool == 0 || v.coolLeft < res.minCool) {
				res.minCool = v.coolLeft
			}
		}
		view = append(view, policies.Replica{
			Addr:          addr,
			InFlight:      v.inFlight,
			Prefilling:    v.prefilling,
			Cap:           limit,
			Unavailable:   unavailable,
			EngineWaiting: v.waiting,
			EngineRunning: v.running,
			KVUsage:       v.kv,
			Index:         st.index,
		})
		if v.avail == availFull {
			// Full is expressed through InFlight >= Cap so strategies see it.
			view[len(view)-1].InFlight = max(v.inFlight, limit)
		}
		states = append(states, st)
	}
	for range len(view) {
		i := p.strategy.Pick(keys, view)
		if i < 0 {
			break
		}
		st := states[i]
		resv, ok := st.tryReserve(now, view[i].Cap)
		if !ok {
			view[i].Unavailable = true
			continue
		}
		predicted := st.index.Match(keys.Blocks)
		if len(keys.Blocks) > 0 {
			resv.markPending(keys.Blocks[0])
		}
		if !rc.attach(resv, view[i].Addr, p.cd, p.failStatus, predicted, p.strategy.Name(), p.IndexBlocks) {
			return nil, res
		}
		if len(keys.Blocks) > 0 {
			// Optimistic: the replica will cache what we send it. Feedback
			// from the engine's cached-token counts corrects this belief.
			st.index.Insert(keys.Blocks)
		}
		clearAttemptPlaceholders(r)
		rc.mu.Lock()
		body := rc.body
		rc.mu.Unlock()
		if body != nil {
			r.Body = attemptBody(body)
		}
		if p.decision != nil {
			p.decision.Observe(time.Since(start).Seconds())
		}
		return pool[i], res
	}
	return nil, res
}

// checkDepartures notices replicas that left the upstream set (dynamic
// upstreams, a scale-down): their residency index is purged so that a
// replica coming back under the same address starts cold, as its engine
// does. Requests still in flight on a departed replica keep their
// reservation until they end. The common case (same set) costs one hash.
func (p *LLMSelection) checkDepartures(pool reverseproxy.UpstreamPool) {
	// Static upstreams arrive as the same slice every time: nothing moved.
	if len(pool) > 0 && p.lastPool.Load() == &pool[0] && int(p.lastLen.Load()) == len(pool) {
		return
	}
	var sig uint64
	for _, u := range pool {
		sig ^= policies.Rendezvous(0x9e3779b97f4a7c15, u.String())
	}
	sig ^= uint64(len(pool))
	if p.poolSig.Load() == sig {
		p.rememberPool(pool)
		return
	}
	p.poolMu.Lock()
	defer p.poolMu.Unlock()
	if p.poolSig.Load() == sig {
		return
	}
	now := make(map[string]struct{}, len(pool))
	for _, u := range pool {
		now[u.String()] = struct{}{}
	}
	for addr := range p.poolLast {
		if _, ok := now[addr]; ok {
			continue
		}
		if v, ok := p.states.LoadAndDelete(addr); ok {
			st := v.(*replicaState)
			st.purge("removed")
			st.depart()
			if p.scraper != nil {
				p.scraper.unwatch(addr)
			}
		}
	}
	p.poolLast = now
	p.poolSig.Store(sig)
	p.rememberPool(pool)
	if !p.retired.Load() {
		if old, loaded := successors.Swap(sig, p); loaded && old != p {
			// A reload's new policy saw this set: requests queued under
			// the old one look again under the new limits.
			waiters.wakeAll()
		}
	}
}

// departedOf returns the replicas of pool that the last set checked by
// checkDepartures no longer holds (nil when there are none).
func (p *LLMSelection) departedOf(pool reverseproxy.UpstreamPool) map[string]bool {
	p.poolMu.Lock()
	defer p.poolMu.Unlock()
	if p.poolLast == nil {
		return nil
	}
	var gone map[string]bool
	for _, u := range pool {
		if _, ok := p.poolLast[u.String()]; !ok {
			if gone == nil {
				gone = map[string]bool{}
			}
			gone[u.String()] = true
		}
	}
	return gone
}

// rememberPool notes the slice of a set already checked, for the fast path.
func (p *LLMSelection) rememberPool(pool reverseproxy.UpstreamPool) {
	if len(pool) > 0 {
		p.lastLen.Store(int64(len(pool)))
		p.lastPool.Store(&pool[0])
	}
}

// selectUntracked serves requests that did not pass through llm_route: it
// picks by strategy with Caddy's own request counts and reserves nothing.
func (p *LLMSelection) selectUntracked(pool reverseproxy.UpstreamPool) *reverseproxy.Upstream {
	view := make([]policies.Replica, len(pool))
	for i, u := range pool {
		view[i] = policies.Replica{
			Addr: u.String(), InFlight: u.NumRequests(), Cap: u.MaxRequests,
			Unavailable: !u.Healthy(), EngineWaiting: -1, EngineRunning: -1, KVUsage: -1,
		}
	}
	if i := p.strategy.Pick(policies.Keys{}, view); i >= 0 {
		return pool[i]
	}
	return nil
}

func (rc *routeCtx) setReject(r rejectReason, retryAfter time.Duration) {
	rc.mu.Lock()
	rc.reject, rc.retryAfter = r, retryAfter
	rc.mu.Unlock()
}

// refuse records an admission refusal and counts it.
func (rc *routeCtx) refuse(r rejectReason, retryAfter time.Duration) {
	rc.setReject(r, retryAfter)
	metricRejected.WithLabelValues(r.String()).Inc()
}

// UnmarshalCaddyfile sets up the policy from Caddyfile tokens:
//
//	lb_policy llm [<strategy>] {
//		strategy        round_robin|prefix_affinity|least_load|prefix_load
//		max_in_flight   <n>
//		queue_size      <n>
//		queue_timeout   <duration>
//		slow_start      <duration>
//		cooldown        <base> [<max>]
//		dial_timeout_fails <n> [<window>]
//		fail_status     <code...>
//		balance_factor  <float>
//		load_slack      <n>
//		cold_choices    1|2|3
//		cold_balance_factor <float>
//		index_blocks    <n>
//		seed            <n>
//		engine_metrics  [<path>] {
//			interval <duration>
//			timeout  <duration>
//			stale_after <duration>
//		}
//	}
func (p *LLMSelection) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // consume policy name
	if d.NextArg() {
		p.Strategy = d.Val()
	}
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		switch d.Val() {
		case "strategy":
			if !d.NextArg() {
				return d.ArgErr()
			}
			p.Strategy = d.Val()
		case "max_in_flight", "queue_size", "load_slack", "index_blocks", "cold_choices":
			name := d.Val()
			if !d.NextArg() {
				return d.ArgErr()
			}
			n, err := strconv.Atoi(d.Val())
			if err != nil {
				return d.Errf("%s: %v", name, err)
			}
			switch name {
			case "max_in_flight":
				p.MaxInFlight = n
			case "queue_size":
				p.QueueSize = n
			case "load_slack":
				p.LoadSlack = n
			case "index_blocks":
				p.IndexBlocks = n
			case "cold_choices":
				p.ColdChoices = n
			}
		case "queue_timeout", "slow_start":
			name := d.Val()
			if !d.NextArg() {
				return d.ArgErr()
			}
			dur, err := caddy.ParseDuration(d.Val())
			if err != nil {
				return d.Errf("%s: %v", name, err)
			}
			if name == "slow_start" {
				p.SlowStart = caddy.Duration(dur)
			} else {
				p.QueueTimeout = caddy.Duration(dur)
			}
		case "cooldown":
			args := d.RemainingArgs()
			if len(args) < 1 || len(args) > 2 {
				return d.ArgErr()
			}
			base, err := caddy.ParseDuration(args[0])
			if err != nil {
				return d.Errf("cooldown: %v", err)
			}
			p.CooldownBase = caddy.Duration(base)
			if len(args) == 2 {
				m, err := caddy.ParseDuration(args[1])
				if err != nil {
					return d.Errf("cooldown: %v", err)
				}
				p.CooldownMax = caddy.Duration(m)
			}
		case "dial_timeout_fails":
			args := d.RemainingArgs()
			if len(args) < 1 || len(args) > 2 {
				return d.ArgErr()
			}
			n, err := strconv.Atoi(args[0])
			if err != nil {
				return d.Errf("dial_timeout_fails: %v", err)
			}
			p.DialTimeoutFails = n
			if len(args) == 2 {
				w, err := caddy.ParseDuration(args[1])
				if err != nil {
					return d.Errf("dial_timeout_fails: %v", err)
				}
				p.DialTimeoutWindow = caddy.Duration(w)
			}
		case "fail_status":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.ArgErr()
			}
			p.FailStatus = p.FailStatus[:0]
			for _, a := range args {
				n, err := strconv.Atoi(a)
				if err != nil || n < 100 || n > 599 {
					return d.Errf("fail_status: bad status code %q", a)
				}
				p.FailStatus = append(p.FailStatus, n)
			}
		case "balance_factor", "cold_balance_factor":
			opt := d.Val()
			if !d.NextArg() {
				return d.ArgErr()
			}
			f, err := strconv.ParseFloat(d.Val(), 64)
			if err != nil {
				return d.Errf("%s: %v", opt, err)
			}
			if opt == "balance_factor" {
				p.BalanceFactor = f
			} else {
				p.ColdBalanceFactor = f
			}
		case "seed":
			if !d.NextArg() {
				return d.ArgErr()
			}
			n, err := strconv.ParseUint(d.Val(), 10, 64)
			if err != nil {
				return d.Errf("seed: %v", err)
			}
			p.Seed = n
		case "engine_metrics":
			cfg, err := parseEngineMetrics(d)
			if err != nil {
				return err
			}
			p.EngineMetrics = cfg
		default:
			return d.Errf("unrecognized llm policy option %q", d.Val())
		}
	}
	return nil
}

// Interface guards
var (
	_ reverseproxy.Selector = (*LLMSelection)(nil)
	_ caddy.Provisioner     = (*LLMSelection)(nil)
	_ caddy.Validator       = (*LLMSelection)(nil)
	_ caddy.CleanerUpper    = (*LLMSelection)(nil)
	_ caddyfile.Unmarshaler = (*LLMSelection)(nil)
)
