package policies

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	pathChat      = "/v1/chat/completions"
	pathMessages  = "/v1/messages"
	pathResponses = "/v1/responses"
	pathCount     = "/v1/messages/count_tokens"
)

// TestParseMessagesLikeChat checks that an Anthropic body gets the keys of
// the chat body with the same conversation, so that a client switching
// API keeps its prefix (and its replica).
func TestParseMessagesLikeChat(t *testing.T) {
	tests := []struct {
		name     string
		chat     string
		messages string
	}{
		{"system string, user string",
			`{"model":"m","messages":[{"role":"system","content":"You are terse and exact."},{"role":"user","content":"hello there, how are you"}]}`,
			`{"model":"m","max_tokens":64,"system":"You are terse and exact.","messages":[{"role":"user","content":"hello there, how are you"}]}`},
		{"system and content as text blocks",
			`{"model":"m","messages":[{"role":"system","content":"You are terse and exact."},{"role":"user","content":"hello there, how are you"}]}`,
			`{"model":"m","system":[{"type":"text","text":"You are terse and exact."}],"messages":[{"role":"user","content":[{"type":"text","text":"hello there, how are you"}]}]}`},
		{"several system blocks are the parts of one system message",
			`{"model":"m","messages":[{"role":"system","content":[{"type":"text","text":"You are Claude Code."},{"type":"text","text":"Be careful with files."}]},{"role":"user","content":"list the files"}]}`,
			`{"model":"m","system":[{"type":"text","text":"You are Claude Code."},{"type":"text","text":"Be careful with files."}],"messages":[{"role":"user","content":"list the files"}]}`},
		{"cache_control marks are not rendered",
			`{"model":"m","messages":[{"role":"system","content":"You are terse and exact."},{"role":"user","content":[{"type":"text","text":"first part"},{"type":"text","text":"second part"}]}]}`,
			`{"model":"m","system":[{"type":"text","text":"You are terse and exact.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"first part"},{"type":"text","text":"second part","cache_control":{"type":"ephemeral","ttl":"1h"}}]}]}`},
		{"multi-turn",
			`{"model":"m","stream":true,"messages":[{"role":"system","content":"S"},{"role":"user","content":"question one"},{"role":"assistant","content":"answer one"},{"role":"user","content":"question two"}]}`,
			`{"model":"m","stream":true,"system":"S","messages":[{"role":"user","content":"question one"},{"role":"assistant","content":[{"type":"text","text":"answer one"}]},{"role":"user","content":"question two"}]}`},
		{"no system",
			`{"model":"m","messages":[{"role":"user","content":"just a question"}]}`,
			`{"model":"m","system":"","messages":[{"role":"user","content":"just a question"}]}`},
		{"tools, tool use and tool result",
			`{"model":"m","tools":[{"type":"function","function":{"name":"get_weather","description":"Weather of a city.","parameters":{"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
			"messages":[{"role":"system","content":"Use tools."},{"role":"user","content":"weather in Paris?"},
			{"role":"assistant","content":"checking","tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
			{"role":"tool","tool_call_id":"toolu_1","content":"sunny"},{"role":"user","content":"thanks"}]}`,
			`{"model":"m","system":"Use tools.","tools":[{"name":"get_weather","description":"Weather of a city.","input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]},"cache_control":{"type":"ephemeral"}}],
			"messages":[{"role":"user","content":"weather in Paris?"},
			{"role":"assistant","content":[{"type":"text","text":"checking"},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{ "city" : "Paris" }}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"sunny"},{"type":"text","text":"thanks"}]}]}`},
		{"tool use alone, tool results alone, result as blocks",
			`{"model":"m","messages":[{"role":"user","content":"two lookups"},
			{"role":"assistant","content":null,"tool_calls":[{"id":"a","function":{"name":"f","arguments":"{}"}},{"id":"b","function":{"name":"g","arguments":"{\"x\":[1,2]}"}}]},
			{"role":"tool","tool_call_id":"a","content":[{"type":"text","text":"line 1"},{"type":"text","text":"line 2"}]},{"role":"tool","tool_call_id":"b","content":"ok"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"two lookups"},
			{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f","input":{}},{"type":"tool_use","id":"b","name":"g","input":{"x":[1, 2]}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":[{"type":"text","text":"line 1"},{"type":"text","text":"line 2"}]},{"type":"tool_result","tool_use_id":"b","content":"ok","is_error":false}]}]}`},
		{"images",
			`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}},{"type":"image_url","image_url":{"url":"https://example.com/cat.jpg"}},{"type":"text","text":"what are these?"}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}},{"type":"image","source":{"type":"url","url":"https://example.com/cat.jpg"}},{"type":"text","text":"what are these?"}]}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			chat := mustParse(t, pathChat, tt.chat, small)
			msgs := mustParse(t, pathMessages, tt.messages, small)
			require.Empty(t, chat.NoPrefix)
			require.Empty(t, msgs.NoPrefix)
			require.NotEmpty(t, chat.Keys.Blocks)
			assert.Equal(t, EndpointMessages, msgs.Endpoint)
			assert.Equal(t, chat.Model, msgs.Model)
			assert.Equal(t, chat.Stream, msgs.Stream)
			assert.Equal(t, chat.Keys, msgs.Keys)
			assert.Equal(t, chat.PromptBytes, msgs.PromptBytes)
		})
	}
}

// TestParseOnePrefixAcrossAPIs checks that one conversation with tools
// keys alike as chat, responses and messages.
func TestParseOnePrefixAcrossAPIs(t *testing.T) {
	chat := mustParse(t, pathChat, `{"model":"m","tools":[{"type":"function","function":{"name":"search","description":"Search the web.","parameters":{"type":"object","properties":{"q":{"type":"string"}}},"strict":true}}],
		"messages":[{"role":"system","content":"You are a research agent."},{"role":"user","content":"find the paper"}]}`, small)
	resp := mustParse(t, pathResponses, `{"model":"m","instructions":"You are a research agent.","input":"find the paper",
		"tools":[{"type":"function","name":"search","description":"Search the web.","parameters":{"type":"object","properties":{"q":{"type":"string"}}}}]}`, small)
	msgs := mustParse(t, pathMessages, `{"model":"m","max_tokens":1024,"system":"You are a research agent.","messages":[{"role":"user","content":"find the paper"}],
		"tools":[{"name":"search","description":"Search the web.","input_schema":{"type":"object","properties":{"q":{"type":"string"}}}}]}`, small)
	none := mustParse(t, pathChat, `{"model":"m","messages":[{"role":"system","content":"You are a research agent."},{"role":"user","content":"find the paper"}]}`, small)
	require.NotEmpty(t, chat.Keys.Blocks)
	assert.Equal(t, chat.Keys, resp.Keys)
	assert.Equal(t, chat.Keys, msgs.Keys)
	assert.Equal(t, none.Keys.Leading, chat.Keys.Leading, "tools follow the system prompt in the chain, outside the leading key")
	assert.NotEqual(t, none.Keys.Blocks, chat.Keys.Blocks, "tools are part of the chain")
}

// TestParseToolsCanonical checks which differences in tools change the
// block chain (tools are rendered into it after the system prompt).
func TestParseToolsCanonical(t *testing.T) {
	body := func(tools string) string {
		return `{"model":"m","tools":` + tools + `,"messages":[{"role":"system","content":"S"},{"role":"user","content":"U"}]}`
	}
	lead := func(tools string) string { return fmt.Sprint(mustParse(t, pathChat, body(tools), small).Keys.Blocks) }
	base := lead(`[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object"}}}]`)
	noTools := fmt.Sprint(mustParse(t, pathChat, `{"model":"m","messages":[{"role":"system","content":"S"},{"role":"user","content":"U"}]}`, small).Keys.Blocks)
	tests := []struct {
		name  string
		tools string
		same  bool
	}{
		{"spacing and key order of the tool object", `[ { "function" : { "parameters" : { "type" : "object" }, "description":"d", "name":"f" }, "type":"function" } ]`, true},
		{"strict is not rendered", `[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object"},"strict":true}}]`, true},
		{"responses shape", `[{"type":"function","name":"f","description":"d","parameters":{"type":"object"}}]`, true},
		{"anthropic shape", `[{"name":"f","description":"d","input_schema":{"type":"object"}}]`, true},
		{"anthropic custom type", `[{"type":"custom","name":"f","description":"d","input_schema":{"type":"object"}}]`, true},
		{"other name", `[{"type":"function","function":{"name":"g","description":"d","parameters":{"type":"object"}}}]`, false},
		{"other description", `[{"type":"function","function":{"name":"f","description":"e","parameters":{"type":"object"}}}]`, false},
		{"other schema", `[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"array"}}}]`, false},
		{"schema key order is the client's", `[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object","properties":{}}}}]`, false},
		{"a second tool", `[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object"}}},{"name":"g","input_schema":{}}]`, false},
		{"a server tool instead", `[{"type":"web_search_20250305","name":"f"}]`, false},
		{"OpenAI custom tool (no schema)", `[{"type":"custom","name":"f","description":"d"}]`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.same {
				assert.Equal(t, base, lead(tt.tools))
			} else {
				assert.NotEqual(t, base, lead(tt.tools))
				assert.NotEqual(t, noTools, lead(tt.tools))
			}
		})
	}
	assert.Equal(t, noTools, lead(`[]`), "an empty list is no tools")
	assert.Equal(t, noTools, lead(`null`))
	assert.NotEqual(t, noTools, lead(`{"name":"f"}`), "tools that are not a list still count")
	assert.NotEqual(t, lead(`[{"type":"web_search"}]`), lead(`[{"type":"file_search"}]`))
	legacy := mustParse(t, pathChat, `{"model":"m","functions":[{"name":"f","description":"d","parameters":{"type":"object"}}],"messages":[{"role":"system","content":"S"},{"role":"user","content":"U"}]}`, small)
	assert.Equal(t, base, fmt.Sprint(legacy.Keys.Blocks), "legacy functions are the same tools")
}

// TestParseMessagesRenderedFields checks that what differs between two
// Anthropic conversations changes their keys, and what is not rendered
// does not.
func TestParseMessagesRenderedFields(t *testing.T) {
	body := func(assistant string) string {
		return `{"model":"m","system":"S","messages":[{"role":"user","content":"hello"},{"role":"assistant","content":` + assistant + `},{"role":"user","content":"next"}]}`
	}
	base := mustParse(t, pathMessages, body(`[{"type":"tool_use","id":"t1","name":"f","input":{"a":1}}]`), small)
	tests := []struct {
		name string
		a    string
		same bool
	}{
		{"same with spaces", `[ {"input": { "a": 1 }, "name":"f", "id":"t1", "type":"tool_use"} ]`, true},
		{"cache_control", `[{"type":"tool_use","id":"t1","name":"f","input":{"a":1},"cache_control":{"type":"ephemeral"}}]`, true},
		{"other id", `[{"type":"tool_use","id":"t2","name":"f","input":{"a":1}}]`, false},
		{"other name", `[{"type":"tool_use","id":"t1","name":"g","input":{"a":1}}]`, false},
		{"other input", `[{"type":"tool_use","id":"t1","name":"f","input":{"a":2}}]`, false},
		{"thinking before", `[{"type":"thinking","thinking":"hmm","signature":"sig"},{"type":"tool_use","id":"t1","name":"f","input":{"a":1}}]`, false},
		{"text before", `[{"type":"text","text":"let me see"},{"type":"tool_use","id":"t1","name":"f","input":{"a":1}}]`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mustParse(t, pathMessages, body(tt.a), small)
			require.Empty(t, got.NoPrefix)
			assert.Equal(t, base.Keys.Leading, got.Keys.Leading, "the system prompt leads alike")
			if tt.same {
				assert.Equal(t, base.Keys.Blocks, got.Keys.Blocks)
			} else {
				assert.NotEqual(t, base.Keys.Blocks, got.Keys.Blocks)
			}
		})
	}
	thinking := func(s string) []uint64 {
		return mustParse(t, pathMessages, body(`[{"type":"thinking","thinking":"`+s+`","signature":"x"},{"type":"text","text":"done"}]`), small).Keys.Blocks
	}
	assert.NotEqual(t, thinking("first idea"), thinking("other idea"), "two thinking blocks never render alike")
	doc := func(data string) []uint64 {
		return mustParse(t, pathMessages, `{"model":"m","messages":[{"role":"user","content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"`+data+`"}},{"type":"text","text":"summarise"}]}]}`, small).Keys.Blocks
	}
	assert.NotEqual(t, doc("JVBERi0x"), doc("JVBERi0y"), "two documents never render alike")
	other := mustParse(t, pathMessages, `{"model":"m","system":"T","messages":[{"role":"user","content":"hello"}]}`, small)
	assert.NotEqual(t, base.Keys.Leading, other.Keys.Leading, "the system prompt is the leading key")
}

// TestParseMessagesShapes checks the outcome of Anthropic bodies of every
// shape: keys, a stable reason for no prefix, or an error.
func TestParseMessagesShapes(t *testing.T) {
	tests := []struct {
		name     string
		path     string
		body     string
		err      error
		noPrefix string
		stream   bool
	}{
		{name: "plain", path: pathMessages, body: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
		{name: "stream, trailing slash", path: pathMessages + "/", body: `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, stream: true},
		{name: "only a system prompt and an empty turn", path: pathMessages, body: `{"model":"m","system":"S","messages":[{"role":"user","content":[]}]}`},
		{name: "content null", path: pathMessages, body: `{"model":"m","messages":[{"role":"user","content":null}]}`},
		{name: "unknown block type", path: pathMessages, body: `{"model":"m","messages":[{"role":"user","content":[{"type":"search_result","title":"t","content":[{"type":"text","text":"x"}]}]}]}`},
		{name: "image with a file source", path: pathMessages, body: `{"model":"m","messages":[{"role":"user","content":[{"type":"image","source":{"type":"file","file_id":"file_1"}}]}]}`},
		{name: "tools not a list", path: pathMessages, body: `{"model":"m","tools":{"name":"f"},"messages":[{"role":"user","content":"hi"}]}`},
		{name: "messages a string", path: pathMessages, body: `{"model":"m","messages":"hi"}`, noPrefix: NoPrefixMessagesShape},
		{name: "message not an object", path: pathMessages, body: `{"model":"m","messages":[{"role":"user","content":"a"},7]}`, noPrefix: NoPrefixMessagesShape},
		{name: "no messages", path: pathMessages, body: `{"model":"m","system":"S"}`, noPrefix: NoPrefixNoMessages},
		{name: "empty messages", path: pathMessages, body: `{"model":"m","messages":[]}`, noPrefix: NoPrefixNoMessages},
		{name: "role missing", path: pathMessages, body: `{"model":"m","messages":[{"content":"a"}]}`, noPrefix: NoPrefixRoleShape},
		{name: "role a number", path: pathMessages, body: `{"model":"m","messages":[{"role":1,"content":"a"}]}`, noPrefix: NoPrefixRoleShape},
		{name: "content a number", path: pathMessages, body: `{"model":"m","messages":[{"role":"user","content":5}]}`, noPrefix: NoPrefixContentShape},
		{name: "content an object", path: pathMessages, body: `{"model":"m","messages":[{"role":"user","content":{"type":"text","text":"a"}}]}`, noPrefix: NoPrefixContentShape},
		{name: "block not an object", path: pathMessages, body: `{"model":"m","messages":[{"role":"user","content":["a"]}]}`, noPrefix: NoPrefixContentShape},
		{name: "block without a type", path: pathMessages, body: `{"model":"m","messages":[{"role":"user","content":[{"text":"a"}]}]}`, noPrefix: NoPrefixContentShape},
		{name: "block type a number", path: pathMessages, body: `{"model":"m","messages":[{"role":"user","content":[{"type":3,"text":"a"}]}]}`, noPrefix: NoPrefixContentShape},
		{name: "image source a string", path: pathMessages, body: `{"model":"m","messages":[{"role":"user","content":[{"type":"image","source":"x"}]}]}`, noPrefix: NoPrefixContentShape},
		{name: "tool result content a number", path: pathMessages, body: `{"model":"m","messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":5}]}]}`, noPrefix: NoPrefixContentShape},
		{name: "tool result block without type", path: pathMessages, body: `{"model":"m","messages":[{"role":"user","content":[{"type":"tool_result","content":[{}]}]}]}`, noPrefix: NoPrefixContentShape},
		{name: "system a number", path: pathMessages, body: `{"model":"m","system":5,"messages":[{"role":"user","content":"a"}]}`, noPrefix: NoPrefixSystemShape},
		{name: "system an object", path: pathMessages, body: `{"model":"m","system":{"text":"S"},"messages":[{"role":"user","content":"a"}]}`, noPrefix: NoPrefixSystemShape},
		{name: "system block not an object", path: pathMessages, body: `{"model":"m","system":["S"],"messages":[{"role":"user","content":"a"}]}`, noPrefix: NoPrefixSystemShape},
		{name: "system block without type", path: pathMessages, body: `{"model":"m","system":[{"text":"S"}],"messages":[{"role":"user","content":"a"}]}`, noPrefix: NoPrefixSystemShape},
		{name: "missing model", path: pathMessages, body: `{"messages":[{"role":"user","content":"a"}]}`, err: ErrMissingModel},
		{name: "model a number", path: pathMessages, body: `{"model":3,"messages":[]}`, err: ErrMissingModel},
		{name: "array body", path: pathMessages, body: `[{"model":"m"}]`, err: ErrMalformedJSON},
		{name: "truncated", path: pathMessages, body: `{"model":"m","messages":[{"role":"user","content":"a"`, err: ErrMalformedJSON},
		{name: "count_tokens", path: pathCount, body: `{"model":"m","system":"S","messages":[{"role":"user","content":"hi"}]}`, noPrefix: NoPrefixCountTokens},
		{name: "count_tokens of an odd body", path: pathCount, body: `{"model":"m","messages":7}`, noPrefix: NoPrefixCountTokens},
		{name: "count_tokens without model", path: pathCount, body: `{"messages":[]}`, err: ErrMissingModel},
		{name: "count_tokens not JSON", path: pathCount, body: `hello`, err: ErrMalformedJSON},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := Parse(tt.path, []byte(tt.body), small)
			if tt.err != nil {
				require.ErrorIs(t, err, tt.err)
				assert.Nil(t, req)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, "m", req.Model)
			assert.Equal(t, tt.stream, req.Stream)
			assert.False(t, req.IncludeUsage)
			assert.Equal(t, tt.noPrefix, req.NoPrefix)
			if tt.noPrefix != "" {
				assert.Zero(t, req.Keys.Leading)
				assert.Empty(t, req.Keys.Blocks)
				return
			}
			assert.Contains(t, []Endpoint{EndpointMessages}, req.Endpoint)
			assert.NotZero(t, req.Keys.Leading)
			assert.Equal(t, req.PromptBytes/small.BlockSize, len(req.Keys.Blocks))
		})
	}
}

// TestParseModelOnlyEndpoints checks that the inference endpoints with no
// prompt cache to follow (embeddings, rerank and score, tokenize, Anthropic
// count_tokens) yield their model and no prefix, so they are routed by
// model and load.
func TestParseModelOnlyEndpoints(t *testing.T) {
	tests := []struct {
		path     string
		body     string
		model    string
		endpoint Endpoint
		noPrefix string
	}{
		{"/v1/embeddings", `{"model":"emb","input":["a","b"],"encoding_format":"float"}`, "emb", EndpointUnknown, NoPrefixEndpoint},
		{"/v1/embeddings", `{"model":"emb","input":[[1,2,3]]}`, "emb", EndpointUnknown, NoPrefixEndpoint},
		{"/v1/rerank", `{"model":"rr","query":"q","documents":["a","b"],"top_n":1}`, "rr", EndpointUnknown, NoPrefixEndpoint},
		{"/v2/rerank", `{"model":"rr","query":"q","documents":[{"text":"a"}]}`, "rr", EndpointUnknown, NoPrefixEndpoint},
		{"/rerank", `{"model":"rr","query":"q","documents":["a"]}`, "rr", EndpointUnknown, NoPrefixEndpoint},
		{"/v1/score", `{"model":"sc","text_1":"a","text_2":["b","c"]}`, "sc", EndpointUnknown, NoPrefixEndpoint},
		{"/score", `{"model":"sc","text_1":"a","text_2":"b"}`, "sc", EndpointUnknown, NoPrefixEndpoint},
		{"/tokenize", `{"model":"tk","prompt":"hello"}`, "tk", EndpointUnknown, NoPrefixEndpoint},
		{"/tokenize", `{"model":"tk","messages":[{"role":"user","content":"hello"}],"add_generation_prompt":true}`, "tk", EndpointUnknown, NoPrefixEndpoint},
		{"/detokenize", `{"model":"tk","tokens":[1,2,3]}`, "tk", EndpointUnknown, NoPrefixEndpoint},
		{"/tokenize", `{"prompt":"no model"}`, "", EndpointUnknown, NoPrefixEndpoint},
		{"/v1/embeddings", `{"model":7,"input":"x"}`, "", EndpointUnknown, NoPrefixEndpoint},
		{pathCount, `{"model":"claude-x","messages":[{"role":"user","content":"hi"}],"tools":[]}`, "claude-x", EndpointCountTokens, NoPrefixCountTokens},
	}
	for _, tt := range tests {
		t.Run(tt.path+" "+tt.body, func(t *testing.T) {
			req := mustParse(t, tt.path, tt.body, small)
			assert.Equal(t, tt.endpoint, req.Endpoint)
			assert.Equal(t, tt.model, req.Model)
			assert.Equal(t, tt.noPrefix, req.NoPrefix)
			assert.False(t, req.Stream)
			assert.Zero(t, req.Keys.Leading)
			assert.Empty(t, req.Keys.Blocks)
			assert.Zero(t, req.PromptBytes)
		})
	}
}

// agentBody is a coding agent's request: 20 tools with long descriptions
// and schemas, a long system prompt and a conversation, as chat (false)
// or as messages (true).
func agentBody(messages bool) []byte {
	var tools []map[string]any
	for i := range 20 {
		schema := map[string]any{"type": "object", "properties": map[string]any{
			"path": map[string]any{"type": "string", "description": strings.Repeat("The file to read. ", 10)},
			"n":    map[string]any{"type": "integer"}}, "required": []string{"path"}}
		name, desc := fmt.Sprintf("tool_%d", i), strings.Repeat("Reads a file from the workspace and returns it. ", 20)
		if messages {
			tools = append(tools, map[string]any{"name": name, "description": desc, "input_schema": schema})
		} else {
			tools = append(tools, map[string]any{"type": "function", "function": map[string]any{"name": name, "description": desc, "parameters": schema}})
		}
	}
	sys := strings.Repeat("You are a coding agent. Follow the rules. ", 300)
	turns := []map[string]any{}
	for i := range 10 {
		turns = append(turns, map[string]any{"role": "user", "content": fmt.Sprintf("step %d: %s", i, strings.Repeat("do the thing ", 50))},
			map[string]any{"role": "assistant", "content": strings.Repeat("done ", 100)})
	}
	body := map[string]any{"model": "m", "tools": tools}
	if messages {
		body["system"] = sys
		body["messages"] = turns
	} else {
		body["messages"] = append([]map[string]any{{"role": "system", "content": sys}}, turns...)
	}
	b, _ := json.Marshal(body)
	return b
}

func benchmarkAgent(b *testing.B, path string, messages bool) {
	body := agentBody(messages)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(path, body, ParseConfig{Deployment: "d"}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseAgentChat(b *testing.B)     { benchmarkAgent(b, pathChat, false) }
func BenchmarkParseAgentMessages(b *testing.B) { benchmarkAgent(b, pathMessages, true) }
