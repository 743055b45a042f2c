package caddymodule

import (
	"fmt"
	"sync/atomic"

	"github.com/llmroute/caddy-llmroute/policies"
)

// Whether an answer's silence about cached tokens means none. vLLM and
// SGLang write prompt_tokens_details only when something was cached, and
// neither writes Anthropic's cache_read_input_tokens: on them a miss looks
// exactly like an engine that does not report. So a replica that has
// reported cached tokens for an endpoint kind is a reporting replica for
// that kind, and its silence afterwards means 0 cached; the pool's
// cache_report setting says so from the start (always) or never trusts
// the reports (never).

// Cache report modes (LLMSelection.CacheReport).
const (
	cacheReportAuto   = "auto"
	cacheReportAlways = "always"
	cacheReportNever  = "never"
)

// validCacheReport checks a cache_report value ("" is auto).
func validCacheReport(mode string) error {
	switch mode {
	case "", cacheReportAuto, cacheReportAlways, cacheReportNever:
		return nil
	}
	return fmt.Errorf(`cache_report must be "auto", "always" or "never", got %q`, mode)
}

// reportKinds is one flag per endpoint kind: has the replica reported
// cached tokens for it.
type reportKinds [policies.EndpointCountTokens + 1]atomic.Bool

// cachedOf returns the cached tokens an answer of kind says on the replica
// with flags r, and whether it says anything: the engine's figure (which
// makes the replica a reporting one for kind), or 0 for usage without one
// from a replica that reports (mode always, or auto once it has).
func (r *reportKinds) cachedOf(kind policies.Endpoint, mode string, sn *usageSniffer) (int, bool) {
	if mode == cacheReportNever || int(kind) < 0 || int(kind) >= len(r) {
		return 0, false
	}
	switch {
	case sn.found:
		r[kind].Store(true)
		return sn.cached, true
	case sn.promptTokens <= 0:
		return 0, false // no usage at all
	case mode == cacheReportAlways || r[kind].Load():
		return 0, true
	}
	return 0, false
}

// kinds lists the endpoint kinds the replica has reported for, for
// /llm_route/state.
func (r *reportKinds) kinds() []string {
	var out []string
	for k := range r {
		if r[k].Load() {
			out = append(out, endpointNames[policies.Endpoint(k)])
		}
	}
	return out
}

// endpointNames name the endpoint kinds in /llm_route/state.
var endpointNames = map[policies.Endpoint]string{
	policies.EndpointUnknown: "other", policies.EndpointChat: "chat", policies.EndpointCompletions: "completions",
	policies.EndpointResponses: "responses", policies.EndpointMessages: "messages", policies.EndpointCountTokens: "count_tokens",
}
