package caddymodule

import (
	"encoding/json"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/llmroute/caddy-llmroute/internal/anthropic"
)

// apiError is an error in the shape OpenAI-compatible clients parse:
// {"error": {"message": ..., "type": ..., "param": null, "code": ...}}.
type apiError struct {
	status     int
	typ        string
	code       string
	message    string
	retryAfter time.Duration
	// allow is the Allow header of a 405.
	allow string
	// param names the request field at fault ("" for none).
	param string
}

// writeAPIError writes e as JSON. The message never contains request
// content or credentials: callers pass fixed texts.
func writeAPIError(w http.ResponseWriter, e apiError) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Del("Content-Length")
	if e.retryAfter > 0 || e.status == http.StatusTooManyRequests || e.status == http.StatusServiceUnavailable {
		h.Set("Retry-After", retryAfterSeconds(e.retryAfter))
	}
	if e.allow != "" {
		h.Set("Allow", e.allow)
	}
	if e.status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="llmroute"`)
	}
	w.WriteHeader(e.status)
	if anthropicShaped(w) {
		writeAnthropicError(w, e)
		return
	}
	body := struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}{}
	body.Error.Message = e.message
	body.Error.Type = e.typ
	if e.param != "" {
		body.Error.Param = &e.param
	}
	if e.code != "" {
		body.Error.Code = &e.code
	}
	_ = json.NewEncoder(w).Encode(body)
}

// Errors llm_route answers itself.
var (
	errUnauthorized = apiError{status: http.StatusUnauthorized, typ: "invalid_request_error", code: "invalid_api_key",
		message: "Incorrect or missing API key. Pass it as 'Authorization: Bearer <key>'."}
	errTooLarge = apiError{status: http.StatusRequestEntityTooLarge, typ: "invalid_request_error", code: "request_too_large",
		message: "Request body exceeds the configured limit."}
	errMalformed = apiError{status: http.StatusBadRequest, typ: "invalid_request_error", code: "invalid_json",
		message: "Request body is not a valid JSON object."}
	errNoModel = apiError{status: http.StatusBadRequest, typ: "invalid_request_error", code: "missing_model",
		message: "Request body must name a model: the 'model' field is missing or not a string."}
	errContentType = apiError{status: http.StatusUnsupportedMediaType, typ: "invalid_request_error", code: "unsupported_media_type",
		message: "Content-Type must be application/json."}
	errNotFound = apiError{status: http.StatusNotFound, typ: "invalid_request_error", code: "unknown_url",
		message: "Unknown endpoint: this gateway serves the inference API only."}
	errMethod = apiError{status: http.StatusMethodNotAllowed, typ: "invalid_request_error", code: "method_not_allowed",
		message: "This endpoint does not accept that method."}
	errModelNotFound = apiError{status: http.StatusNotFound, typ: "invalid_request_error", code: "model_not_found", param: "model",
		message: "No replica pool of this gateway serves the requested model."}
	errEncoding = apiError{status: http.StatusUnsupportedMediaType, typ: "invalid_request_error", code: "unsupported_content_encoding",
		message: "Content-Encoding must be gzip, deflate, zstd or identity."}
	errDecode = apiError{status: http.StatusBadRequest, typ: "invalid_request_error", code: "body_decode_error",
		message: "The request body could not be decoded with its Content-Encoding."}
	errBodyRead = apiError{status: http.StatusBadRequest, typ: "invalid_request_error", code: "body_read_error",
		message: "Could not read the request body."}
	errPriority = apiError{status: http.StatusBadRequest, typ: "invalid_request_error", code: "invalid_priority",
		message: "X-LLMRoute-Priority must be critical, standard or sheddable."}
)

// budgetError is the answer for a request past its tenant's requests (or,
// when tokens, tokens) per minute, in OpenAI's shape: type "requests" or
// "tokens", code rate_limit_exceeded, with how long until it would fit.
func budgetError(tokens bool, retryAfter time.Duration) apiError {
	if tokens {
		return apiError{status: http.StatusTooManyRequests, typ: "tokens", code: "rate_limit_exceeded", retryAfter: retryAfter,
			message: "Rate limit reached for tokens per minute; retry after the time given in Retry-After."}
	}
	return apiError{status: http.StatusTooManyRequests, typ: "requests", code: "rate_limit_exceeded", retryAfter: retryAfter,
		message: "Rate limit reached for requests per minute; retry after the time given in Retry-After."}
}

// rejectError is the answer for a request the policy refused.
func rejectError(r rejectReason, retryAfter time.Duration) apiError {
	switch r {
	case rejectQueueFull:
		return apiError{status: http.StatusTooManyRequests, typ: "rate_limit_error", code: "queue_full", retryAfter: retryAfter,
			message: "All replicas are busy and the wait queue is full; retry later."}
	case rejectDisplaced:
		return apiError{status: http.StatusTooManyRequests, typ: "rate_limit_error", code: "queue_full", retryAfter: retryAfter,
			message: "All replicas are busy and this request's place in the wait queue went to one of higher priority or of a tenant with fewer places; retry later."}
	case rejectQueueWait:
		return apiError{status: http.StatusTooManyRequests, typ: "rate_limit_error", code: "queue_timeout", retryAfter: retryAfter,
			message: "All replicas stayed busy for the whole queue timeout; retry later."}
	case rejectNoReplicas:
		return apiError{status: http.StatusServiceUnavailable, typ: "server_error", code: "no_replicas", retryAfter: retryAfter,
			message: "No model replica is configured for this route."}
	case rejectStateGone:
		return apiError{status: http.StatusNotFound, typ: "invalid_request_error", code: "previous_response_not_found", param: "previous_response_id",
			message: "The replica that holds the previous response is no longer available; send the whole conversation as input without previous_response_id."}
	case rejectRateLimited:
		return apiError{status: http.StatusTooManyRequests, typ: "rate_limit_error", code: "rate_limit_exceeded", retryAfter: retryAfter,
			message: "Every model replica is rate limiting; retry after the time given in Retry-After."}
	default:
		return apiError{status: http.StatusServiceUnavailable, typ: "server_error", code: "no_healthy_replica", retryAfter: retryAfter,
			message: "No healthy model replica is available; retry later."}
	}
}

// upstreamError is the answer when reverse_proxy gave up with status.
func upstreamError(status int, retryAfter time.Duration) apiError {
	e := apiError{status: status, typ: "server_error", code: "upstream_error", retryAfter: retryAfter,
		message: "The model replica could not serve the request."}
	switch status {
	case http.StatusTooManyRequests:
		e.typ, e.code, e.message = "rate_limit_error", "upstream_rate_limited", "The model replicas are rate limiting; retry later."
	case http.StatusServiceUnavailable:
		e.code, e.message = "upstream_unavailable", "The model replicas are unavailable; retry later."
	case http.StatusGatewayTimeout:
		e.code, e.message = "upstream_timeout", "The model replica did not answer in time."
	}
	return e
}

// Anthropic clients (on /v1/messages and its count_tokens) parse errors in
// Anthropic's shape, {"type":"error","error":{"type":...,"message":...}},
// with the same statuses and headers. The handler marks such a request's
// response writer once, before anything can fail (withErrorShape), so that
// every writeAPIError for it, whoever calls it and through whichever
// wrapper, answers in that shape.

// anthropicWriter marks the response writer of a request on Anthropic's
// Messages API.
type anthropicWriter struct {
	*caddyhttp.ResponseWriterWrapper
}

// withErrorShape returns w, marked for Anthropic's error shape when r is
// on an Anthropic path.
func withErrorShape(r *http.Request, w http.ResponseWriter) http.ResponseWriter {
	if anthropicPath(r.URL.Path) {
		return &anthropicWriter{&caddyhttp.ResponseWriterWrapper{ResponseWriter: w}}
	}
	return w
}

// anthropicPath reports whether p is /v1/messages or any path below it,
// as a client would mean it: doubled slashes and dot segments are read
// away first, so that every refusal an Anthropic client gets under the
// Messages API (an unknown endpoint such as /v1/messages/batches, a path
// that is not clean) is in the shape it parses.
func anthropicPath(p string) bool {
	if !strings.Contains(p, "messages") {
		return false // the common case, without building a cleaned copy
	}
	for strings.Contains(p, "//") {
		p = strings.ReplaceAll(p, "//", "/")
	}
	p = path.Clean("/" + p)
	return p == "/v1/messages" || strings.HasPrefix(p, "/v1/messages/")
}

// anthropicShaped reports whether w, or a writer it wraps, is marked by
// withErrorShape.
func anthropicShaped(w http.ResponseWriter) bool {
	for range 16 { // wrappers are few; a cycle must not hang an error
		switch v := w.(type) {
		case *anthropicWriter:
			return true
		case interface{ Unwrap() http.ResponseWriter }:
			w = v.Unwrap()
		default:
			return false
		}
	}
	return false
}

// writeAnthropicError writes e's body in Anthropic's shape (the headers are
// written).
func writeAnthropicError(w http.ResponseWriter, e apiError) {
	_ = json.NewEncoder(w).Encode(anthropic.NewError(e.status, e.message))
}

// rejectReason says why the policy gave up on a request without an upstream.
type rejectReason int

const (
	rejectNone        rejectReason = iota
	rejectQueueFull                // bounded wait queue was full -> 429
	rejectQueueWait                // waited past queue_timeout -> 429
	rejectNoHealthy                // every replica is cooling or tried -> 503
	rejectNoReplicas               // the pool is empty -> 503
	rejectRateLimited              // every replica is cooling after a 429 -> 429
	rejectStateGone                // the replica holding previous_response_id left -> 404
	rejectDisplaced                // a higher-priority arrival took its place in a full queue -> 429
)

func (r rejectReason) String() string {
	switch r {
	case rejectQueueFull:
		return "queue_full"
	case rejectQueueWait:
		return "queue_timeout"
	case rejectNoHealthy:
		return "no_healthy_replica"
	case rejectNoReplicas:
		return "no_replicas"
	case rejectRateLimited:
		return "rate_limited"
	case rejectStateGone:
		return "state_gone"
	case rejectDisplaced:
		return "displaced"
	}
	return "none"
}
