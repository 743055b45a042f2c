package policies

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/llmroute/caddy-llmroute/internal/agentbody"
)

// parseBothMessages is parseBoth for /v1/messages.
func parseBothMessages(t *testing.T, body []byte, cfg ParseConfig) (accepted bool) {
	t.Helper()
	return parseBothAt(t, pathMessages, fastMessages, body, cfg)
}

// fastMessagesBodies are bodies the fast path is for, as coding agents
// send them: system as a string or text blocks with cache_control, tools,
// text, tool_use and tool_result blocks (results as strings and as
// blocks), images by base64 and by URL, thinking, documents, escapes,
// unknown fields. It must accept every one.
var fastMessagesBodies = []string{
	`{"model":"m","max_tokens":64,"system":"You are terse.","messages":[{"role":"user","content":"hello"}]}`,
	`{"model":"m","system":[{"type":"text","text":"You are Claude Code.","cache_control":{"type":"ephemeral"}},{"type":"text","text":"Be careful."}],"messages":[{"role":"user","content":[{"type":"text","text":"list the files"}]}]}`,
	`{"model":"m","stream":true,"metadata":{"user_id":"u-1"},"system":"S","messages":[{"role":"user","content":"q1"},{"role":"assistant","content":[{"type":"text","text":"a1"}]},{"role":"user","content":"q2"}]}`,
	`{"model":"m","system":"Use tools.","tools":[{"name":"read","description":"Read a file.","input_schema":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]},"cache_control":{"type":"ephemeral"}}],"tool_choice":{"type":"auto"},"messages":[{"role":"user","content":"read a.go"},{"role":"assistant","content":[{"type":"text","text":"Reading."},{"type":"tool_use","id":"toolu_1","name":"read","input":{"path":"a.go","n": [1, 2.5e3, -0.1, true, null]}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"package main\n\nfunc main() {\n\tprintln(\"hi\")\n}\n"},{"type":"text","text":"now fix it"}]}]}`,
	`{"model":"m","messages":[{"role":"user","content":"two"},{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f","input":{}},{"type":"tool_use","id":"b","name":"g","input":null}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":[{"type":"text","text":"r1"}],"is_error":false},{"type":"tool_result","tool_use_id":"b","content":[{"type":"text","text":"r2"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}]}]}]}`,
	`{"model":"m","messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}},{"type":"image","source":{"type":"url","url":"https://example.com/cat.jpg"}},{"type":"text","text":"what is this"}]}]}`,
	`{"model":"m","thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"think"},{"role":"assistant","content":[{"type":"thinking","thinking":"let me see","signature":"sig=="},{"type":"redacted_thinking","data":"abc"},{"type":"text","text":"done","citations":[{"type":"char_location"}]}]},{"role":"user","content":"again"}]}`,
	`{"model":"m","messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","media_type":"text/plain","data":"doc body"},"title":"T","context":"C"},{"type":"document","source":{"type":"file","file_id":"file_1"}},{"type":"text","text":"summarise"}]}]}`,
	`{"model":"m","prompt_cache_key":"k","cache_salt":"s","messages":[{"role":"user","content":"caf\u00e9 \ud83d\ude00 \n\t\"\\ \/"}]}`,
	` { "model" : "m" , "system" : null , "messages" : [ { "role" : "user" , "content" : [ { "type" : "text" , "text" : "q" } ] } ] } `,
	`{"messages":[{"content":"hi","role":"user"}],"model":"m","temperature":0.7,"stop_sequences":["\n\nHuman:"]}`,
	`{"model":"m","system":"` + strings.Repeat("rules. ", 200) + `","messages":[{"role":"user","content":"` + strings.Repeat(`a\n\t\"b\\`, 100) + `"},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"x\u00e9\ny\n"},{"type":"tool_result","tool_use_id":"u","content":"p\nq"},{"type":"tool_result","tool_use_id":"v","content":[{"type":"text","text":"f\n\tg\n"}]},{"type":"text","text":"r\"s\""}]}]}`,
	`{"model":"m","system":"` + strings.Repeat("a long shared system prompt. ", 200) + `","messages":[{"role":"user","content":[{"type":"text","text":"` + strings.Repeat(`line of code\n\t\"quoted\"\n`, 100) + `"}]}]}`,
}

func TestFastMessagesMatchesGeneral(t *testing.T) {
	cfg := ParseConfig{Deployment: "d", BlockSize: 16, MaxBlocks: 64}
	odd := checkFixedBodies(t, parseBothMessages, cfg, append(agentBodies(agentbody.Messages), fastMessagesBodies...), []string{
		`{"Model":"m","messages":[{"role":"user","content":"q"}]}`,
		`{"model":"m","messages":[{"Role":"user","content":"q"}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"Type":"text","text":"q"}]}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"q","TEXT":"r"}]}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"q","text":"r"}]}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":5}]}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"image","source":"x"}]}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"image","source":{"type":1}}]}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"text":"no type"}]}]}`,
		`{"model":"m","messages":[{"role":"user","content":[1]}]}`,
		`{"model":"m","messages":[{"role":"user","content":{"type":"text"}}]}`,
		`{"model":"m","messages":[{"role":"user","content":7}]}`,
		`{"model":"m","system":7,"messages":[{"role":"user","content":"q"}]}`,
		`{"model":"m","system":[{"type":"text","text":"s"}],"system":"t","messages":[{"role":"user","content":"q"}]}`,
		`{"model":"m","messages":[]}`,
		`{"model":"m","messages":[{"role":"user","content":"q"}],"messages":[{"role":"user","content":"r"}]}`,
		`{"model":"m","messages":"x"}`,
		`{"model":"m","messages":[1]}`,
		`{"model":"","messages":[{"role":"user","content":"q"}]}`,
		`{"model":"m","messages":[{"role":"","content":"q"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"q"}]} x`,
		`{"model":"m","messages":[{"role":"user","content":"q"},]}`,
		`{"model":"m","messages":[{"role":"user","content":"q"}]`,
		"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\x01b\"}]}",
		"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"caf\xc3\xa9 \xff\"}]}",
		`{"model":"m","messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":[{"type":"tool_result","content":[{"type":"tool_result","content":[{"type":"tool_result","content":[{"type":"tool_result","content":[{"type":"tool_result","content":[{"type":"tool_result","content":[{"type":"tool_result","content":[{"type":"tool_result","content":"deep"}]}]}]}]}]}]}]}]}]}]}`,
		`{"model":"m","stream":1,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}]}`,
	})
	// Random agent-shaped bodies, every one of which the fast path must
	// accept, and truncations and single-byte mutations of them, some of
	// which it accepts.
	r := rand.New(rand.NewPCG(5, 6))
	str := func() string { return randLiteral(r, literalPieces, 20) }
	blockOf := func(depth int) string {
		switch r.IntN(6) {
		case 0:
			return `{"type":"tool_use","id":` + str() + `,"name":"f","input":{"p":` + str() + `,"n":[1,true,null]}}`
		case 1:
			if depth == 0 {
				return `{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":` + str() + `}],"is_error":true}`
			}
			return `{"type":"tool_result","tool_use_id":"t","content":` + str() + `}`
		case 2:
			return `{"type":"image","source":{"type":"base64","media_type":"image/png","data":` + str() + `}}`
		case 3:
			return `{"type":"thinking","thinking":` + str() + `,"signature":"s"}`
		default:
			return `{"type":"text","text":` + str() + `,"cache_control":{"type":"ephemeral"}}`
		}
	}
	const iters = 300
	var whole int
	var d damaged
	for iter := 0; iter < iters; iter++ {
		var sb strings.Builder
		fmt.Fprintf(&sb, `{"model":"m%d","stream":%v,"max_tokens":64,"system":`, iter%3, iter%2 == 0)
		if r.IntN(2) == 0 {
			sb.WriteString(str())
		} else {
			sb.WriteString(`[{"type":"text","text":` + str() + `}]`)
		}
		sb.WriteString(`,"messages":[`)
		for i := range 1 + r.IntN(4) {
			if i > 0 {
				sb.WriteString(",")
			}
			role := []string{"user", "assistant"}[i%2]
			if r.IntN(3) == 0 {
				fmt.Fprintf(&sb, `{"role":%q,"content":%s}`, role, str())
				continue
			}
			var parts []string
			for range 1 + r.IntN(3) {
				parts = append(parts, blockOf(0))
			}
			fmt.Fprintf(&sb, `{"role":%q,"content":[%s]}`, role, strings.Join(parts, ","))
		}
		sb.WriteString(`],"temperature":0.7}`)
		body := []byte(sb.String())
		if parseBothMessages(t, body, cfg) {
			whole++
		} else {
			t.Errorf("fast path declined a well-formed generated body: %q", body)
		}
		d.try(r, body, 9, func(b []byte) bool { return parseBothMessages(t, b, cfg) })
	}
	t.Logf("fast path accepted %d/%d generated bodies, %d/%d truncations, %d/%d mutations", whole, iters, d.cutsAccepted, d.cuts, d.mutsAccepted, d.muts)
	d.check(t)
	d.exact(t, 29932, 29932, 13122)
	if odd != 4 {
		t.Errorf("fast path accepted %d odd bodies, want 4", odd)
	}
}

// FuzzFastMessages checks, for any body, that an accepted body parses
// exactly as the general path parses it and that a declined one still
// gets the general path's answer; each seed it is meant for must be
// accepted.
func FuzzFastMessages(f *testing.F) {
	fuzzFastPath(f, parseBothMessages, fastMessagesBodies,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"q","text":"r"}]}]}`)
}

// agentBlocksBody is a coding agent's /v1/messages body as Claude Code
// sends one, about 200 KiB: a system of text blocks with cache_control,
// 20 tools, and 20 turns of text, tool_use and tool_result blocks whose
// results are source files (a line break every 30 bytes or so, quotes,
// tabs: escapes all through).
func agentBlocksBody() []byte {
	var tools []map[string]any
	for i := range 20 {
		tools = append(tools, map[string]any{"name": fmt.Sprintf("tool_%d", i),
			"description":  strings.Repeat("Reads a file from the workspace and returns it. ", 20),
			"input_schema": map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}, "required": []string{"path"}}})
	}
	file := strings.Repeat("func (s *server) handle(w http.ResponseWriter, r *http.Request) {\n\tif r.Method != \"POST\" {\n\t\treturn\n\t}\n}\n", 40)
	var turns []map[string]any
	for i := range 20 {
		id := fmt.Sprintf("toolu_%02d", i)
		turns = append(turns,
			map[string]any{"role": "assistant", "content": []map[string]any{
				{"type": "text", "text": "Let me read the file."},
				{"type": "tool_use", "id": id, "name": "tool_1", "input": map[string]any{"path": fmt.Sprintf("pkg/f%d.go", i)}}}},
			map[string]any{"role": "user", "content": []map[string]any{
				{"type": "tool_result", "tool_use_id": id, "content": file},
				{"type": "text", "text": "Go on.", "cache_control": map[string]any{"type": "ephemeral"}}}})
	}
	body := map[string]any{"model": "m", "max_tokens": 8192, "stream": true, "tools": tools,
		"system": []map[string]any{
			{"type": "text", "text": "You are Claude Code, a coding agent."},
			{"type": "text", "text": strings.Repeat("Follow the repository's rules. ", 300), "cache_control": map[string]any{"type": "ephemeral"}}},
		"messages": append([]map[string]any{{"role": "user", "content": "fix the handler"}}, turns...)}
	b, _ := json.Marshal(body)
	return b
}

// BenchmarkParseAgentBlocks is Parse of agentBlocksBody by the fast path;
// BenchmarkParseGeneralAgentBlocks by encoding/json, for comparison.
func BenchmarkParseAgentBlocks(b *testing.B) {
	benchmarkFastPath(b, pathMessages, fastMessages, agentBlocksBody(), true)
}
func BenchmarkParseGeneralAgentBlocks(b *testing.B) {
	benchmarkFastPath(b, pathMessages, fastMessages, agentBlocksBody(), false)
}

// agentBodies are agent bodies of build (agentbody.Messages or Chat):
// agentSpec's, a smaller one with few tools, and that one indented (its
// schemas are not tight: compacted for the tools' canonical form).
func agentBodies(build func(agentbody.Spec) []byte) []string {
	small := build(agentbody.Spec{Size: 6 << 10, Tools: 3, Tenant: 2, Seed: 9})
	var indented bytes.Buffer
	if err := json.Indent(&indented, small, "", "  "); err != nil {
		panic(err)
	}
	return []string{string(build(agentSpec)), string(small), indented.String()}
}

// agentSpec is the agent body the fast paths are held to: 51 KiB, 40
// tools (27 KB of them), a system prompt of 6 KB and six rounds of
// tool_use and tool_result.
var agentSpec = agentbody.Spec{Size: 51 << 10, Tools: 40, Tenant: 1, Seed: 1, Stream: true}

// BenchmarkParseAgentMessages51K is Parse of agentbody.Messages(agentSpec)
// by the fast path; BenchmarkParseGeneralAgentMessages51K by
// encoding/json, for comparison.
func BenchmarkParseAgentMessages51K(b *testing.B) {
	benchmarkFastPath(b, pathMessages, fastMessages, agentbody.Messages(agentSpec), true)
}
func BenchmarkParseGeneralAgentMessages51K(b *testing.B) {
	benchmarkFastPath(b, pathMessages, fastMessages, agentbody.Messages(agentSpec), false)
}

// BenchmarkParseAgentChat51K is the same conversation as a chat body
// with tools (agentbody.Chat).
func BenchmarkParseAgentChat51K(b *testing.B) {
	benchmarkFastPath(b, pathChat, fastChat, agentbody.Chat(agentSpec), true)
}
func BenchmarkParseGeneralAgentChat51K(b *testing.B) {
	benchmarkFastPath(b, pathChat, fastChat, agentbody.Chat(agentSpec), false)
}

// The bench's -prompts agent-tools bodies at its larger size: 256 KiB,
// mostly tool results (escape-dense source), as messages and as chat.
var agentSpec256K = agentbody.Spec{Size: 256 << 10, Tools: 40, Tenant: 1, Seed: 1, Stream: true}

func BenchmarkParseAgentMessages256K(b *testing.B) {
	benchmarkFastPath(b, pathMessages, fastMessages, agentbody.Messages(agentSpec256K), true)
}
func BenchmarkParseAgentChat256K(b *testing.B) {
	benchmarkFastPath(b, pathChat, fastChat, agentbody.Chat(agentSpec256K), true)
}

// BenchmarkParseAgentChainCap is Parse of the 256 KiB agent body at the
// default block cap and at 256 blocks (32 KiB at the default block size,
// past which a string is only counted): what the longer chain costs the
// hot path.
func BenchmarkParseAgentChainCap(b *testing.B) {
	body := agentbody.Messages(agentSpec256K)
	for _, max := range []int{256, DefaultMaxBlocks} {
		b.Run(fmt.Sprintf("max_blocks=%d", max), func(b *testing.B) {
			cfg := ParseConfig{Deployment: "d", MaxBlocks: max}
			if req, err := Parse(pathMessages, body, cfg); err != nil || len(req.Keys.Blocks) != min(max, ChainBlocks(req.Keys.Bytes, DefaultBlockSize)) {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse(pathMessages, body, cfg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
