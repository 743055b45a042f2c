package caddymodule

import (
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmroute/caddy-llmroute/policies"
)

// Per-model metrics, named after the OpenTelemetry GenAI semantic
// conventions (docs/metrics.md has the mapping and where it departs from
// them): gen_ai.server.time_to_first_token, gen_ai.server.time_per_output_token
// and gen_ai.server.request.duration as histograms, the token usage as one
// counter by token type, and the requests by status. Every name carries the
// llmroute_ prefix: these are the gateway's measurements (its queue and the
// network to the replica included), not the engine's own, which may be in
// the same Prometheus under the unprefixed names.
//
// Labels are bounded: gen_ai_request_model takes only models the config
// names or the replicas list (modellabels.go), anything else "other";
// gen_ai_operation_name one of a few operations; tenant only configured
// tenants' names. The histograms are per model and operation; the counters
// are per tenant too.

// Label names, as the conventions' attributes spell them in Prometheus.
const (
	labelModel     = "gen_ai_request_model"
	labelOperation = "gen_ai_operation_name"
	labelTokenType = "gen_ai_token_type"
	labelStatus    = "http_response_status_code"
	labelErrorType = "error_type"
)

// Token types of llmroute_gen_ai_token_usage_total: input and output are
// the conventions' values; cached counts the input tokens the engine
// reported served from its prefix cache (a part of input).
const (
	tokenInput  = "input"
	tokenOutput = "output"
	tokenCached = "cached"
)

var (
	// Buckets (seconds) of the conventions' advice: for time to first
	// token, with 30 s and 60 s above for a gateway whose queue holds
	// requests up to queue_timeout; for request duration as advised; for
	// time per output token with two below its 10 ms, where fast engines
	// and small models stream.
	genAITTFTBuckets     = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30, 60}
	genAIDurationBuckets = prometheus.ExponentialBuckets(0.01, 2, 14) // 0.01 to 81.92
	genAIPerTokenBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5}

	metricGenAITTFT = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: metricNS, Name: "gen_ai_server_time_to_first_token_seconds",
		Help:    "Time from a streamed request's arrival to its first byte relayed (successful streams), by model and operation.",
		Buckets: genAITTFTBuckets,
	}, []string{labelModel, labelOperation})
	metricGenAITPOT = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: metricNS, Name: "gen_ai_server_time_per_output_token_seconds",
		Help:    "Time per output token after the first, of successful streams whose usage the engine reported, by model and operation.",
		Buckets: genAIPerTokenBuckets,
	}, []string{labelModel, labelOperation})
	metricGenAIDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: metricNS, Name: "gen_ai_server_request_duration_seconds",
		Help:    "Time from a request's arrival to its end (last byte relayed, or its error), by model and operation.",
		Buckets: genAIDurationBuckets,
	}, []string{labelModel, labelOperation})
	metricGenAITokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricNS, Name: "gen_ai_token_usage_total",
		Help: "Tokens the engines reported in usage, by model, operation, tenant and type (input, output, cached: the input tokens served from the prefix cache).",
	}, []string{labelModel, labelOperation, "tenant", labelTokenType})
	metricGenAIRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricNS, Name: "gen_ai_requests_total",
		Help: "Requests by model, operation, tenant, the status the client got (499: it left first) and error type (empty for success).",
	}, []string{labelModel, labelOperation, "tenant", labelStatus, labelErrorType})
)

// operationName maps an endpoint ({llm.endpoint}) to the conventions'
// gen_ai.operation.name: chat for the chat-shaped APIs (chat completions,
// Responses, Anthropic Messages), text_completion, embeddings; the other
// endpoints keep their own name (rerank, score, tokenize, ...), which the
// conventions do not list.
func operationName(endpoint string) string {
	switch endpoint {
	case "chat/completions", "responses", "messages":
		return "chat"
	case "completions":
		return "text_completion"
	case "embeddings":
		return "embeddings"
	case "":
		return "other"
	}
	return strings.ReplaceAll(endpoint, "/", "_")
}

// genAISeries are the children of the per-model metrics for one model,
// operation and tenant, made once and kept (nothing deletes one), so that
// observing a request hashes no labels.
type genAISeries struct {
	ttft, tpot, duration         prometheus.Observer
	input, output, cached        prometheus.Counter
	model, operation, tenantName string
}

type genAIKey struct{ model, operation, tenant string }

type genAIStatusKey struct {
	genAIKey
	status  int
	errType string
}

var (
	genAISeriesCache cowMap[genAIKey, *genAISeries]
	genAIStatusCache cowMap[genAIStatusKey, prometheus.Counter]
)

// cowMap is a map read without a lock or an allocation (a struct key in a
// sync.Map is boxed on every lookup) and copied on the rare write: its
// keys are the bounded label sets, each written once.
type cowMap[K comparable, V any] struct {
	m  atomic.Pointer[map[K]V]
	mu sync.Mutex
}

// get returns k's value, made by mk (under the write lock) when missing.
func (c *cowMap[K, V]) get(k K, mk func() V) V {
	if m := c.m.Load(); m != nil {
		if v, ok := (*m)[k]; ok {
			return v
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil {
		if v, ok := (*old)[k]; ok {
			return v
		}
	}
	next := make(map[K]V, 1)
	if old != nil {
		maps.Copy(next, *old)
	}
	v := mk()
	next[k] = v
	c.m.Store(&next)
	return v
}

// genAISeriesOf returns the series of k.
func genAISeriesOf(k genAIKey) *genAISeries {
	return genAISeriesCache.get(k, func() *genAISeries { return newGenAISeries(k) })
}

// newGenAISeries makes k's children.
func newGenAISeries(k genAIKey) *genAISeries {
	return &genAISeries{
		ttft:     metricGenAITTFT.WithLabelValues(k.model, k.operation),
		tpot:     metricGenAITPOT.WithLabelValues(k.model, k.operation),
		duration: metricGenAIDuration.WithLabelValues(k.model, k.operation),
		input:    metricGenAITokens.WithLabelValues(k.model, k.operation, k.tenant, tokenInput),
		output:   metricGenAITokens.WithLabelValues(k.model, k.operation, k.tenant, tokenOutput),
		cached:   metricGenAITokens.WithLabelValues(k.model, k.operation, k.tenant, tokenCached),
		model:    k.model, operation: k.operation, tenantName: k.tenant,
	}
}

// countStatus counts one request in llmroute_gen_ai_requests_total.
func (s *genAISeries) countStatus(status int, errType string) {
	k := genAIStatusKey{genAIKey{s.model, s.operation, s.tenantName}, boundStatus(status), errType}
	genAIStatusCache.get(k, func() prometheus.Counter {
		return metricGenAIRequests.WithLabelValues(k.model, k.operation, k.tenant, statusLabel(k.status), k.errType)
	}).Inc()
}

// statusLabel spells an HTTP status for a label; anything outside 100-599
// is "0", so that the label's values stay few.
func statusLabel(status int) string {
	if status < 100 || status > 599 {
		return "0"
	}
	return strconv.Itoa(status)
}

// boundStatus is status as the requests metric keys it (statusLabel's
// bound), so that the cache holds one entry per label value.
func boundStatus(status int) int {
	if status < 100 || status > 599 {
		return 0
	}
	return status
}

// usageFigures is what an answer's usage said: prompt, cached and output
// tokens (each 0 when not reported), and whether any was reported.
type usageFigures struct {
	prompt, cached, output int
	reported               bool
}

// usageOf reads the sniffer's figures. Output is the whole usage less the
// prompt (countTokens keeps the whole: total_tokens, or prompt plus
// completion or output tokens).
func usageOf(sn *usageSniffer) usageFigures {
	if sn == nil {
		return usageFigures{}
	}
	u := usageFigures{prompt: max(sn.promptTokens, 0), reported: sn.usageTokens > 0 || sn.found}
	if sn.found {
		u.cached = max(sn.cached, 0)
	}
	if sn.usageTokens > u.prompt {
		u.output = sn.usageTokens - u.prompt
	}
	if u.prompt > 0 {
		u.reported = true
	}
	return u
}

// genAIObservation is one ended request, as the per-model metrics and the
// access log see it.
type genAIObservation struct {
	model, operation, tenant string
	status                   int
	errType                  string
	duration                 time.Duration
	// ttft is the time to first byte of a successful stream (0: none).
	ttft   time.Duration
	usage  usageFigures
	stream bool
}

// observeGenAI records one ended request in the per-model metrics.
func observeGenAI(o genAIObservation) {
	s := genAISeriesOf(genAIKey{o.model, o.operation, o.tenant})
	s.duration.Observe(o.duration.Seconds())
	s.countStatus(o.status, o.errType)
	if o.ttft > 0 {
		s.ttft.Observe(o.ttft.Seconds())
		if o.usage.output > 1 && o.duration > o.ttft {
			s.tpot.Observe((o.duration - o.ttft).Seconds() / float64(o.usage.output-1))
		}
	}
	if o.usage.prompt > 0 {
		s.input.Add(float64(o.usage.prompt))
	}
	if o.usage.cached > 0 {
		s.cached.Add(float64(o.usage.cached))
	}
	if o.usage.output > 0 {
		s.output.Add(float64(o.usage.output))
	}
}

// observation describes the request rc ended: what the client got (ww),
// with errType the requests metric's outcome ("" for ok), at end.
func (h *LLMRoute) observation(rc *routeCtx, ww *routeWriter, label string, end time.Time) genAIObservation {
	o := genAIObservation{
		model:     modelLabel(rc.req),
		operation: operationName(rc.ph.endpoint),
		tenant:    rc.ph.tenant,
		status:    ww.status,
		duration:  end.Sub(rc.started),
		usage:     usageOf(ww.sniff),
	}
	if label != "ok" {
		o.errType = label
	}
	if label == "client_disconnect" {
		o.status = 499
	}
	o.stream = ww.sniff != nil && ww.sniff.sse
	if o.stream && label == "ok" && !ww.firstByteAt.IsZero() {
		o.ttft = ww.firstByteAt.Sub(rc.started)
	}
	return o
}

// modelLabel is the request's model as a bounded label ("" for a request
// without one: GET /v1/models, tokenize without a model).
func modelLabel(req *policies.Request) string {
	if req == nil || req.Model == "" {
		return ""
	}
	return knownModels.label(req.Model)
}
