package caddymodule

import (
	"bytes"
	"encoding/json"
	"strings"
)

// maxSniffJSON bounds how much of a non-streamed body is copied to read its
// usage; larger bodies are relayed without feedback.
const maxSniffJSON = 1 << 20

// maxSniffLine bounds one SSE line held for inspection.
const maxSniffLine = 256 << 10

// usageSniffer reads the usage an engine reports as the response streams by:
// usage.prompt_tokens_details.cached_tokens (OpenAI, vLLM, SGLang),
// llama.cpp's timings.cache_n / tokens_cached, or Anthropic's
// cache_read_input_tokens (/v1/messages). It relays every complete SSE
// line at once; only when strip is set (llm_route asked the engine for a
// usage chunk the client did not want) does it hold a partial line until
// its end, so that the usage-only chunk can be left out.
type usageSniffer struct {
	strip bool

	sse     bool
	json    bool
	line    []byte
	body    []byte
	dropped bool // the last line was dropped, so drop the blank line after it

	found        bool
	cached       int
	promptTokens int
	finished     bool // saw a finish_reason, [DONE] or Anthropic's message_stop

	// usageTokens is the request's whole usage (prompt and output) as the
	// engine reported it, 0 until it did; chunks counts the SSE data
	// events streamed (not the usage-only chunk). Token budgets are
	// settled from them (budgets.go, tokensUsed).
	usageTokens int
	chunks      int
	// bound is what the request could have used; negative is set when
	// the engine reported a count below zero (usagebound.go).
	bound    usageBound
	negative bool

	// answer, when set, is fed the answer's text (answers.go).
	answer *answerCapture
	// end follows whether the answer reaches its end (answerend.go).
	end answerEnd
}

func (s *usageSniffer) start(contentType string) {
	ct := strings.ToLower(contentType)
	s.sse = strings.HasPrefix(ct, "text/event-stream")
	s.json = !s.sse && strings.HasPrefix(ct, "application/json")
	if !s.sse {
		s.strip = false
	}
}

// observe inspects p and returns the bytes to send to the client: p itself
// unless a usage chunk must be stripped.
func (s *usageSniffer) observe(p []byte) []byte {
	s.end.jsonBytes(p)
	switch {
	case s.json:
		if len(s.body)+len(p) <= maxSniffJSON {
			s.body = append(s.body, p...)
		} else {
			s.json = false
			s.body = nil
		}
		return p
	case !s.sse:
		return p
	}
	if !s.strip {
		s.scanLines(p)
		return p
	}
	return s.scanStrip(p)
}

// scanStrip is scanLines for strip mode: it also leaves out the usage-only
// chunk. It returns a subslice of p while
// the lines it keeps are contiguous in p (every write but the rare one that
// completes a line carried over from the last write, or that has a dropped
// line between kept ones), and copies only otherwise.
func (s *usageSniffer) scanStrip(p []byte) []byte {
	var out []byte
	copying := false
	runStart, runEnd := 0, 0
	keep := func(a, b int) {
		switch {
		case runStart == runEnd:
			runStart, runEnd = a, b
		case runEnd == a:
			runEnd = b
		default:
			copying = true
			out = append(out, p[runStart:runEnd]...)
			runStart, runEnd = a, b
		}
	}
	keepCopy := func(b []byte) {
		copying = true
		out = append(out, p[runStart:runEnd]...)
		out = append(out, b...)
		runStart, runEnd = 0, 0
	}
	pos := 0
	for pos < len(p) {
		i := bytes.IndexByte(p[pos:], '\n')
		if i < 0 {
			rest := p[pos:]
			if len(s.line)+len(rest) <= maxSniffLine {
				s.line = append(s.line, rest...)
			} else if len(s.line) == 0 {
				keep(pos, len(p))
			} else {
				// An oversized line cannot be a usage chunk: relay it.
				keepCopy(s.line)
				keep(pos, len(p))
				s.line = s.line[:0]
			}
			break
		}
		end := pos + i + 1
		if len(s.line) > 0 {
			s.line = append(s.line, p[pos:end]...)
			if !s.inspect(s.line) {
				keepCopy(s.line)
			}
			s.line = s.line[:0]
		} else if !s.inspect(p[pos:end]) {
			keep(pos, end)
		}
		pos = end
	}
	if !copying {
		return p[runStart:runEnd]
	}
	return append(out, p[runStart:runEnd]...)
}

// scanLines inspects every complete SSE line of p for usage; a partial line
// is held until its end. The caller relays p itself (nothing is dropped
// when not stripping).
func (s *usageSniffer) scanLines(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(s.line)+len(p) <= maxSniffLine {
				s.line = append(s.line, p...)
			}
			return
		}
		line := p[:i+1]
		if len(s.line) > 0 {
			s.line = append(s.line, line...)
			line = s.line
		}
		s.inspect(line)
		s.line = s.line[:0]
		p = p[i+1:]
	}
}

// inspect reads one SSE line and reports whether to drop it.
func (s *usageSniffer) inspect(line []byte) bool {
	t := bytes.TrimRight(line, "\r\n")
	if len(t) == 0 {
		d := s.dropped
		s.dropped = false
		return d && s.strip
	}
	s.dropped = false
	s.end.sseLine(t)
	data, ok := bytes.CutPrefix(t, []byte("data:"))
	if !ok {
		// Anthropic's stream ends with "event: message_stop".
		if ev, ok := bytes.CutPrefix(t, []byte("event:")); ok && string(bytes.TrimSpace(ev)) == "message_stop" {
			s.finished = true
		}
		return false
	}
	data = bytes.TrimSpace(data)
	if bytes.Equal(data, []byte("[DONE]")) {
		s.finished = true
		return false
	}
	s.chunks++
	if s.answer != nil {
		s.answer.feed(data)
	}
	finish, usage := marks(data)
	if finish {
		s.finished = true
	}
	if !usage {
		return false
	}
	usageOnly := s.read(data)
	if usageOnly {
		s.chunks-- // no output in it
	}
	if s.strip && usageOnly {
		s.dropped = true
		return true
	}
	return false
}

// usageDoc is the part of a response or chunk that carries usage.
type usageDoc struct {
	Choices *[]json.RawMessage `json:"choices"`
	Usage   *usageCounts       `json:"usage"`
	// Response is a Responses API event's response (response.completed
	// carries the usage).
	Response *struct {
		Usage *responsesUsage `json:"usage"`
	} `json:"response"`
	// Type and Message are Anthropic's: an event's type, and message_start's
	// message, which carries the usage.
	Type    string        `json:"type"`
	Message *usageMessage `json:"message"`
	Timings *struct {
		CacheN  *int `json:"cache_n"`
		PromptN int  `json:"prompt_n"`
	} `json:"timings"`
	TokensCached *int `json:"tokens_cached"`
	TokensEval   int  `json:"tokens_evaluated"`
}

// usageCounts is a doc's usage object, in any of the APIs' shapes.
type usageCounts struct {
	PromptTokens        int           `json:"prompt_tokens"`
	PromptTokensDetails *cachedTokens `json:"prompt_tokens_details"`
	// InputTokensDetails is the Responses API's (with input_tokens,
	// which there counts the cached tokens too).
	InputTokensDetails *cachedTokens `json:"input_tokens_details"`
	anthropicUsage
	tokenCounts
}

// cachedTokens is OpenAI's prompt_tokens_details (and the Responses API's
// input_tokens_details).
type cachedTokens struct {
	CachedTokens int `json:"cached_tokens"`
}

// usageMessage is Anthropic's message_start message, as far as usage goes.
type usageMessage struct {
	Usage *anthropicUsage `json:"usage"`
}

// read records the usage in doc and reports whether doc is a usage-only
// chunk (no choices).
// The common OpenAI and Anthropic shapes are read in one pass (scanUsage,
// scanAnthropicUsage), any other by encoding/json (readDecoded), with the
// same result.
func (s *usageSniffer) read(doc []byte) bool {
	f, ok := scanUsage(doc)
	if ok {
		return s.readScanned(f)
	}
	var (
		u     usageDoc
		store anthropicStore
	)
	if scanAnthropicUsage(doc, &u, &store) {
		return s.apply(&u)
	}
	return s.readDecoded(doc)
}

// readScanned is read's end for a doc scanUsage (or scanResponse) read
// as f.
func (s *usageSniffer) readScanned(f openAIUsage) bool {
	if f.usage && f.details {
		s.found, s.cached, s.promptTokens = true, f.cached, f.prompt
	} else if f.usage && f.prompt > 0 {
		s.promptTokens = f.prompt
	}
	if f.usage {
		s.countTokens(f.prompt, tokenCounts{CompletionTokens: f.completion, TotalTokens: f.total})
	}
	return f.usage && !f.choices
}

// readDecoded is read through encoding/json.
func (s *usageSniffer) readDecoded(doc []byte) bool {
	var u usageDoc
	if json.Unmarshal(doc, &u) != nil {
		return false
	}
	return s.apply(&u)
}

// apply records the usage of a decoded doc and reports whether it is a
// usage-only chunk.
func (s *usageSniffer) apply(u *usageDoc) bool {
	switch {
	case u.Usage != nil && u.Usage.PromptTokensDetails != nil:
		s.found, s.cached, s.promptTokens = true, u.Usage.PromptTokensDetails.CachedTokens, u.Usage.PromptTokens
	case u.Usage != nil && u.Usage.InputTokensDetails != nil:
		s.found, s.cached, s.promptTokens = true, u.Usage.InputTokensDetails.CachedTokens, u.Usage.InputTokens
	case u.Response != nil && u.Response.Usage != nil && u.Response.Usage.InputTokensDetails != nil:
		ru := u.Response.Usage
		s.found, s.cached, s.promptTokens = true, ru.InputTokensDetails.CachedTokens, ru.InputTokens
	case u.Timings != nil && u.Timings.CacheN != nil:
		s.found, s.cached, s.promptTokens = true, *u.Timings.CacheN, *u.Timings.CacheN+u.Timings.PromptN
	case u.TokensCached != nil:
		s.found, s.cached, s.promptTokens = true, *u.TokensCached, u.TokensEval
	case u.Usage != nil && u.Usage.CacheReadInputTokens != nil:
		s.readAnthropic(&u.Usage.anthropicUsage)
	case u.Message != nil && u.Message.Usage != nil && u.Message.Usage.CacheReadInputTokens != nil:
		s.readAnthropic(u.Message.Usage)
	case u.Usage != nil && u.Usage.PromptTokens > 0:
		// Usage without details: no cached tokens reported (whether that
		// means none is the replica's record: cachereport.go).
		s.promptTokens = u.Usage.PromptTokens
	case u.Usage != nil && u.Usage.InputTokens > 0:
		// Anthropic's shape without cache_read_input_tokens (vLLM, SGLang):
		// input_tokens is then the whole prompt.
		s.promptTokens = u.Usage.InputTokens
	case u.Message != nil && u.Message.Usage != nil && u.Message.Usage.InputTokens > 0:
		s.promptTokens = u.Message.Usage.InputTokens
	}
	if u.Usage != nil {
		s.countTokens(u.Usage.PromptTokens, u.Usage.tokenCounts)
	}
	// A typed event (Anthropic's, the Responses API's) is never a usage chunk
	// to strip.
	return u.Usage != nil && u.Type == "" && (u.Choices == nil || len(*u.Choices) == 0)
}

// responsesUsage is the usage of the Responses API: input_tokens counts
// every prompt token, cached ones included.
type responsesUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
}

// anthropicUsage is the usage of Anthropic's Messages API (in a JSON answer,
// message_start's message and message_delta): input_tokens counts only the
// prompt tokens neither read from the cache nor written to it.
type anthropicUsage struct {
	InputTokens              int  `json:"input_tokens"`
	CacheReadInputTokens     *int `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int  `json:"cache_creation_input_tokens"`
}

// readAnthropic records Anthropic usage: cached is what was read from the
// cache, the prompt all three counts.
func (s *usageSniffer) readAnthropic(u *anthropicUsage) {
	s.found, s.cached = true, *u.CacheReadInputTokens
	s.promptTokens = u.InputTokens + *u.CacheReadInputTokens + u.CacheCreationInputTokens
}

// finish parses a buffered non-streamed body, and ends the answer's
// capture.
func (s *usageSniffer) finish() {
	if s.json && len(s.body) > 0 {
		s.readWhole(s.body)
		s.finished = true
		s.body = nil
	}
	if s.answer != nil {
		s.answer.end(s.finished)
	}
}

// readWhole reads a whole (not streamed) response: its usage, and its
// answer when one is captured. Both are read in one pass (scanResponse)
// when that pass takes the doc, else by read and feed in turn, each with
// its own fallback to encoding/json.
func (s *usageSniffer) readWhole(doc []byte) {
	if c := s.answer; c != nil && !c.dead {
		if f, choices, ok := scanResponse(doc, c.choices[:0]); ok {
			s.readScanned(f)
			c.write(choices)
			return
		}
	}
	s.read(doc)
	if s.answer != nil {
		s.answer.feed(doc)
	}
}
