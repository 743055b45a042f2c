package caddymodule

import (
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/llmroute/caddy-llmroute/admission"
)

// Budgets and the request's admission record. The handler admits a
// request for its tenant before routing it (admitTenant): its band, its
// token estimate, its reservations against the tenant's per-minute
// budgets (admission.Bucket). The request then carries a ticket through
// the queue (waitqueue.go: its tenant's slot and virtual time) and at its
// end settles it (settleTenant): the reservations give back what was not
// used and take what was used beyond them, and the tenant's virtual time
// is corrected the same way.

// priorityHeader is the request header with which a request lowers its
// own band below its tenant's ceiling. It is spelled canonically
// (header names are case-insensitive): Header.Get and Del allocate a
// canonical copy of any other spelling on every call.
const priorityHeader = "X-Llmroute-Priority"

// Rejection reasons of the budgets, as metrics and logs name them.
const (
	reasonRPM = "requests_per_minute"
	reasonTPM = "tokens_per_minute"
)

// ticket is one request's admission record: who sent it, in which band,
// what it is estimated to cost, and what it holds.
type ticket struct {
	ts *tenantState
	// flow is the tenant's name: its queue flow and its metrics label.
	flow string
	band admission.Priority
	// promptBytes and promptEst are the prompt's canonical size and its
	// token estimate; cost is the whole estimate (prompt and learned
	// output), charged to the tenant's virtual time at admission.
	promptBytes int
	promptEst   float64
	cost        float64
	// tokens is what tokens_per_minute holds for the request (0 for a
	// request without a body, which uses no tokens).
	tokens float64

	// shared says the budgets were reserved in the shared store
	// (sharedbudgets.go), which settles them; scale is what each unit
	// reserved in the local budgets counts for (the instances sharing
	// the store while it does not answer; 0 means 1).
	shared bool
	scale  float64

	// Guarded by waiters.mu: holds says the request holds a slot of its
	// tenant's max_in_flight (tentative: taken for an attempt not yet
	// known to succeed); charged that its cost went to the virtual time.
	holds, tentative, charged bool
}

// sheddable reports whether the request is in the sheddable band.
func (tk *ticket) sheddable() bool { return tk != nil && tk.band == admission.Sheddable }

// admitTenant admits r for its tenant ts before it is routed: it takes
// the band (the tenant's ceiling, lowered by X-LLMRoute-Priority, which is
// not forwarded), names the tenant for logs and placeholders, and reserves
// the request against the tenant's budgets. It refuses a request past a
// budget (429 rate_limit_exceeded with Retry-After) or whose priority
// header names no band (400). A handler without tenants (set up without
// Provision) admits with no ticket.
func (h *LLMRoute) admitTenant(r *http.Request, rc *routeCtx, ts *tenantState) (apiError, bool) {
	asked := r.Header.Get(priorityHeader)
	r.Header.Del(priorityHeader)
	if ts == nil {
		return apiError{}, true
	}
	lim := ts.limits()
	band := lim.ceiling
	if asked != "" {
		p, ok := admission.ParsePriority(asked)
		if !ok {
			return errPriority, false
		}
		band = lim.ceiling.Lower(p)
	}
	nameRequest(r, rc, ts.name, band, len(h.keyHashes) > 0)
	promptBytes, hasBody := 0, rc.req != nil
	if hasBody {
		promptBytes = rc.req.PromptBytes
	}
	tk, why, wait := h.reserveTenant(ts, lim, promptBytes, hasBody) // sharedbudgets.go
	if tk == nil {
		metricRejected.WithLabelValues(why).Inc()
		metricTenantRejected.WithLabelValues(ts.name, why).Inc()
		if c := h.logger.Check(zap.DebugLevel, "tenant budget spent"); c != nil {
			c.Write(zap.String("tenant", ts.name), zap.String("budget", why))
		}
		return budgetError(why == reasonTPM, wait), false
	}
	tk.band = band
	rc.tk = tk
	ts.requests[band].get(metricTenantRequests, ts.name, band.String()).Inc()
	return apiError{}, true
}

// nameRequest names the tenant (never its key) where Caddy looks: the
// {llm.tenant} and {llm.priority} placeholders (placeholders.go), the
// access log's "tenant" field and, when the tenant was authenticated by a
// key, its user_id.
func nameRequest(r *http.Request, rc *routeCtx, tenant string, band admission.Priority, keyed bool) {
	rc.ph.named, rc.ph.tenant, rc.ph.band = true, tenant, band
	if keyed {
		if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
			repl.Set("http.auth.user.id", tenant)
		}
	}
	if extra, ok := r.Context().Value(caddyhttp.ExtraLogFieldsCtxKey).(*caddyhttp.ExtraLogFields); ok {
		extra.Set(zap.String("tenant", tenant))
	}
}

// reserve takes one request and its token estimate from the tenant's
// budgets. It returns the ticket, or the budget that is spent and how long
// until the request would fit.
func (ts *tenantState) reserve(promptBytes int, hasBody bool) (*ticket, string, time.Duration) {
	return ts.reserveScaled(promptBytes, hasBody, 1)
}

// reserveScaled is reserve with every unit counting scale times.
func (ts *tenantState) reserveScaled(promptBytes int, hasBody bool, scale float64) (*ticket, string, time.Duration) {
	now := ts.clk.Now()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	tk := &ticket{ts: ts, flow: ts.name, promptBytes: promptBytes, promptEst: admission.PromptTokens(promptBytes)}
	tk.cost = tk.promptEst
	if hasBody {
		tk.cost = ts.est.Tokens(promptBytes)
		tk.tokens = tk.cost
	}
	tk.scale = scale
	if ok, wait := ts.rpm.Reserve(scale, now); !ok {
		return nil, reasonRPM, wait
	}
	if ok, wait := ts.tpm.Reserve(tk.tokens*scale, now); !ok {
		ts.rpm.Settle(scale, 0, now)
		return nil, reasonTPM, wait
	}
	ts.admitted++
	return tk, "", 0
}

// settle ends tk's reservations: the request counts against
// requests_per_minute if it was sent to a replica, and used tokens
// against tokens_per_minute; exact usage (the engine's) also teaches the
// tenant's estimate.
func (ts *tenantState) settle(tk *ticket, sent bool, used float64, exact bool) {
	now := ts.clk.Now()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	n := 0.0
	if sent {
		n = 1
	}
	if !tk.shared {
		scale := max(tk.scale, 1)
		ts.rpm.Settle(scale, n*scale, now)
		ts.tpm.Settle(tk.tokens*scale, used*scale, now)
	}
	if exact {
		ts.est.Observe(tk.promptBytes, used)
	}
	ts.charged += used
}

// settleTenant settles the request's ticket at its end; sent says an
// attempt reached a replica.
func (h *LLMRoute) settleTenant(rc *routeCtx, ww *routeWriter, sent bool) {
	tk := rc.tk
	if tk == nil {
		return
	}
	used, exact := tokensUsed(tk, ww)
	tk.ts.settle(tk, sent, used, exact)
	if tk.shared {
		h.settleShared(tk, sent, used) // sharedbudgets.go
	}
	waiters.settle(tk, used)
	if used > 0 {
		tk.ts.tokens.get(metricTenantTokens, tk.flow).Add(used) // flow is ts's name
	}
}

// tokensUsed is what a request is charged: the engine's usage when the
// answer reported it (exact); else, for an answer that started, its prompt
// estimate and one token per streamed chunk (engines stream about a token
// per chunk: a stream cut midway is charged what it produced); else
// nothing (no replica answered, or it answered an error).
func tokensUsed(tk *ticket, ww *routeWriter) (float64, bool) {
	sn := ww.sniff
	if sn != nil && sn.usageTokens > 0 {
		return boundedUsage(sn, ww.bytes) // usagebound.go
	}
	if ww.firstByteAt.IsZero() || ww.status >= 400 {
		return 0, false
	}
	chunks := 0
	if sn != nil {
		chunks = sn.chunks
	}
	return tk.promptEst + float64(chunks), false
}

// tokenCounts are the usage fields besides the prompt's that a token
// budget is charged from: total_tokens (chat, completions, responses),
// completion_tokens, and output_tokens (the Responses API, Anthropic's
// message_delta, whose prompt came in message_start).
type tokenCounts struct {
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
	OutputTokens     int `json:"output_tokens"`
}

// countTokens records the request's whole usage from one usage object
// (the last one seen wins: streams that report usage on every chunk
// report it cumulatively).
func (s *usageSniffer) countTokens(prompt int, c tokenCounts) {
	var neg bool
	prompt, c, neg = nonNegative(prompt, c) // usagebound.go
	s.negative = s.negative || neg
	switch {
	case c.TotalTokens > 0:
		s.usageTokens = c.TotalTokens
	case prompt > 0 || c.CompletionTokens > 0:
		s.usageTokens = prompt + c.CompletionTokens
	case c.OutputTokens > 0:
		s.usageTokens = s.promptTokens + c.OutputTokens
	}
}
