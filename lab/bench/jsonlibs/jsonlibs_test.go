package jsonlibs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/bytedance/sonic"
	"github.com/bytedance/sonic/ast"
	"github.com/minio/simdjson-go"

	"github.com/llmroute/caddy-llmroute/internal/agentbody"
	"github.com/llmroute/caddy-llmroute/policies"
)

// body is one agent body of the bench (-prompts agent-tools).
type body struct {
	name, path string
	b          []byte
}

func bodies() []body {
	var out []body
	for _, size := range []int{51 << 10, 256 << 10} {
		spec := agentbody.Spec{Size: size, Tools: 40, Tenant: 1, Seed: 1, Stream: true}
		out = append(out,
			body{fmt.Sprintf("messages%dK", size>>10), "/v1/messages", agentbody.Messages(spec)},
			body{fmt.Sprintf("chat%dK", size>>10), "/v1/chat/completions", agentbody.Chat(spec)})
	}
	return out
}

// parse is what llm_route does with a body: the validating parse and
// the prefix keys.
func parse(bd body, b []byte) error {
	req, err := policies.Parse(bd.path, b, policies.ParseConfig{Deployment: "d"})
	if err == nil && len(req.Keys.Blocks) == 0 {
		err = fmt.Errorf("no keys")
	}
	return err
}

// sonicWalk reads, through sonic's lazy AST, the values llmroute reads:
// the top-level fields, and every message's role, content (a string, or
// its blocks' fields), tool calls and tool call id, as raw JSON. It
// decodes and hashes nothing, so it is a lower bound of what the parse
// would cost built on it.
func sonicWalk(b []byte) error {
	root := ast.NewRaw(string(b))
	if err := raws(root, "model", "system", "tools", "stream", "max_tokens"); err != nil {
		return err
	}
	it, err := root.Get("messages").Values()
	if err != nil {
		return err
	}
	var m ast.Node
	for it.Next(&m) {
		if err := raws(m, "role", "tool_calls", "tool_call_id"); err != nil {
			return err
		}
		c := m.Get("content")
		if c.TypeSafe() != ast.V_ARRAY {
			if err := raws(m, "content"); err != nil {
				return err
			}
			continue
		}
		bi, err := c.Values()
		if err != nil {
			return err
		}
		var bl ast.Node
		for bi.Next(&bl) {
			if err := raws(bl, "type", "text", "content", "input", "id", "name", "tool_use_id"); err != nil {
				return err
			}
		}
	}
	return nil
}

// raws reads the raw JSON of n's fields that are present.
func raws(n ast.Node, fields ...string) error {
	for _, k := range fields {
		if f := n.Get(k); f.Exists() {
			if _, err := f.Raw(); err != nil {
				return err
			}
		}
	}
	return nil
}

// tape is simdjson-go's parse reused from one call to the next, its best
// case (the contenders run one at a time).
var tape *simdjson.ParsedJson

func simdParse(b []byte) error {
	pj, err := simdjson.Parse(b, tape)
	if err == nil {
		tape = pj
	}
	return err
}

// The contenders. Each must accept every bench body and, but for
// sonic.Valid, reject a body whose string holds an invalid escape or a
// raw control byte, as encoding/json does: a parse that checks less
// would measure less.
var contenders = []struct {
	name string
	run  func(body, []byte) error
	// strict: it rejects what encoding/json rejects in a string.
	strict bool
}{
	{"llmroute Parse (with keys)", parse, true},
	{"encoding/json Valid", func(_ body, b []byte) error { return validErr(json.Valid(b)) }, true},
	{"simdjson-go Parse (tape reused)", func(_ body, b []byte) error { return simdParse(b) }, true},
	{"sonic lazy AST walk", func(_ body, b []byte) error { return sonicWalk(b) }, false},
	{"sonic Valid (structure only)", func(_ body, b []byte) error { return validErr(sonic.Valid(b)) }, false},
}

func validErr(ok bool) error {
	if !ok {
		return fmt.Errorf("invalid")
	}
	return nil
}

// broken returns b with a string's byte after its first backslash
// replaced by bad, or nil when b has no escape.
func broken(b []byte, bad byte) []byte {
	i := bytes.Index(b, []byte(`\n`))
	if i < 0 {
		return nil
	}
	c := bytes.Clone(b)
	if bad < ' ' {
		c[i] = bad // a raw control byte in place of the backslash
	} else {
		c[i+1] = bad
	}
	return c
}

func TestContendersAgree(t *testing.T) {
	if !simdjson.SupportedCPU() {
		t.Skip("simdjson-go needs AVX2 and CLMUL")
	}
	checked := 0
	for _, bd := range bodies() {
		for _, c := range contenders {
			if err := c.run(bd, bd.b); err != nil {
				t.Errorf("%s rejects %s: %v", c.name, bd.name, err)
			}
			for _, bad := range []byte{'q', 0x01} {
				bb := broken(bd.b, bad)
				if bb == nil {
					t.Fatalf("%s has no escape to break", bd.name)
				}
				err := c.run(bd, bb)
				if c.strict && err == nil {
					t.Errorf("%s accepts %s with %q in a string", c.name, bd.name, bad)
				}
				checked++
			}
		}
	}
	if want := len(bodies()) * len(contenders) * 2; checked != want {
		t.Fatalf("checked %d broken bodies, want %d", checked, want)
	}
	// sonic.Valid checks structure only: it takes the broken bodies, so
	// its figure is not a validating parse's.
	if bb := broken(bodies()[0].b, 'q'); !sonic.Valid(bb) {
		t.Log("sonic.Valid now rejects an invalid escape: its figure compares with the strict ones")
	}
}

// BenchmarkContenders times each contender on each body (MB/s is of the
// body).
func BenchmarkContenders(b *testing.B) {
	if !simdjson.SupportedCPU() {
		b.Skip("simdjson-go needs AVX2 and CLMUL")
	}
	for _, bd := range bodies() {
		for _, c := range contenders {
			b.Run(bd.name+"/"+c.name, func(b *testing.B) {
				b.SetBytes(int64(len(bd.b)))
				b.ReportAllocs()
				for b.Loop() {
					if err := c.run(bd, bd.b); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
