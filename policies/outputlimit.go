package policies

import (
	"bytes"
	"math"

	"github.com/llmroute/caddy-llmroute/internal/jsonscan"
)

// A request's output limit bounds the usage an engine may report for it
// (caddymodule's usage bound). It is read from the body's top level as
// one jsonscan pass over limitNames reads it: the largest positive
// integer of the first three (chat's limits, old and new, and Anthropic's
// max_tokens; the Responses API's max_output_tokens) times the largest of
// the last two (n; best_of on completions). A limit field whose value is
// a number but not a positive integer of at most 18 digits ends the
// reading (that pass cannot skip past it), and what was read before it
// stands. The fast paths read it on their way (commonField); the general
// path scans for it (outputLimitOf).

var limitNames = []string{"max_tokens", "max_completion_tokens", "max_output_tokens", "n", "best_of"}

// outputLimits is what has been read of a body's limit fields.
type outputLimits struct {
	limit, choices int64
	// stopped is set at a field whose value ends the reading.
	stopped bool
}

// read reads limit field i (an index in limitNames) at s's value.
func (o *outputLimits) read(s *jsonscan.Scanner, i int) bool {
	if o.stopped {
		_, ok := s.Skip()
		return ok
	}
	s.WS()
	at := s.Pos()
	if n, ok := s.Int(); ok && n > 0 {
		if i < 3 {
			o.limit = max(o.limit, n)
		} else {
			o.choices = max(o.choices, n)
		}
		return true
	}
	if s.Pos() != at {
		o.stopped = true // a number, read whole, but not a limit
		return true
	}
	_, ok := s.Skip()
	return ok
}

// product returns the output limit: 0 for none, or when it overflows.
func (o *outputLimits) product() int64 {
	choices := max(o.choices, 1)
	if o.limit > 0 && choices < math.MaxInt64/o.limit {
		return o.limit * choices
	}
	return 0
}

// outputLimitOf scans body's top level for its output limit. Only a body
// that names a limit ("max_...") is scanned.
func outputLimitOf(body []byte) int64 {
	if !bytes.Contains(body, []byte(`"max_`)) {
		return 0
	}
	s := jsonscan.New(body)
	var o outputLimits
	_ = s.Object(limitNames, func(i int) bool {
		if !o.read(&s, i) {
			return false
		}
		return !o.stopped
	})
	return o.product()
}
