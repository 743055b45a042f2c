package policies

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// Tools hash into the leading key in one canonical form, whichever API
// carried them, so that a client switching API keeps its prefix key: chat's
// {"type":"function","function":{name, description, parameters}}, the
// Responses API's {"type":"function", name, description, parameters},
// Anthropic's {name, description, input_schema} and chat's legacy
// functions all reduce to (name, description, schema), the schema
// compacted (its key order stays the client's). Those three are what an
// engine's template renders into the prompt; what never reaches it
// (cache_control, strict) is left out. A tool of any other kind (a server
// tool such as web_search) hashes as its compacted JSON, and tools that
// are not an array hash as sent. No tools, null and an empty array hash
// alike.
//
// Coding agents send tens of kilobytes of tools with every request, so the
// canonical form is read in one scan (toolsFast); anything that scan does
// not read exactly as encoding/json would falls back to the decoder.

// Markers that start each tool's canonical form, so that a function tool
// and another tool never hash alike.
const (
	toolFunction byte = 1
	toolOther    byte = 2
	toolsNotList byte = 3
)

// toolDef is the part of one tool the canonical form reads.
type toolDef struct {
	Type        jsonText  `json:"type"`
	Name        jsonText  `json:"name"`
	Description jsonText  `json:"description"`
	Parameters  rawField  `json:"parameters"`
	InputSchema rawField  `json:"input_schema"`
	Function    *function `json:"function"`
}

// function is chat's nested function definition.
type function struct {
	Name        jsonText `json:"name"`
	Description jsonText `json:"description"`
	Parameters  rawField `json:"parameters"`
}

// toolsCanonical returns the canonical form of the tools (and legacy
// functions), nil when there are none.
func toolsCanonical(c *commonBody) []byte {
	if len(c.Tools) == 0 && len(c.Functions) == 0 {
		return nil
	}
	// The canonical form is at most the tools' size plus a few bytes per
	// tool and field.
	n, out := appendTools(make([]byte, 0, len(c.Tools)+len(c.Functions)+256), c.Tools)
	m, out := appendTools(out, c.Functions)
	if n+m == 0 {
		return nil
	}
	return out
}

// toolsHash hashes tools (and legacy functions) in their canonical form.
func toolsHash(c *commonBody) uint64 { return xxhash.Sum64(toolsCanonical(c)) }

// noTools is the tools part of every leading key: tools are rendered into
// the block chain right after the leading system run (renderTools), where
// chat templates put them (Qwen's and Hermes-style ones render them after
// the system prompt, inside the system turn), so that requests with one
// system prompt and different tools share a home and the blocks of the
// system prompt, as the engine shares those tokens, and part where the
// tools begin. It is the hash of no tools, so the keys of requests without
// tools did not change when tools left the leading key.
var noTools = xxhash.Sum64(nil)

// renderTools writes the tools' canonical form into the chain, as one
// "tools" turn.
func renderTools(w *sink, tools []byte) {
	if len(tools) == 0 {
		return
	}
	header(w, "tools")
	w.WriteString(string(tools))
	w.WriteString(endTag)
}

// appendTools appends the canonical form of one tools value to out and
// returns how many tools it held (1 for a value that is not an array).
func appendTools(out []byte, raw []byte) (int, []byte) {
	if len(raw) == 0 {
		return 0, out
	}
	if n, o, ok := toolsFast(out, raw); ok {
		return n, o
	}
	return toolsSlow(out, raw)
}

// toolsSlow is appendTools by encoding/json.
func toolsSlow(out []byte, raw []byte) (int, []byte) {
	var list []json.RawMessage
	if t := bytes.TrimLeft(raw, " \t\r\n"); len(t) == 0 || t[0] != '[' || json.Unmarshal(raw, &list) != nil {
		out = append(out, toolsNotList)
		return 1, appendField(out, raw)
	}
	for _, t := range list {
		var td toolDef
		if len(t) > 0 && t[0] == '{' && json.Unmarshal(t, &td) == nil {
			out = td.appendTo(out, t)
		} else {
			out = appendOther(out, t)
		}
	}
	return len(list), out
}

// toolsFast is appendTools in one scan of raw; it declines (ok false) a
// value that is not an array, duplicate or case-folded field names, and
// a name, description, type or function of another JSON type than
// expected, all of which toolsSlow reads.
func toolsFast(out []byte, raw []byte) (n int, _ []byte, ok bool) {
	s := &fscan{b: raw}
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '[' {
		return 0, nil, false
	}
	s.i++
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		s.ws()
		return 0, out, s.i == len(s.b)
	}
	for {
		s.ws()
		if s.i >= len(s.b) {
			return 0, nil, false
		}
		start := s.i
		if s.b[s.i] != '{' {
			v, ok := s.skip()
			if !ok {
				return 0, nil, false
			}
			out = appendOther(out, v)
		} else {
			var td toolDef
			if !s.tool(&td) {
				return 0, nil, false
			}
			out = td.appendTo(out, s.b[start:s.i])
		}
		n++
		more, ok := s.next(']')
		if !ok {
			return 0, nil, false
		}
		if !more {
			break
		}
	}
	s.ws()
	return n, out, s.i == len(s.b)
}

// tool scans one tool object into td.
func (s *fscan) tool(td *toolDef) bool {
	return s.object(toolFields, func(k string) bool {
		switch k {
		case "type":
			return s.textField(&td.Type)
		case "name":
			return s.textField(&td.Name)
		case "description":
			return s.textField(&td.Description)
		case "parameters":
			return s.rawValue(&td.Parameters)
		case "input_schema":
			return s.rawValue(&td.InputSchema)
		case "function":
			return s.function(&td.Function)
		}
		_, ok := s.skip()
		return ok
	})
}

var (
	toolFields     = []string{"type", "name", "description", "parameters", "input_schema", "function"}
	functionFields = []string{"name", "description", "parameters"}
)

// function scans chat's function object (or null).
func (s *fscan) function(f **function) bool {
	if s.lit("null") {
		return true
	}
	fn := &function{}
	*f = fn
	return s.object(functionFields, func(k string) bool {
		switch k {
		case "name":
			return s.textField(&fn.Name)
		case "description":
			return s.textField(&fn.Description)
		case "parameters":
			return s.rawValue(&fn.Parameters)
		}
		_, ok := s.skip()
		return ok
	})
}

// textField scans a string (or null) into t; any other value declines.
func (s *fscan) textField(t *jsonText) bool {
	if s.lit("null") {
		*t = jsonText{}
		return true
	}
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return false
	}
	lit, esc, ok := s.str()
	if !ok {
		return false
	}
	v, ok := text(lit, esc)
	*t = jsonText{s: v, kind: shapeString}
	return ok
}

// lazyText is textField for text that is mostly rendered: an escaped
// string is kept as its literal (jsonText.raw), decoded as it renders, or
// only counted past the block cap.
func (s *fscan) lazyText(t *jsonText) bool {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return s.textField(t)
	}
	v, lit, n, ok := s.lazyString()
	if lit != nil {
		*t = jsonText{raw: lit, n: int32(n), kind: shapeString}
	} else {
		*t = jsonText{s: v, kind: shapeString}
	}
	return ok
}

// lazyString scans a string at s.i (which must be '"'): its text when it
// has no escapes (the body's own bytes, no copy), else its literal and
// decoded length, to be decoded as it renders (sink.writeLit).
func (s *fscan) lazyString() (text string, lit []byte, n int, ok bool) {
	l, n, ok := s.strLen()
	if !ok {
		return "", nil, 0, false
	}
	if n != len(l)-2 {
		return "", l, n, true
	}
	v := l[1 : len(l)-1]
	return unsafe.String(unsafe.SliceData(v), len(v)), nil, 0, true
}

// rawValue scans any value into r (null as absent), without copying it.
func (s *fscan) rawValue(r *rawField) bool {
	v, ok := s.skip()
	if ok && !isNull(v) {
		*r = v
	}
	return ok
}

// appendTo appends the canonical form of the tool td was read from (raw).
func (t *toolDef) appendTo(out []byte, raw []byte) []byte {
	name, desc, schema, ok := t.function()
	if !ok {
		return appendOther(out, raw)
	}
	out = append(out, toolFunction)
	out = appendText(out, name)
	out = appendText(out, desc)
	return appendCompactField(out, schema)
}

// function returns the tool's name, description and schema when it is a
// function tool in any API's shape.
func (t *toolDef) function() (name, desc *jsonText, schema []byte, ok bool) {
	if f := t.Function; f != nil && f.Name.kind == shapeString {
		return &f.Name, &f.Description, f.Parameters, true
	}
	if t.Name.kind != shapeString {
		return nil, nil, nil, false
	}
	switch t.Type.kind {
	case shapeAbsent:
	case shapeString:
		// Anthropic's client tools may say "custom"; OpenAI's custom tools
		// (free-form input, no schema) are not functions.
		if typ := t.Type.s; typ != "function" && (typ != "custom" || t.InputSchema == nil) {
			return nil, nil, nil, false
		}
	default:
		return nil, nil, nil, false
	}
	schema = t.Parameters
	if schema == nil {
		schema = t.InputSchema
	}
	return &t.Name, &t.Description, schema, true
}

// appendOther appends a tool of another kind: its compacted JSON.
func appendOther(out []byte, raw []byte) []byte {
	return appendCompactField(append(out, toolOther), raw)
}

// appendField appends p with its length, so that fields cannot shift.
func appendField(out []byte, p []byte) []byte {
	out = binary.LittleEndian.AppendUint64(out, uint64(len(p)))
	return append(out, p...)
}

// appendText appends a text field: its string, or the raw JSON of another
// value (absent and "" alike).
func appendText(out []byte, t *jsonText) []byte {
	switch t.kind {
	case shapeString:
		v := t.str()
		out = binary.LittleEndian.AppendUint64(out, uint64(len(v)))
		return append(out, v...)
	case shapeOther:
		return appendField(out, t.raw)
	}
	return appendField(out, nil)
}

// appendCompactField appends raw JSON compacted, with its length.
func appendCompactField(out []byte, raw []byte) []byte {
	at := len(out)
	out = appendCompact(binary.LittleEndian.AppendUint64(out, 0), raw)
	binary.LittleEndian.PutUint64(out[at:], uint64(len(out)-at-8))
	return out
}

// appendCompact appends raw JSON without the spaces outside its strings
// (what json.Compact does to valid JSON, without validating it again).
func appendCompact(out []byte, raw []byte) []byte {
	inStr, esc := false, false
	from := 0
	for i, c := range raw {
		switch {
		case inStr:
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
		case c == '"':
			inStr = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			out = append(out, raw[from:i]...)
			from = i + 1
		}
	}
	return append(out, raw[from:]...)
}
