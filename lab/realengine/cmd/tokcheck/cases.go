package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/llmroute/caddy-llmroute/lab/realengine/client"
)

// textCase is a sample text whose tokenization llama.cpp and the reference
// tokenizer must agree on, unless Known names why they cannot.
type textCase struct {
	Name string `json:"name"`
	Text string `json:"-"`
	// Known is a documented llama.cpp difference the case shows; "" = the
	// tokens must match.
	Known string `json:"known_difference,omitempty"`
}

// chatCase is one chat completion request: its raw body (what the router
// parses) and the messages and tools in it (what the engine renders).
type chatCase struct {
	Name string          `json:"name"`
	Body json.RawMessage `json:"-"`
}

// engineChat is what check.mjs renders of a chat case.
type engineChat struct {
	Messages []any `json:"messages"`
	Tools    []any `json:"tools,omitempty"`
}

// engineChat decodes the body's messages and tools for check.mjs.
func (c chatCase) engine() (engineChat, error) {
	var e engineChat
	if err := json.Unmarshal(c.Body, &e); err != nil {
		return e, fmt.Errorf("case %s: %w", c.Name, err)
	}
	return e, nil
}

// probe is a pair of requests sent one after the other to the same replica:
// what the router believes B shares with A (its block chains) against what
// the engine can reuse of A's tokens for B.
type probe struct {
	Name string `json:"name"`
	// Kind groups probes for the summary: a workload name, or "rule" for
	// the leading-key cases.
	Kind string `json:"kind"`
	What string `json:"what"`
	A, B chatCase
	// Tools marks probes whose requests carry tools: they are also
	// measured with the proposed rule (tools hashed after the system
	// messages, not in the leading key).
	Tools bool `json:"tools"`
}

func body(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func msg(role, content string) map[string]any {
	return map[string]any{"role": role, "content": content}
}

// chat is a request body with msgs and, when not nil, tools spliced in
// byte for byte (encoding/json would compact them: the router hashes tools
// as sent, so their spelling is part of what is measured).
func chat(msgs []map[string]any, tools json.RawMessage) json.RawMessage {
	b := body(map[string]any{"model": "tiny", "stream": true, "max_tokens": 8, "messages": msgs})
	if tools == nil {
		return b
	}
	out := append([]byte(nil), b[:len(b)-1]...)
	out = append(append(append(out, `,"tools":`...), tools...), '}')
	return out
}

// Tool lists as a client would send them; weatherAlt spells the same list
// with other whitespace.
var (
	weatherTool = json.RawMessage(`[{"type":"function","function":{"name":"get_weather","description":"Current weather in a city","parameters":{"type":"object","properties":{"city":{"type":"string","description":"City name, e.g. Zürich"},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["city"]}}}]`)
	weatherAlt  = json.RawMessage(`[ {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name, e.g. Zürich"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}} ]`)
	searchTools = json.RawMessage(`[{"type":"function","function":{"name":"search_docs","description":"Search the documentation","parameters":{"type":"object","properties":{"query":{"type":"string"}},"required":["query"]}}},{"type":"function","function":{"name":"open_page","description":"Open a page by id","parameters":{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"]}}}]`)
)

// texts returns the tokenization samples: hand-picked hard cases, then
// system prompts and questions of the measured workloads.
func texts(workloadTexts []string) []textCase {
	ts := []textCase{
		{Name: "english", Text: "Hello, my dog is cute. It's been a long day, hasn't it? We'll see."},
		{Name: "code", Text: "func main() {\n\tfor i := 0; i < 10; i++ {\n\t\tfmt.Printf(\"%d\\n\", i*i)\n\t}\n}\n"},
		{Name: "python", Text: "def f(x):\n    return {'a': [1, 2, 3], \"b\": x ** 2}  # comment\n\n\nprint(f(3))"},
		{Name: "cjk", Text: "日本語のテキストと中文文本，还有한국어 텍스트。"},
		{Name: "emoji", Text: "Ship it 🚀🚀 — done ✅ (👩‍💻 + 🧑🏽‍🔬)"},
		{Name: "whitespace", Text: "a  b   c\t\td\n\n\ne \r\n f      \n\t \n"},
		{Name: "numbers", Text: "1234567890 3.14159 -42 1e-9 0x1F 2026-12-01T10:30:00Z"},
		{Name: "accents_nfc", Text: "café naïve résumé Ångström"},
		{Name: "specials", Text: "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n{}\n</tool_call><|endoftext|>"},
		{Name: "json", Text: `{"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}`},
		{Name: "url", Text: "https://example.com/path?q=a+b&x=%20y#frag user@example.org"},
		{Name: "long_word", Text: strings.Repeat("supercalifragilisticexpialidocious", 20)},
		{Name: "accents_nfd", Text: "cafe\u0301 nai\u0308ve",
			Known: "llama.cpp does not NFC-normalize (tokenizer.json's normalizer): decomposed accents tokenize as the separate code points"},
	}
	for i, t := range workloadTexts {
		ts = append(ts, textCase{Name: fmt.Sprintf("workload_%d", i), Text: t})
	}
	return ts
}

// chats returns the template cases: every path of the Qwen3 template the
// measurement or a client can take.
func chats() []chatCase {
	sys := msg("system", "You are a careful assistant. Answer in one sentence.")
	user := msg("user", "What is the capital of Switzerland?")
	toolCall := map[string]any{"role": "assistant", "content": "",
		"tool_calls": []any{map[string]any{"id": "call_1", "type": "function",
			"function": map[string]any{"name": "get_weather", "arguments": `{"city": "Bern"}`}}}}
	twoCalls := map[string]any{"role": "assistant", "content": "Let me check both.",
		"tool_calls": []any{
			map[string]any{"id": "call_1", "type": "function", "function": map[string]any{"name": "get_weather", "arguments": `{"city": "Bern"}`}},
			map[string]any{"id": "call_2", "type": "function", "function": map[string]any{"name": "get_weather", "arguments": `{"city": "Genève"}`}}}}
	toolMsg := func(id, c string) map[string]any {
		return map[string]any{"role": "tool", "tool_call_id": id, "content": c}
	}
	return []chatCase{
		{"system_user", chat([]map[string]any{sys, user}, nil)},
		{"user_only", chat([]map[string]any{user}, nil)},
		{"multi_turn", chat([]map[string]any{sys, user, msg("assistant", "Bern."), msg("user", "And its population?")}, nil)},
		{"tools_with_system", chat([]map[string]any{sys, user}, weatherTool)},
		{"tools_without_system", chat([]map[string]any{user}, searchTools)},
		{"tool_call_and_result", chat([]map[string]any{sys, msg("user", "Weather in Bern?"), toolCall,
			toolMsg("call_1", `{"temp": 3, "sky": "fog"}`)}, weatherTool)},
		{"parallel_tool_results", chat([]map[string]any{sys, msg("user", "Bern or Geneva, which is warmer?"), twoCalls,
			toolMsg("call_1", `{"temp": 3}`), toolMsg("call_2", `{"temp": 7}`), msg("user", "Thanks. And tomorrow?")}, weatherTool)},
		{"think_in_history", chat([]map[string]any{sys, user, msg("assistant", "<think>\nSwiss federal city.\n</think>\n\nBern."),
			msg("user", "Sure?")}, nil)},
		{"think_after_last_query", chat([]map[string]any{sys, msg("user", "Weather in Bern?"),
			{"role": "assistant", "content": "", "reasoning_content": "Need the tool.",
				"tool_calls": toolCall["tool_calls"]}, toolMsg("call_1", `{"temp": 3}`)}, weatherTool)},
		{"developer_message", chat([]map[string]any{msg("developer", "Always answer in French."), sys, user}, nil)},
		{"late_system", chat([]map[string]any{user, msg("assistant", "Bern."), msg("system", "Be brief."), msg("user", "Population?")}, nil)},
		{"content_parts", chat([]map[string]any{sys, {"role": "user", "content": []any{
			map[string]any{"type": "text", "text": "Part one. "}, map[string]any{"type": "text", "text": "Part two?"}}}}, nil)},
		{"unicode", chat([]map[string]any{msg("system", "Tu es un assistant. 日本語でも答えます 🙂"), msg("user", "Ça va ?")}, weatherTool)},
	}
}

// workloadProbes pairs requests of the measured workloads as they follow
// each other on a replica: two requests of a shared_prefix group, two
// unrelated no_shared_prefix requests, and consecutive turns of a
// multi_turn conversation (the earlier answer stood in for by a fixed
// sentence: what the engine generated is measured in the live run).
func workloadProbes(cfg client.WorkloadConfig, pairs int) ([]probe, []string, error) {
	var out []probe
	var sample []string
	req := func(r client.Request) chatCase {
		return chatCase{Name: fmt.Sprintf("#%d", r.Index), Body: client.ChatBody("tiny", cfg.MaxTokens, r)}
	}
	for _, wl := range []string{client.SharedPrefix, client.NoSharedPrefix, client.MultiTurn} {
		c := cfg
		c.Name = wl
		plan, err := client.Plan(c)
		if err != nil {
			return nil, nil, err
		}
		n := 0
		byGroup := map[int]int{}
		for i, r := range plan {
			if n == pairs {
				break
			}
			switch wl {
			case client.SharedPrefix:
				if j, ok := byGroup[r.Group]; ok {
					out = append(out, probe{Name: fmt.Sprintf("%s %d", wl, n), Kind: wl, What: "same group, new question",
						A: req(plan[j]), B: req(r)})
					n++
				}
				byGroup[r.Group] = i
			case client.NoSharedPrefix:
				if i > 0 {
					out = append(out, probe{Name: fmt.Sprintf("%s %d", wl, n), Kind: wl, What: "unrelated requests",
						A: req(plan[i-1]), B: req(r)})
					n++
				}
			case client.MultiTurn:
				if r.Prev >= 0 {
					a := plan[r.Prev]
					a.History = historyOf(plan, r.Prev)
					b := r
					b.History = append(historyOf(plan, r.Prev), client.Exchange{User: a.User, Assistant: "The answer, in short, is yes."})
					out = append(out, probe{Name: fmt.Sprintf("%s %d", wl, n), Kind: wl, What: "next turn, earlier answer included",
						A: req(a), B: req(b)})
					n++
				}
			}
		}
		if len(plan) > 0 {
			sample = append(sample, plan[0].System, plan[0].User)
		}
	}
	return out, sample, nil
}

// historyOf rebuilds the history request i was sent with in the probes'
// stand-in conversation.
func historyOf(plan []client.Request, i int) []client.Exchange {
	if plan[i].Prev < 0 {
		return nil
	}
	p := plan[plan[i].Prev]
	return append(historyOf(plan, plan[i].Prev), client.Exchange{User: p.User, Assistant: "The answer, in short, is yes."})
}

// ruleProbes are the leading-key cases: what the router's leading key
// (system and developer messages, tools, as sent) groups or splits against
// what the Qwen3 template puts at the front of the prompt. They are
// measured on the BPE model only: the byte model's plain template renders
// neither tools nor the real template's rules.
func ruleProbes(system string) []probe {
	sys := msg("system", system)
	q1, q2 := msg("user", "First question: what does the router do?"), msg("user", "Second question: where is the cache?")
	dev1, dev2 := msg("developer", "Answer in English."), msg("developer", "Answer in French.")
	devLong := msg("developer", system)
	asstThink := map[string]any{"role": "assistant", "content": "<think>\nI should look it up first.\n</think>\n\nLet me search.",
		"tool_calls": []any{map[string]any{"id": "c1", "type": "function", "function": map[string]any{"name": "search_docs", "arguments": `{"query": "cache"}`}}}}
	tool := map[string]any{"role": "tool", "tool_call_id": "c1", "content": `{"hits": 3}`}
	final := msg("assistant", "It lives on the replica.")
	c := func(name string, ms []map[string]any, tools json.RawMessage) chatCase {
		return chatCase{Name: name, Body: chat(ms, tools)}
	}
	return []probe{
		{Name: "same system", Kind: "rule", What: "same system prompt, new question (the shared_prefix case)",
			A: c("a", []map[string]any{sys, q1}, nil), B: c("b", []map[string]any{sys, q2}, nil)},
		{Name: "same system and tools", Kind: "rule", What: "same system prompt and tools, new question", Tools: true,
			A: c("a", []map[string]any{sys, q1}, searchTools), B: c("b", []map[string]any{sys, q2}, searchTools)},
		{Name: "tools differ", Kind: "rule", What: "same system prompt, another tool list", Tools: true,
			A: c("a", []map[string]any{sys, q1}, searchTools), B: c("b", []map[string]any{sys, q1}, weatherTool)},
		{Name: "tools added", Kind: "rule", What: "same system prompt, tools only in the second request", Tools: true,
			A: c("a", []map[string]any{sys, q1}, nil), B: c("b", []map[string]any{sys, q1}, weatherTool)},
		{Name: "tools respelled", Kind: "rule", What: "same system prompt and tools, the tools JSON with other whitespace", Tools: true,
			A: c("a", []map[string]any{sys, q1}, weatherTool), B: c("b", []map[string]any{sys, q1}, weatherAlt)},
		{Name: "developer differs", Kind: "rule", What: "same system prompt, another developer message (the template drops developer messages)",
			A: c("a", []map[string]any{dev1, sys, q1}, nil), B: c("b", []map[string]any{dev2, sys, q1}, nil)},
		{Name: "developer instead of system", Kind: "rule", What: "the long prompt as a developer message, new question (the template drops it)",
			A: c("a", []map[string]any{devLong, q1}, nil), B: c("b", []map[string]any{devLong, q2}, nil)},
		{Name: "agent loop, next user turn", Kind: "rule", What: "tool loop then a new question: the template drops the earlier turn's <think> once a later user message exists", Tools: true,
			A: c("a", []map[string]any{sys, q1, asstThink, tool}, searchTools), B: c("b", []map[string]any{sys, q1, asstThink, tool, final, q2}, searchTools)},
	}
}
