package policies

import "sync"

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

var messagesTop = topNames("system", "messages")

const (
	bType = iota
	bText
	bID
	bName
	bInput
	bToolUseID
	bContent
	bSource
	bTitle
	bContext
	bThinking
	bSignature
	bData
)

var (
	messageNames = []string{"role", "content"}
	blockNames   = []string{bType: "type", bText: "text", bID: "id", bName: "name", bInput: "input", bToolUseID: "tool_use_id",
		bContent: "content", bSource: "source", bTitle: "title", bContext: "context", bThinking: "thinking", bSignature: "signature", bData: "data"}
	sourceNames = []string{"type", "media_type", "data", "url", "file_id"}
)

// fastMessages parses a /v1/messages body in one pass, or declines.
func fastMessages(body []byte, cfg ParseConfig) (*Request, bool) {
	s := newReader(body)
	s.blockBufs = blockPool.Get().(*blockBufs)
	var b messagesBody
	b.Messages = s.blockBufs.msgs[:0]
	defer func() {
		b.release()
		s.blockBufs.msgs = b.Messages
		s.blockBufs.release()
		s.release()
	}()
	gotMsgs := false
	ok := s.Object(messagesTop, func(i int) bool {
		switch i {
		case nCommon:
			return s.blocks(&b.System, 0)
		case nCommon + 1:
			gotMsgs = true
			return s.anthropicMessages(&b.Messages)
		}
		return s.commonField(i, &b.commonBody)
	})
	if !ok || !s.End() || b.Model.kind != shapeString || !gotMsgs {
		return nil, false
	}
	req := &Request{Endpoint: EndpointMessages}
	fillCommon(req, &b.commonBody)
	msgs, reason := chatOfMessages(&b, &s.blockBufs.conv)
	if reason != "" {
		return nil, false
	}
	chat := chatBody{commonBody: b.commonBody, Messages: msgs}
	keysChat(req, &chat, cfg, len(body))
	return req, req.NoPrefix == ""
}

// anthropicMessages reads messages: objects with a role and a content.
func (s *reader) anthropicMessages(out *[]anthropicMessage) bool {
	return s.Array(func() bool {
		var m anthropicMessage
		ok := s.Object(messageNames, func(i int) bool {
			if i == 0 {
				return s.textField(&m.Role)
			}
			return s.blocks(&m.Content, 0)
		})
		*out = append(*out, m)
		return ok
	})
}

// maxBlockDepth bounds tool results nested in tool results (each level
// is a content of blocks); deeper bodies go to the general path.
const maxBlockDepth = 8

// blocks reads a content: null, a string or an array of blocks; any other
// value declines (the general path makes it shapeOther).
func (s *reader) blocks(b *blocks, depth int) bool {
	*b = blocks{}
	switch {
	case s.Lit("null"):
		return true
	case s.Peek() == '"':
		t, lit, _, plain, ok := s.lazyString() // no copy of the prompt
		*b = blocks{text: t, lit: lit, plain: plain, kind: shapeString}
		return ok
	case s.Peek() == '[' && depth < maxBlockDepth:
		// The blocks of a list at one depth lie together in that depth's
		// buffer: the lists inside them fill the next one meanwhile.
		l := &s.blockBufs.lists[depth]
		at := len(*l)
		ok := s.Array(func() bool {
			*l = append(*l, block{})
			return s.block(&(*l)[len(*l)-1], depth)
		})
		*b = blocks{list: (*l)[at:len(*l):len(*l)], kind: shapeArray}
		return ok
	}
	return false
}

// blockBufs holds fastMessages' messages and blocks: a block is about
// 600 bytes and an agent's body has hundreds, and nothing of them
// outlives the parse (keysChat hashes what it renders). The lists of
// blocks at one depth are slices of one buffer: a list is complete before
// the next one at its depth starts, and the lists inside its blocks go to
// the next depth's buffer, so a list is built where it stays, without a
// copy (a buffer that grows leaves the lists before in the old array,
// which they keep alive). All are pooled.
type blockBufs struct {
	msgs  []anthropicMessage
	lists [maxBlockDepth][]block
	conv  convBufs // the chat messages they convert into
}

var blockPool = sync.Pool{New: func() any {
	bb := &blockBufs{}
	bb.lists[0] = make([]block, 0, 64)
	return bb
}}

// release clears the buffers (they must not keep a body alive) and gives
// them back to blockPool, unless a body made them too large to keep.
func (bb *blockBufs) release() {
	keep := bb.conv.reset() && cap(bb.msgs) <= 1024
	for d := range bb.lists {
		clear(bb.lists[d])
		bb.lists[d] = bb.lists[d][:0]
		keep = keep && cap(bb.lists[d]) <= 4096
	}
	clear(bb.msgs)
	if !keep {
		return
	}
	bb.msgs = bb.msgs[:0]
	blockPool.Put(bb)
}

// block reads one content block: its known fields, others skipped.
func (s *reader) block(bl *block, depth int) bool {
	return s.Object(blockNames, func(i int) bool {
		switch i {
		case bType:
			return s.textField(&bl.Type)
		case bText:
			return s.lazyText(&bl.Text)
		case bID:
			return s.textField(&bl.ID)
		case bName:
			return s.textField(&bl.Name)
		case bInput:
			v, tight, ok := s.SkipTight()
			if ok && !isNull(v) {
				bl.Input, bl.inputTight = v, tight
			}
			return ok
		case bToolUseID:
			return s.textField(&bl.ToolUseID)
		case bContent:
			return s.blocks(&bl.Content, depth+1)
		case bSource:
			return s.source(&bl.Source)
		case bTitle:
			return s.textField(&bl.Title)
		case bContext:
			return s.textField(&bl.Context)
		case bThinking:
			return s.textField(&bl.Thinking)
		case bSignature:
			return s.textField(&bl.Signature)
		case bData:
			return s.textField(&bl.Data)
		}
		return false
	})
}

// source reads an image's or a document's source (or null).
func (s *reader) source(out **blockSource) bool {
	if s.Lit("null") {
		return true
	}
	src := &blockSource{}
	*out = src
	fields := [...]*jsonText{&src.Type, &src.MediaType, &src.Data, &src.URL, &src.FileID} // sourceNames' order
	return s.Object(sourceNames, func(i int) bool { return s.textField(fields[i]) })
}
