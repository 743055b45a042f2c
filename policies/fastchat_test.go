package policies

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/llmroute/caddy-llmroute/internal/agentbody"
)

// parseBoth checks the chat fast path against the general one
// (parseBothAt).
func parseBoth(t *testing.T, body []byte, cfg ParseConfig) (accepted bool) {
	t.Helper()
	return parseBothAt(t, pathChat, fastChat, body, cfg)
}

// parseBothAt checks an endpoint's fast path against the general one
// (encoding/json) on body and reports whether the fast path accepted it.
// Accepted, its answer must be the general path's; declined, Parse must
// still answer exactly as the general path does.
func parseBothAt(t *testing.T, path string, fast func([]byte, ParseConfig) (*Request, bool), body []byte, cfg ParseConfig) (accepted bool) {
	t.Helper()
	defer func(old bool) { useFastChat = old }(useFastChat)
	useFastChat = false
	slow, errS := Parse(path, body, cfg)
	useFastChat = true
	routed, errR := Parse(path, body, cfg)
	got, ok := fast(body, cfg.withDefaults())
	if !ok {
		if fmt.Sprint(errR) != fmt.Sprint(errS) || !reflect.DeepEqual(slow, routed) {
			t.Fatalf("fast path declined but Parse differs from the general path on %q:\ngeneral %+v (%v)\nParse   %+v (%v)", body, slow, errS, routed, errR)
		}
		return false
	}
	if errS != nil {
		t.Fatalf("fast path accepted a body the general path rejects (%v): %q", errS, body)
	}
	if !reflect.DeepEqual(slow, got) {
		t.Fatalf("mismatch on %q:\nslow %+v\nfast %+v", body, slow, got)
	}
	if errR != nil || !reflect.DeepEqual(routed, got) {
		t.Fatalf("Parse did not return the fast path's answer on %q: %+v (%v)", body, routed, errR)
	}
	return true
}

// damaged tallies what a fast path accepted of truncations and
// single-byte mutations of generated bodies.
type damaged struct{ cuts, cutsAccepted, muts, mutsAccepted int }

// try checks both (a parseBoth) on truncations of body and on single-byte
// mutations, one every 1 to step bytes.
func (d *damaged) try(r *rand.Rand, body []byte, step int, both func([]byte) bool) {
	for cut := 0; cut < len(body); cut += 1 + r.IntN(step) {
		d.cuts++
		if both(body[:cut]) {
			d.cutsAccepted++
		}
		m := append([]byte(nil), body...)
		m[cut] = "{}[],:\"\\ a0-e.tfn\x01\xff"[r.IntN(18)]
		d.muts++
		if both(m) {
			d.mutsAccepted++
		}
	}
}

// check fails t when a truncated body was accepted, or too few mutated
// ones for the comparison to have run on a fair share of them (a
// mutation inside a content string mostly leaves the body valid).
func (d *damaged) check(t *testing.T) {
	t.Helper()
	if d.cutsAccepted != 0 {
		t.Errorf("fast path accepted %d truncated bodies", d.cutsAccepted)
	}
	if d.mutsAccepted*5 < d.muts {
		t.Errorf("fast path accepted only %d of %d mutated bodies, want at least a fifth", d.mutsAccepted, d.muts)
	}
}

// exact fails t unless the tallies are these: the generated bodies are
// seeded, so a change of what a fast path accepts (a rewrite of its
// scanner above all) shows as a change of count, not only as a mismatch
// with the general path on a body it still accepts.
func (d *damaged) exact(t *testing.T, cuts, muts, mutsAccepted int) {
	t.Helper()
	if d.cuts != cuts || d.muts != muts || d.mutsAccepted != mutsAccepted {
		t.Errorf("tallies: %d truncations, %d/%d mutations accepted; want %d, %d/%d", d.cuts, d.mutsAccepted, d.muts, cuts, mutsAccepted, muts)
	}
}

// fastChatBodies are well-formed chat bodies of the kind the fast path is
// for (string or null contents, ordinary and unknown fields, escapes,
// spaces): it must accept every one, so that comparing it with the
// general path on them compares something.
var fastChatBodies = []string{
	`{"model":"m","prompt_cache_key":"session-\u00e9-1","cache_salt":"s","messages":[{"role":"user","content":"hi"}]}`,
	`{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}`,
	`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}]}`,
	`{"model":"m","stream":false,"messages":[{"role":"user","content":"x"}]}`,
	`{"model":"m","messages":[{"role":"user","content":"caf\u00e9 \ud83d\ude00 \ud800 \n\t\"\\"}]}`,
	`{"model":"m","cache_salt":"s","tools":[{"type":"function","x":[1,2.5e3,-0.1,true,null]}],"messages":[{"role":"developer","content":"d"},{"role":"user","content":null}]}`,
	`{"model":"m","functions":{"a":1},"tools":null,"messages":[{"role":"user","content":"q","extra":{"k":[]}}]}`,
	`{"model":"m","messages":[{"role":"user","content":"q\u0001"}]}`,
	`{"model":"m","n":-1.5E+3,"messages":[{"role":"user","content":"q"}]}`,
	` { "model" : "m" , "messages" : [ { "role" : "user" , "content" : "q" } ] } `,
	"{\n\t\"model\": \"m\",\r\n\t\"messages\": [{\"role\": \"user\", \"content\": \"q\"}]\n}",
	`{"model":"m","max_tokens":64,"temperature":0.7,"top_p":1,"user":"u","stop":["\n"],"metadata":{"a":{"b":[{}]}},"messages":[{"role":"user","content":"q"}]}`,
	`{"messages":[{"content":"hi","role":"user"}],"model":"m"}`,
	`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"u1"},{"role":"assistant","content":"a1"},{"role":"user","content":"u2"}]}`,
	`{"model":"m","messages":[{"role":"user","content":"ünïcödé raw, 世界 \/ slash"}]}`,
	`{"model":"m","messages":[{"role":"user","content":""}]}`,
	`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("a long shared system prompt. ", 200) + `"}]}`,
	// Escaped contents past the block cap (of the 16-byte, 64-block
	// config): counted, not decoded.
	`{"model":"m","messages":[{"role":"system","content":"` + strings.Repeat("rules. ", 200) + `"},{"role":"user","content":"` + strings.Repeat(`a\n\t\"b\\`, 100) + `"},{"role":"tool","tool_call_id":"c","content":"x\u00e9\ny"},{"role":"user","content":[{"type":"text","text":"p\n\"q\""},{"type":"text","text":"\u00e9\n"}]}]}`,
	// What agents send: parts, tool calls, tool results, names.
	`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"q"},{"type":"image_url","image_url":{"url":"https://x/a.png","detail":"low"}},{"type":"image_url","image_url":"data:image/png;base64,iVBO"}]}]}`,
	`{"model":"m","tools":[{"type":"function","function":{"name":"read","parameters":{"type":"object"}}}],"messages":[{"role":"system","content":"s"},{"role":"user","name":"ann","content":"read a.go"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"read","arguments":"{\"path\":\"a.go\"}"}},{"id":"call_2","type":"function","function":null}]},{"role":"tool","tool_call_id":"call_1","content":"package main\n\nfunc main() {\n\tprintln(\"hi\")\n}\n"},{"role":"user","content":[{"type":"text","text":"go on"}]}]}`,
	`{"model":"m","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"UklG","format":"wav"}},{"type":"file","file":{"file_id":"f1"}},{"type":"video_url","video_url":{"url":"https://x/v.mp4"}},{"type":"refusal","refusal":"no"},{"type":"text","text":null}]},{"role":"assistant","content":"","tool_calls":[]},{"role":"tool","tool_call_id":null,"content":[]}]}`,
}

// checkFixedBodies runs both (a parseBoth) under cfg and the default
// config on the bodies a fast path is meant for, each of which must be
// JSON and accepted, and on odd bodies it may decline, where it must still
// agree when it accepts; it returns how many odd bodies it accepted (under
// cfg and the default config, counted apart).
func checkFixedBodies(t *testing.T, both func(*testing.T, []byte, ParseConfig) bool, cfg ParseConfig, meant, odd []string) (oddAccepted int) {
	t.Helper()
	for _, b := range meant {
		if !json.Valid([]byte(b)) {
			t.Fatalf("not JSON: %s", b)
		}
		for _, c := range []ParseConfig{cfg, {}} {
			if !both(t, []byte(b), c) {
				t.Errorf("fast path declined a body it is meant for (cfg %+v): %q", c, b)
			}
		}
	}
	for _, b := range odd {
		for _, c := range []ParseConfig{cfg, {}} {
			if both(t, []byte(b), c) {
				oddAccepted++
			}
		}
	}
	return oddAccepted
}

// literalPieces are what randLiteral strings together: text, escapes of
// every kind and JSON's own punctuation.
var literalPieces = []string{"a", " ", "\\n", "\\\"", "\\u00e9", "é", "x y", "{", "}", "[", "]", ",", ":", "\\\\", "\\t"}

// randLiteral returns a JSON string literal (quotes included) of fewer
// than max pieces drawn from pieces.
func randLiteral(r *rand.Rand, pieces []string, max int) string {
	var c strings.Builder
	c.WriteByte('"')
	for range r.IntN(max) {
		c.WriteString(pieces[r.IntN(len(pieces))])
	}
	c.WriteByte('"')
	return c.String()
}

func TestFastChatMatchesGeneral(t *testing.T) {
	cfg := ParseConfig{Deployment: "d", BlockSize: 16, MaxBlocks: 64}
	// Bodies it may decline (odd shapes, duplicates, case-folded keys,
	// invalid JSON); where it accepts one it must still agree.
	odd := checkFixedBodies(t, parseBoth, cfg, append(agentBodies(agentbody.Chat), fastChatBodies...), []string{
		`{"model":"m","stream":1,"stream_options":{"include_usage":true,"include_usage":false},"messages":[{"role":"user","content":"x"}]}`,
		`{"Model":"m","messages":[{"role":"user","content":"q"}]}`,
		`{"model":"m","messages":[{"Role":"user","content":"q"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"q"}]} x`,
		"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\x01b\"}]}",
		"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"caf\xc3\xa9 \xff\"}]}",
		`{"model":"m","n":01,"messages":[{"role":"user","content":"q"}]}`,
		`{"model":"m","n":1.,"messages":[{"role":"user","content":"q"}]}`,
		`{"model":"m","s":"\x","messages":[{"role":"user","content":"q"}]}`,
		`{"model":"m","s":"\u12G4","messages":[{"role":"user","content":"q"}]}`,
		`{"model":"m","messages":[{"role":"","content":"q"}]}`,
		`{"model":"","messages":[{"role":"u","content":"q"}]}`,
		`{"model":"m","messages":[]}`,
		`{"model":"m","messages":[{"role":"user","content":"q"}],"messages":[{"role":"user","content":"r"}]}`,
		`{"model":"m","stream_options":"x","messages":[{"role":"user","content":"q"}]}`,
		`{"model":"m","stream_options":{"Include_Usage":true},"messages":[{"role":"user","content":"q"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"q"},]}`,
		`{"model":"m","messages":[{"role":"user","content":"q"}],}`,
		`{"model":"m","messages":[{"role":"user","content":"q"}]`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"q"}]}]}`,
		`{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[]}]}`,
		`{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":"x"}]}`,
		`{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[1]}]}`,
		`{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"a","function":"f"}]}]}`,
		`{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"a","function":{"name":"f","arguments":{"p":1}}}]}]}`,
		`{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"a","ID":"b"}]}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"q","text":"r"}]}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":7}}]}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":[1]}]}]}`,
		`{"model":"m","messages":[{"role":"user","content":[1,2]}]}`,
		`{"model":"m","messages":[{"role":"user","content":{"a":1}}]}`,
		`{"model":"m","messages":[{"role":"user","name":7,"content":"q"}]}`,
		`{"model":"m","messages":[{"role":"tool","tool_call_id":"a","tool_call_id":"b","content":"q"}]}`,
	})
	// Random well-formed bodies, every one of which the fast path must
	// accept, and truncations and single-byte mutations of them, some of
	// which it accepts.
	r := rand.New(rand.NewPCG(3, 4))
	pieces := literalPieces[:len(literalPieces)-1] // no \t: the bodies this test has always drawn
	const iters = 300
	var whole int
	var d damaged
	for iter := 0; iter < iters; iter++ {
		var sb strings.Builder
		fmt.Fprintf(&sb, `{"model":"m%d","stream":%v,"messages":[`, iter%3, iter%2 == 0)
		n := 1 + r.IntN(4)
		for i := range n {
			if i > 0 {
				sb.WriteString(",")
			}
			role := []string{"system", "user", "assistant", "developer"}[r.IntN(4)]
			c := randLiteral(r, pieces, 40)
			switch r.IntN(4) {
			case 0:
				fmt.Fprintf(&sb, `{"role":%q,"content":[{"type":"text","text":%s},{"type":"image_url","image_url":{"url":"u%d"}}]}`, role, c, i)
			case 1:
				fmt.Fprintf(&sb, `{"role":"assistant","content":null,"tool_calls":[{"id":"c%d","type":"function","function":{"name":"f","arguments":%s}}]}`, i, c)
			case 2:
				fmt.Fprintf(&sb, `{"role":"tool","tool_call_id":"c%d","content":%s}`, i, c)
			default:
				fmt.Fprintf(&sb, `{"role":%q,"content":%s}`, role, c)
			}
		}
		sb.WriteString(`],"temperature":0.7}`)
		body := []byte(sb.String())
		if parseBoth(t, body, cfg) {
			whole++
		} else if whole == iter {
			t.Errorf("fast path declined a well-formed generated body: %q", body)
		}
		d.try(r, body, 5, func(b []byte) bool { return parseBoth(t, b, cfg) })
	}
	t.Logf("fast path accepted %d/%d generated bodies, %d/%d truncations, %d/%d mutations", whole, iters, d.cutsAccepted, d.cuts, d.mutsAccepted, d.muts)
	if whole != iters {
		t.Errorf("fast path accepted %d of %d well-formed generated bodies, want all", whole, iters)
	}
	d.check(t)
	d.exact(t, 34393, 34393, 16000)
	if odd != 8 {
		t.Errorf("fast path accepted %d odd bodies, want 8", odd)
	}
}

// FuzzFastChat checks, for any body, that an accepted body parses exactly
// as the general path parses it and that a declined one still gets the
// general path's answer. Its seeds are bodies the fast path is meant for,
// and each must be accepted: a fast path that declined everything would
// pass the property vacuously.
func FuzzFastChat(f *testing.F) {
	fuzzFastPath(f, parseBoth, fastChatBodies,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"q"}]}]}`,
		`{"model":"m","messages":[{"role":"user","content":"q"}],"messages":[]}`)
}

// fuzzFastPath is the fuzz property of a fast path (both: its parseBoth):
// any body parses as the general path parses it; meant, the bodies the
// fast path is for, are seeds it must accept (so that the property is not
// met by declining everything), more are other seeds.
func fuzzFastPath(f *testing.F, both func(*testing.T, []byte, ParseConfig) bool, meant []string, more ...string) {
	mustAccept := map[string]bool{}
	for _, b := range meant {
		f.Add([]byte(b))
		mustAccept[b] = true
	}
	for _, b := range more {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		accepted := both(t, body, ParseConfig{Deployment: "d", BlockSize: 16, MaxBlocks: 64})
		if !accepted && mustAccept[string(body)] {
			t.Fatalf("fast path declined a seed it is meant for: %q", body)
		}
	})
}

func BenchmarkParseGeneral4K(b *testing.B) {
	useFastChat = false
	benchmarkParse(b, 4<<10)
	useFastChat = true
}
func BenchmarkParseGeneral64K(b *testing.B) {
	useFastChat = false
	benchmarkParse(b, 64<<10)
	useFastChat = true
}

// agentChatBody is an OpenAI-style agent's chat body, about 105 KiB: a
// long system prompt, then 20 rounds of an assistant tool call, the tool
// message carrying a source file (escapes all through) and a user message
// of text parts.
func agentChatBody() []byte {
	file := strings.Repeat("func (s *server) handle(w http.ResponseWriter, r *http.Request) {\n\tif r.Method != \"POST\" {\n\t\treturn\n\t}\n}\n", 40)
	msgs := []map[string]any{{"role": "system", "content": strings.Repeat("Follow the repository's rules. ", 300)}, {"role": "user", "content": "fix the handler"}}
	for i := range 20 {
		id := fmt.Sprintf("call_%02d", i)
		msgs = append(msgs,
			map[string]any{"role": "assistant", "content": "Let me read the file.", "tool_calls": []map[string]any{{"id": id, "type": "function", "function": map[string]any{"name": "read", "arguments": fmt.Sprintf(`{"path":"pkg/f%d.go"}`, i)}}}},
			map[string]any{"role": "tool", "tool_call_id": id, "content": file},
			map[string]any{"role": "user", "content": []map[string]any{{"type": "text", "text": "Go on."}}})
	}
	b, _ := json.Marshal(map[string]any{"model": "m", "stream": true, "messages": msgs})
	return b
}

// benchmarkFastPath is Parse of body at path, by the fast path when on,
// else by encoding/json; either way the body must have a prefix and the
// fast path must accept it, so that the two compare the same work.
func benchmarkFastPath(b *testing.B, path string, fast func([]byte, ParseConfig) (*Request, bool), body []byte, on bool) {
	defer func(old bool) { useFastChat = old }(useFastChat)
	useFastChat = on
	req, err := Parse(path, body, ParseConfig{Deployment: "d"})
	if err != nil || req.NoPrefix != "" {
		b.Fatal(err, req.NoPrefix)
	}
	if _, ok := fast(body, ParseConfig{Deployment: "d"}.withDefaults()); !ok {
		b.Fatal("the fast path declines the body")
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(path, body, ParseConfig{Deployment: "d"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseAgentChatTools is Parse of agentChatBody by the fast path;
// BenchmarkParseGeneralAgentChatTools by encoding/json, for comparison.
func BenchmarkParseAgentChatTools(b *testing.B) {
	benchmarkFastPath(b, pathChat, fastChat, agentChatBody(), true)
}
func BenchmarkParseGeneralAgentChatTools(b *testing.B) {
	benchmarkFastPath(b, pathChat, fastChat, agentChatBody(), false)
}
