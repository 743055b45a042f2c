package caddymodule

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// usageDocs are usage shapes read meets, and odd ones.
var usageDocs = []string{
	`{"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":1024,"completion_tokens":6,"total_tokens":1030,"prompt_tokens_details":{"cached_tokens":512}}}`,
	`{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0}}}`,
	`{"choices":[],"usage":{"prompt_tokens":100}}`, `{"choices":null,"usage":{"prompt_tokens":100,"prompt_tokens_details":null}}`,
	`{"usage":{}}`, `{"usage":null}`, `{"choices":[{}]}`, `{}`, `{"usage":{"prompt_tokens":1.5}}`, `{"usage":{"prompt_tokens":"1"}}`,
	`{"usage":{"prompt_tokens":100,"input_tokens_details":{"cached_tokens":3},"input_tokens":100}}`,
	`{"type":"message_start","message":{"usage":{"input_tokens":5,"cache_read_input_tokens":7}}}`,
	`{"timings":{"cache_n":5,"prompt_n":9}}`, `{"tokens_cached":5,"tokens_evaluated":9}`,
	`{"Usage":{"prompt_tokens":1}}`, `{"usage":{"Prompt_Tokens":1}}`, `{"usage":{"prompt_tokens":1},"usage":{"prompt_tokens":2}}`,
	`{"usage":{"prompt_tokens_details":{"cached_tokens":5,"cached_tokens":6}}}`, `{"usage":{"prompt_tokens_details":[]}}`,
	`{"choices":{},"usage":{"prompt_tokens":1}}`, `{"usage":{"prompt_tokens":1}} x`, `[]`, `null`,
	`{"usage":{"prompt_tokens":-3,"total_tokens":0,"completion_tokens":4}}`,
	`{"response":{"usage":{"input_tokens":4,"input_tokens_details":{"cached_tokens":2}}}}`,
}

// anthropicUsageDocs are Anthropic-shaped usage events, as Anthropic, vLLM
// and SGLang send them, and odd ones; the first anthropicCommon are the
// common shapes, which scanAnthropicUsage must take.
var anthropicUsageDocs = []string{
	`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"usage":{"input_tokens":512,"cache_read_input_tokens":12800,"output_tokens":1}}}`,
	`{"type":"message_start","message":{"usage":{"input_tokens":3,"cache_creation_input_tokens":40,"cache_read_input_tokens":100,"output_tokens":1}}}`,
	`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}`,
	`{"type":"message_delta","delta":{},"usage":{"input_tokens":5,"cache_read_input_tokens":100,"cache_creation_input_tokens":7,"output_tokens":15}}`,
	`{"type":"message_start","message":{"usage":{"input_tokens":512,"output_tokens":1}}}`,
	`{"id":"msg_1","type":"message","content":[{"type":"text","text":"x"}],"usage":{"input_tokens":9,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":2}}`,
	`{"type":"message_start","message":{"usage":{"input_tokens":5,"cache_read_input_tokens":null}}}`,
	`{"type":"message_start","message":{"usage":null}}`, `{"type":"message_start","message":null,"usage":null}`,
	`{"type":"","usage":{"input_tokens":3}}`, `{"type":null,"usage":{"input_tokens":3,"total_tokens":4}}`,
	`{"type":5,"usage":{"input_tokens":1}}`, `{"type":"a\u0041","usage":{"output_tokens":1}}`,
	`{"type":"message_start","Message":{"usage":{}}}`, `{"message":{"Usage":{"input_tokens":1}}}`,
	`{"message":{"usage":{"input_tokens":1,"Cache_Read_Input_Tokens":2}}}`, `{"message":[],"usage":{}}`,
	`{"message":{"usage":{"input_tokens":1,"input_tokens":2}}}`, `{"message":{"usage":{"output_tokens":1.5,"input_tokens":2}}}`,
	`{"usage":{"input_tokens":1,"cache_read_input_tokens":"2"}}`, `{"usage":{"input_tokens":-4,"cache_read_input_tokens":2,"output_tokens":3}}`,
	`{"choices":[null],"usage":{"input_tokens":2}}`, `{"choices":[],"usage":{"input_tokens":2}}`, `{"choices":{},"usage":{"input_tokens":2}}`,
	`{"usage":{"input_tokens":2,"prompt_tokens_details":{"cached_tokens":1}}}`, `{"type":"message_delta","usage":{"output_tokens":1}} x`,
	`{"type":"message_start","message":{"usage":{"input_tokens":1}},"timings":{"cache_n":1}}`,
	`{"type":"message_delta","usage":{"prompt_tokens":5,"completion_tokens":2,"output_tokens":1}}`,
	`{"type":"message_delta","usage":{"prompt_tokens":5,"total_tokens":9}}`,
}

const anthropicCommon = 6

// checkScanUsage fails when read through scanUsage ends otherwise than
// through encoding/json alone.
func checkScanUsage(t *testing.T, doc []byte) bool {
	t.Helper()
	_, fast := scanUsage(doc)
	a, b := &usageSniffer{promptTokens: 3}, &usageSniffer{promptTokens: 3}
	ra, rb := a.read(doc), b.readDecoded(doc)
	if ra != rb || a.found != b.found || a.cached != b.cached || a.promptTokens != b.promptTokens || a.usageTokens != b.usageTokens {
		t.Fatalf("read(%q) = %v %+v, encoding/json %v %+v", doc, ra, *a, rb, *b)
	}
	return fast
}

// TestScanUsageMatchesDecoder proves the one-pass usage reader ends as
// encoding/json does on every document, and takes the common shapes.
func TestScanUsageMatchesDecoder(t *testing.T) {
	for i, d := range usageDocs {
		if fast := checkScanUsage(t, []byte(d)); i < 5 && !fast {
			t.Errorf("common shape declined: %s", d)
		}
	}
	mutate(rand.New(rand.NewPCG(5, 6)), usageDocs, "{}[]\":,01.-enultUP \\\xff", 20000, func(b []byte) { checkScanUsage(t, b) })
}

// TestScanAnthropicUsageMatchesDecoder proves the same of Anthropic's
// shape: read ends as encoding/json does on every document and mutation,
// the common shapes are taken, and enough mutations are taken that the
// comparison covers the scanner (the counts).
func TestScanAnthropicUsageMatchesDecoder(t *testing.T) {
	taken := func(doc []byte) bool {
		var u usageDoc
		var st anthropicStore
		_, openAI := scanUsage(doc)
		return !openAI && scanAnthropicUsage(doc, &u, &st)
	}
	for i, d := range anthropicUsageDocs {
		checkScanUsage(t, []byte(d))
		if i < anthropicCommon && !taken([]byte(d)) {
			t.Errorf("common shape declined: %s", d)
		}
	}
	var n, took int
	mutate(rand.New(rand.NewPCG(9, 10)), anthropicUsageDocs, "{}[]\":,01.-enultUIpc_ \\\xff", 30000, func(b []byte) {
		checkScanUsage(t, b)
		n++
		if taken(b) {
			took++
		}
	})
	t.Logf("%d mutations, %d taken by the one-pass reader", n, took)
	if took < n/10 || took == n {
		t.Errorf("%d of %d mutations taken: the comparison does not cover both paths", took, n)
	}
}

func FuzzScanUsage(f *testing.F) {
	for _, d := range append(append([]string{}, usageDocs...), anthropicUsageDocs...) {
		f.Add([]byte(d))
	}
	f.Fuzz(func(t *testing.T, doc []byte) { checkScanUsage(t, doc) })
}

// TestMarksMatchContains proves marks says what bytes.Contains of each
// pattern says, on short and long mixes of the patterns, their fragments
// and the bytes around them, at every alignment; the counts show both
// answers of each mark were met.
func TestMarksMatchContains(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	pieces := []string{`"finish_reason":"`, `"finish_reason": "`, `"type":"message_stop"`, `"usage"`, `"timings"`, `"tokens_cached"`, `"`, `x`, `finish_reason`, `"usag`, `:`, ` `, `"#`, `""`, `"content":" token"`, "\""}
	var finishes, usages, n int
	for range 40000 {
		var b []byte
		for range r.IntN(24) {
			b = append(b, pieces[r.IntN(len(pieces))]...)
		}
		finish, usage := marks(b)
		wantF := bytes.Contains(b, []byte(`"finish_reason":"`)) || bytes.Contains(b, []byte(`"finish_reason": "`)) || bytes.Contains(b, []byte(`"type":"message_stop"`))
		wantU := bytes.Contains(b, []byte(`"usage"`)) || bytes.Contains(b, []byte(`"timings"`)) || bytes.Contains(b, []byte(`"tokens_cached"`))
		if finish != wantF || usage != wantU {
			t.Fatalf("marks(%q) = %v %v, Contains %v %v", b, finish, usage, wantF, wantU)
		}
		n++
		if finish {
			finishes++
		}
		if usage {
			usages++
		}
	}
	t.Logf("%d docs: %d with a finish mark, %d with a usage mark", n, finishes, usages)
	for _, c := range []int{finishes, usages, n - finishes, n - usages} {
		if c < 5000 {
			t.Fatalf("too few of one answer: %d finish, %d usage of %d", finishes, usages, n)
		}
	}
}

// BenchmarkMarks looks for the finish and usage marks in a content chunk,
// as the usage sniffer does for every streamed event.
func BenchmarkMarks(b *testing.B) {
	doc := benchSSEChunk[len("data: ") : len(benchSSEChunk)-2]
	b.SetBytes(int64(len(doc)))
	for b.Loop() {
		if f, u := marks(doc); f || u {
			b.Fatal("a content chunk has no mark")
		}
	}
}

// BenchmarkScanUsage reads the usage chunk as the usage sniffer does.
func BenchmarkScanUsage(b *testing.B) {
	doc := benchSSEUsage[len("data: ") : len(benchSSEUsage)-2]
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := scanUsage(doc); !ok {
			b.Fatal("declined")
		}
	}
}
