package policies

import (
	"errors"
	"reflect"
	"testing"
)

// fuzzPaths are the paths FuzzParse chooses from.
var fuzzPaths = []string{"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings", "/v1/responses/"}

// FuzzParse checks that Parse never panics, errs only with its two
// sentinels on known endpoints, and returns self-consistent keys. Its seed
// corpus runs with every go test.
func FuzzParse(f *testing.F) {
	seeds := []struct {
		path int
		body string
	}{
		{0, `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}`},
		{0, `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":[{"type":"text","text":"what"},{"type":"image_url","image_url":{"url":"u"}}]}]}`},
		{0, `{"model":"m","tools":[{"type":"function"}],"messages":[{"role":"developer","content":"d"},{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"r"}]}`},
		{0, `{"model":"m","messages":"hello"}`},
		{0, `{"model":"m","messages":[{"role":"user","content":42}]}`},
		{0, `{"model":"m","messages":[1,[2],{"role":null}]}`},
		{0, `{"messages":[]}`},
		{0, `[1,2,3]`},
		{0, `{"model":"m","messages":[{"role":"user","content":"caf\u00e9 \ud83d\ude00 \ud800 \n\t\"\\"}]}`},
		{1, `{"model":"m","prompt":"once upon a time"}`},
		{1, `{"model":"m","prompt":["a","b"]}`},
		{1, `{"model":"m","prompt":[1,2,3]}`},
		{1, `{"model":"m","prompt":[[1,2],[3]]}`},
		{1, `{"model":"m","prompt":[[1,"x"]]}`},
		{2, `{"model":"m","instructions":"be brief","input":"hi"}`},
		{2, `{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"ok"},{"type":"reasoning","id":"r","summary":[]}]}`},
		{2, `{"model":"m","input":{"x":1}}`},
		{2, `{"model":"m","input":[null,"s"]}`},
		{3, `{"model":"e","input":"x"}`},
		{3, ``},
		{4, `not json`},
	}
	for _, s := range seeds {
		f.Add(uint8(s.path), []byte(s.body))
	}
	cfg := ParseConfig{Deployment: "d", BlockSize: 16, MaxBlocks: 64}
	f.Fuzz(func(t *testing.T, p uint8, body []byte) {
		path := fuzzPaths[int(p)%len(fuzzPaths)]
		req, err := Parse(path, body, cfg)
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
