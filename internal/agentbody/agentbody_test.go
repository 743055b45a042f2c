package agentbody

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestBodies checks that every body is valid JSON of about its size, the
// same for the same spec, and that bodies of one tenant share their
// system prompt and tools while their histories differ.
func TestBodies(t *testing.T) {
	for _, build := range []struct {
		name string
		f    func(Spec) []byte
	}{{"messages", Messages}, {"chat", Chat}} {
		for _, size := range []int{51 << 10, 64 << 10, 256 << 10} {
			s := Spec{Size: size, Tools: 40, Tenant: 3, Seed: 7, Stream: true}
			b := build.f(s)
			if !json.Valid(b) {
				t.Fatalf("%s %d: not JSON", build.name, size)
			}
			if n := len(b); n < size*9/10 || n > size*11/10 {
				t.Errorf("%s %d: %d bytes", build.name, size, n)
			}
			if !bytes.Equal(b, build.f(s)) {
				t.Errorf("%s %d: not deterministic", build.name, size)
			}
			var v struct {
				Tools    []json.RawMessage `json:"tools"`
				Messages []json.RawMessage `json:"messages"`
				System   json.RawMessage   `json:"system"`
			}
			if err := json.Unmarshal(b, &v); err != nil || len(v.Tools) != 40 || len(v.Messages) < 5 {
				t.Fatalf("%s %d: %v, %d tools, %d messages", build.name, size, err, len(v.Tools), len(v.Messages))
			}
			s2 := s
			s2.Seed = 8
			var w struct {
				Tools    []json.RawMessage `json:"tools"`
				Messages []json.RawMessage `json:"messages"`
				System   json.RawMessage   `json:"system"`
			}
			if err := json.Unmarshal(build.f(s2), &w); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(v.Tools[39], w.Tools[39]) || !bytes.Equal(v.System, w.System) || !bytes.Equal(v.Messages[0], w.Messages[0]) && build.name == "chat" {
				t.Errorf("%s %d: one tenant's bodies do not share their system prompt and tools", build.name, size)
			}
			if bytes.Equal(v.Messages[len(v.Messages)-1], w.Messages[len(w.Messages)-1]) && bytes.Equal(v.Messages[2], w.Messages[2]) {
				t.Errorf("%s %d: two seeds give one history", build.name, size)
			}
		}
	}
}
