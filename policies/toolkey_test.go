package policies

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/llmroute/caddy-llmroute/internal/agentbody"
	"github.com/llmroute/caddy-llmroute/internal/jsonscan"

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

// TestToolsCacheMatchesGeneral checks toolsCache: an agent body's tools
// are served from it once read twice, with the general path's keys, and
// a body whose tools differ from a cached value in any byte (mutated, or
// cut short) is never served from it, and still parses as the general
// path parses it.
func TestToolsCacheMatchesGeneral(t *testing.T) {
	cfg := ParseConfig{Deployment: "d", BlockSize: 16, MaxBlocks: 64}
	hits, muts, mutsAccepted, cuts := 0, 0, 0, 0
	for tenant := range 3 {
		for _, ep := range []struct {
			both  func(*testing.T, []byte, ParseConfig) bool
			build func(agentbody.Spec) []byte
		}{{parseBothMessages, agentbody.Messages}, {parseBoth, agentbody.Chat}} {
			body := ep.build(agentbody.Spec{Size: 4 << 10, Tools: 5, Tenant: 100 + tenant, Seed: 1})
			at := bytes.Index(body, []byte(`"tools":`)) + len(`"tools":`)
			end := at + len(mustSkip(t, body[at:]))
			for range 3 {
				require.True(t, ep.both(t, body, cfg))
			}
			if cachedTools(toolsBucketOf(body, at), body, at) == nil {
				t.Fatalf("tenant %d: tools read %d times and not cached", tenant, 6)
			}
			hits++
			for i := at; i < end; i += 7 {
				m := bytes.Clone(body)
				m[i] = "{}[],:\"\\ a0-e.tfn\x01\xff"[i%18]
				if m[i] == body[i] {
					continue
				}
				muts++
				if cachedTools(toolsBucketOf(m, at), m, at) != nil {
					t.Fatalf("a body with byte %d of its tools changed is served from the cache", i)
				}
				if ep.both(t, m, cfg) {
					mutsAccepted++
				}
			}
			cut := body[:at+(end-at)/2]
			cuts++
			if cachedTools(toolsBucketOf(cut, at), cut, at) != nil || ep.both(t, cut, cfg) {
				t.Fatal("a body cut inside its tools is served from the cache or accepted")
			}
		}
	}
	if hits != 6 || muts != 2913 || mutsAccepted != 2059 || cuts != 6 {
		t.Errorf("%d bodies served from the cache, %d/%d mutations accepted, %d cuts; want 6, 2059/2913, 6", hits, mutsAccepted, muts, cuts)
	}
}

// mustSkip returns the JSON value at the start of b.
func mustSkip(t *testing.T, b []byte) []byte {
	s := jsonscan.New(b)
	v, ok := s.Skip()
	require.True(t, ok)
	return v
}
