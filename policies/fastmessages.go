package policies

import "strings"

// fastMessages is fastChat's counterpart for Anthropic's /v1/messages: one
// pass over the body with the module's own scanner instead of
// encoding/json, which validates the whole body, then decodes it, and
// validates and decodes each content array again inside blocks'
// UnmarshalJSON (about 100 MB/s on an agent's body; coding agents send
// 50-500 KiB of them). It fills the same messagesBody the general path
// fills and hands it to the same conversion (chatOfMessages) and keys
// (keysChat), so the keys are the general path's by construction; what it
// does not handle exactly as encoding/json would (a field of another type
// than a string where a string is expected, a source that is not an
// object, duplicate fields, keys that differ from a field's name only by
// case, escapes in keys) makes it decline, and Parse falls back to the
// general path. FuzzFastMessages checks it against the general path.

var (
	messagesTop   = []string{"model", "stream", "stream_options", "cache_salt", "prompt_cache_key", "tools", "functions", "system", "messages"}
	messageFields = []string{"role", "content"}
	blockNames    = []string{"type", "text", "id", "name", "input", "tool_use_id", "content", "source", "title", "context", "thinking", "signature", "data"}
	sourceNames   = []string{"type", "media_type", "data", "url", "file_id"}
)

// fastMessages parses a /v1/messages body in one pass, or declines.
func fastMessages(body []byte, cfg ParseConfig) (*Request, bool) {
	s := &fscan{b: body}
	var b messagesBody
	gotMsgs := false
	ok := s.object(messagesTop, func(k string) bool {
		switch k {
		case "system":
			return s.blocks(&b.System, 0)
		case "messages":
			gotMsgs = true
			return s.anthropicMessages(&b.Messages)
		}
		return s.commonField(k, &b.commonBody)
	})
	s.ws()
	if !ok || s.i != len(s.b) || b.Model.kind != shapeString || !gotMsgs {
		return nil, false
	}
	req := &Request{Endpoint: EndpointMessages}
	fillCommon(req, &b.commonBody)
	msgs, reason := chatOfMessages(&b)
	if reason != "" {
		return nil, false
	}
	chat := chatBody{commonBody: b.commonBody, Messages: msgs}
	keysChat(req, &chat, cfg, len(body))
	return req, req.NoPrefix == ""
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

// anthropicMessages scans messages: objects with a role and a content.
func (s *fscan) anthropicMessages(out *[]anthropicMessage) bool {
	return s.array(func() bool {
		var m anthropicMessage
		ok := s.object(messageFields, func(k string) bool {
			switch k {
			case "role":
				return s.textField(&m.Role)
			case "content":
				return s.blocks(&m.Content, 0)
			}
			_, ok := s.skip()
			return ok
		})
		*out = append(*out, m)
		return ok
	})
}

// maxBlockDepth bounds tool results nested in tool results (each level
// is a content of blocks); deeper bodies go to the general path.
const maxBlockDepth = 8

// blocks scans a content: null, a string or an array of blocks; any other
// value declines (the general path makes it shapeOther).
func (s *fscan) blocks(b *blocks, depth int) bool {
	*b = blocks{}
	switch {
	case s.lit("null"):
		return true
	case s.i < len(s.b) && s.b[s.i] == '"':
		lit, n, ok := s.strLen()
		if !ok {
			return false
		}
		if n != len(lit)-2 {
			// Decoded as it renders: no copy of the prompt.
			*b = blocks{lit: lit, n: n, kind: shapeString}
			return true
		}
		t, _ := text(lit, false)
		*b = blocks{text: t, kind: shapeString}
		return true
	case s.i < len(s.b) && s.b[s.i] == '[' && depth < maxBlockDepth:
		list := []block{}
		ok := s.array(func() bool {
			list = append(list, block{})
			return s.block(&list[len(list)-1], depth)
		})
		*b = blocks{list: list, kind: shapeArray}
		return ok
	}
	return false
}

// block scans one content block: its known fields, others skipped.
func (s *fscan) block(bl *block, depth int) bool {
	return s.object(blockNames, func(k string) bool {
		switch k {
		case "type":
			return s.textField(&bl.Type)
		case "text":
			return s.lazyText(&bl.Text)
		case "id":
			return s.textField(&bl.ID)
		case "name":
			return s.textField(&bl.Name)
		case "input":
			return s.rawValue(&bl.Input)
		case "tool_use_id":
			return s.textField(&bl.ToolUseID)
		case "content":
			return s.blocks(&bl.Content, depth+1)
		case "source":
			if s.lit("null") {
				return true
			}
			src := &blockSource{}
			bl.Source = src
			return s.object(sourceNames, func(k string) bool {
				switch k {
				case "type":
					return s.textField(&src.Type)
				case "media_type":
					return s.textField(&src.MediaType)
				case "data":
					return s.textField(&src.Data)
				case "url":
					return s.textField(&src.URL)
				case "file_id":
					return s.textField(&src.FileID)
				}
				_, ok := s.skip()
				return ok
			})
		case "title":
			return s.textField(&bl.Title)
		case "context":
			return s.textField(&bl.Context)
		case "thinking":
			return s.textField(&bl.Thinking)
		case "signature":
			return s.textField(&bl.Signature)
		case "data":
			return s.textField(&bl.Data)
		}
		_, ok := s.skip()
		return ok
	})
}
