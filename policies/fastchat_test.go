package policies

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

func parseBoth(t *testing.T, body []byte, cfg ParseConfig) {
	t.Helper()
	useFastChat = false
	slow, errS := Parse("/v1/chat/completions", body, cfg)
	useFastChat = true
	fast, ok := fastChat(body, cfg.withDefaults())
	if !ok {
		return
	}
	if errS != nil {
		t.Fatalf("fast path accepted a body the general path rejects (%v): %q", errS, body)
	}
	if !reflect.DeepEqual(slow, fast) {
		t.Fatalf("mismatch on %q:\nslow %+v\nfast %+v", body, slow, fast)
	}
}

func TestFastChatMatchesGeneral(t *testing.T) {
	cfg := ParseConfig{Deployment: "d", BlockSize: 16, MaxBlocks: 64}
	bodies := []string{
		`{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}`,
		`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}]}`,
		`{"model":"m","stream":1,"stream_options":{"include_usage":true,"include_usage":false},"messages":[{"role":"user","content":"x"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"caf\u00e9 \ud83d\ude00 \ud800 \n\t\"\\"}]}`,
		`{"model":"m","cache_salt":"s","tools":[{"type":"function","x":[1,2.5e3,-0.1,true,null]}],"messages":[{"role":"developer","content":"d"},{"role":"user","content":null}]}`,
		`{"model":"m","functions":{"a":1},"tools":null,"messages":[{"role":"user","content":"q","extra":{"k":[]}}]}`,
		`{"Model":"m","messages":[{"role":"user","content":"q"}]}`,
		`{"model":"m","messages":[{"Role":"user","content":"q"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"q"}]} x`,
		`{"model":"m","messages":[{"role":"user","content":"q\u0001"}]}`,
		"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\x01b\"}]}",
		"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"caf\xc3\xa9 \xff\"}]}",
		`{"model":"m","n":01,"messages":[{"role":"user","content":"q"}]}`,
		`{"model":"m","n":1.,"messages":[{"role":"user","content":"q"}]}`,
		`{"model":"m","n":-1.5E+3,"messages":[{"role":"user","content":"q"}]}`,
		`{"model":"m","s":"\x","messages":[{"role":"user","content":"q"}]}`,
		`{"model":"m","s":"\u12G4","messages":[{"role":"user","content":"q"}]}`,
		` { "model" : "m" , "messages" : [ { "role" : "user" , "content" : "q" } ] } `,
		`{"model":"m","messages":[{"role":"","content":"q"}]}`,
		`{"model":"","messages":[{"role":"u","content":"q"}]}`,
		`{"model":"m","messages":[]}`,
		`{"model":"m","messages":[{"role":"user","content":"q"}],"messages":[{"role":"user","content":"r"}]}`,
		`{"model":"m","stream_options":"x","messages":[{"role":"user","content":"q"}]}`,
		`{"model":"m","stream_options":{"Include_Usage":true},"messages":[{"role":"user","content":"q"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"q"},]}`,
		`{"model":"m","messages":[{"role":"user","content":"q"}],}`,
		`{"model":"m","messages":[{"role":"user","content":"q"}]`,
	}
	for _, b := range bodies {
		parseBoth(t, []byte(b), cfg)
		parseBoth(t, []byte(b), ParseConfig{})
	}
	// Random bodies and every truncation and single-byte mutation of them.
	r := rand.New(rand.NewPCG(3, 4))
	alpha := []string{"a", " ", "\\n", "\\\"", "\\u00e9", "é", "x y", "{", "}", "[", "]", ",", ":", "\\\\"}
	for iter := 0; iter < 300; iter++ {
		var sb strings.Builder
		fmt.Fprintf(&sb, `{"model":"m%d","stream":%v,"messages":[`, iter%3, iter%2 == 0)
		n := 1 + r.IntN(4)
		for i := range n {
			if i > 0 {
				sb.WriteString(",")
			}
			role := []string{"system", "user", "assistant", "developer"}[r.IntN(4)]
			var c strings.Builder
			for range r.IntN(40) {
				c.WriteString(alpha[r.IntN(len(alpha))])
			}
			fmt.Fprintf(&sb, `{"role":%q,"content":"%s"}`, role, c.String())
		}
		sb.WriteString(`],"temperature":0.7}`)
		body := []byte(sb.String())
		parseBoth(t, body, cfg)
		for cut := 0; cut < len(body); cut += 1 + r.IntN(5) {
			parseBoth(t, body[:cut], cfg)
			m := append([]byte(nil), body...)
			m[cut] = "{}[],:\"\\ a0-e.tfn\x01\xff"[r.IntN(18)]
			parseBoth(t, m, cfg)
		}
	}
}

func FuzzFastChat(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		parseBoth(t, body, ParseConfig{Deployment: "d", BlockSize: 16, MaxBlocks: 64})
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
