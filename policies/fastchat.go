package policies

import "sync"

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
// Parse falls back to the general path. FuzzFastChat checks it against
// the general path.

var chatTop = topNames("messages")

const (
	mRole = iota
	mContent
	mName
	mToolCallID
	mToolCalls
)

var msgNames = []string{mRole: "role", mContent: "content", mName: "name", mToolCallID: "tool_call_id", mToolCalls: "tool_calls"}

// messageSlices pools fastChat's messages: a message is 264 bytes, and
// nothing of them outlives the parse (keysChat copies what the Request
// keeps), so a slice is cleared and reused rather than allocated per body.
var messageSlices = sync.Pool{New: func() any { s := make([]chatMessage, 0, 8); return &s }}

// fastChat parses a chat body in one pass, or declines (ok false).
func fastChat(body []byte, cfg ParseConfig) (*Request, bool) {
	s := newReader(body)
	var b chatBody
	msgs := messageSlices.Get().(*[]chatMessage)
	b.Messages = (*msgs)[:0]
	defer func() {
		b.release()
		s.release()
		clear(b.Messages) // it must not keep the body alive
		if cap(b.Messages) <= 1024 {
			*msgs = b.Messages[:0]
			messageSlices.Put(msgs)
		}
	}()
	gotMsgs := false
	ok := s.Object(chatTop, func(i int) bool {
		if i == nCommon {
			gotMsgs = true
			return s.messages(&b)
		}
		return s.commonField(i, &b.commonBody)
	})
	if !ok || !s.End() || b.Model.kind != shapeString || !gotMsgs || len(b.Messages) == 0 {
		return nil, false
	}
	req := &Request{Endpoint: EndpointChat}
	fillCommon(req, &b.commonBody)
	keysChat(req, &b, cfg, len(body))
	return req, req.NoPrefix == ""
}

// messages reads the messages array: objects with a role, a content (a
// string, null or an array of parts), a name, a tool_call_id and
// tool_calls (other fields skipped); anything else declines.
func (s *reader) messages(b *chatBody) bool {
	return s.Array(func() bool {
		b.Messages = append(b.Messages, chatMessage{})
		m := &b.Messages[len(b.Messages)-1]
		return s.Object(msgNames, func(i int) bool {
			switch i {
			case mRole:
				return s.textField(&m.Role)
			case mContent:
				return s.content(&m.Content)
			case mName:
				return s.textField(&m.Name)
			case mToolCallID:
				return s.textField(&m.ToolCallID)
			case mToolCalls:
				return s.toolCalls(&m.ToolCalls)
			}
			return false
		})
	})
}

// content reads a message's content: null, a string (kept as its literal
// when it has escapes, rendered from it, sink.writeLit: no copy of the
// prompt) or an array of parts.
func (s *reader) content(c *content) bool {
	*c = content{}
	switch {
	case s.Lit("null"):
		return true
	case s.Peek() == '"':
		t, lit, _, plain, ok := s.lazyString()
		*c = content{text: t, lit: lit, plain: plain, kind: shapeString}
		return ok
	case s.Peek() == '[':
		sb := s.scratch()
		parts := sb.parts[:0]
		ok := s.Array(func() bool {
			parts = append(parts, contentPart{})
			return s.part(&parts[len(parts)-1])
		})
		*c = content{parts: append(sb.conv.partArena().take(len(parts)), parts...), kind: shapeArray}
		clear(parts)
		sb.parts = parts[:0]
		return ok
	}
	return false
}

// scratchBufs hold what the fast paths read before they know its length
// (the parts of a content, the calls of a message) and the arenas the
// values then go to (copied at their length): nothing of them outlives a
// parse, and all are pooled.
type scratchBufs struct {
	parts []contentPart
	calls []toolCall
	items []responseItem // fastResponses' input
	conv  convBufs
}

var scratchPool = sync.Pool{New: func() any { return new(scratchBufs) }}

// scratch returns the reader's scratchBufs, from the pool on first use.
func (s *reader) scratch() *scratchBufs {
	if s.scratchBufs == nil {
		s.scratchBufs = scratchPool.Get().(*scratchBufs)
	}
	return s.scratchBufs
}

// release gives the reader's scratchBufs back to the pool.
func (s *reader) release() {
	sb := s.scratchBufs
	if sb == nil {
		return
	}
	s.scratchBufs = nil
	clear(sb.items)
	if sb.conv.reset() && cap(sb.parts) <= 1024 && cap(sb.calls) <= 1024 && cap(sb.items) <= 1024 {
		scratchPool.Put(sb)
	}
}

const (
	pType = iota
	pText
	pImageURL
	pInputAudio
	pFile
	pFileID
	pFileData
	pFileURL
	pRefusal
	pVideoURL
)

var partNames = []string{pType: "type", pText: "text", pImageURL: "image_url", pInputAudio: "input_audio", pFile: "file",
	pFileID: "file_id", pFileData: "file_data", pFileURL: "file_url", pRefusal: "refusal", pVideoURL: "video_url"}

// part reads one part of an array content.
func (s *reader) part(p *contentPart) bool {
	return s.Object(partNames, func(i int) bool {
		switch i {
		case pType:
			return s.textField(&p.Type)
		case pText:
			return s.lazyText(&p.Text)
		case pImageURL:
			return s.imageURL(&p.ImageURL)
		case pVideoURL:
			return s.imageURL(&p.VideoURL)
		case pInputAudio:
			return s.rawValue(&p.InputAudio)
		case pFile:
			return s.rawValue(&p.File)
		case pFileID:
			return s.textField(&p.FileID)
		case pFileData:
			return s.textField(&p.FileData)
		case pFileURL:
			return s.textField(&p.FileURL)
		case pRefusal:
			return s.textField(&p.Refusal)
		}
		return false
	})
}

// imageURL reads {"url": string, ...} or a plain string (or null).
func (s *reader) imageURL(u *imageURL) bool {
	*u = imageURL{}
	if s.Peek() == '{' {
		return s.Object(urlNames, func(int) bool { return s.textField(&u.url) })
	}
	return s.textField(&u.url)
}

var (
	urlNames          = []string{"url"}
	toolCallNames     = []string{"id", "function"}
	callFunctionNames = []string{"name", "arguments"}
)

// toolCalls reads tool_calls: null or an array of
// {"id", "function": {"name", "arguments"}} objects.
func (s *reader) toolCalls(t *toolCalls) bool {
	*t = toolCalls{}
	if s.Lit("null") {
		return true
	}
	sb := s.scratch()
	calls := sb.calls[:0]
	ok := s.Array(func() bool {
		calls = append(calls, toolCall{})
		tc := &calls[len(calls)-1]
		return s.Object(toolCallNames, func(i int) bool {
			if i == 0 {
				return s.textField(&tc.ID)
			}
			if s.Lit("null") {
				return true
			}
			return s.Object(callFunctionNames, func(i int) bool {
				if i == 0 {
					return s.textField(&tc.Function.Name)
				}
				return s.lazyText(&tc.Function.Arguments)
			})
		})
	})
	t.calls = append(sb.conv.callArena().take(len(calls)), calls...)
	clear(calls)
	sb.calls = calls[:0]
	return ok
}
