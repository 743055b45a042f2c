package policies

import (
	"strings"
	"sync"
	"unsafe"

	"github.com/llmroute/caddy-llmroute/internal/jsonscan"
)

// fastChat is a one-pass fast path for /v1/chat/completions bodies. It
// validates the JSON as it goes (one scan instead of encoding/json's
// checkValid + decode + rescans), hands the message strings to the
// renderer without copying them when they have no escapes (and escaped
// string contents as their literals, decoded as they render), and then
// reuses keysChat, so the keys are those of the general path. It reads
// what agents send too: array contents of parts, names, tool_call_id and
// tool_calls. Anything it does not handle exactly like encoding/json
// would (a non-string where a string is expected, a shape the general path
// keeps as raw JSON, keys that differ from a field name only by case,
// duplicate fields, escapes in keys, deep nesting) makes it decline, and
// Parse falls back to the general path. It took Parse of a 4 KiB chat body
// from ~42 us to ~3 us (lab/bench/proposals/hot-path-results.md), and of an
// agent's body with tool calls from 110 to 260-290 MB/s; FuzzFastChat checks
// it against the general path.

type fscan struct {
	b []byte
	i int
}

func (s *fscan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// str scans a string at s.i (which must be '"'); it returns the literal
// (quotes included) and whether it holds escapes. It reads each byte once
// (jsonscan.StringEnd: quotes, backslashes and control bytes eight bytes
// at a time).
// strLen is str that returns the literal's decoded length instead
// (jsonscan.StringEndLen); it holds escapes when n != len(lit)-2.
func (s *fscan) strLen() (lit []byte, n int, ok bool) {
	end, n, ok := jsonscan.StringEndLen(s.b, s.i)
	if !ok {
		return nil, 0, false
	}
	lit = s.b[s.i:end]
	s.i = end
	return lit, n, true
}

func (s *fscan) str() (lit []byte, esc, ok bool) {
	end, esc, ok := jsonscan.StringEnd(s.b, s.i)
	if !ok {
		return nil, false, false
	}
	lit = s.b[s.i:end]
	s.i = end
	return lit, esc, true
}

func (s *fscan) lit(word string) bool {
	if strings.HasPrefix(unsafe.String(unsafe.SliceData(s.b[s.i:]), len(s.b)-s.i), word) {
		s.i += len(word)
		return true
	}
	return false
}

// skip scans any value at s.i and returns its bytes: jsonscan's Skip,
// the one value scanner of the module.
func (s *fscan) skip() ([]byte, bool) {
	sc := jsonscan.At(s.b, s.i)
	v, ok := sc.Skip()
	s.i = sc.Pos()
	return v, ok
}

// keyAt scans an object key and returns it with the index of the name it
// is (-1 for another key); it declines escapes and non-ASCII keys, and
// keys that equal one of names but for case (encoding/json would match
// them case-insensitively).
func (s *fscan) keyAt(names []string) (string, int, bool) {
	s.ws()
	k, ok := jsonscan.PlainKey(s.b, s.i)
	if !ok {
		return "", -1, false
	}
	s.i += len(k) + 2
	ks := unsafe.String(unsafe.SliceData(k), len(k))
	i, ok := jsonscan.MatchName(ks, names)
	if !ok {
		return "", -1, false
	}
	if i >= 0 {
		return names[i], i, true
	}
	s.ws()
	return ks, -1, true
}

func (s *fscan) colon() bool {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != ':' {
		return false
	}
	s.i++
	s.ws()
	return true
}

// next consumes ',' (more) or closer (done).
func (s *fscan) next(closer byte) (more, ok bool) {
	s.ws()
	if s.i >= len(s.b) {
		return false, false
	}
	switch s.b[s.i] {
	case ',':
		s.i++
		return true, true
	case closer:
		s.i++
		return false, true
	}
	return false, false
}

// commonField scans the value of the top-level field k into c when it is
// one of the fields every endpoint shares, and skips it otherwise. Only
// what the Request keeps (model, cache_salt, prompt_cache_key) is copied
// out of the body.
func (s *fscan) commonField(k string, c *commonBody) bool {
	switch k {
	case "model":
		if !s.textField(&c.Model) || c.Model.s == "" {
			return false
		}
		c.Model.s = strings.Clone(c.Model.s)
	case "stream":
		v, ok := s.skip()
		c.Stream = jsonBool(string(v) == "true")
		return ok
	case "stream_options":
		c.StreamOptions.Present = true
		if s.i < len(s.b) && s.b[s.i] == '{' {
			return s.streamOptions(&c.StreamOptions)
		}
		_, ok := s.skip()
		return ok
	case "cache_salt", "prompt_cache_key":
		t := &c.CacheSalt
		if k == "prompt_cache_key" {
			t = &c.PromptCacheKey
		}
		if s.i < len(s.b) && s.b[s.i] == '"' {
			if !s.textField(t) {
				return false
			}
			t.s = strings.Clone(t.s)
			return true
		}
		_, ok := s.skip()
		return ok
	case "tools", "functions":
		r := &c.Tools
		if k == "functions" {
			r = &c.Functions
		}
		return s.rawValue(r)
	default:
		_, ok := s.skip()
		return ok
	}
	return true
}

// object scans an object at s.i whose keys are matched against names
// (s.key declines near-misses), calling field with s.i at each value; a
// duplicate of a named field declines (encoding/json keeps the last).
func (s *fscan) object(names []string, field func(k string) bool) bool {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '{' {
		return false
	}
	s.i++
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return true
	}
	var seen uint32
	for {
		k, i, ok := s.keyAt(names)
		if !ok || !s.colon() {
			return false
		}
		if i >= 0 {
			if seen&(1<<i) != 0 {
				return false
			}
			seen |= 1 << i
		}
		if !field(k) {
			return false
		}
		more, ok := s.next('}')
		if !ok {
			return false
		}
		if !more {
			return true
		}
	}
}

// array scans an array at s.i, calling elem with s.i at each element.
func (s *fscan) array(elem func() bool) bool {
	if s.i >= len(s.b) || s.b[s.i] != '[' {
		return false
	}
	s.i++
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return true
	}
	for {
		s.ws()
		if !elem() {
			return false
		}
		more, ok := s.next(']')
		if !ok {
			return false
		}
		if !more {
			return true
		}
	}
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

var (
	topFields = []string{"model", "stream", "stream_options", "cache_salt", "prompt_cache_key", "tools", "functions", "messages"}
	msgFields = []string{"role", "content", "name", "tool_call_id", "tool_calls"}
)

// messageSlices pools fastChat's messages: a message is 264 bytes, and
// nothing of them outlives the parse (keysChat copies what the Request
// keeps), so a slice is cleared and reused rather than allocated per body.
var messageSlices = sync.Pool{New: func() any { s := make([]chatMessage, 0, 8); return &s }}

// fastChat parses a chat body in one pass, or declines (ok false).
func fastChat(body []byte, cfg ParseConfig) (*Request, bool) {
	s := &fscan{b: body}
	var b chatBody
	msgs := messageSlices.Get().(*[]chatMessage)
	b.Messages = (*msgs)[:0]
	defer func() {
		clear(b.Messages) // it must not keep the body alive
		if cap(b.Messages) <= 1024 {
			*msgs = b.Messages[:0]
			messageSlices.Put(msgs)
		}
	}()
	gotMsgs := false
	ok := s.object(topFields, func(k string) bool {
		if k == "messages" {
			gotMsgs = true
			return s.messages(&b)
		}
		return s.commonField(k, &b.commonBody)
	})
	s.ws()
	if !ok || s.i != len(s.b) || b.Model.kind != shapeString || !gotMsgs || len(b.Messages) == 0 {
		return nil, false
	}
	req := &Request{Endpoint: EndpointChat}
	fillCommon(req, &b.commonBody)
	keysChat(req, &b, cfg, len(body))
	return req, req.NoPrefix == ""
}

// streamOptions scans the stream_options object (s.i at its '{').
func (s *fscan) streamOptions(o *streamOptions) bool {
	return s.object(streamOptionFields, func(k string) bool {
		v, ok := s.skip()
		if k == "include_usage" {
			o.IncludeUsage = jsonBool(string(v) == "true")
		}
		return ok
	})
}

var streamOptionFields = []string{"include_usage"}

// messages scans the messages array: objects with a role, a content (a
// string, null or an array of parts), a name, a tool_call_id and
// tool_calls (other fields skipped); anything else declines.
func (s *fscan) messages(b *chatBody) bool {
	return s.array(func() bool {
		b.Messages = append(b.Messages, chatMessage{})
		m := &b.Messages[len(b.Messages)-1]
		return s.object(msgFields, func(k string) bool {
			switch k {
			case "role":
				return s.textField(&m.Role)
			case "content":
				return s.content(&m.Content)
			case "name":
				return s.textField(&m.Name)
			case "tool_call_id":
				return s.textField(&m.ToolCallID)
			case "tool_calls":
				return s.toolCalls(&m.ToolCalls)
			}
			_, ok := s.skip()
			return ok
		})
	})
}

// content scans a message's content: null, a string (kept as its literal
// when it has escapes, decoded as it renders: no copy of the prompt) or an
// array of parts.
func (s *fscan) content(c *content) bool {
	*c = content{}
	switch {
	case s.lit("null"):
		return true
	case s.i < len(s.b) && s.b[s.i] == '"':
		t, lit, n, ok := s.lazyString()
		*c = content{text: t, lit: lit, n: n, kind: shapeString}
		return ok
	case s.i < len(s.b) && s.b[s.i] == '[':
		parts := []contentPart{}
		ok := s.array(func() bool {
			parts = append(parts, contentPart{})
			return s.part(&parts[len(parts)-1])
		})
		*c = content{parts: parts, kind: shapeArray}
		return ok
	}
	return false
}

var partFields = []string{"type", "text", "image_url", "input_audio", "file", "file_id", "file_data", "file_url", "refusal", "video_url"}

// part scans one part of an array content.
func (s *fscan) part(p *contentPart) bool {
	return s.object(partFields, func(k string) bool {
		switch k {
		case "type":
			return s.textField(&p.Type)
		case "text":
			return s.lazyText(&p.Text)
		case "image_url":
			return s.imageURL(&p.ImageURL)
		case "video_url":
			return s.imageURL(&p.VideoURL)
		case "input_audio":
			return s.rawValue(&p.InputAudio)
		case "file":
			return s.rawValue(&p.File)
		case "file_id":
			return s.textField(&p.FileID)
		case "file_data":
			return s.textField(&p.FileData)
		case "file_url":
			return s.textField(&p.FileURL)
		case "refusal":
			return s.textField(&p.Refusal)
		}
		_, ok := s.skip()
		return ok
	})
}

// imageURL scans {"url": string, ...} or a plain string (or null).
func (s *fscan) imageURL(u *imageURL) bool {
	*u = imageURL{}
	if s.i < len(s.b) && s.b[s.i] == '{' {
		return s.object(urlFields, func(k string) bool {
			if k == "url" {
				return s.textField(&u.url)
			}
			_, ok := s.skip()
			return ok
		})
	}
	return s.textField(&u.url)
}

var (
	urlFields          = []string{"url"}
	toolCallFields     = []string{"id", "function"}
	callFunctionFields = []string{"name", "arguments"}
)

// toolCalls scans tool_calls: null or an array of
// {"id", "function": {"name", "arguments"}} objects.
func (s *fscan) toolCalls(t *toolCalls) bool {
	*t = toolCalls{}
	if s.lit("null") {
		return true
	}
	calls := []toolCall{}
	ok := s.array(func() bool {
		calls = append(calls, toolCall{})
		tc := &calls[len(calls)-1]
		return s.object(toolCallFields, func(k string) bool {
			switch k {
			case "id":
				return s.textField(&tc.ID)
			case "function":
				if s.lit("null") {
					return true
				}
				return s.object(callFunctionFields, func(k string) bool {
					switch k {
					case "name":
						return s.textField(&tc.Function.Name)
					case "arguments":
						return s.textField(&tc.Function.Arguments)
					}
					_, ok := s.skip()
					return ok
				})
			}
			_, ok := s.skip()
			return ok
		})
	})
	t.calls = calls
	return ok
}
