package policies

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// toolSeeds are tools values of every shape: the fast scan must read each
// as the decoder does, or decline.
var toolSeeds = []struct {
	raw      string
	declines bool // the fast scan leaves it to the decoder
}{
	{`[]`, false},
	{` [ ] `, false},
	{`[{"type":"function","function":{"name":"f","description":"d","parameters":{"type": "object", "properties": {"a": {"type": "string"}}}}}]`, false},
	{`[{"type":"function","name":"f","description":"d","parameters":{"type":"object"},"strict":true}]`, false},
	{`[{"name":"f","description":"d\u00e9 \"q\" \n","input_schema":{"type":"object","x":"a b\"c"},"cache_control":{"type":"ephemeral"}}]`, false},
	{`[{"type":"custom","name":"f","input_schema":{}}, {"type":"custom","name":"g","format":{"type":"text"}}]`, false},
	{`[{"type":"web_search_20250305","name":"web_search","max_uses":5}, {"type":"web_search"}, "x", 3, null, [1, 2], {}]`, false},
	{`[{"type":"function","function":null,"name":"f"}]`, false},
	{`[{"type":"function","function":{},"name":"f"}]`, false},
	{`[{"type":null,"name":"f","description":null,"parameters":null}]`, false},
	{`[{"name":"f","name":"g"}]`, true},
	{`[{"Name":"f"}]`, true},
	{`[{"name":5,"description":"d"}]`, true},
	{`[{"type":["function"],"name":"f"}]`, true},
	{`[{"type":"function","function":"f"}]`, true},
	{`[{"type":"function","function":{"name":"f","name":"g"}}]`, true},
	{`[{"na\u006de":"f"}]`, true},
	{`{"name":"f"}`, true},
	{`"tools"`, true},
	{`[1,2,3]`, false},
}

// TestToolsFastMatchesSlow checks the one-scan reading of tools against
// the decoder's on every seed, and that it declines what it should.
func TestToolsFastMatchesSlow(t *testing.T) {
	for _, s := range toolSeeds {
		require.True(t, json.Valid([]byte(s.raw)), s.raw)
		n, fast, ok := toolsFast(nil, []byte(s.raw))
		assert.Equal(t, !s.declines, ok, s.raw)
		if !ok {
			continue
		}
		m, slow := toolsSlow(nil, []byte(s.raw))
		assert.Equal(t, m, n, s.raw)
		assert.Equal(t, slow, fast, s.raw)
	}
}

// FuzzToolsHash checks that the fast scan, whenever it reads a valid tools
// value, reads it as the decoder does.
func FuzzToolsHash(f *testing.F) {
	for _, s := range toolSeeds {
		f.Add([]byte(s.raw))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) == 0 || !json.Valid(raw) {
			return // tools come from a body the decoder accepted
		}
		n, fast, ok := toolsFast(nil, raw)
		m, slow := toolsSlow(nil, raw)
		if ok && (n != m || string(fast) != string(slow)) {
			t.Fatalf("fast %d %q, slow %d %q", n, fast, m, slow)
		}
	})
}
