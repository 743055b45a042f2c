package caddymodule

import (
	"net/http"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// What an operator watches besides the routing internals: each ended
// request in the per-model metrics (genai.go) and the access log
// (accesslog.go), and the gauges a dashboard needs that /llm_route/state
// holds (the engines' queues and KV usage, the tenants' budgets).

// observe records the request rc ended, with the requests metric's label,
// the strategy and replica of its last attempt.
func (h *LLMRoute) observe(r *http.Request, ww *routeWriter, rc *routeCtx, label, strategy, replica string) {
	o := h.observation(rc, ww, label, time.Now())
	observeGenAI(o)
	logRequest(r, rc, o, replica, strategy)
}

// observeRefused records a request its tenant's budgets refused with
// status, before any routing.
func (h *LLMRoute) observeRefused(r *http.Request, rc *routeCtx, status int) {
	o := genAIObservation{
		model: modelLabel(rc.req), operation: operationName(rc.ph.endpoint), tenant: rc.ph.tenant,
		status: status, errType: "budget", duration: time.Since(rc.started),
	}
	observeGenAI(o)
	logRequest(r, rc, o, "", "")
}

// operatorCollector reports, per replica, the last engine scrape
// (engine_metrics) and the sessions bound to it, and per tenant its
// budgets.
type operatorCollector struct{}

var (
	descEngineWaiting = prometheus.NewDesc(metricNS+"_engine_waiting", "Requests waiting in the replica's engine at its last scrape (engine_metrics).", []string{"replica"}, nil)
	descEngineRunning = prometheus.NewDesc(metricNS+"_engine_running", "Requests running in the replica's engine at its last scrape (engine_metrics).", []string{"replica"}, nil)
	descEngineKV      = prometheus.NewDesc(metricNS+"_engine_kv_usage_ratio", "KV cache usage of the replica's engine at its last scrape, 0 to 1 (engine_metrics).", []string{"replica"}, nil)
	descEngineAge     = prometheus.NewDesc(metricNS+"_engine_scrape_age_seconds", "Age of the replica's last engine scrape (engine_metrics).", []string{"replica"}, nil)
	descPrecision     = prometheus.NewDesc(metricNS+"_prediction_precision_ratio", "Share of the replica's checked predictions the engine's cached tokens confirmed (policies.Belief).", []string{"replica"}, nil)
	descTenantTPM     = prometheus.NewDesc(metricNS+"_tenant_tokens_per_minute_limit", "The tenant's tokens_per_minute budget (only tenants with one).", []string{"tenant"}, nil)
	descTenantRPM     = prometheus.NewDesc(metricNS+"_tenant_requests_per_minute_limit", "The tenant's requests_per_minute budget (only tenants with one).", []string{"tenant"}, nil)
	descTenantTPMLeft = prometheus.NewDesc(metricNS+"_tenant_tokens_left", "What is left of the tenant's tokens_per_minute budget now (negative after an overrun).", []string{"tenant"}, nil)
)

func (operatorCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descEngineWaiting, descEngineRunning, descEngineKV, descEngineAge, descPrecision, descTenantTPM, descTenantRPM, descTenantTPMLeft} {
		ch <- d
	}
}

func (operatorCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range snapshotReplicas() {
		if e := s.Engine; e != nil && !e.Stale {
			ch <- prometheus.MustNewConstMetric(descEngineWaiting, prometheus.GaugeValue, e.Waiting, s.Addr)
			ch <- prometheus.MustNewConstMetric(descEngineRunning, prometheus.GaugeValue, e.Running, s.Addr)
			if e.KVUsage >= 0 {
				ch <- prometheus.MustNewConstMetric(descEngineKV, prometheus.GaugeValue, e.KVUsage, s.Addr)
			}
		}
		if e := s.Engine; e != nil {
			ch <- prometheus.MustNewConstMetric(descEngineAge, prometheus.GaugeValue, e.AgeSeconds, s.Addr)
		}
		if s.Feedback.Checks > 0 {
			ch <- prometheus.MustNewConstMetric(descPrecision, prometheus.GaugeValue, s.Feedback.Precision, s.Addr)
		}
	}
	for _, t := range snapshotTenants() {
		if t.TokensPerMinute > 0 {
			ch <- prometheus.MustNewConstMetric(descTenantTPM, prometheus.GaugeValue, float64(t.TokensPerMinute), t.Name)
			ch <- prometheus.MustNewConstMetric(descTenantTPMLeft, prometheus.GaugeValue, t.TokensLeft, t.Name)
		}
		if t.RequestsPerMinute > 0 {
			ch <- prometheus.MustNewConstMetric(descTenantRPM, prometheus.GaugeValue, float64(t.RequestsPerMinute), t.Name)
		}
	}
}

// operatorCollectors are registerMetrics' collectors of this file and
// genai.go.
var operatorCollectors = []prometheus.Collector{
	metricGenAITTFT, metricGenAITPOT, metricGenAIDuration, metricGenAITokens, metricGenAIRequests, operatorCollector{},
}

// replicaAddrs lists the replicas the policy holds state for, sorted.
func (p *LLMSelection) replicaAddrs() []string {
	var out []string
	p.states.Range(func(k, _ any) bool {
		out = append(out, k.(string))
		return true
	})
	sort.Strings(out)
	return out
}

// sessionsPerReplica counts the remembered sessions by the replica they
// went to last. It walks the whole table (bounded by maxSessions), for
// /llm_route/state only, never per request.
func sessionsPerReplica() map[string]int {
	out := map[string]int{}
	for _, addr := range sessionHomes.Values() {
		out[addr]++
	}
	return out
}

// Interface guards
var _ prometheus.Collector = operatorCollector{}
