package caddymodule

import (
	"net/http"
	"strconv"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
)

// Fields llm_route adds to Caddy's access log entry of each request it
// routed (through the request's extra log fields, which the entry is
// written with after the handlers return, also when a stream broke). They
// never carry the prompt, an answer or a key: the session is hashed, the
// tenant (the "tenant" field, budgets.go) is a configured name.
const (
	logModel     = "llm_model"
	logEndpoint  = "llm_endpoint"
	logSession   = "llm_session"
	logReplica   = "llm_replica"
	logStrategy  = "llm_strategy"
	logReason    = "llm_reason"
	logQueued    = "llm_queued"
	logAttempts  = "llm_attempts"
	logPrompt    = "llm_prompt_tokens"
	logCached    = "llm_cached_tokens"
	logOutput    = "llm_output_tokens"
	logTTFT      = "llm_ttft"
	logStream    = "llm_stream"
	logOperation = "gen_ai_operation_name"
)

// maxLoggedModel bounds the model name logged (a client's text).
const maxLoggedModel = 256

// extraLogFields returns r's extra log fields, nil when no access log
// will be written for r (the server logs nothing), so that a request
// nobody logs builds no fields.
func extraLogFields(r *http.Request) *caddyhttp.ExtraLogFields {
	if srv, ok := r.Context().Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server); !ok || srv == nil || srv.Logs == nil {
		return nil
	}
	extra, _ := r.Context().Value(caddyhttp.ExtraLogFieldsCtxKey).(*caddyhttp.ExtraLogFields)
	return extra
}

// logRequest adds the request's fields: o as the metrics saw it, the
// replica and strategy of its last attempt ("" when none was made).
func logRequest(r *http.Request, rc *routeCtx, o genAIObservation, replica, strategy string) {
	extra := extraLogFields(r)
	if extra == nil {
		return
	}
	model := ""
	if rc.req != nil {
		model = clip(rc.req.Model, maxLoggedModel)
	}
	reason, queued := rc.pickOf()
	extra.Add(zap.String(logModel, model))
	extra.Add(zap.String(logEndpoint, rc.ph.endpoint))
	extra.Add(zap.String(logOperation, o.operation))
	if rc.sessionKey != 0 {
		extra.Add(zap.String(logSession, strconv.FormatUint(rc.sessionKey, 16)))
	}
	extra.Add(zap.Bool(logStream, o.stream))
	if replica != "" {
		extra.Add(zap.String(logReplica, replica))
		extra.Add(zap.String(logStrategy, strategy))
		extra.Add(zap.String(logReason, reason))
		extra.Add(zap.Bool(logQueued, queued))
		extra.Add(zap.Int(logAttempts, len(rc.triedList())))
	}
	if o.usage.reported {
		extra.Add(zap.Int(logPrompt, o.usage.prompt))
		extra.Add(zap.Int(logCached, o.usage.cached))
		extra.Add(zap.Int(logOutput, o.usage.output))
	}
	if o.ttft > 0 {
		extra.Add(zap.Float64(logTTFT, o.ttft.Seconds()))
	}
}

// logUntracked marks, in the access log, a request the policy routed
// without llm_route before it.
func logUntracked(r *http.Request) {
	if extra := extraLogFields(r); extra != nil {
		extra.Set(zap.String(logReason, pickUntracked))
	}
}
