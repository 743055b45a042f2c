package policies

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// small makes blocks out of short test prompts.
var small = ParseConfig{Deployment: "d", BlockSize: 8, MaxBlocks: 1024}

func mustParse(t testing.TB, path, body string, cfg ParseConfig) *Request {
	t.Helper()
	req, err := Parse(path, []byte(body), cfg)
	require.NoError(t, err, body)
	return req
}

func TestParseShapes(t *testing.T) {
	deep := `{"model":"m","messages":[{"role":"user","content":"hi"}],"x":` +
		strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `}`
	tooDeep := `{"model":"m","x":` + strings.Repeat(`{"a":`, 20000) + `1` + strings.Repeat("}", 20000) + `}`
	tests := []struct {
		name      string
		path      string
		body      string
		err       error
		endpoint  Endpoint
		model     string
		stream    bool
		usage     bool
		salt      string
		noPrefix  string
		minBlocks int // at least this many blocks (only when noPrefix is "")
	}{
		{name: "chat string content", path: "/v1/chat/completions",
			body:     `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hello there"}]}`,
			endpoint: EndpointChat, model: "m", minBlocks: 3},
		{name: "chat trailing slash, stream and usage", path: "/v1/chat/completions/",
			body:     `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello"}]}`,
			endpoint: EndpointChat, model: "m", stream: true, usage: true, minBlocks: 1},
		{name: "chat stream not a bool", path: "/v1/chat/completions",
			body:     `{"model":"m","stream":"true","stream_options":"yes","messages":[{"role":"user","content":"hello"}]}`,
			endpoint: EndpointChat, model: "m", minBlocks: 1},
		{name: "chat parts", path: "/v1/chat/completions",
			body:     `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"what is this"},{"type":"image_url","image_url":{"url":"https://x/y.png"}},{"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}}]}]}`,
			endpoint: EndpointChat, model: "m", minBlocks: 5},
		{name: "chat tools, developer, tool calls, salt", path: "/v1/chat/completions",
			body: `{"model":"m","cache_salt":"s1","tools":[{"type":"function","function":{"name":"f","parameters":{}}}],
			"messages":[{"role":"developer","content":"use tools"},{"role":"user","content":"weather?","name":"bob"},
			{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},
			{"role":"tool","tool_call_id":"c1","content":"sunny"}]}`,
			endpoint: EndpointChat, model: "m", salt: "s1", minBlocks: 8},
		{name: "chat tool arguments as object", path: "/v1/chat/completions",
			body:     `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c1","function":{"name":"f","arguments":{"a":1}}}]}]}`,
			endpoint: EndpointChat, model: "m", minBlocks: 2},
		{name: "chat tool_calls not an array", path: "/v1/chat/completions",
			body:     `{"model":"m","messages":[{"role":"assistant","tool_calls":{"id":"c1"}}]}`,
			endpoint: EndpointChat, model: "m", minBlocks: 2},
		{name: "chat messages as a string", path: "/v1/chat/completions",
			body:     `{"model":"m","messages":"hello"}`,
			endpoint: EndpointChat, model: "m", noPrefix: NoPrefixMessagesShape},
		{name: "chat message not an object", path: "/v1/chat/completions",
			body:     `{"model":"m","messages":[{"role":"user","content":"a"}, 42]}`,
			endpoint: EndpointChat, model: "m", noPrefix: NoPrefixMessagesShape},
		{name: "chat messages as a number", path: "/v1/chat/completions",
			body:     `{"model":"m","messages":7,"stream":true}`,
			endpoint: EndpointChat, model: "m", stream: true, noPrefix: NoPrefixMessagesShape},
		{name: "chat messages as an object", path: "/v1/chat/completions",
			body:     `{"messages":{"role":"user","content":"hi"},"model":"m"}`,
			endpoint: EndpointChat, model: "m", noPrefix: NoPrefixMessagesShape},
		{name: "chat content as a number", path: "/v1/chat/completions",
			body:     `{"model":"m","messages":[{"role":"user","content":42}]}`,
			endpoint: EndpointChat, model: "m", noPrefix: NoPrefixContentShape},
		{name: "chat part not an object", path: "/v1/chat/completions",
			body:     `{"model":"m","messages":[{"role":"user","content":["a"]}]}`,
			endpoint: EndpointChat, model: "m", noPrefix: NoPrefixContentShape},
		{name: "chat role missing", path: "/v1/chat/completions",
			body:     `{"model":"m","messages":[{"content":"a"}]}`,
			endpoint: EndpointChat, model: "m", noPrefix: NoPrefixRoleShape},
		{name: "chat empty messages", path: "/v1/chat/completions",
			body:     `{"model":"m","messages":[]}`,
			endpoint: EndpointChat, model: "m", noPrefix: NoPrefixNoMessages},
		{name: "chat no messages", path: "/v1/chat/completions",
			body:     `{"model":"m"}`,
			endpoint: EndpointChat, model: "m", noPrefix: NoPrefixNoMessages},
		{name: "chat null messages", path: "/v1/chat/completions",
			body:     `{"model":"m","messages":null}`,
			endpoint: EndpointChat, model: "m", noPrefix: NoPrefixNoMessages},
		{name: "chat deeply nested junk in content", path: "/v1/chat/completions",
			body:     `{"model":"m","messages":[{"role":"user","content":[{"type":"x","text":` + strings.Repeat("[", 3000) + strings.Repeat("]", 3000) + `}]}]}`,
			endpoint: EndpointChat, model: "m", minBlocks: 1},
		{name: "chat unicode and escapes", path: "/v1/chat/completions",
			body:     `{"model":"m","messages":[{"role":"user","content":"caf\u00e9 \ud83d\ude00 \ud800 \n\t\"\\ ünï"}]}`,
			endpoint: EndpointChat, model: "m", minBlocks: 2},
		{name: "chat deeply nested junk elsewhere", path: "/v1/chat/completions",
			body: deep, endpoint: EndpointChat, model: "m", minBlocks: 1},
		{name: "chat nesting past the decoder's limit", path: "/v1/chat/completions",
			body: tooDeep, err: ErrMalformedJSON},
		{name: "missing model", path: "/v1/chat/completions",
			body: `{"messages":[{"role":"user","content":"hello"}]}`, err: ErrMissingModel},
		{name: "model not a string", path: "/v1/responses",
			body: `{"model":7,"input":"hi"}`, err: ErrMissingModel},
		{name: "empty model", path: "/v1/completions",
			body: `{"model":"","prompt":"hi"}`, err: ErrMissingModel},
		{name: "array body", path: "/v1/chat/completions", body: `[{"model":"m"}]`, err: ErrMalformedJSON},
		{name: "string body", path: "/v1/completions", body: `"hello"`, err: ErrMalformedJSON},
		{name: "empty body", path: "/v1/responses", body: ``, err: ErrMalformedJSON},
		{name: "truncated body", path: "/v1/chat/completions", body: `{"model":"m","messages":[`, err: ErrMalformedJSON},
		{name: "responses string input", path: "/v1/responses",
			body:     `{"model":"m","instructions":"be brief","input":"hello there","stream":true}`,
			endpoint: EndpointResponses, model: "m", stream: true, minBlocks: 3},
		{name: "responses items", path: "/v1/responses",
			body: `{"model":"m","input":[{"role":"user","content":"weather?"},
			{"type":"message","role":"assistant","content":[{"type":"output_text","text":"checking"}]},
			{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},
			{"type":"function_call_output","call_id":"c1","output":"sunny"},
			{"type":"message","role":"user","content":[{"type":"input_text","text":"thanks"},{"type":"input_image","image_url":"https://x/y.png"}]},
			{"type":"reasoning","id":"r1","summary":[]}]}`,
			endpoint: EndpointResponses, model: "m", minBlocks: 10},
		{name: "responses input odd", path: "/v1/responses",
			body:     `{"model":"m","input":{"text":"hi"}}`,
			endpoint: EndpointResponses, model: "m", noPrefix: NoPrefixInputShape},
		{name: "responses input items not objects", path: "/v1/responses",
			body:     `{"model":"m","input":["hi", 3]}`,
			endpoint: EndpointResponses, model: "m", noPrefix: NoPrefixInputShape},
		{name: "responses instructions only in items", path: "/v1/responses/",
			body:     `{"model":"m","input":[{"role":"developer","content":"rules"},{"role":"user","content":"go"}]}`,
			endpoint: EndpointResponses, model: "m", minBlocks: 4},
		{name: "responses empty input", path: "/v1/responses",
			body:     `{"model":"m","input":[]}`,
			endpoint: EndpointResponses, model: "m", noPrefix: NoPrefixNoInput},
		{name: "responses no input", path: "/v1/responses",
			body:     `{"model":"m","instructions":"x"}`,
			endpoint: EndpointResponses, model: "m", noPrefix: NoPrefixNoInput},
		{name: "responses item content odd", path: "/v1/responses",
			body:     `{"model":"m","input":[{"role":"user","content":true}]}`,
			endpoint: EndpointResponses, model: "m", noPrefix: NoPrefixContentShape},
		{name: "completions string", path: "/v1/completions",
			body:     `{"model":"m","prompt":"once upon a time"}`,
			endpoint: EndpointCompletions, model: "m", minBlocks: 2},
		{name: "completions array of strings", path: "/v1/completions",
			body:     `{"model":"m","prompt":["once upon a time","there was"]}`,
			endpoint: EndpointCompletions, model: "m", minBlocks: 3},
		{name: "completions token ids", path: "/v1/completions",
			body:     `{"model":"m","prompt":[101, 2023, 2003, 1037, 3231]}`,
			endpoint: EndpointCompletions, model: "m", minBlocks: 2},
		{name: "completions token id batches", path: "/v1/completions",
			body:     `{"model":"m","prompt":[[101, 2023], [2003, 1037, 3231]]}`,
			endpoint: EndpointCompletions, model: "m", minBlocks: 2},
		{name: "completions mixed array", path: "/v1/completions",
			body:     `{"model":"m","prompt":["a", 1]}`,
			endpoint: EndpointCompletions, model: "m", noPrefix: NoPrefixPromptShape},
		{name: "completions prompt object", path: "/v1/completions",
			body:     `{"model":"m","prompt":{"a":1}}`,
			endpoint: EndpointCompletions, model: "m", noPrefix: NoPrefixPromptShape},
		{name: "completions no prompt", path: "/v1/completions",
			body:     `{"model":"m"}`,
			endpoint: EndpointCompletions, model: "m", noPrefix: NoPrefixNoPrompt},
		{name: "unknown path with JSON", path: "/v1/embeddings",
			body:     `{"model":"e","input":"hello","stream":true}`,
			endpoint: EndpointUnknown, model: "e", stream: true, noPrefix: NoPrefixEndpoint},
		{name: "unknown path, empty body", path: "/v1/models",
			endpoint: EndpointUnknown, noPrefix: NoPrefixEndpoint},
		{name: "unknown path, not JSON", path: "/metrics", body: `<html>`,
			endpoint: EndpointUnknown, noPrefix: NoPrefixEndpoint},
		{name: "unknown path, no model", path: "/v2/chat/completions", body: `{"messages":[]}`,
			endpoint: EndpointUnknown, noPrefix: NoPrefixEndpoint},
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
			assert.Equal(t, tt.endpoint, req.Endpoint)
			assert.Equal(t, tt.model, req.Model)
			assert.Equal(t, tt.stream, req.Stream)
			assert.Equal(t, tt.usage, req.IncludeUsage)
			assert.Equal(t, tt.salt, req.CacheSalt)
			assert.Equal(t, tt.noPrefix, req.NoPrefix)
			if tt.noPrefix != "" {
				assert.Zero(t, req.Keys.Leading)
				assert.Empty(t, req.Keys.Blocks)
				return
			}
			assert.NotZero(t, req.Keys.Leading)
			assert.GreaterOrEqual(t, len(req.Keys.Blocks), tt.minBlocks)
			assert.Equal(t, min(ChainBlocks(req.PromptBytes, small.BlockSize), small.MaxBlocks), len(req.Keys.Blocks))
		})
	}
}

// chatBodyOf builds a chat body from alternating role, content pairs.
func chatBodyOf(t testing.TB, extra string, rc ...string) string {
	t.Helper()
	var msgs []map[string]string
	for i := 0; i+1 < len(rc); i += 2 {
		msgs = append(msgs, map[string]string{"role": rc[i], "content": rc[i+1]})
	}
	b, err := json.Marshal(msgs)
	require.NoError(t, err)
	return fmt.Sprintf(`{"model":"m"%s,"messages":%s}`, extra, b)
}

func TestParseLeadingKey(t *testing.T) {
	const chat = "/v1/chat/completions"
	base := mustParse(t, chat, chatBodyOf(t, "", "system", "S", "user", "U1"), small).Keys.Leading
	tests := []struct {
		name string
		body string
		same bool
	}{
		{"another user turn", chatBodyOf(t, "", "system", "S", "user", "U2"), true},
		{"longer conversation", chatBodyOf(t, "", "system", "S", "user", "U1", "assistant", "A", "user", "U2"), true},
		{"other system prompt", chatBodyOf(t, "", "system", "S2", "user", "U1"), false},
		{"developer instead of system", chatBodyOf(t, "", "developer", "S", "user", "U1"), false},
		{"second leading message", chatBodyOf(t, "", "system", "S", "developer", "D", "user", "U1"), false},
		{"system after a user turn is not leading", chatBodyOf(t, "", "system", "S", "user", "U1", "system", "late"), true},
		// Tools follow the system prompt in the chain, outside the
		// leading key (TestToolsFollowTheSystemPrompt).
		{"tools", chatBodyOf(t, `,"tools":[{"type":"function"}]`, "system", "S", "user", "U1"), true},
		{"null tools", chatBodyOf(t, `,"tools":null`, "system", "S", "user", "U1"), true},
		{"legacy functions", chatBodyOf(t, `,"functions":[{"name":"f"}]`, "system", "S", "user", "U1"), true},
		{"cache salt", chatBodyOf(t, `,"cache_salt":"x"`, "system", "S", "user", "U1"), false},
		{"stream flag", chatBodyOf(t, `,"stream":true`, "system", "S", "user", "U1"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mustParse(t, chat, tt.body, small).Keys.Leading
			if tt.same {
				assert.Equal(t, base, got)
			} else {
				assert.NotEqual(t, base, got)
			}
		})
	}
	other := small
	other.Deployment = "other"
	assert.NotEqual(t, base, mustParse(t, chat, chatBodyOf(t, "", "system", "S", "user", "U1"), other).Keys.Leading)
}

func TestLeadingKeyFieldBoundaries(t *testing.T) {
	assert.NotEqual(t, leadingKey("ab", "c", "", 0), leadingKey("a", "bc", "", 0))
	assert.NotEqual(t, leadingKey("", "ab", "c", 0), leadingKey("", "a", "bc", 0))
	assert.NotEqual(t, leadingKey("d", "", "", 0), leadingKey("", "d", "", 0))
}

// TestParseRenderedFields checks that every field the rendering includes
// changes the chain, and that what it leaves out does not.
func TestParseRenderedFields(t *testing.T) {
	const chat = "/v1/chat/completions"
	msg := func(m string) string {
		return `{"model":"m","temperature":0.5,"messages":[{"role":"user","content":"hello"},` + m + `]}`
	}
	base := mustParse(t, chat, msg(`{"role":"assistant","content":"x","tool_calls":[{"id":"c1","function":{"name":"f","arguments":"{}"}}]}`), small).Keys.Blocks
	tests := []struct {
		name string
		m    string
		same bool
	}{
		{"same", `{"role":"assistant","content":"x","tool_calls":[{"id":"c1","function":{"name":"f","arguments":"{}"}}]}`, true},
		{"key order and spacing", `{ "tool_calls":[{"function":{"arguments":"{}","name":"f"},"id":"c1","type":"function"}], "content":"x","role":"assistant"}`, true},
		{"other call id", `{"role":"assistant","content":"x","tool_calls":[{"id":"c2","function":{"name":"f","arguments":"{}"}}]}`, false},
		{"other function", `{"role":"assistant","content":"x","tool_calls":[{"id":"c1","function":{"name":"g","arguments":"{}"}}]}`, false},
		{"other arguments", `{"role":"assistant","content":"x","tool_calls":[{"id":"c1","function":{"name":"f","arguments":"{ }"}}]}`, false},
		{"name", `{"role":"assistant","name":"n","content":"x","tool_calls":[{"id":"c1","function":{"name":"f","arguments":"{}"}}]}`, false},
		{"tool_call_id", `{"role":"assistant","tool_call_id":"t","content":"x","tool_calls":[{"id":"c1","function":{"name":"f","arguments":"{}"}}]}`, false},
		{"role", `{"role":"tool","content":"x","tool_calls":[{"id":"c1","function":{"name":"f","arguments":"{}"}}]}`, false},
		{"content", `{"role":"assistant","content":"y","tool_calls":[{"id":"c1","function":{"name":"f","arguments":"{}"}}]}`, false},
		{"content as one text part", `{"role":"assistant","content":[{"type":"text","text":"x"}],"tool_calls":[{"id":"c1","function":{"name":"f","arguments":"{}"}}]}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mustParse(t, chat, msg(tt.m), small).Keys.Blocks
			if tt.same {
				assert.Equal(t, base, got)
			} else {
				assert.NotEqual(t, base, got)
			}
		})
	}

	img := func(url string) []uint64 {
		return mustParse(t, chat, `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"`+url+`"}},{"type":"text","text":"what is it?"}]}]}`, small).Keys.Blocks
	}
	assert.NotEqual(t, img("https://a/1.png"), img("https://a/2.png"))
	audio := func(data string) []uint64 {
		return mustParse(t, chat, `{"model":"m","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"`+data+`"}},{"type":"text","text":"transcribe"}]}]}`, small).Keys.Blocks
	}
	assert.NotEqual(t, audio("AAAA"), audio("BBBB"))
}

// TestParseResponsesLikeChat checks that a responses body renders like the
// equivalent chat body, so both reach the same cached prefix.
func TestParseResponsesLikeChat(t *testing.T) {
	chat := mustParse(t, "/v1/chat/completions", chatBodyOf(t, "", "system", "be brief", "user", "hello there, how are you"), small)
	resp := mustParse(t, "/v1/responses", `{"model":"m","instructions":"be brief","input":"hello there, how are you"}`, small)
	items := mustParse(t, "/v1/responses", `{"model":"m","input":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"input_text","text":"hello there, how are you"}]}]}`, small)
	require.NotEmpty(t, chat.Keys.Blocks)
	assert.Equal(t, chat.Keys, resp.Keys)
	assert.Equal(t, chat.Keys, items.Keys)
	assert.Equal(t, chat.PromptBytes, resp.PromptBytes)
}

func TestParseErrorsAreSentinels(t *testing.T) {
	_, err := Parse("/v1/chat/completions", []byte(`{"model":`), ParseConfig{})
	assert.True(t, errors.Is(err, ErrMalformedJSON))
	assert.Contains(t, err.Error(), "not a JSON object")
}

func TestParseConfigDefaults(t *testing.T) {
	body := `{"model":"m","prompt":"` + strings.Repeat("x", 1_100_000) + `"}`
	req := mustParse(t, "/v1/completions", body, ParseConfig{})
	assert.Len(t, req.Keys.Blocks, DefaultMaxBlocks)
	assert.Equal(t, 1_100_000, req.PromptBytes)
	assert.Equal(t, 1040<<10, ChainBytes(DefaultMaxBlocks, DefaultBlockSize), "the default chain reaches 1,040 KiB")
}

// TestParseCopiesPromptOnce checks that parsing a 512 KiB body allocates
// little more than one copy of it.
func TestParseCopiesPromptOnce(t *testing.T) {
	body := benchChat(512 << 10)
	cfg := ParseConfig{Deployment: "d"}
	_, err := Parse("/v1/chat/completions", body, cfg)
	require.NoError(t, err)
	const runs = 4
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < runs; i++ {
		_, _ = Parse("/v1/chat/completions", body, cfg)
	}
	runtime.ReadMemStats(&after)
	per := float64(after.TotalAlloc-before.TotalAlloc) / runs
	t.Logf("%.0f bytes allocated per %d-byte body (%.2fx)", per, len(body), per/float64(len(body)))
	assert.Less(t, per, 1.25*float64(len(body)))
}

func benchmarkParse(b *testing.B, size int) {
	body := benchChat(size)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("/v1/chat/completions", body, ParseConfig{Deployment: "d"}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParse4K(b *testing.B)   { benchmarkParse(b, 4<<10) }
func BenchmarkParse64K(b *testing.B)  { benchmarkParse(b, 64<<10) }
func BenchmarkParse512K(b *testing.B) { benchmarkParse(b, 512<<10) }

// BenchmarkParse512KEscaped is BenchmarkParse512K with the line breaks and
// quotes of real prompts (an escape every 40 bytes or so): the escaped
// strings are rendered from the body itself, not copied (B/op stays that
// of the unescaped body).
func BenchmarkParse512KEscaped(b *testing.B) {
	body := bytes.ReplaceAll(benchChat(512<<10), []byte("fox "), []byte(`fox\n\"`))
	if _, err := Parse("/v1/chat/completions", body, ParseConfig{}); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("/v1/chat/completions", body, ParseConfig{Deployment: "d"}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestParseStateFields proves the fields that route by state rather than
// prefix are read: prompt_cache_key (chat, by the fast path and the
// general one alike), previous_response_id and conversation (responses,
// as an id or an object).
func TestParseStateFields(t *testing.T) {
	for _, tt := range []struct {
		name, path, body          string
		cacheKey, previous, convo string
	}{
		{"chat prompt_cache_key", "/v1/chat/completions", `{"model":"m","prompt_cache_key":"sess-1","messages":[{"role":"user","content":"hi"}]}`, "sess-1", "", ""},
		{"chat prompt_cache_key, general path", "/v1/chat/completions", `{"model":"m","prompt_cache_key":"sess-2","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`, "sess-2", "", ""},
		{"responses previous", "/v1/responses", `{"model":"m","previous_response_id":"resp_1","input":"more"}`, "", "resp_1", ""},
		{"responses conversation id", "/v1/responses", `{"model":"m","conversation":"conv_1","input":[{"role":"user","content":"x"}]}`, "", "", "conv_1"},
		{"responses conversation object", "/v1/responses", `{"model":"m","conversation":{"id":"conv_2"},"input":"x","prompt_cache_key":"k"}`, "k", "", "conv_2"},
		{"responses conversation of another shape", "/v1/responses", `{"model":"m","conversation":7,"input":"x"}`, "", "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, err := Parse(tt.path, []byte(tt.body), ParseConfig{})
			require.NoError(t, err)
			assert.Equal(t, tt.cacheKey, req.PromptCacheKey)
			assert.Equal(t, tt.previous, req.PreviousResponseID)
			assert.Equal(t, tt.convo, req.Conversation)
		})
	}
	history, err := Parse("/v1/responses", []byte(`{"model":"m","previous_response_id":"resp_1","input":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}]}`), ParseConfig{})
	require.NoError(t, err)
	assert.True(t, history.InputHasHistory)
	delta, err := Parse("/v1/responses", []byte(`{"model":"m","previous_response_id":"resp_1","input":[{"role":"user","content":"c"}]}`), ParseConfig{})
	require.NoError(t, err)
	assert.False(t, delta.InputHasHistory)
}
