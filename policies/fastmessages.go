package policies

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
		t, lit, n, ok := s.lazyString() // no copy of the prompt
		*b = blocks{text: t, lit: lit, n: n, kind: shapeString}
		return ok
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
