package caddymodule

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/llmroute/caddy-llmroute/policies"
)

// answerDocs are chunk and response shapes feed meets, and odd ones.
var answerDocs = []string{
	`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" token"},"finish_reason":null}]}`,
	`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
	`{"choices":[],"usage":{"prompt_tokens":100,"prompt_tokens_details":{"cached_tokens":0}}}`,
	`{"choices":[{"index":0,"message":{"role":"assistant","content":"a\nb \u00e9"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1}}`,
	`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{}"}}]}}]}`,
	`{"choices":[{"index":1,"delta":{"content":"other"}}]}`,
	`{"choices":[{"index":0,"text":"completion text"}]}`,
	`{"choices":[{"index":0,"delta":null,"message":{"content":"m"}}]}`,
	`{"choices":[{"index":0,"delta":{"content":null,"tool_calls":null,"function_call":{"name":"f"}}}]}`,
	`{"choices":[null,{"index":0,"delta":{"content":"x"}}]}`,
	`{"choices":null}`, `{}`, `null`, `[]`, `{"choices":{}}`, `{"choices":[1]}`,
	`{"choices":[{"index":"0"}]}`, `{"choices":[{"index":1.0}]}`, `{"choices":[{"index":-1}]}`,
	`{"Choices":[{"index":0,"delta":{"content":"x"}}]}`, `{"choices":[{"Delta":{"content":"x"}}]}`,
	`{"choices":[{"index":0,"delta":{"Content":"x"}}]}`, `{"choices":[],"choices":[{"index":1}]}`,
	`{"choices":[{"index":0,"delta":{"content":5}}]}`, `{"choices":[{"index":0,"delta":"x"}]}`,
	"{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\xff\"}}]}", `{"choices":[{"index":0,"delta":{"content":"\ud800"}}]}`,
	`{"choices":[{"index":0,"delta":{"content":"x"}}]} trailing`, `{"choices":[{"index":0,"delta":{"content":"x"}}]`,
	` { "choices" : [ { "index" : 0 , "delta" : { "content" : "x" } } ] } `,
}

// checkScanAnswer fails when scanAnswer accepts doc and reads it otherwise
// than encoding/json.
func checkScanAnswer(t *testing.T, doc []byte) bool {
	t.Helper()
	got, ok := scanAnswer(doc, nil)
	if !ok {
		return false
	}
	want, wok := decodeAnswer(doc, nil)
	if !wok {
		t.Fatalf("scanAnswer accepted %q, which encoding/json rejects", doc)
	}
	if len(got) == 0 && len(want) == 0 {
		return true
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("scanAnswer(%q) = %+v, encoding/json %+v", doc, got, want)
	}
	return true
}

// TestScanAnswerMatchesDecoder proves the one-pass reader of answer chunks
// reads every document it accepts as encoding/json does, on the shapes
// above and on random mutations of them, and accepts the common ones.
func TestScanAnswerMatchesDecoder(t *testing.T) {
	accepted := 0
	for _, d := range answerDocs {
		if checkScanAnswer(t, []byte(d)) {
			accepted++
		}
	}
	if accepted < 12 {
		t.Fatalf("only %d of %d shapes took the fast path", accepted, len(answerDocs))
	}
	for _, d := range answerDocs[:10] {
		if _, ok := scanAnswer([]byte(d), nil); !ok {
			t.Errorf("common shape declined: %s", d)
		}
	}
	mutate(rand.New(rand.NewPCG(3, 4)), answerDocs, "{}[]\":,01.-enultrxCD \\\xff", 20000, func(b []byte) { checkScanAnswer(t, b) })
}

// mutate calls check with n mutations of docs: one to three bytes of a
// document replaced by, deleted, or inserted from alphabet.
func mutate(r *rand.Rand, docs []string, alphabet string, n int, check func([]byte)) {
	for range n {
		b := []byte(docs[r.IntN(len(docs))])
		for range 1 + r.IntN(3) {
			i := r.IntN(len(b))
			switch r.IntN(3) {
			case 0:
				b[i] = alphabet[r.IntN(len(alphabet))]
			case 1:
				b = append(b[:i], b[i+1:]...)
			default:
				b = append(b[:i], append([]byte{alphabet[r.IntN(len(alphabet))]}, b[i:]...)...)
			}
			if len(b) == 0 {
				break
			}
		}
		check(b)
	}
}

func FuzzScanAnswer(f *testing.F) {
	for _, d := range answerDocs {
		f.Add([]byte(d))
	}
	f.Fuzz(func(t *testing.T, doc []byte) { checkScanAnswer(t, doc) })
}

// BenchmarkScanAnswer reads one streamed chunk as feed does, one pass
// against encoding/json.
func BenchmarkScanAnswer(b *testing.B) {
	doc := benchSSEChunk[len("data: ") : len(benchSSEChunk)-2]
	b.Run("scan", func(b *testing.B) {
		b.SetBytes(int64(len(doc)))
		b.ReportAllocs()
		var buf []answerChoice
		for b.Loop() {
			var ok bool
			if buf, ok = scanAnswer(doc, buf[:0]); !ok {
				b.Fatal("declined")
			}
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		b.SetBytes(int64(len(doc)))
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := decodeAnswer(doc, nil); !ok {
				b.Fatal("rejected")
			}
		}
	})
}

// TestScanResponseMatchesParts proves that reading a whole response in
// one pass (readWhole through scanResponse) ends as reading its usage and
// feeding its answer each on its own does: the same usage figures and
// the same answer text and capture state, on the shapes of both readers
// and on mutations of them; and that the pass takes the common shapes.
// (A whole response is never stripped, so read's verdict is not asked.)
func TestScanResponseMatchesParts(t *testing.T) {
	keys := answerKeys(t)
	accepted, checked := 0, 0
	check := func(doc []byte) {
		checked++
		if _, _, ok := scanResponse(doc, nil); ok {
			accepted++
		}
		a, b := &usageSniffer{promptTokens: 3}, &usageSniffer{promptTokens: 3}
		a.answer = &answerCapture{ans: policies.NewAnswer(keys)}
		b.answer = &answerCapture{ans: policies.NewAnswer(keys)}
		a.readWhole(doc)
		b.read(doc)
		b.answer.feed(doc)
		if a.found != b.found || a.cached != b.cached || a.promptTokens != b.promptTokens || a.usageTokens != b.usageTokens {
			t.Fatalf("readWhole(%q) usage %+v, read %+v", doc, *a, *b)
		}
		if !reflect.DeepEqual(a.answer, b.answer) {
			t.Fatalf("readWhole(%q) answer %+v, feed %+v", doc, *a.answer, *b.answer)
		}
	}
	docs := append(append([]string{}, answerDocs...), usageDocs...)
	for _, d := range docs {
		check([]byte(d))
	}
	if accepted < 15 {
		t.Fatalf("only %d of %d shapes took the one pass", accepted, len(docs))
	}
	for _, d := range []string{string(benchJSONAnswer), usageDocs[1], answerDocs[3]} {
		if _, _, ok := scanResponse([]byte(d), nil); !ok {
			t.Errorf("common shape declined: %s", d)
		}
	}
	mutate(rand.New(rand.NewPCG(5, 6)), docs, "{}[]\":,01.-enultrxCDU \\\xff", 20000, check)
	t.Logf("%d of %d documents read in one pass", accepted, checked)
	if accepted < checked/10 {
		t.Fatalf("only %d of %d documents read in one pass", accepted, checked)
	}
}

// answerKeys are the keys of a chat request whose answer can be captured.
func answerKeys(t *testing.T) policies.Keys {
	t.Helper()
	req, err := policies.Parse("/v1/chat/completions", answerChatBody(t, strings.Repeat("system prompt ", 20), "a question"), policies.ParseConfig{BlockSize: 32})
	if err != nil {
		t.Fatal(err)
	}
	return req.Keys
}

// BenchmarkScanResponse reads a whole JSON answer as finish does: usage
// and choices in one pass.
func BenchmarkScanResponse(b *testing.B) {
	b.SetBytes(int64(len(benchJSONAnswer)))
	b.ReportAllocs()
	var buf []answerChoice
	for b.Loop() {
		var ok bool
		if _, buf, ok = scanResponse(benchJSONAnswer, buf[:0]); !ok {
			b.Fatal("declined")
		}
	}
}
