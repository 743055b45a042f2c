package policies

import (
	"errors"
	"reflect"
	"testing"
)

// fuzzPaths are the paths FuzzParse chooses from.
var fuzzPaths = []string{"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings", "/v1/responses/",
	"/v1/messages", "/v1/messages/count_tokens"}

// Outcomes a FuzzParse seed must have besides a NoPrefix reason.
const (
	seedKeys  = "keys"  // parsed, with prefix keys
	seedError = "error" // ErrMalformedJSON or ErrMissingModel
)

// seedKey names a FuzzParse seed.
type seedKey struct {
	path uint8
	body string
}

// FuzzParse checks that Parse never panics, errs only with its two
// sentinels on known endpoints, and returns self-consistent keys. Its seed
// corpus runs with every go test, and each seed must have its own outcome
// (keys, a given NoPrefix reason, or an error), so that every branch of
// the property is taken: a Parse that failed every body would otherwise
// pass.
func FuzzParse(f *testing.F) {
	seeds := []struct {
		path int
		body string
		want string // seedKeys, seedError or the NoPrefix reason
	}{
		{0, `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}`, seedKeys},
		{0, `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":[{"type":"text","text":"what"},{"type":"image_url","image_url":{"url":"u"}}]}]}`, seedKeys},
		{0, `{"model":"m","tools":[{"type":"function"}],"messages":[{"role":"developer","content":"d"},{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"r"}]}`, seedKeys},
		{0, `{"model":"m","messages":"hello"}`, NoPrefixMessagesShape},
		{0, `{"model":"m","messages":[{"role":"user","content":42}]}`, NoPrefixContentShape},
		{0, `{"model":"m","messages":[1,[2],{"role":null}]}`, NoPrefixMessagesShape},
		{0, `{"messages":[]}`, seedError},
		{0, `[1,2,3]`, seedError},
		{0, `{"model":"m","messages":[{"role":"user","content":"caf\u00e9 \ud83d\ude00 \ud800 \n\t\"\\"}]}`, seedKeys},
		{1, `{"model":"m","prompt":"once upon a time"}`, seedKeys},
		{1, `{"model":"m","prompt":["a","b"]}`, seedKeys},
		{1, `{"model":"m","prompt":[1,2,3]}`, seedKeys},
		{1, `{"model":"m","prompt":[[1,2],[3]]}`, seedKeys},
		{1, `{"model":"m","prompt":[[1,"x"]]}`, NoPrefixPromptShape},
		{2, `{"model":"m","instructions":"be brief","input":"hi"}`, seedKeys},
		{2, `{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"ok"},{"type":"reasoning","id":"r","summary":[]}]}`, seedKeys},
		{2, `{"model":"m","input":{"x":1}}`, NoPrefixInputShape},
		{2, `{"model":"m","input":[null,"s"]}`, NoPrefixInputShape},
		{3, `{"model":"e","input":"x"}`, NoPrefixEndpoint},
		{3, ``, NoPrefixEndpoint},
		{4, `not json`, seedError},
		{5, `{"model":"m","system":[{"type":"text","text":"be brief","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"hi"}]}`, seedKeys},
		{5, `{"model":"m","tools":[{"name":"f","input_schema":{}}],"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"text","text":"t"},{"type":"tool_use","id":"u","name":"f","input":{"a":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"u","content":[{"type":"text","text":"r"}]},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]}]}`, seedKeys},
		{5, `{"model":"m","messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"x","signature":"s"},{"type":"document","source":{"type":"text","data":"d"}}]}]}`, seedKeys},
		{5, `{"model":"m","messages":"hi"}`, NoPrefixMessagesShape},
		{5, `{"model":"m","messages":[]}`, NoPrefixNoMessages},
		{5, `{"model":"m","messages":[{"role":"user","content":[{"type":"tool_result","content":7}]}]}`, NoPrefixContentShape},
		{5, `{"model":"m","messages":[{"role":["user"],"content":"a"}]}`, NoPrefixRoleShape},
		{5, `{"model":"m","system":{"a":1},"messages":[{"role":"user","content":"a"}]}`, NoPrefixSystemShape},
		{5, `{"system":"s","messages":[]}`, seedError},
		{6, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, NoPrefixCountTokens},
		{6, `{"model":""}`, seedError},
	}
	want := map[seedKey]string{}
	for _, s := range seeds {
		f.Add(uint8(s.path), []byte(s.body))
		want[seedKey{uint8(s.path), s.body}] = s.want
	}
	cfg := ParseConfig{Deployment: "d", BlockSize: 16, MaxBlocks: 64}
	f.Fuzz(func(t *testing.T, p uint8, body []byte) {
		path := fuzzPaths[int(p)%len(fuzzPaths)]
		req, err := Parse(path, body, cfg)
		if w, ok := want[seedKey{p, string(body)}]; ok {
			got := seedKeys
			switch {
			case err != nil:
				got = seedError
			case req.NoPrefix != "":
				got = req.NoPrefix
			}
			if got != w {
				t.Fatalf("seed %s %q: outcome %q (error %v), want %q", path, body, got, err, w)
			}
		}
		if err != nil {
			if !errors.Is(err, ErrMalformedJSON) && !errors.Is(err, ErrMissingModel) {
				t.Fatalf("unexpected error %v", err)
			}
			if endpointOf(path) == EndpointUnknown {
				t.Fatalf("error %v on an unknown endpoint", err)
			}
			if req != nil {
				t.Fatal("request with an error")
			}
			return
		}
		if req.NoPrefix != "" {
			if req.Keys.Leading != 0 || len(req.Keys.Blocks) != 0 {
				t.Fatalf("keys with NoPrefix %q", req.NoPrefix)
			}
		} else {
			if req.Endpoint == EndpointUnknown || req.Keys.Leading == 0 || req.Model == "" {
				t.Fatalf("keys without a leading key or model: %+v", req)
			}
			if want := min(req.PromptBytes/cfg.BlockSize, cfg.MaxBlocks); len(req.Keys.Blocks) != want {
				t.Fatalf("%d blocks for %d bytes", len(req.Keys.Blocks), req.PromptBytes)
			}
		}
		again, _ := Parse(path, body, cfg)
		if !reflect.DeepEqual(req, again) {
			t.Fatalf("not deterministic: %+v vs %+v", req, again)
		}
	})
}
