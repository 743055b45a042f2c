package caddymodule

import (
	"bytes"
	"strings"

	"github.com/llmroute/caddy-llmroute/policies"
)

// Whether an answer reached its end. A replica that closes its
// connection midway through an answer sent without HTTP framing (no
// Content-Length, not chunked: the body ends where the connection does)
// looks to reverse_proxy like an answer that ended: it returns normally
// and the client would get a clean end. So the protocol's own end is
// checked instead: a streamed answer ends with its end event (OpenAI's
// `data: [DONE]`, Anthropic's message_stop, the Responses API's
// response.completed, .failed or .incomplete, or an error event), a JSON
// answer with the close of its top-level value. An answer without it is
// a cut: the handler aborts the client's connection as reverse_proxy
// does when a replica breaks a stream (handler.go), and the attempt ends
// as stream_incomplete.

// Kinds of end an answer is checked for.
const (
	endNone  = iota // not checked (another protocol, a compressed body)
	endDone         // SSE ending with data: [DONE] (chat, completions)
	endTyped        // SSE ending with a typed end event (messages, responses)
	endJSON         // a JSON value read to its close
)

// answerEnd follows one answer towards its end.
type answerEnd struct {
	kind  int
	ended bool // SSE: the end event was seen

	// The JSON value's progress: nesting depth, inside a string, after a
	// backslash in one, whether the value began and closed, and whether
	// anything but white space follows it.
	depth              int
	inStr, esc         bool
	began, closed, bad bool
}

// startEnd chooses what the answer of a request on endpoint is checked
// for, from its headers (contentType already read as SSE or JSON).
func (e *answerEnd) startEnd(endpoint policies.Endpoint, sse, json bool, contentEncoding string) {
	e.kind = endNone
	if ce := strings.TrimSpace(contentEncoding); ce != "" && !strings.EqualFold(ce, "identity") {
		return // the bytes are not the protocol's
	}
	switch {
	case sse && (endpoint == policies.EndpointChat || endpoint == policies.EndpointCompletions):
		e.kind = endDone
	case sse && (endpoint == policies.EndpointMessages || endpoint == policies.EndpointResponses):
		e.kind = endTyped
	case json && endpoint != policies.EndpointUnknown:
		e.kind = endJSON
	}
}

// endEvents are the typed streams' end events, as event names and as the
// type a data payload carries.
var endEvents = []string{"message_stop", "response.completed", "response.failed", "response.incomplete", "error"}

// sseLine notes the end event in one SSE line (its line break trimmed).
func (e *answerEnd) sseLine(t []byte) {
	if e.ended || e.kind == endNone || e.kind == endJSON {
		return
	}
	if data, ok := bytes.CutPrefix(t, []byte("data:")); ok {
		data = bytes.TrimSpace(data)
		if bytes.Equal(data, []byte("[DONE]")) {
			e.ended = true
			return
		}
		if e.kind == endTyped {
			e.ended = typedEnd(data)
		}
		return
	}
	if ev, ok := bytes.CutPrefix(t, []byte("event:")); ok && e.kind == endTyped {
		name := string(bytes.TrimSpace(ev))
		for _, end := range endEvents {
			if name == end {
				e.ended = true
				return
			}
		}
	}
}

// typedEnd reports whether a data payload's type is an end event.
func typedEnd(data []byte) bool {
	i := bytes.Index(data, []byte(`"type":`))
	if i < 0 {
		return false
	}
	rest := bytes.TrimLeft(data[i+len(`"type":`):], " ")
	for _, end := range endEvents {
		if len(rest) > len(end)+1 && rest[0] == '"' && string(rest[1:1+len(end)]) == end && rest[1+len(end)] == '"' {
			return true
		}
	}
	return false
}

// jsonBytes follows a JSON answer's bytes.
func (e *answerEnd) jsonBytes(p []byte) {
	if e.kind != endJSON || e.bad {
		return
	}
	for _, c := range p {
		switch {
		case e.inStr:
			switch {
			case e.esc:
				e.esc = false
			case c == '\\':
				e.esc = true
			case c == '"':
				e.inStr = false
				e.closeScalar()
			}
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
		case e.closed:
			e.bad = true // something after the value
			return
		case c == '"':
			e.began, e.inStr = true, true
		case c == '{' || c == '[':
			e.began = true
			e.depth++
		case c == '}' || c == ']':
			e.depth--
			if e.depth <= 0 {
				e.closed = e.depth == 0
				e.bad = e.depth < 0
			}
		default:
			// A scalar's byte. The endpoints checked answer objects: a
			// top-level scalar never closes, and so is a cut.
			e.began = true
		}
	}
}

// closeScalar marks a top-level string closed.
func (e *answerEnd) closeScalar() {
	if e.depth == 0 {
		e.closed = true
	}
}

// cut reports whether the answer, now over, lacked its end.
func (e *answerEnd) cut() bool {
	switch e.kind {
	case endDone, endTyped:
		return !e.ended
	case endJSON:
		return e.bad || !e.closed
	}
	return false
}
