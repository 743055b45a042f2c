package policies

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// parseBothResponses is parseBoth for /v1/responses.
func parseBothResponses(t *testing.T, body []byte, cfg ParseConfig) (accepted bool) {
	t.Helper()
	return parseBothAt(t, pathResponses, fastResponses, body, cfg)
}

// fastResponsesBodies are bodies the fast path is for, as Codex-style
// agents send them: instructions, tools, messages with input_text parts,
// function calls and their outputs, reasoning items, a string input,
// previous_response_id, conversation as an id or an object, escapes. It
// must accept every one.
var fastResponsesBodies = []string{
	`{"model":"m","input":"hello"}`,
	`{"model":"m","instructions":"You are a coding agent.","input":"fix \"it\"\n","previous_response_id":"resp_1"}`,
	`{"model":"m","instructions":"I","stream":true,"store":false,"include":["reasoning.encrypted_content"],"prompt_cache_key":"sess-1","tools":[{"type":"function","name":"shell","description":"Run a command.","parameters":{"type":"object","properties":{"cmd":{"type":"array","items":{"type":"string"}}}},"strict":false}],"input":[{"type":"message","role":"developer","content":[{"type":"input_text","text":"rules"}]},{"type":"message","role":"user","content":[{"type":"input_text","text":"list files"}]},{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"think"}],"encrypted_content":"gAAAA"},{"type":"function_call","id":"fc_1","call_id":"call_1","name":"shell","arguments":"{\"cmd\":[\"ls\"]}"},{"type":"function_call_output","call_id":"call_1","output":"a.go\nb.go\n"},{"type":"message","role":"assistant","id":"msg_1","content":[{"type":"output_text","text":"Two files.","annotations":[]}]},{"role":"user","content":"next"}]}`,
	`{"model":"m","conversation":"conv_1","input":[{"role":"user","content":[{"type":"input_text","text":"q"},{"type":"input_image","image_url":"data:image/png;base64,iVBO","detail":"auto"},{"type":"input_file","file_id":"file_1"}]}]}`,
	`{"model":"m","conversation":{"id":"conv_2","x":1},"input":[{"role":"system","content":"s"},{"role":"user","content":"u"}]}`,
	`{"model":"m","conversation":null,"previous_response_id":null,"instructions":null,"input":[{"type":"message","role":"user","content":null},{"type":"item_reference","id":"r1"}]}`,
	` { "model" : "m" , "input" : [ { "role" : "user" , "content" : "caf\u00e9 \ud83d\ude00" } ] } `,
	// Escaped outputs and texts past the block cap of the 1 KiB test config.
	`{"model":"m","instructions":"` + strings.Repeat("rules. ", 200) + `","input":[{"type":"function_call","call_id":"c","name":"cat","arguments":"{\"p\":1}"},{"type":"function_call_output","call_id":"c","output":"a\n\tb\n"},{"role":"user","content":[{"type":"input_text","text":"go \"on\"\n"}]}]}`,
}

func TestFastResponsesMatchesGeneral(t *testing.T) {
	cfg := ParseConfig{Deployment: "d", BlockSize: 16, MaxBlocks: 64}
	odd := checkFixedBodies(t, parseBothResponses, cfg, fastResponsesBodies, []string{
		`{"model":"m","input":null}`,
		`{"model":"m","input":5}`,
		`{"model":"m","input":{"role":"user"}}`,
		`{"model":"m","input":[1]}`,
		`{"model":"m","input":[]}`,
		`{"model":"m"}`,
		`{"model":"m","input":"a","input":"b"}`,
		`{"model":"m","Input":"a"}`,
		`{"model":"m","input":[{"role":"user","content":"q","Role":"x"}]}`,
		`{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"o"}]}]}`,
		`{"model":"m","input":[{"type":5,"content":"q"}]}`,
		`{"model":"m","input":[{"role":"user","content":5}]}`,
		`{"model":"m","conversation":5,"input":"q"}`,
		`{"model":"m","conversation":{"id":5},"input":"q"}`,
		`{"model":"m","conversation":{"ID":"c"},"input":"q"}`,
		`{"model":"m","previous_response_id":7,"input":"q"}`,
		`{"model":"","input":"q"}`,
		`{"model":"m","input":"q"} x`,
		`{"model":"m","input":[{"role":"user","content":"q"},]}`,
		"{\"model\":\"m\",\"input\":\"a\x01b\"}",
	})
	// Random agent-shaped bodies (all must be accepted), and truncations
	// and single-byte mutations of them.
	r := rand.New(rand.NewPCG(7, 8))
	str := func() string { return randLiteral(r, literalPieces, 20) }
	const iters = 300
	var whole int
	var d damaged
	for iter := 0; iter < iters; iter++ {
		var sb strings.Builder
		fmt.Fprintf(&sb, `{"model":"m%d","stream":%v,"instructions":%s,"input":[`, iter%3, iter%2 == 0, str())
		for i := range 1 + r.IntN(5) {
			if i > 0 {
				sb.WriteString(",")
			}
			switch r.IntN(5) {
			case 0:
				fmt.Fprintf(&sb, `{"type":"function_call","call_id":"c%d","name":"shell","arguments":%s}`, i, str())
			case 1:
				fmt.Fprintf(&sb, `{"type":"function_call_output","call_id":"c%d","output":%s}`, i, str())
			case 2:
				fmt.Fprintf(&sb, `{"type":"reasoning","summary":[{"type":"summary_text","text":%s}],"encrypted_content":"e"}`, str())
			case 3:
				fmt.Fprintf(&sb, `{"role":"user","content":%s}`, str())
			default:
				fmt.Fprintf(&sb, `{"type":"message","role":"assistant","content":[{"type":"output_text","text":%s}]}`, str())
			}
		}
		sb.WriteString(`],"store":false}`)
		body := []byte(sb.String())
		if parseBothResponses(t, body, cfg) {
			whole++
		} else {
			t.Errorf("fast path declined a well-formed generated body: %q", body)
		}
		d.try(r, body, 5, func(b []byte) bool { return parseBothResponses(t, b, cfg) })
	}
	t.Logf("fast path accepted %d/%d generated bodies, %d/%d truncations, %d/%d mutations", whole, iters, d.cutsAccepted, d.cuts, d.mutsAccepted, d.muts)
	d.check(t)
	d.exact(t, 34346, 34346, 17171)
	if odd != 0 {
		t.Errorf("fast path accepted %d odd bodies, want 0", odd)
	}
}

// FuzzFastResponses checks, for any body, that an accepted body parses
// exactly as the general path parses it and that a declined one still
// gets the general path's answer; each seed it is meant for must be
// accepted.
func FuzzFastResponses(f *testing.F) {
	fuzzFastPath(f, parseBothResponses, fastResponsesBodies)
}

// agentResponsesBody is a Codex-style /v1/responses body, about 100 KiB:
// long instructions, tools, then 20 rounds of a function call and its
// output carrying a source file (escapes all through).
func agentResponsesBody() []byte {
	file := strings.Repeat("func (s *server) handle(w http.ResponseWriter, r *http.Request) {\n\tif r.Method != \"POST\" {\n\t\treturn\n\t}\n}\n", 40)
	items := []map[string]any{{"type": "message", "role": "user", "content": []map[string]any{{"type": "input_text", "text": "fix the handler"}}}}
	for i := range 20 {
		id := fmt.Sprintf("call_%02d", i)
		items = append(items,
			map[string]any{"type": "reasoning", "summary": []any{}, "encrypted_content": strings.Repeat("gAAAAB", 40)},
			map[string]any{"type": "function_call", "call_id": id, "name": "shell", "arguments": fmt.Sprintf(`{"cmd":["cat","pkg/f%d.go"]}`, i)},
			map[string]any{"type": "function_call_output", "call_id": id, "output": file})
	}
	b, _ := json.Marshal(map[string]any{"model": "m", "stream": true, "store": false, "instructions": strings.Repeat("Follow the repository's rules. ", 300),
		"tools": []map[string]any{{"type": "function", "name": "shell", "parameters": map[string]any{"type": "object"}}}, "input": items})
	return b
}

// BenchmarkParseAgentResponses is Parse of agentResponsesBody by the fast
// path; BenchmarkParseGeneralAgentResponses by encoding/json.
func BenchmarkParseAgentResponses(b *testing.B) {
	benchmarkFastPath(b, pathResponses, fastResponses, agentResponsesBody(), true)
}
func BenchmarkParseGeneralAgentResponses(b *testing.B) {
	benchmarkFastPath(b, pathResponses, fastResponses, agentResponsesBody(), false)
}
