package policies

import (
	"testing"
)

// TestOutputLimit holds the fast paths' output limit to the general
// path's scan (parseBothAt compares the whole Request) and both to the
// expected figure, on limit fields of every kind of value, in chat,
// messages and responses bodies: positive, zero, negative, fractional,
// exponent, 19 digits, a string, null, n before and after, a field past
// one that ends the reading, a case-folded or duplicated name (which the
// fast paths decline). It counts the bodies the fast paths accepted.
func TestOutputLimit(t *testing.T) {
	cases := []struct {
		fields string
		want   int64
	}{
		{``, 0},
		{`"max_tokens":100,`, 100},
		{`"max_tokens":100,"n":4,`, 400},
		{`"n":4,"max_completion_tokens":7,`, 28},
		{`"max_tokens":5,"max_completion_tokens":9,"max_output_tokens":7,`, 9},
		{`"best_of":3,"n":2,"max_tokens":10,`, 30},
		{`"n":4,`, 0},
		{`"max_tokens":0,"n":3,`, 0},
		{`"max_tokens":-4,`, 0},
		{`"max_tokens":1.5,"max_completion_tokens":8,`, 0},
		{`"max_completion_tokens":8,"max_tokens":1e3,"n":5,`, 8},
		{`"max_tokens":1234567890123456789,`, 0},
		{`"max_tokens":123456789012345678,`, 123456789012345678},
		{`"max_tokens":123456789012345678,"n":100,`, 0},
		{`"max_tokens":"x","max_completion_tokens":6,`, 6},
		{`"max_tokens":null,"n":2,"max_output_tokens":3,`, 6},
		{`"max_tokens":[1,2],"max_output_tokens":3,`, 3},
		{`"max_tokens" : 12 ,`, 12},
		{`"Max_Tokens":12,`, 0},
		{`"max_tokens":5,"Max_Tokens":12,`, 5},
		{`"max_tokens":5,"max_tokens":12,`, 5},
		{`"N":3,"max_tokens":5,`, 0},
		{`"max_tokens":5,"x":"\"max_tokens\":9",`, 5},
	}
	bodies := []struct {
		path, head, tail string
		fast             func([]byte, ParseConfig) (*Request, bool)
	}{
		{pathChat, `{`, `"model":"m","messages":[{"role":"user","content":"hi"}]}`, fastChat},
		{pathMessages, `{`, `"model":"m","messages":[{"role":"user","content":"hi"}]}`, fastMessages},
		{"/v1/responses", `{`, `"model":"m","input":"hi"}`, fastResponses},
		{pathChat, `{"model":"m",`, `"messages":[{"role":"user","content":"hi"}]}`, fastChat},
	}
	accepted, declined := 0, 0
	for _, c := range cases {
		for _, b := range bodies {
			body := []byte(b.head + c.fields + b.tail)
			if parseBothAt(t, b.path, b.fast, body, ParseConfig{}) {
				accepted++
			} else {
				declined++
			}
			req, err := Parse(b.path, body, ParseConfig{})
			if err != nil || req.OutputLimit != c.want {
				t.Fatalf("%s %s: OutputLimit %d (%v), want %d", b.path, body, req.OutputLimit, err, c.want)
			}
		}
	}
	// The case-folded and duplicated names: 4 cases, declined everywhere.
	if want := 4 * len(bodies); declined != want || accepted != len(cases)*len(bodies)-want {
		t.Fatalf("%d accepted, %d declined; want %d declined", accepted, declined, want)
	}
}
