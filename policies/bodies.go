package policies

import (
	"bytes"
	"encoding/json"
)

// The body types below decode OpenAI-style bodies without failing on odd
// shapes: a value of the wrong type is recorded (as shapeOther, or as the
// decoder's UnmarshalTypeError for the messages and input arrays, which
// encoding/json reports after decoding everything else) so that it becomes
// a NoPrefix reason instead of an error.
//
// Cost: prompt strings are copied exactly once, by unquote; the body is
// scanned by encoding/json's validator once, and a string-or-array field is
// scanned once more where it is handed to its UnmarshalJSON. The arrays that
// carry most of a prompt (messages, responses input items) are typed slices
// rather than custom types, so their contents are not validated a second
// time. Raw JSON is kept only for small odd shapes rendered verbatim.

// shape says what JSON value a tolerant field held.
type shape uint8

const (
	shapeAbsent shape = iota // missing or null
	shapeString
	shapeArray
	shapeOther // any other value; for text fields it is kept in raw
)

// isNull reports whether data is the JSON literal null.
func isNull(data []byte) bool { return bytes.Equal(data, []byte("null")) }

// decodeString decodes a string literal into *s, by unquote or, for
// anything unquote declines, by encoding/json.
func decodeString(data []byte, s *string) bool {
	if v, ok := unquote(data); ok {
		*s = v
		return true
	}
	return json.Unmarshal(data, s) == nil
}

// jsonText is a field that should be a string. Any other non-null value is
// kept as raw JSON so that it can still be rendered deterministically.
type jsonText struct {
	s string
	// raw is the raw JSON of a value of another kind (shapeOther); for a
	// string it is set, instead of s, by the fast paths for text that is
	// mostly rendered (parts' and blocks' text, function outputs) when it
	// has escapes: the literal, rendered from it (sink.writeLit; decoded
	// by str), with n its decoded length (the tools' canonical form
	// prefixes it). plain says that the literal, or s, renders as it
	// is (sink.writeBodyText). One field for both keeps jsonText at 48
	// bytes; a block holds eighteen.
	raw   []byte
	n     int32
	kind  shape
	plain bool
}

func (t *jsonText) UnmarshalJSON(data []byte) error {
	*t = jsonText{}
	switch {
	case len(data) == 0 || isNull(data):
	case data[0] == '"' && decodeString(data, &t.s):
		t.kind = shapeString
	default:
		t.kind = shapeOther
		t.raw = append([]byte(nil), data...)
	}
	return nil
}

// str returns the string value, or "" when the field was not a string.
func (t *jsonText) str() string {
	if t.kind == shapeString {
		if t.raw != nil {
			v, _ := unquote(t.raw)
			return v
		}
		return t.s
	}
	return ""
}

// render writes the string or the raw JSON of any other value.
func (t *jsonText) render(w *sink) {
	switch t.kind {
	case shapeString:
		w.writeBodyText(t.s, t.raw, t.plain)
	case shapeOther:
		w.Write(t.raw)
	}
}

// jsonBool is true only for the JSON literal true.
type jsonBool bool

func (b *jsonBool) UnmarshalJSON(data []byte) error {
	*b = jsonBool(bytes.Equal(data, []byte("true")))
	return nil
}

// streamOptions is stream_options; anything but an object is ignored.
// Present records that the body has the field at all (any value, null
// included).
type streamOptions struct {
	IncludeUsage jsonBool
	Present      bool
}

func (o *streamOptions) UnmarshalJSON(data []byte) error {
	o.Present = true
	o.IncludeUsage = false
	if len(data) > 0 && data[0] == '{' {
		var v struct {
			IncludeUsage jsonBool `json:"include_usage"`
		}
		if json.Unmarshal(data, &v) == nil {
			o.IncludeUsage = v.IncludeUsage
		}
	}
	return nil
}

// rawField keeps a field's raw JSON, treating null as absent. Tools are
// kept so, and hashed into the leading key in a canonical form (toolkey.go).
type rawField []byte

func (r *rawField) UnmarshalJSON(data []byte) error {
	if isNull(data) {
		*r = nil
		return nil
	}
	*r = append((*r)[:0], data...)
	return nil
}

// commonBody holds the fields every endpoint shares.
type commonBody struct {
	Model         jsonText      `json:"model"`
	Stream        jsonBool      `json:"stream"`
	StreamOptions streamOptions `json:"stream_options"`
	CacheSalt     jsonText      `json:"cache_salt"`
	// PromptCacheKey is OpenAI's cache routing hint: llm_route takes it as
	// a session identity when no session header is sent.
	PromptCacheKey jsonText `json:"prompt_cache_key"`
	Tools          rawField `json:"tools"`
	Functions      rawField `json:"functions"` // legacy chat field; part of the tools
	// canon holds the canonical forms of Tools and Functions when a fast
	// path read them on its way (toolsCanonical reuses them).
	canon [2]toolsForm
	// limits is what a fast path read of the output limit on its way.
	limits outputLimits
}

// chatBody is a /v1/chat/completions body. Messages that is not an array of
// objects surfaces as an UnmarshalTypeError on "messages".
type chatBody struct {
	commonBody
	Messages []chatMessage `json:"messages"`
}

// chatMessage is one element of messages.
type chatMessage struct {
	Role       jsonText  `json:"role"`
	Content    content   `json:"content"`
	Name       jsonText  `json:"name"`
	ToolCallID jsonText  `json:"tool_call_id"`
	ToolCalls  toolCalls `json:"tool_calls"`
}

// content is a message's content: a string or an array of parts. A string
// is text, or (fastChat) lit: its literal, escapes and all, rendered from
// it (sink.writeLit) so that it is never copied.
type content struct {
	text  string
	lit   []byte
	plain bool // lit, or text, renders as it is (sink.writeBodyText)
	parts []contentPart
	kind  shape
}

func (c *content) UnmarshalJSON(data []byte) error {
	*c = content{kind: shapeOther}
	switch {
	case isNull(data):
		c.kind = shapeAbsent
	case data[0] == '"':
		if decodeString(data, &c.text) {
			c.kind = shapeString
		}
	case data[0] == '[':
		if json.Unmarshal(data, &c.parts) == nil {
			c.kind = shapeArray
		} else {
			c.parts = nil
		}
	}
	return nil
}

// contentPart is one part of an array content (chat or responses). Text
// parts render their text alone; every other type renders its type and
// whichever payload fields it has, so that two different images or audio
// clips never render alike.
type contentPart struct {
	Type       jsonText `json:"type"`
	Text       jsonText `json:"text"`
	ImageURL   imageURL `json:"image_url"`
	InputAudio rawField `json:"input_audio"`
	File       rawField `json:"file"`
	FileID     jsonText `json:"file_id"`
	FileData   jsonText `json:"file_data"`
	FileURL    jsonText `json:"file_url"`
	Refusal    jsonText `json:"refusal"`
	VideoURL   imageURL `json:"video_url"`
}

// imageURL is chat's {"url": "..."} or the responses API's plain string.
type imageURL struct{ url jsonText }

func (u *imageURL) UnmarshalJSON(data []byte) error {
	if len(data) > 0 && data[0] == '{' {
		var v struct {
			URL jsonText `json:"url"`
		}
		u.url = jsonText{}
		if json.Unmarshal(data, &v) == nil {
			u.url = v.URL
		}
		return nil
	}
	return u.url.UnmarshalJSON(data)
}

// toolCalls is an assistant message's tool_calls; a shape other than an
// array of objects is kept as raw JSON.
type toolCalls struct {
	calls []toolCall
	raw   []byte
}

func (t *toolCalls) UnmarshalJSON(data []byte) error {
	t.calls, t.raw = nil, nil
	if isNull(data) {
		return nil
	}
	if data[0] != '[' || json.Unmarshal(data, &t.calls) != nil {
		t.calls = nil
		t.raw = append([]byte(nil), data...)
	}
	return nil
}

// toolCall is one element of tool_calls.
type toolCall struct {
	ID       jsonText `json:"id"`
	Function struct {
		Name      jsonText `json:"name"`
		Arguments jsonText `json:"arguments"`
	} `json:"function"`
}

// completionsBody is a /v1/completions body.
type completionsBody struct {
	commonBody
	Prompt prompt `json:"prompt"`
}

// prompt is a completions prompt: a string, an array of strings, an array
// of token ids, or an array of token-id arrays.
type prompt struct {
	text    string
	texts   []string
	tokens  []int64
	batches [][]int64
	kind    shape
}

func (p *prompt) UnmarshalJSON(data []byte) error {
	*p = prompt{kind: shapeOther}
	switch {
	case isNull(data):
		p.kind = shapeAbsent
	case data[0] == '"':
		if decodeString(data, &p.text) {
			p.kind = shapeString
		}
	case data[0] == '[':
		// The first element decides the array's type; a mixed array
		// fails to decode and stays shapeOther.
		var err error
		switch firstElem(data) {
		case '"':
			err = json.Unmarshal(data, &p.texts)
		case '[':
			err = json.Unmarshal(data, &p.batches)
		case ']':
			p.texts = []string{}
		default:
			err = json.Unmarshal(data, &p.tokens)
		}
		if err == nil {
			p.kind = shapeArray
		} else {
			*p = prompt{kind: shapeOther}
		}
	}
	return nil
}

// firstElem returns the first non-space byte after an array's '['.
func firstElem(data []byte) byte {
	for _, c := range data[1:] {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return c
	}
	return 0
}

// responsesBody is a /v1/responses body with input as an array of items.
// An input that is a string (or anything but an array of objects) surfaces
// as an UnmarshalTypeError on "input"; Parse then decodes responsesText.
type responsesBody struct {
	commonBody
	Instructions jsonText       `json:"instructions"`
	Input        []responseItem `json:"input"`
	// PreviousResponseID and Conversation name server-side state that
	// lives on the replica that made it.
	PreviousResponseID jsonText     `json:"previous_response_id"`
	Conversation       conversation `json:"conversation"`
}

// conversation is the Responses API's conversation field: an id string or
// an object with an id.
type conversation struct{ id string }

// UnmarshalJSON reads either form; anything else is no conversation.
func (c *conversation) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		c.id = s
		return nil
	}
	var o struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(b, &o) == nil {
		c.id = o.ID
	}
	return nil
}

// responsesText is the second look at a body whose input is not an array.
type responsesText struct {
	Input jsonText `json:"input"`
}

// responseItem is one input item: a message (with or without "type"), a
// function_call, a function_call_output, or any other item type, which
// renders its type and whichever of the fields below it has.
type responseItem struct {
	Type      jsonText `json:"type"`
	Role      jsonText `json:"role"`
	Content   content  `json:"content"`
	ID        jsonText `json:"id"`
	Name      jsonText `json:"name"`
	CallID    jsonText `json:"call_id"`
	Arguments jsonText `json:"arguments"`
	Output    jsonText `json:"output"`
	Summary   rawField `json:"summary"`
	Encrypted jsonText `json:"encrypted_content"`
}

// kind returns the item's type, "message" for a typeless item with a role.
func (it *responseItem) kind() string {
	if t := it.Type.str(); t != "" || it.Role.kind == shapeAbsent {
		return t
	}
	return "message"
}
