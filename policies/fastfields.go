package policies

import (
	"strings"
	"unsafe"

	"github.com/llmroute/caddy-llmroute/internal/jsonscan"
)

// The fast paths (fastChat, fastMessages, fastResponses, toolsFast) read a
// body with jsonscan's Scanner, the module's one JSON scanner: it
// validates as it goes, matches keys as encoding/json would or declines
// (escaped keys, keys equal to a field's name but for case, duplicates of
// a field), and skips the rest. reader adds what the body types need: a
// field read into a jsonText, a string kept as its literal to be decoded
// as it renders, a raw value, and the fields every endpoint shares. Any
// value of another type than the field's (a number where a string is
// expected, say) declines, and Parse falls back to the general path.
type reader struct {
	jsonscan.Scanner
	b           []byte       // the Scanner's input, for the values a reader keeps
	blockBufs   *blockBufs   // fastMessages' blocks
	scratchBufs *scratchBufs // see scratch
}

// newReader returns a reader at the start of b.
func newReader(b []byte) *reader { return &reader{Scanner: jsonscan.New(b), b: b} }

// The top-level fields every endpoint shares, first in each endpoint's
// list of names (commonNames), so that commonField reads them by index.
const (
	fModel = iota
	fStream
	fStreamOptions
	fCacheSalt
	fPromptCacheKey
	fTools
	fFunctions
	fLimits // limitNames, in their order
	nCommon = fLimits + 5
)

var commonNames = append([]string{fModel: "model", fStream: "stream", fStreamOptions: "stream_options",
	fCacheSalt: "cache_salt", fPromptCacheKey: "prompt_cache_key", fTools: "tools", fFunctions: "functions"}, limitNames...)

// topNames returns commonNames followed by an endpoint's own names, whose
// indexes are then nCommon on.
func topNames(own ...string) []string {
	return append(append([]string(nil), commonNames...), own...)
}

// commonField reads the shared top-level field i (below nCommon) into c.
// Only what the Request keeps (model, cache_salt, prompt_cache_key) is
// copied out of the body; the tools are read into their canonical form
// on the way (readTools), so that they are not scanned again for the
// keys.
func (s *reader) commonField(i int, c *commonBody) bool {
	switch i {
	case fModel:
		if !s.textField(&c.Model) || c.Model.s == "" {
			return false
		}
		c.Model.s = strings.Clone(c.Model.s)
	case fStream:
		v, ok := s.Skip()
		c.Stream = jsonBool(string(v) == "true")
		return ok
	case fStreamOptions:
		c.StreamOptions.Present = true
		if s.Peek() == '{' {
			return s.Object(streamOptionNames, func(int) bool {
				v, ok := s.Skip()
				c.StreamOptions.IncludeUsage = jsonBool(string(v) == "true")
				return ok
			})
		}
		_, ok := s.Skip()
		return ok
	case fCacheSalt, fPromptCacheKey:
		t := &c.CacheSalt
		if i == fPromptCacheKey {
			t = &c.PromptCacheKey
		}
		if s.Peek() == '"' {
			if !s.textField(t) {
				return false
			}
			t.s = strings.Clone(t.s)
			return true
		}
		_, ok := s.Skip()
		return ok
	case fTools, fFunctions:
		r, f := &c.Tools, &c.canon[0]
		if i == fFunctions {
			r, f = &c.Functions, &c.canon[1]
		}
		return s.toolsValue(r, f)
	default: // the limit fields
		return c.limits.read(&s.Scanner, i-fLimits)
	}
	return true
}

var streamOptionNames = []string{"include_usage"}

// textField reads a string (or null) into t; any other value declines.
func (s *reader) textField(t *jsonText) bool {
	if s.Lit("null") {
		*t = jsonText{}
		return true
	}
	lit, esc, ok := s.String()
	if !ok {
		return false
	}
	v, ok := text(lit, esc)
	*t = jsonText{s: v, kind: shapeString}
	return ok
}

// text decodes a string literal: the body's own bytes when it has no
// escapes (valid while the body is), else a copy by unquote.
func text(lit []byte, esc bool) (string, bool) {
	if !esc {
		v := lit[1 : len(lit)-1]
		return unsafe.String(unsafe.SliceData(v), len(v)), true
	}
	return unquote(lit)
}

// lazyText is textField for text that is mostly rendered: an escaped
// string is kept as its literal (jsonText.raw), rendered from it
// (sink.writeLit) and decoded only where str asks.
func (s *reader) lazyText(t *jsonText) bool {
	if s.Peek() != '"' {
		return s.textField(t)
	}
	v, lit, n, plain, ok := s.lazyString()
	if lit != nil {
		*t = jsonText{raw: lit, n: int32(n), kind: shapeString, plain: plain}
	} else {
		*t = jsonText{s: v, kind: shapeString, plain: plain}
	}
	return ok
}

// lazyString reads a string: its text when it has no escapes (the body's
// own bytes, no copy, plain: JSON escapes nothing in it), else its
// literal, decoded length and whether it is plain, to be rendered from
// (sink.writeLit).
func (s *reader) lazyString() (text string, lit []byte, n int, plain, ok bool) {
	l, n, plain, ok := s.StringLen()
	if !ok {
		return "", nil, 0, false, false
	}
	if n != len(l)-2 {
		return "", l, n, plain, true
	}
	v := l[1 : len(l)-1]
	return unsafe.String(unsafe.SliceData(v), len(v)), nil, 0, true, true
}

// rawValue reads any value into r (null as absent), without copying it.
func (s *reader) rawValue(r *rawField) bool {
	v, ok := s.Skip()
	if ok && !isNull(v) {
		*r = v
	}
	return ok
}
