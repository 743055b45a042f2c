package caddymodule

// The one-pass readers of an answer's usage in the common OpenAI shape
// (scanUsage, scanResponse) and the marks that say whether a chunk may hold
// usage at all; usage.go falls back to encoding/json for any other shape.

import (
	"bytes"
	"encoding/binary"
	"math/bits"

	"github.com/llmroute/caddy-llmroute/internal/jsonscan"
)

// marks reports in one pass whether data holds `"finish_reason":"` (or
// with a space after the colon) or `"type":"message_stop"` (finish), and
// whether it holds `"usage"`, `"timings"` or `"tokens_cached"` (usage):
// what bytes.Contains of each would say, from one look at each quote. The
// quotes are found eight bytes at a time (a word's quote bytes in one
// mask), not by a search call per quote: a streamed chunk has two dozen.
func marks(data []byte) (finish, usage bool) {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(data); i += 8 {
		x := binary.LittleEndian.Uint64(data[i:]) ^ (lo * '"')
		// The lowest set bit is exact; a higher one may be a byte just
		// above a quote (a borrow), so each is checked.
		for m := (x - lo) &^ x & hi; m != 0; m &= m - 1 {
			if k := i + bits.TrailingZeros64(m)/8; data[k] == '"' && mayMark(data, k) {
				finish, usage = markAt(data[k:], finish, usage)
			}
		}
	}
	for ; i < len(data); i++ {
		if data[i] == '"' && mayMark(data, i) {
			finish, usage = markAt(data[i:], finish, usage)
		}
	}
	return finish, usage
}

// mayMark reports whether the quote at data[k] may begin a mark: whether
// the next byte begins one of them.
func mayMark(data []byte, k int) bool {
	if k+1 >= len(data) {
		return false
	}
	c := data[k+1]
	return c == 'f' || c == 't' || c == 'u'
}

// markAt adds what the quote that begins rest starts to finish and usage.
func markAt(rest []byte, finish, usage bool) (bool, bool) {
	switch rest[1] {
	case 'f':
		finish = finish || bytes.HasPrefix(rest, []byte(`"finish_reason":"`)) || bytes.HasPrefix(rest, []byte(`"finish_reason": "`))
	case 't':
		finish = finish || bytes.HasPrefix(rest, []byte(`"type":"message_stop"`))
		usage = usage || bytes.HasPrefix(rest, []byte(`"timings"`)) || bytes.HasPrefix(rest, []byte(`"tokens_cached"`))
	case 'u':
		usage = usage || bytes.HasPrefix(rest, []byte(`"usage"`))
	}
	return finish, usage
}

// openAIUsage is what scanUsage reads of an OpenAI-shaped usage: whether
// the doc has a usage object, prompt_tokens_details in it (details) and
// its cached_tokens, the counts, and whether choices is not empty.
type openAIUsage struct {
	usage, details, choices           bool
	prompt, cached, completion, total int
}

// The fields of usageDoc: scanUsage reads the OpenAI ones and declines a
// doc with any other (or one of them but for case), which read leaves to
// encoding/json.
var (
	usageDocFields = []string{"choices", "usage", "response", "type", "message", "timings", "tokens_cached", "tokens_evaluated"}
	usageFields    = []string{"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details", "input_tokens_details", "input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens", "output_tokens"}
)

// scanUsage reads an OpenAI-shaped usage chunk or response in one pass,
// exactly as encoding/json would decode it into usageDoc, or declines (ok
// false): any other usage shape (llama.cpp's timings, Anthropic's, the
// Responses API's), duplicate fields, a count that is not a plain integer,
// anything that would not decode.
func scanUsage(doc []byte) (f openAIUsage, ok bool) {
	f, _, ok = scanOpenAI(doc, nil, false)
	return f, ok
}

// scanResponse reads an OpenAI-shaped response's usage and choices in
// one pass: what scanUsage and scanAnswer each read of it. It declines
// whatever either declines, and more (a case-folded or repeated name of
// either's fields): a declined doc goes to each of them on its own.
func scanResponse(doc []byte, choices []answerChoice) (openAIUsage, []answerChoice, bool) {
	return scanOpenAI(doc, choices, true)
}

// scanOpenAI is scanUsage's and scanResponse's one walk of the doc: with
// answers, the choices are read as scanAnswer reads them (into choices);
// without, each is only skipped, whatever it holds.
func scanOpenAI(doc []byte, choices []answerChoice, answers bool) (f openAIUsage, _ []answerChoice, ok bool) {
	s := jsonscan.New(doc)
	ok = s.Object(usageDocFields, func(i int) bool {
		switch usageDocFields[i] {
		case "choices":
			if answers {
				var ok bool
				choices, ok = scanChoices(&s, choices)
				f.choices = len(choices) > 0 // a null choice is one too
				return ok
			}
			if s.Lit("null") {
				return true
			}
			return s.Array(func() bool {
				f.choices = true
				_, ok := s.Skip()
				return ok
			})
		case "usage":
			return scanUsageObject(&s, &f)
		}
		return false // another usage shape: left to encoding/json
	})
	return f, choices, ok && s.End()
}

// scanUsageObject reads the usage object (null declines).
func scanUsageObject(s *jsonscan.Scanner, f *openAIUsage) bool {
	f.usage = true
	return s.Object(usageFields, func(i int) bool {
		switch {
		case i == 3:
			if !s.Lit("null") {
				f.details = true
				return scanCount(s, &f.cached, cachedFields)
			}
		case i < 3:
			return scanInt(s, []*int{&f.prompt, &f.completion, &f.total}[i])
		default:
			return false // Anthropic's or the Responses API's counts
		}
		return true
	})
}

// scanInt reads a plain integer into v; null leaves v as it is.
func scanInt(s *jsonscan.Scanner, v *int) bool {
	if s.Lit("null") {
		return true
	}
	n, ok := s.Int()
	*v = int(n)
	return ok
}

// cachedFields is the one field of prompt_tokens_details that feed reads.
var cachedFields = []string{"cached_tokens"}

// scanCount reads into v the integer of an object's one field in name
// (the others are skipped).
func scanCount(s *jsonscan.Scanner, v *int, name []string) bool {
	return s.Object(name, func(int) bool { return scanInt(s, v) })
}
