package openai

import (
	"encoding/json"
	"strconv"
)

// ErrorBody is an OpenAI-style error answer:
// {"error":{"message","type","param","code"}}.
type ErrorBody struct {
	// Error is the error object; nil when the body is not an error.
	Error *Error `json:"error"`
}

// Error is the error object. Param and Code are raw so that a reader can
// tell null from absent and a string from a number.
type Error struct {
	// Message is for people; Type is the error class
	// ("invalid_request_error", "rate_limit_error", "server_error").
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Param   json.RawMessage `json:"param"`
	Code    json.RawMessage `json:"code"`
}

// NewError returns an error body with a null param and code as a JSON
// string (null when code is "").
func NewError(message, typ, code string) ErrorBody {
	c := json.RawMessage("null")
	if code != "" {
		c = json.RawMessage(strconv.Quote(code))
	}
	return ErrorBody{Error: &Error{Message: message, Type: typ, Param: json.RawMessage("null"), Code: c}}
}

// ErrorCode returns error.code of an OpenAI-style error body: "" when b is
// not one (no error object, or no message or type), "null" when the code is
// null or not a string.
func ErrorCode(b []byte) string {
	var e ErrorBody
	if json.Unmarshal(b, &e) != nil || e.Error == nil || e.Error.Message == "" || e.Error.Type == "" {
		return ""
	}
	var s string
	if json.Unmarshal(e.Error.Code, &s) == nil && s != "" {
		return s
	}
	return "null"
}
