// Package agentbody builds request bodies shaped like a coding agent's
// (Claude Code, Codex, OpenCode): a long system prompt, tens of tool
// definitions, and a history of tool calls whose results are source files
// (a line break, a tab or a quote every 20 bytes or so: escapes all
// through), as an Anthropic /v1/messages body or an OpenAI chat body with
// tools. The system prompt and the tools are a tenant's (bodies of one
// tenant share them, as an agent's turns do); the history is the body's
// own. It is for benchmarks and differential tests: the same spec always
// gives the same bytes.
package agentbody

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
)

// Spec says what body to build.
type Spec struct {
	// Size is the body's length to reach, in bytes: the history grows
	// until the body is about that long (never shorter than the system
	// prompt and tools alone).
	Size int
	// Tools is the number of tool definitions.
	Tools int
	// Tenant picks the system prompt and the tools.
	Tenant int
	// Seed picks the history.
	Seed uint64
	// Stream sets "stream".
	Stream bool
	// Model is the model field ("agent-model" when empty).
	Model string
}

var vocab = strings.Fields(`the of and to in is you that it was for on are as with they at be this have from or one had by
word but not what all were we when your can said there use an each which do how their if will up other about out many then them
these so some would make like into time has look two more write go see number no way could people than first been call who its
now find long down day did get come made may part cache prefix token model replica route stream chunk block hash file read edit`)

func words(r *rand.Rand, n int) string {
	var b strings.Builder
	for b.Len() < n {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(vocab[r.IntN(len(vocab))])
	}
	return b.String()[:n]
}

// sourceLines are the lines tool results are made of: Go source, so that
// a JSON body carrying them has an escape every 20 bytes or so, as
// agents' bodies do.
var sourceLines = strings.Split(`func (s *server) handle(w http.ResponseWriter, r *http.Request) {
	if r.Method != "POST" {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	var req struct {
		Path string `+"`json:\"path\"`"+`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	fmt.Fprintf(w, "read %q\n", req.Path)
}`, "\n")

// Source returns lines of Go source drawn from r, newline-ended, until
// there are at least n bytes of them: the text of a tool result.
func Source(r *rand.Rand, n int) string {
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(sourceLines[r.IntN(len(sourceLines))])
		b.WriteByte('\n')
	}
	return b.String()
}

// tool is one tool definition in the form every API shares.
type tool struct {
	name, desc string
	schema     map[string]any
}

// tenant is what a tenant's bodies share.
type tenant struct {
	system string
	tools  []tool
}

var toolNames = []string{"Bash", "Read", "Edit", "Write", "Glob", "Grep", "TodoWrite", "WebFetch", "NotebookEdit", "Task"}

func tenantOf(s Spec) tenant {
	r := rand.New(rand.NewPCG(uint64(s.Tenant), 0x5eed))
	t := tenant{system: fmt.Sprintf("You are the coding agent of tenant %d.\n\n", s.Tenant) +
		strings.ReplaceAll(words(r, 6<<10), " the ", "\n- the ")}
	for i := range s.Tools {
		name := fmt.Sprintf("mcp__tenant%d__%s_%d", s.Tenant, vocab[r.IntN(len(vocab))], i)
		if i < len(toolNames) {
			name = toolNames[i]
		}
		props := map[string]any{}
		for j := range 2 + r.IntN(3) {
			props[fmt.Sprintf("%s_%d", vocab[r.IntN(len(vocab))], j)] = map[string]any{
				"type": []string{"string", "integer", "boolean"}[r.IntN(3)], "description": words(r, 30+r.IntN(40))}
		}
		t.tools = append(t.tools, tool{name: name,
			desc:   words(r, 100+r.IntN(200)) + "\n\nUsage:\n- \"" + words(r, 40) + "\"\n",
			schema: map[string]any{"type": "object", "properties": props, "required": []string{}, "additionalProperties": false}})
	}
	return t
}

// round is one tool call and its result.
type round struct {
	id, name, text, path, result string
}

// history returns the rounds that take the body from base bytes to size.
func history(s Spec, base int) (task string, rounds []round) {
	r := rand.New(rand.NewPCG(uint64(s.Tenant), s.Seed))
	task = fmt.Sprintf("Task %d: fix the handler in pkg/%s and run the tests.", s.Seed, vocab[r.IntN(len(vocab))])
	names := max(1, min(s.Tools, len(toolNames)))
	for n, i := base+len(task), 0; n < s.Size; i++ {
		rd := round{id: fmt.Sprintf("toolu_%08x_%02d", r.Uint32(), i), name: toolNames[r.IntN(names)%len(toolNames)],
			text: "Let me look at " + words(r, 20+r.IntN(40)) + ".", path: fmt.Sprintf("pkg/%s/%s.go", vocab[r.IntN(len(vocab))], vocab[r.IntN(len(vocab))])}
		// Escaping adds about a tenth; each round's fields about 250 bytes.
		rd.result = Source(r, max(64, min((s.Size-n)*9/10-250, 1<<10+r.IntN(3<<10))))
		rounds = append(rounds, rd)
		n += len(rd.result)*11/10 + len(rd.text) + 250
	}
	return task, rounds
}

func (s Spec) model() string {
	if s.Model == "" {
		return "agent-model"
	}
	return s.Model
}

// kv is an ordered JSON object (field order as agents send them).
type kv []struct {
	k string
	v any
}

func (o kv) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	b.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, v := marshal(f.k), marshal(f.v)
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return []byte(b.String()), nil
}

func obj(kvs ...any) kv {
	o := make(kv, 0, len(kvs)/2)
	for i := 0; i+1 < len(kvs); i += 2 {
		o = append(o, struct {
			k string
			v any
		}{kvs[i].(string), kvs[i+1]})
	}
	return o
}

// marshal is json.Marshal without HTML escapes (agents' clients write
// '&' and '<' as they are).
func marshal(v any) []byte {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		panic(err) // only values of this package's own making
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// Messages returns an Anthropic /v1/messages body: system as text blocks
// with cache_control, tools with input_schema, and rounds of an assistant
// text and tool_use followed by the user's tool_result (the file) and a
// text block.
func Messages(s Spec) []byte {
	t := tenantOf(s)
	tools := make([]any, 0, len(t.tools))
	for _, tl := range t.tools {
		tools = append(tools, obj("name", tl.name, "description", tl.desc, "input_schema", tl.schema))
	}
	ephemeral := obj("type", "ephemeral")
	system := []any{obj("type", "text", "text", "You are Claude Code, Anthropic's official CLI for Claude."),
		obj("type", "text", "text", t.system, "cache_control", ephemeral)}
	head := obj("model", s.model(), "max_tokens", 32000, "stream", s.Stream, "system", system, "tools", tools)
	task, rounds := history(s, len(marshal(head)))
	msgs := []any{obj("role", "user", "content", []any{obj("type", "text", "text", task)})}
	for _, rd := range rounds {
		msgs = append(msgs,
			obj("role", "assistant", "content", []any{obj("type", "text", "text", rd.text),
				obj("type", "tool_use", "id", rd.id, "name", rd.name, "input", obj("file_path", rd.path))}),
			obj("role", "user", "content", []any{obj("type", "tool_result", "tool_use_id", rd.id, "content", rd.result),
				obj("type", "text", "text", "Go on.", "cache_control", ephemeral)}))
	}
	return marshal(append(head[:2:2], append(kv{{"messages", msgs}}, head[2:]...)...))
}

// Chat returns an OpenAI /v1/chat/completions body with the same
// conversation: a system message, tools as functions, and rounds of an
// assistant message with a tool call followed by the tool message (the
// file) and a user message.
func Chat(s Spec) []byte {
	t := tenantOf(s)
	tools := make([]any, 0, len(t.tools))
	for _, tl := range t.tools {
		tools = append(tools, obj("type", "function", "function", obj("name", tl.name, "description", tl.desc, "parameters", tl.schema)))
	}
	head := obj("model", s.model(), "max_tokens", 32000, "stream", s.Stream, "tools", tools)
	task, rounds := history(s, len(marshal(head))+len(t.system))
	msgs := []any{obj("role", "system", "content", t.system), obj("role", "user", "content", task)}
	for _, rd := range rounds {
		args := string(marshal(obj("file_path", rd.path)))
		msgs = append(msgs,
			obj("role", "assistant", "content", rd.text, "tool_calls", []any{obj("id", rd.id, "type", "function", "function", obj("name", rd.name, "arguments", args))}),
			obj("role", "tool", "tool_call_id", rd.id, "content", rd.result),
			obj("role", "user", "content", "Go on."))
	}
	return marshal(append(head[:2:2], append(kv{{"messages", msgs}}, head[2:]...)...))
}
