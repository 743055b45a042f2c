package caddymodule

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
)

const metricNS = "llmroute"

// The router's metrics. They are package-level so that every config load
// registers the same collectors in its own registry (Caddy serves the
// registry of the running config at /metrics).
var (
	metricRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricNS, Name: "requests_total",
		Help: "Requests by strategy, replica and outcome.",
	}, []string{"strategy", "replica", "outcome"})
	metricRejected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricNS, Name: "admission_rejected_total",
		Help: "Requests refused by admission, by reason.",
	}, []string{"reason"})
	metricCooldowns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricNS, Name: "cooldowns_total",
		Help: "Cooldowns started, by replica and reason.",
	}, []string{"replica", "reason"})
	metricQueueDepth = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metricNS, Name: "queue_depth",
		Help: "Requests waiting for a slot.",
	})
	metricQueueWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: metricNS, Name: "queue_wait_seconds",
		Help:    "Time requests spent waiting for a slot.",
		Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30},
	})
	metricDecision = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: metricNS, Name: "decision_seconds",
		Help:    "Time to choose and reserve a replica, by strategy.",
		Buckets: []float64{.00001, .00005, .0001, .0005, .001, .005, .01},
	}, []string{"strategy"})
	metricSlotHolds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricNS, Name: "slot_holds_total",
		Help: "Requests past slot_hold, by how: none (nothing of their prompt ran), ended (they waited for it to end), timeout (they waited slot_hold), skipped (waiting was expected to take longer than their own prefill), gone (the client left).",
	}, []string{"outcome"})
	metricHomesClaims = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricNS, Name: "homes_directory_claims_total",
		Help: "Claims of new prefixes in the homes directory, by how: path (answered before the request went on), later (made off the request's path, during a run of traffic that shares nothing), dropped (too many later claims out), failed (the store did not answer).",
	}, []string{"how"})
	metricStoreErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricNS, Name: "shared_store_errors_total",
		Help: "Calls to the shared store that failed (timeout, connection, bad reply), by operation.",
	}, []string{"op"})
	metricStoreFallbacks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricNS, Name: "shared_store_fallbacks_total",
		Help: "Decisions made on this instance's own state because the shared store did not answer, by feature.",
	}, []string{"feature"})
	metricTTFB = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: metricNS, Name: "time_to_first_byte_seconds",
		Help:    "Time from request arrival to the first response byte relayed.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
	})
	metricPredictedTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricNS, Name: "predicted_cached_tokens_total",
		Help: "Prompt tokens the residency index predicted cached on the chosen replica.",
	}, []string{"replica"})
	metricReportedTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricNS, Name: "reported_cached_tokens_total",
		Help: "Prompt tokens the engine reported cached.",
	}, []string{"replica"})
	metricPromptTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricNS, Name: "prompt_tokens_total",
		Help: "Prompt tokens the engine reported, on responses that carried usage.",
	}, []string{"replica"})
	metricPredictions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricNS, Name: "predictions_total",
		Help: "Prefix predictions checked against the engine: hit (predicted and cached), miss (predicted, not cached), partial (predicted, less than half of it cached), concurrent (predicted, not all cached, sent while the same prefix was still being prefilled there), cold (not predicted).",
	}, []string{"replica", "result"})
	metricStatusOverrides = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricNS, Name: "status_cooldown_overrides_total",
		Help: "Cooldowns begun by fail_status answers that were ended early because every replica was out, by replica.",
	}, []string{"replica"})
	metricIndexPurges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricNS, Name: "index_purges_total",
		Help: "Residency index purges, by replica and reason.",
	}, []string{"replica", "reason"})
)

// Tenant metrics. The tenant label takes only configured tenants' names
// (and "default"), never a key or anything a client sends, so their
// cardinality is the config's.
var (
	metricTenantRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricNS, Name: "tenant_requests_total",
		Help: "Requests admitted past their tenant's budgets, by tenant and priority band.",
	}, []string{"tenant", "priority"})
	metricTenantRejected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricNS, Name: "tenant_rejected_total",
		Help: "Requests refused, by tenant and reason (requests_per_minute, tokens_per_minute, queue_full, displaced, queue_timeout, no_healthy_replica, ...).",
	}, []string{"tenant", "reason"})
	metricTenantQueueWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: metricNS, Name: "tenant_queue_wait_seconds",
		Help:    "Time requests spent waiting for a slot, by tenant.",
		Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30},
	}, []string{"tenant"})
	metricTenantTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricNS, Name: "tenant_tokens_total",
		Help: "Tokens charged to tenants' budgets at settlement (the engine's usage, or the estimate when it reported none), by tenant.",
	}, []string{"tenant"})
)

// stateCollector reports the live per-replica state.
type stateCollector struct{}

var (
	descInFlight = prometheus.NewDesc(metricNS+"_in_flight", "Reservations held per replica.", []string{"replica"}, nil)
	descIndex    = prometheus.NewDesc(metricNS+"_index_entries", "Residency index entries per replica.", []string{"replica"}, nil)
	descIndexCap = prometheus.NewDesc(metricNS+"_index_capacity", "Residency index capacity per replica, in blocks: the engine's cache once it reports its size, else index_blocks as the cached-token feedback shrank it.", []string{"replica"}, nil)
	descCooling  = prometheus.NewDesc(metricNS+"_cooling", "1 while the replica is cooling down.", []string{"replica"}, nil)
	descSessions = prometheus.NewDesc(metricNS+"_sessions", "Sessions whose replica the router remembers (bounded, expiring).", nil, nil)
)

func (stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descInFlight
	ch <- descIndex
	ch <- descIndexCap
	ch <- descCooling
	ch <- descSessions
}

func (stateCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range snapshotReplicas() {
		ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(s.InFlight), s.Addr)
		ch <- prometheus.MustNewConstMetric(descIndex, prometheus.GaugeValue, float64(s.IndexEntries), s.Addr)
		ch <- prometheus.MustNewConstMetric(descIndexCap, prometheus.GaugeValue, float64(s.IndexCapacity), s.Addr)
		cool := 0.0
		if s.Cooling {
			cool = 1
		}
		ch <- prometheus.MustNewConstMetric(descCooling, prometheus.GaugeValue, cool, s.Addr)
	}
	ch <- prometheus.MustNewConstMetric(descSessions, prometheus.GaugeValue, float64(sessionHomes.Len()))
}

// requestOutcome is one child of metricRequests.
type requestOutcome struct{ strategy, replica, outcome string }

// requestCounters caches metricRequests' children (nothing deletes one),
// so that counting a request hashes its labels once per process, not once
// per request.
var requestCounters sync.Map // requestOutcome -> prometheus.Counter

// countRequest counts one request in metricRequests.
func countRequest(strategy, replica, outcome string) {
	k := requestOutcome{strategy, replica, outcome}
	c, ok := requestCounters.Load(k)
	if !ok {
		c, _ = requestCounters.LoadOrStore(k, metricRequests.WithLabelValues(strategy, replica, outcome))
	}
	c.(prometheus.Counter).Inc()
}

// counterSlot holds one child of a CounterVec for labels that do not
// change (a replica's, a tenant's), made on first use so that /metrics
// shows the series it would without the slot, and kept (nothing deletes
// one): counting then hashes no labels.
type counterSlot struct {
	p atomic.Pointer[prometheus.Counter]
}

// get returns the slot's counter, vec's child for labels, making it first
// if need be (concurrent first uses make the same child).
func (s *counterSlot) get(vec *prometheus.CounterVec, labels ...string) prometheus.Counter {
	if c := s.p.Load(); c != nil {
		return *c
	}
	c := vec.WithLabelValues(labels...)
	s.p.Store(&c)
	return c
}

// registerMetrics registers the router's collectors in the config's
// registry; the handler and the policy both call it, so the second
// registration's AlreadyRegisteredError is expected.
func registerMetrics(ctx caddy.Context) {
	reg := ctx.GetMetricsRegistry()
	if reg == nil {
		return
	}
	for _, c := range append([]prometheus.Collector{
		metricRequests, metricRejected, metricCooldowns, metricQueueDepth, metricQueueWait,
		metricDecision, metricTTFB, metricSlotHolds, metricPredictedTokens, metricReportedTokens, metricPromptTokens,
		metricPredictions, metricIndexPurges, metricStatusOverrides, metricSessionRoutes, metricStateRoutes, metricHomesClaims, metricStoreErrors, metricStoreFallbacks, stateCollector{},
		metricTenantRequests, metricTenantRejected, metricTenantQueueWait, metricTenantTokens, tenantCollector{},
		metricUsageClamped,
	}, operatorCollectors...) {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				caddy.Log().Named("llmroute").Warn("registering metric: " + err.Error())
			}
		}
	}
}

// tenantCollector reports each tenant's requests in flight and waiting.
type tenantCollector struct{}

var (
	descTenantInFlight = prometheus.NewDesc(metricNS+"_tenant_in_flight", "Requests in flight per tenant (admitted, not yet ended).", []string{"tenant"}, nil)
	descTenantQueued   = prometheus.NewDesc(metricNS+"_tenant_queued", "Requests waiting for a slot per tenant.", []string{"tenant"}, nil)
)

func (tenantCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descTenantInFlight
	ch <- descTenantQueued
}

func (tenantCollector) Collect(ch chan<- prometheus.Metric) {
	for _, t := range snapshotTenants() {
		ch <- prometheus.MustNewConstMetric(descTenantInFlight, prometheus.GaugeValue, float64(t.InFlight), t.Name)
		ch <- prometheus.MustNewConstMetric(descTenantQueued, prometheus.GaugeValue, float64(t.Queued), t.Name)
	}
}
