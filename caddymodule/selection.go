package caddymodule

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"github.com/jonboulle/clockwork"
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
	// bounded by load, with new prefixes placed by the prefill queued on
	// each replica.
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

	// SheddableShare is the share of the pool's capacity (the sum of its
	// available replicas' caps) that sheddable requests may use: one is
	// admitted only while the pool's requests in flight, itself included,
	// stay within this share, so that the rest is kept for standard and
	// critical traffic. Between 0 and 1; default 0.8. 1 lets sheddable
	// requests fill the pool (they still wait behind every higher band).
	SheddableShare float64 `json:"sheddable_share,omitempty"`

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
	// always cool a replica at once), that count as the replica's failure.
	// An engine also answers these to an input it mishandles, so they cool a
	// replica only when StatusFails distinct requests in a row get one from
	// it; a request that gets the same status from a second replica is the
	// request's fault and counts against neither; and they never cool every
	// replica: the least recently failed one stays routable, through a
	// probe. Default [500, 502, 504].
	FailStatus []int `json:"fail_status,omitempty"`

	// StatusFails is how many distinct requests in a row must get a
	// FailStatus answer from a replica before it cools (the same input sent
	// again counts once; any success ends the streak), like Envoy's
	// consecutive_5xx. 1 cools at the first. Default 3.
	StatusFails int `json:"status_fails,omitempty"`

	// BalanceFactor is the load bound of prefix_load, prefix affinity's
	// sessions and pins: a replica stays a candidate while its load+1 is
	// at most BalanceFactor times the mean load (+1) plus a slack of 2
	// requests (1.25 is HAProxy's hash-balance-factor 125). Load is
	// in-flight requests, those still awaiting their first byte counted
	// twice, plus the engine's queue when known. Larger keeps a hot prefix
	// on its replica longer; nearer 1 spreads it sooner. Default 1.5.
	BalanceFactor float64 `json:"balance_factor,omitempty"`

	// Peers says whether other router instances (or other clients) send to
	// the same replicas: "auto" (the default) infers it from engine_metrics
	// (an engine running well more than this router sent there), assuming
	// peers until the metrics say otherwise or when there are none; "none"
	// or "some" say so. Alone, prefix_load balances new prefixes by load;
	// with peers it keeps them at their rendezvous home, which every
	// instance computes alike, within ColdSlack.
	Peers string `json:"peers,omitempty"`

	// HomesDirectory, when set, shares where each new prefix was first
	// placed with the other router instances through Valkey or Redis
	// (directory.go): new prefixes are then placed by load and every
	// instance follows the first placement, which no instance can do on
	// its own state. When the store does not answer, the router places as
	// it does without it.
	HomesDirectory *HomesDirectoryConfig `json:"homes_directory,omitempty"`

	// IndexAnswers adds what each streamed answer said to the replica's
	// residency index, rendered as the next turn of the conversation will
	// carry it (the engine caches the KV of the tokens it generates), so
	// that a conversation's next turn is predicted whole. Default true.
	IndexAnswers *bool `json:"index_answers,omitempty"`

	// IndexBlocks is the capacity, in 128-byte blocks (2 MiB of prompt text
	// by default), of each replica's residency index until the engine
	// reports its cache size; with another llm_route block_size the index
	// holds as many bytes in that many more or fewer blocks. The answers'
	// cached tokens (request_usage) shrink it toward what an engine that
	// never reports its size keeps (llama.cpp's server), so it is a
	// ceiling rather than a guess. Default 16384.
	IndexBlocks int `json:"index_blocks,omitempty"`

	// SlotHold is for engines whose prompt cache belongs to a slot that
	// one request holds at a time (llama.cpp's server): a request whose
	// prompt begins as one still running (the same deployment, model,
	// system and developer messages, or first block without them; across
	// reloads) waits
	// to be handed that request's place when it ends, so that it reuses
	// the warm slot instead of prefilling its whole prompt into another
	// and evicting what that one held. It waits only while that is
	// expected to be quicker than its own prefill (both learned from the
	// answers: how long requests hold their slot, and the seconds per
	// uncached prompt byte of misses), and never longer than SlotHold;
	// waiters of one prompt are handed places in arrival order. Held
	// requests take no replica slot and are not in the queue. Default 0:
	// never hold (engines with a shared prefix cache, vLLM and SGLang,
	// serve such requests together, and should).
	SlotHold caddy.Duration `json:"slot_hold,omitempty"`

	// SlowStart ramps the cap of a replica llmroute has just started to see
	// (a scale-up, a new dynamic upstream) from 1 to max_in_flight over this
	// duration, so it takes load gradually. Default 0 (off).
	SlowStart caddy.Duration `json:"slow_start,omitempty"`

	// CacheReport says whether the replicas' silence about cached tokens
	// means none were cached, so that a miss is counted and the index
	// corrected: "auto" (the default) once a replica has reported cached
	// tokens for that endpoint kind (vLLM and SGLang write the figure only
	// when it is above 0, llama.cpp always); "always" from the first
	// answer (engines configured to report: vLLM's
	// --enable-prompt-tokens-details, SGLang's --enable-cache-report);
	// "never" ignores the reports (the index is then corrected only by
	// the engines' metrics).
	CacheReport string `json:"cache_report,omitempty"`

	// Tuning holds prefix_load's measured constants, for experiments
	// only: JSON, no Caddyfile directive (see Tuning).
	Tuning *Tuning `json:"tuning,omitempty"`

	// EngineMetrics, when set, scrapes each replica's Prometheus metrics
	// (vLLM, SGLang or llama.cpp names) and feeds queue length and cache
	// size to the strategies. Missing or stale metrics mean unknown load.
	EngineMetrics *EngineMetricsConfig `json:"engine_metrics,omitempty"`

	strategy policies.Strategy
	// opts are the strategy's options with their defaults filled in.
	opts policies.Options
	// rules go with every attempt this policy makes (attempt.go).
	rules    attemptRules
	clock    clockwork.Clock
	decision prometheus.Observer
	queued   atomic.Int64
	logger   *zap.Logger
	warnOnce sync.Once
	scraper  *scraper
	// holds tracks running prompts for slot_hold (slotTracker; nil when
	// off).
	holds *slotHolds
	// sharedHomes is the homes directory when it lives in llm_route's
	// shared_store (bound to it at each pick); nil otherwise.
	sharedHomes *redisHomes
	noStoreWarn sync.Once

	// states holds this policy's reference on each replica state it has
	// seen, keyed by dial address.
	states sync.Map // string -> *replicaState
	// resolved is the last upstream slice's states, in its order, and
	// statesGen counts the states dropped from states: a resolution made
	// before a drop is stale (pick.go, statesOf).
	resolved  atomic.Pointer[resolvedPool]
	statesGen atomic.Uint64

	// poolSig fingerprints the last upstream set seen; a change triggers
	// the departure check (departures.go).
	poolSig  atomic.Uint64
	lastPool atomic.Pointer[*reverseproxy.Upstream] // &pool[0] of the last set seen
	lastLen  atomic.Int64
	poolMu   sync.Mutex
	poolLast map[string]struct{}

	// retired is set by Cleanup: a reload replaced this policy (reload.go).
	retired atomic.Bool
}

// CaddyModule returns the Caddy module information.
func (*LLMSelection) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.reverse_proxy.selection_policies.llm",
		New: func() caddy.Module { return new(LLMSelection) },
	}
}

// Provision sets defaults, builds the strategy and joins the live policies.
func (p *LLMSelection) Provision(ctx caddy.Context) error {
	p.logger = ctx.Logger()
	if err := p.setup(); err != nil {
		return err
	}
	registerMetrics(ctx)
	p.decision = metricDecision.WithLabelValues(p.strategy.Name())
	if p.EngineMetrics != nil {
		if err := p.EngineMetrics.resolve(caddy.NewReplacer()); err != nil {
			return err
		}
		p.scraper = newScraper(*p.EngineMetrics, p.logger)
	}
	goLive(p)
	return nil
}

// setup fills in the defaults and builds what Select needs: the strategy,
// the attempts' rules and the clock (real unless a test set one).
func (p *LLMSelection) setup() error {
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
	if p.SheddableShare == 0 {
		p.SheddableShare = defaultSheddableShare
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
	if p.StatusFails == 0 {
		p.StatusFails = 3
	}
	if p.DialTimeoutWindow == 0 {
		p.DialTimeoutWindow = caddy.Duration(10 * time.Second)
	}
	if p.BalanceFactor == 0 {
		p.BalanceFactor = policies.DefaultBalanceFactor
	}
	if p.IndexBlocks == 0 {
		p.IndexBlocks = defaultIndexBlocks
	}
	if p.logger == nil {
		p.logger = zap.NewNop()
	}
	if p.clock == nil {
		p.clock = clockwork.NewRealClock()
	}
	if p.SlotHold > 0 {
		p.holds = slotTracker // package-level: a reload keeps it (slothold.go)
	}
	opts := p.Tuning.options()
	opts.BalanceFactor, opts.Peers = p.BalanceFactor, peerModes[p.Peers]
	if p.HomesDirectory != nil {
		d, err := homesDirectory(*p.HomesDirectory, p.logger)
		if err != nil {
			return err
		}
		opts.Directory = d
		if d.shared {
			p.sharedHomes = d
		}
	}
	var err error
	// The strategy resolves opts itself (WithDefaults is not idempotent for
	// a negative load slack); p.opts keeps the same resolution for /state.
	if p.opts, err = opts.WithDefaults(); err != nil {
		return err
	}
	if p.strategy, err = policies.NewStrategy(p.Strategy, opts); err != nil {
		return err
	}
	p.rules = p.attemptRules()
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
	if p.SheddableShare < 0 || p.SheddableShare > 1 {
		return fmt.Errorf("sheddable_share must be in (0, 1], got %v", p.SheddableShare)
	}
	if p.CooldownBase < 0 || p.CooldownMax < p.CooldownBase {
		return fmt.Errorf("cooldown must satisfy 0 <= base <= max")
	}
	if p.StatusFails < 0 {
		return fmt.Errorf("status_fails must be >= 0, got %d", p.StatusFails)
	}
	if p.DialTimeoutFails < 0 || p.DialTimeoutWindow < 0 {
		return fmt.Errorf("dial_timeout_fails and its window must be >= 0")
	}
	if p.SlotHold < 0 {
		return fmt.Errorf("slot_hold must be >= 0, got %v", time.Duration(p.SlotHold))
	}
	if _, ok := peerModes[p.Peers]; !ok {
		return fmt.Errorf(`peers must be "auto", "none" or "some", got %q`, p.Peers)
	}
	if p.BalanceFactor < 1 {
		return fmt.Errorf("balance_factor must be >= 1, got %v", p.BalanceFactor)
	}
	if err := validCacheReport(p.CacheReport); err != nil {
		return err
	}
	if err := p.Tuning.validate(); err != nil {
		return err
	}
	if p.EngineMetrics != nil {
		return p.EngineMetrics.validate()
	}
	return nil
}

// Cleanup retires the policy (reload.go) and drops its references on
// replica state after a grace period: a reload's new config takes its own
// references as it sees traffic, and state (belief, cooldowns) survives
// when it does so in time. Live requests hold their replica state by
// pointer, so releasing is safe while they stream.
func (p *LLMSelection) Cleanup() error {
	retire(p)
	defer waiters.wakeAll() // queued requests move to the new config's policy
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
		logUntracked(r)
		return p.selectUntracked(pool)
	}
	retry, rejected := rc.pending()
	if retry {
		// Select runs again only when the attempt in progress failed before
		// anything reached the client: learn from it, then move on.
		rc.endCurrent(previousAttempt(r, p.rules.failStatus))
	}
	if rejected {
		return nil
	}
	if len(pool) == 0 {
		rc.refuse(rejectNoReplicas, time.Second)
		return nil
	}
	if !checkPin(rc, pool) {
		return nil
	}
	if p.sharedHomes != nil {
		p.bindHomes(rc)
	}
	keys := rc.keys()
	if p.holds != nil && !retry && len(keys.Blocks) > 0 && !rc.held() {
		// Wait while a request of the same prompt runs (slothold.go):
		// the same leading run (system and developer messages), or first
		// block without one.
		if !rc.hold(r.Context(), p.holds, policies.HomeKey(keys), keys.Bytes, time.Duration(p.SlotHold)) {
			return nil // the client left
		}
	}

	// At once, or through the fair queue when the replicas are full or
	// others wait (waitqueue.go).
	return p.admit(pool, r, rc, keys, start)
}

// Interface guards
var (
	_ reverseproxy.Selector = (*LLMSelection)(nil)
	_ caddy.Provisioner     = (*LLMSelection)(nil)
	_ caddy.Validator       = (*LLMSelection)(nil)
	_ caddy.CleanerUpper    = (*LLMSelection)(nil)
	_ caddyfile.Unmarshaler = (*LLMSelection)(nil)
)
