package policies

import (
	"encoding/json"
	"strings"
	"unsafe"
)

// Anthropic's Messages API (/v1/messages, which vLLM, SGLang and llama.cpp
// serve beside the OpenAI API) keys like chat: a body is converted into the
// chat messages an OpenAI client would send for the same conversation and
// keyed by keysChat, so that the same system prompt, tools and turns give
// the same leading key and block chain whether they came as chat,
// responses or messages, and affinity survives a client switching API.
//
// The conversion, in the way engines convert it themselves:
//   - system (a string, or text blocks) is a leading system message; text
//     blocks are the parts of its content (joined like chat's parts);
//   - text blocks are text parts; an image is chat's image_url part, a
//     base64 source as the data URL an OpenAI client would send;
//   - an assistant's tool_use blocks are its tool_calls (id, name, and the
//     input's compacted JSON as arguments);
//   - each tool_result block is a "tool" message with its tool_use_id,
//     placed before the rest of its message (the order Anthropic requires
//     and engines keep), and a message of tool results only leaves no
//     message of its own;
//   - any other block (thinking, document, server tools) is a part of its
//     own type with whichever of its known fields it has;
//   - cache_control marks, citations and is_error are not rendered: they
//     do not change what a chat client would send.

// Reasons Parse gives for Anthropic bodies, besides the shared ones.
const (
	NoPrefixSystemShape = "system has an unexpected shape"
	NoPrefixCountTokens = "token count only"
)

// messagesBody is a /v1/messages (or count_tokens) body. Messages that is
// not an array of objects surfaces as an UnmarshalTypeError on "messages".
type messagesBody struct {
	commonBody
	System   blocks             `json:"system"`
	Messages []anthropicMessage `json:"messages"`
}

// anthropicMessage is one element of messages.
type anthropicMessage struct {
	Role    jsonText `json:"role"`
	Content blocks   `json:"content"`
}

// blocks is an Anthropic content: a string or an array of content blocks.
// Any other value (or an array that does not decode as blocks) is
// shapeOther. A string is text, or (fastMessages) lit: its literal, escapes
// and all, rendered from it like content's (a tool result carrying a
// source file is most of an agent's body, and escapes all through).
type blocks struct {
	text  string
	lit   []byte
	plain bool // (content.plain)
	list  []block
	kind  shape
}

// content returns a string or absent blocks as a chat content.
func (b *blocks) content() content {
	return content{text: b.text, lit: b.lit, plain: b.plain, kind: b.kind}
}

// str returns a string content's text, decoding lit.
func (b *blocks) str() string {
	if b.lit != nil {
		t, _ := unquote(b.lit)
		return t
	}
	return b.text
}

func (b *blocks) UnmarshalJSON(data []byte) error {
	*b = blocks{kind: shapeOther}
	switch {
	case isNull(data):
		b.kind = shapeAbsent
	case data[0] == '"':
		if decodeString(data, &b.text) {
			b.kind = shapeString
		}
	case data[0] == '[':
		if json.Unmarshal(data, &b.list) == nil {
			b.kind = shapeArray
		} else {
			b.list = nil
		}
	}
	return nil
}

// block is one content block; which fields it has depends on its type.
type block struct {
	Type      jsonText     `json:"type"`
	Text      jsonText     `json:"text"`
	ID        jsonText     `json:"id"`
	Name      jsonText     `json:"name"`
	Input     rawField     `json:"input"`
	ToolUseID jsonText     `json:"tool_use_id"`
	Content   blocks       `json:"content"`
	Source    *blockSource `json:"source"` // images and documents only: a pointer keeps a block small
	Title     jsonText     `json:"title"`
	Context   jsonText     `json:"context"`
	Thinking  jsonText     `json:"thinking"`
	Signature jsonText     `json:"signature"`
	Data      jsonText     `json:"data"`
	// inputTight says that the fast scan found Input tight
	// (jsonscan.SkipTight): its own compact form.
	inputTight bool
}

// source returns the block's source, or an empty one.
func (bl *block) source() *blockSource {
	if bl.Source == nil {
		return &noSource
	}
	return bl.Source
}

// noSource is what a block without a source reads (never written).
var noSource blockSource

// blockSource is an image's or a document's source.
type blockSource struct {
	Type      jsonText `json:"type"`
	MediaType jsonText `json:"media_type"`
	Data      jsonText `json:"data"`
	URL       jsonText `json:"url"`
	FileID    jsonText `json:"file_id"`
}

// parseMessages fills req from a /v1/messages or count_tokens body.
func parseMessages(req *Request, body []byte, cfg ParseConfig) error {
	var b messagesBody
	bad, err := decode(body, &b, &b.commonBody, req)
	switch {
	case err != nil:
		return err
	case req.Endpoint == EndpointCountTokens:
		// Counting tokens prefills nothing: no cache to follow.
		req.NoPrefix = NoPrefixCountTokens
	case bad == "messages":
		req.NoPrefix = NoPrefixMessagesShape
	case bad != "":
		req.NoPrefix = NoPrefixBodyShape
	default:
		msgs, reason := chatOfMessages(&b, nil)
		if reason != "" {
			req.NoPrefix = reason
			return nil
		}
		chat := chatBody{commonBody: b.commonBody, Messages: msgs}
		keysChat(req, &chat, cfg, len(body))
	}
	return nil
}

// chatOfMessages converts an Anthropic body into chat messages, or returns
// the reason it has no prefix; the slices come from cb (nil: allocated).
func chatOfMessages(b *messagesBody, cb *convBufs) ([]chatMessage, string) {
	if b.System.kind == shapeOther {
		return nil, NoPrefixSystemShape
	}
	if len(b.Messages) == 0 {
		return nil, NoPrefixNoMessages
	}
	for i := range b.Messages {
		m := &b.Messages[i]
		if m.Role.str() == "" {
			return nil, NoPrefixRoleShape
		}
		if !m.Content.valid() {
			return nil, NoPrefixContentShape
		}
	}
	if !b.System.valid() {
		return nil, NoPrefixSystemShape
	}

	n := len(b.Messages) + 1 // each tool result is a message of its own
	for i := range b.Messages {
		for j := range b.Messages[i].Content.list {
			if b.Messages[i].Content.list[j].Type.s == "tool_result" {
				n++
			}
		}
	}
	msgs := cb.msgArena().take(n)
	switch sys := &b.System; {
	case sys.kind == shapeString && (sys.text != "" || sys.lit != nil): // an escape decodes to something
		msgs = append(msgs, chatMessage{Role: textField("system"), Content: sys.content()})
	case sys.kind == shapeArray && len(sys.list) > 0:
		msgs = append(msgs, chatMessage{Role: textField("system"), Content: partsOf(sys.list, cb)})
	}
	for i := range b.Messages {
		msgs = appendMessage(msgs, &b.Messages[i], cb)
	}
	return msgs, ""
}

// valid reports whether a content and every block in it (tool results'
// contents included) has a shape the conversion knows: a string, nothing,
// or blocks each with a type.
func (b *blocks) valid() bool {
	switch b.kind {
	case shapeOther:
		return false
	case shapeArray:
		for i := range b.list {
			if b.list[i].Type.str() == "" || !b.list[i].Content.valid() {
				return false
			}
		}
	}
	return true
}

// textField makes a string field.
func textField(s string) jsonText { return jsonText{s: s, kind: shapeString} }

// appendMessage appends the chat messages of one Anthropic message: its
// tool results as tool messages, then the message itself unless it held
// tool results only.
func appendMessage(msgs []chatMessage, m *anthropicMessage, cb *convBufs) []chatMessage {
	if m.Content.kind != shapeArray {
		return append(msgs, chatMessage{Role: m.Role, Content: m.Content.content()})
	}
	// Sized first: a part is 432 bytes, and an agent's message has many.
	nParts, nCalls := 0, 0
	for i := range m.Content.list {
		switch m.Content.list[i].Type.s {
		case "tool_result":
		case "tool_use":
			nCalls++
		default:
			nParts++
		}
	}
	var parts []contentPart
	var calls []toolCall
	if nParts > 0 {
		parts = cb.partArena().take(nParts)
	}
	if nCalls > 0 {
		calls = cb.callArena().take(nCalls)
	}
	results := 0
	for i := range m.Content.list {
		bl := &m.Content.list[i]
		switch bl.Type.s {
		case "tool_result":
			results++
			msgs = append(msgs, chatMessage{Role: textField("tool"), ToolCallID: bl.ToolUseID, Content: contentOf(&bl.Content, cb)})
		case "tool_use":
			var tc toolCall
			tc.ID = bl.ID
			tc.Function.Name = bl.Name
			if args := bl.Input; args != nil {
				if !bl.inputTight {
					args = appendCompact(nil, args)
				}
				// The chat API carries arguments as a string of this
				// JSON, and renders them as its text.
				tc.Function.Arguments = jsonText{s: unsafe.String(unsafe.SliceData(args), len(args)), kind: shapeString}
			}
			calls = append(calls, tc)
		default:
			parts = append(parts, partOf(bl))
		}
	}
	if results > 0 && len(parts) == 0 && len(calls) == 0 {
		return msgs
	}
	msg := chatMessage{Role: m.Role, ToolCalls: toolCalls{calls: calls}}
	if len(parts) > 0 || results == 0 && len(calls) == 0 {
		msg.Content = content{parts: parts, kind: shapeArray}
	}
	return append(msgs, msg)
}

// contentOf converts a tool result's content.
func contentOf(b *blocks, cb *convBufs) content {
	switch b.kind {
	case shapeString:
		return b.content()
	case shapeArray:
		return partsOf(b.list, cb)
	}
	return content{}
}

// partsOf converts blocks that are parts of one content.
func partsOf(list []block, cb *convBufs) content {
	parts := cb.partArena().take(len(list))
	for i := range list {
		parts = append(parts, partOf(&list[i]))
	}
	return content{parts: parts, kind: shapeArray}
}

// partOf converts one block into the chat part it stands for.
func partOf(bl *block) contentPart {
	switch t := bl.Type.s; t {
	case "text":
		return contentPart{Type: bl.Type, Text: bl.Text}
	case "image":
		src := bl.source()
		switch src.Type.str() {
		case "url":
			return contentPart{Type: textField("image_url"), ImageURL: imageURL{url: src.URL}}
		case "base64":
			url := "data:" + src.MediaType.str() + ";base64," + src.Data.str()
			return contentPart{Type: textField("image_url"), ImageURL: imageURL{url: textField(url)}}
		}
	}
	return contentPart{Type: bl.Type, Text: textField(blockFields(bl))}
}

// blockFields renders the known fields of a block of another type, as
// renderPart renders a part's fields: "<|name|>value\n" for each present.
func blockFields(bl *block) string {
	var w strings.Builder
	f := func(name string, v *jsonText) {
		switch v.kind {
		case shapeString:
			w.WriteString("<|" + name + "|>")
			w.WriteString(v.str())
			w.WriteString("\n")
		case shapeOther:
			w.WriteString("<|" + name + "|>")
			w.Write(v.raw)
			w.WriteString("\n")
		}
	}
	f("id", &bl.ID)
	f("name", &bl.Name)
	f("tool_use_id", &bl.ToolUseID)
	f("text", &bl.Text)
	f("thinking", &bl.Thinking)
	f("signature", &bl.Signature)
	f("data", &bl.Data)
	f("title", &bl.Title)
	f("context", &bl.Context)
	if bl.Input != nil {
		w.WriteString("<|input|>")
		w.Write(bl.Input)
		w.WriteString("\n")
	}
	src := bl.source()
	f("source_type", &src.Type)
	f("media_type", &src.MediaType)
	f("source_data", &src.Data)
	f("url", &src.URL)
	f("file_id", &src.FileID)
	switch bl.Content.kind {
	case shapeString:
		w.WriteString("<|content|>")
		w.WriteString(bl.Content.str())
		w.WriteString("\n")
	case shapeArray:
		for i := range bl.Content.list {
			c := &bl.Content.list[i]
			w.WriteString("<|" + c.Type.s + "|>\n")
			w.WriteString(blockFields(c))
		}
	}
	return w.String()
}
