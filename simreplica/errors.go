package simreplica

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/llmroute/caddy-llmroute/internal/anthropic"
)

// apiError is the OpenAI error envelope:
// {"error":{"message":"...","type":"...","param":null,"code":null}}.
type apiError struct {
	Error apiErrorBody `json:"error"`
}

type apiErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// OpenAI error types used by the server.
const (
	errInvalidRequest = "invalid_request_error"
	errServer         = "server_error"
	errRateLimit      = "rate_limit_error"
	errUnavailable    = "service_unavailable_error"
)

// writeError writes an OpenAI-style JSON error. param and code may be "".
func writeError(w http.ResponseWriter, status int, typ, msg, param, code string) {
	body := apiError{Error: apiErrorBody{Message: msg, Type: typ}}
	if param != "" {
		body.Error.Param = &param
	}
	if code != "" {
		body.Error.Code = &code
	}
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// writeBadRequest writes a 400 for err (a *badRequest or any error).
func writeBadRequest(w http.ResponseWriter, err error) {
	param := ""
	if br, ok := err.(*badRequest); ok {
		param = br.param
	}
	writeError(w, http.StatusBadRequest, errInvalidRequest, err.Error(), param, "")
}

// writeFaultStatus answers with an injected 429, 500 or 503.
func writeFaultStatus(w http.ResponseWriter, status, retryAfter int) {
	switch status {
	case http.StatusTooManyRequests:
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
		writeError(w, status, errRateLimit, "simulated rate limit: too many requests", "", "rate_limit_exceeded")
	case http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
		writeError(w, status, errUnavailable, "simulated overload: service unavailable", "", "")
	default:
		writeError(w, status, errServer, "simulated internal server error", "", "")
	}
}

// writeAnthropicError writes an Anthropic-style JSON error.
func writeAnthropicError(w http.ResponseWriter, status int, msg string) {
	b, _ := json.Marshal(anthropic.NewError(status, msg))
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// anthropic reports whether k's clients parse Anthropic's error shape.
func (k apiKind) anthropic() bool { return k == apiMessages || k == apiCountTokens }

// writeError writes an error in k's shape: Anthropic's on its endpoints,
// OpenAI's (with type, param and code) elsewhere.
func (k apiKind) writeError(w http.ResponseWriter, status int, typ, msg, param, code string) {
	if k.anthropic() {
		writeAnthropicError(w, status, msg)
		return
	}
	writeError(w, status, typ, msg, param, code)
}

// writeBadRequest writes a 400 for err in k's shape.
func (k apiKind) writeBadRequest(w http.ResponseWriter, err error) {
	if k.anthropic() {
		writeAnthropicError(w, http.StatusBadRequest, err.Error())
		return
	}
	writeBadRequest(w, err)
}

// writeFaultStatus answers with an injected 429, 500 or 503 in k's shape.
func (k apiKind) writeFaultStatus(w http.ResponseWriter, status, retryAfter int) {
	if !k.anthropic() {
		writeFaultStatus(w, status, retryAfter)
		return
	}
	switch status {
	case http.StatusTooManyRequests:
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
		writeAnthropicError(w, status, "simulated rate limit: too many requests")
	case http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
		writeAnthropicError(w, status, "simulated overload: service unavailable")
	default:
		writeAnthropicError(w, status, "simulated internal server error")
	}
}
