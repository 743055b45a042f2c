package policies

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"sync"

	"github.com/llmroute/caddy-llmroute/internal/jsonscan"
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
// fast paths read the canonical form as they meet the tools (readTools),
// and toolsFast reads it in one scan otherwise; anything that scan does
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
	// paramsTight and inputTight say that the fast scan found Parameters
	// and InputSchema tight (jsonscan.SkipTight): they are their own
	// compact form.
	paramsTight, inputTight bool
}

// function is chat's nested function definition.
type function struct {
	Name        jsonText `json:"name"`
	Description jsonText `json:"description"`
	Parameters  rawField `json:"parameters"`
	tight       bool     // as toolDef's paramsTight
}

// toolsCanonical returns the canonical form of the tools (and legacy
// functions), nil when there are none.
func toolsCanonical(c *commonBody) []byte {
	if len(c.Tools) == 0 && len(c.Functions) == 0 {
		return nil
	}
	if f := &c.canon[0]; f.ok && len(c.Functions) == 0 {
		if f.n == 0 {
			return nil
		}
		return f.b // read by a fast path on its way
	}
	// The canonical form is at most the tools' size plus a few bytes per
	// tool and field.
	n, out := c.canon[0].append(make([]byte, 0, len(c.Tools)+len(c.Functions)+256), c.Tools)
	m, out := c.canon[1].append(out, c.Functions)
	if n+m == 0 {
		return nil
	}
	return out
}

// toolsForm is the canonical form of a tools value as a fast path read it
// (ok), with the number of tools it held.
type toolsForm struct {
	n      int
	b      []byte
	ok     bool
	pooled *[]byte // b's buffer, from toolBufs
}

// append appends the canonical form of raw: f's when it was read, else
// appendTools'.
func (f *toolsForm) append(out, raw []byte) (int, []byte) {
	if f.ok {
		return f.n, append(out, f.b...)
	}
	return appendTools(out, raw)
}

// renderTools writes the tools' canonical form into the chain, as one
// "tools" turn.
func renderTools(w *sink, tools []byte) {
	if len(tools) == 0 {
		return
	}
	header(w, "tools")
	w.Write(tools)
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

// toolsFast is appendTools in one scan of raw (readTools); it declines
// (ok false) what readTools declines and anything after the array.
func toolsFast(out []byte, raw []byte) (n int, _ []byte, ok bool) {
	s := newReader(raw)
	n, out, ok = s.readTools(out)
	return n, out, ok && s.End()
}

// toolsValue reads a tools (or functions) value into r and, when
// readTools reads it (or toolsCache has it), its canonical form into f,
// so that the keys need not scan it again; a value readTools declines is
// only validated, and toolsCanonical reads it by the decoder.
func (s *reader) toolsValue(r *rawField, f *toolsForm) bool {
	s.WS()
	start := s.Pos()
	if s.Peek() == '[' {
		slot := toolsBucketOf(s.b, start)
		if e := cachedTools(slot, s.b, start); e != nil {
			s.Scanner = jsonscan.At(s.b, start+len(e.raw))
			*r = s.b[start:s.Pos()]
			*f = toolsForm{n: e.n, b: e.canon, ok: true}
			return true
		}
		t := *s
		buf := toolBufs.Get().(*[]byte)
		if n, out, ok := t.readTools((*buf)[:0]); ok {
			*s = t
			*r = s.b[start:s.Pos()]
			*buf = out
			*f = toolsForm{n: n, b: out, ok: true, pooled: buf}
			rememberTools(slot, *r, out, n)
			return true
		}
		toolBufs.Put(buf)
	}
	return s.rawValue(r)
}

// toolBufs pools the fast paths' canonical forms of tools: coding agents
// send tens of kilobytes of tools with every request, and nothing of the
// form outlives the keys (the chain copies what it hashes).
var toolBufs = sync.Pool{New: func() any { b := make([]byte, 0, 32<<10); return &b }}

// release gives the canonical forms read by a fast path back to
// toolBufs, once the keys are made.
func (c *commonBody) release() {
	for i := range c.canon {
		if f := &c.canon[i]; f.pooled != nil {
			if cap(*f.pooled) <= 1<<20 {
				*f.pooled = (*f.pooled)[:0]
				toolBufs.Put(f.pooled)
			}
			*f = toolsForm{}
		}
	}
}

// readTools reads a tools array, appending its canonical form to out, and
// returns how many tools it held; it declines (ok false) a value that is
// not an array, duplicate or case-folded field names, and a name,
// description, type or function of another JSON type than expected, all
// of which toolsSlow reads.
func (s *reader) readTools(out []byte) (n int, _ []byte, ok bool) {
	var fn function // every tool's function in turn: appendTo is done with it
	ok = s.Array(func() bool {
		n++
		if s.Peek() != '{' {
			v, ok := s.Skip()
			out = appendOther(out, v)
			return ok
		}
		start := s.Pos()
		var td toolDef
		if !s.tool(&td, &fn) {
			return false
		}
		out = td.appendTo(out, s.b[start:s.Pos()])
		return true
	})
	return n, out, ok
}

const (
	tType = iota
	tName
	tDescription
	tParameters
	tInputSchema
	tFunction
)

var (
	toolNames     = []string{tType: "type", tName: "name", tDescription: "description", tParameters: "parameters", tInputSchema: "input_schema", tFunction: "function"}
	functionNames = []string{tName: "name", tDescription: "description", tParameters: "parameters"}
)

// tool reads one tool object into td, its function (if any) into fn.
func (s *reader) tool(td *toolDef, fn *function) bool {
	return s.Object(toolNames, func(i int) bool {
		switch i {
		case tType:
			return s.textField(&td.Type)
		case tName:
			return s.textField(&td.Name)
		case tDescription:
			return s.lazyText(&td.Description)
		case tParameters:
			return s.schema(&td.Parameters, &td.paramsTight)
		case tInputSchema:
			return s.schema(&td.InputSchema, &td.inputTight)
		case tFunction:
			return s.function(&td.Function, fn)
		}
		return false
	})
}

// schema reads a tool's schema into r (null as absent), and whether it
// is tight (jsonscan.SkipTight: its own compact form).
func (s *reader) schema(r *rawField, tight *bool) bool {
	v, t, ok := s.SkipTight()
	if ok && !isNull(v) {
		*r, *tight = v, t
	}
	return ok
}

// function reads chat's function object (or null) into fn, and points f
// at it.
func (s *reader) function(f **function, fn *function) bool {
	if s.Lit("null") {
		return true
	}
	*fn = function{}
	*f = fn
	return s.Object(functionNames, func(i int) bool {
		switch i {
		case tName:
			return s.textField(&fn.Name)
		case tDescription:
			return s.lazyText(&fn.Description)
		case tParameters:
			return s.schema(&fn.Parameters, &fn.tight)
		}
		return false
	})
}

// appendTo appends the canonical form of the tool td was read from (raw).
func (t *toolDef) appendTo(out []byte, raw []byte) []byte {
	name, desc, schema, tight, ok := t.function()
	if !ok {
		return appendOther(out, raw)
	}
	out = append(out, toolFunction)
	out = appendText(out, name)
	out = appendText(out, desc)
	if tight {
		return appendField(out, schema)
	}
	return appendCompactField(out, schema)
}

// function returns the tool's name, description and schema, and whether
// the schema is known to be tight, when it is a function tool in any
// API's shape.
func (t *toolDef) function() (name, desc *jsonText, schema []byte, tight, ok bool) {
	if f := t.Function; f != nil && f.Name.kind == shapeString {
		return &f.Name, &f.Description, f.Parameters, f.tight, true
	}
	if t.Name.kind != shapeString {
		return nil, nil, nil, false, false
	}
	switch t.Type.kind {
	case shapeAbsent:
	case shapeString:
		// Anthropic's client tools may say "custom"; OpenAI's custom tools
		// (free-form input, no schema) are not functions.
		if typ := t.Type.s; typ != "function" && (typ != "custom" || t.InputSchema == nil) {
			return nil, nil, nil, false, false
		}
	default:
		return nil, nil, nil, false, false
	}
	if t.Parameters != nil {
		return &t.Name, &t.Description, t.Parameters, t.paramsTight, true
	}
	return &t.Name, &t.Description, t.InputSchema, t.inputTight, true
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
		if t.raw != nil { // a lazy literal (reader.lazyText): decoded here
			out = binary.LittleEndian.AppendUint64(out, uint64(t.n))
			return appendUnquoted(out, t.raw)
		}
		out = binary.LittleEndian.AppendUint64(out, uint64(len(t.s)))
		return append(out, t.s...)
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
