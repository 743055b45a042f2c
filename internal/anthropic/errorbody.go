// Package anthropic holds the shapes of Anthropic's Messages API that more
// than one package writes or reads: the error envelope the gateway answers
// with on /v1/messages and the simulated replica imitates.
package anthropic

import "net/http"

// ErrorBody is Anthropic's error envelope:
// {"type":"error","error":{"type":"...","message":"..."}}.
type ErrorBody struct {
	Type  string `json:"type"`
	Error Error  `json:"error"`
}

// Error is the inner object of ErrorBody.
type Error struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// NewError returns the envelope for an HTTP status and a message.
func NewError(status int, message string) ErrorBody {
	return ErrorBody{Type: "error", Error: Error{Type: ErrorType(status), Message: message}}
}

// ErrorType is Anthropic's error type for an HTTP status
// (https://docs.anthropic.com/en/api/errors).
func ErrorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status == http.StatusServiceUnavailable || status == 529:
		return "overloaded_error"
	case status >= 500:
		return "api_error"
	}
	return "invalid_request_error"
}
