package policies

import (
	"encoding/binary"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zeebo/xxh3"
)

// TestChainFormula recomputes a chain by hand: block i is hashed seeded
// with the previous hash (for block 0 the seed of the deployment, model
// and salt); the leading key hashes those fields with the
// identity of the leading run (here empty: the seed, no bytes).
func TestChainFormula(t *testing.T) {
	p := strings.Repeat("abcdefghij", 30) // 300 bytes: two full blocks of 128
	req := mustParse(t, "/v1/completions", `{"model":"m","prompt":"`+p+`"}`, ParseConfig{Deployment: "d"})
	require.Len(t, req.Keys.Blocks, 2)
	prev := leadingKey("d", "m", "", 0)
	run := xxh3.HashSeed(binary.LittleEndian.AppendUint64(nil, prev), 0)
	assert.Equal(t, leadingKey("d", "m", "", run), req.Keys.Leading)
	for i := 0; i < 2; i++ {
		prev = xxh3.HashStringSeed(p[i*128:(i+1)*128], prev)
		assert.Equal(t, prev, req.Keys.Blocks[i], "block %d", i)
	}
	assert.Equal(t, 300, req.PromptBytes)
}

func TestChainSharedConversationPrefix(t *testing.T) {
	const chat = "/v1/chat/completions"
	sys := strings.Repeat("You are a helpful assistant. ", 20)
	turn1 := mustParse(t, chat, chatBodyOf(t, "", "system", sys, "user", "What is the capital of France?"), ParseConfig{})
	turn2 := mustParse(t, chat, chatBodyOf(t, "", "system", sys, "user", "What is the capital of France?",
		"assistant", "Paris.", "user", "And of Germany? "+strings.Repeat("Please explain. ", 20)), ParseConfig{})
	other := mustParse(t, chat, chatBodyOf(t, "", "system", sys, "user", "Tell me a joke about compilers, please."), ParseConfig{})

	require.NotEmpty(t, turn1.Keys.Blocks)
	require.Greater(t, len(turn2.Keys.Blocks), len(turn1.Keys.Blocks))
	assert.Equal(t, turn1.Keys.Blocks, turn2.Keys.Blocks[:len(turn1.Keys.Blocks)],
		"a later turn extends the earlier turn's chain")
	assert.Equal(t, turn1.Keys.Leading, other.Keys.Leading, "same system prompt, same leading key")
	shared := 0
	for shared < len(other.Keys.Blocks) && other.Keys.Blocks[shared] == turn1.Keys.Blocks[shared] {
		shared++
	}
	// The system prompt renders to len(sys)+19 bytes: its full blocks are shared.
	assert.Equal(t, (len(sys)+len("<|system|>\n")+len(endTag))/DefaultBlockSize, shared)
}

func TestChainIsolation(t *testing.T) {
	const chat = "/v1/chat/completions"
	body := func(extra, model string) string {
		return `{"model":"` + model + `"` + extra + `,"messages":[{"role":"user","content":"` + strings.Repeat("same words ", 100) + `"}]}`
	}
	base := mustParse(t, chat, body("", "m"), ParseConfig{Deployment: "d"})
	tests := []struct {
		name string
		req  *Request
	}{
		{"other deployment", mustParse(t, chat, body("", "m"), ParseConfig{Deployment: "d2"})},
		{"other model", mustParse(t, chat, body("", "m2"), ParseConfig{Deployment: "d"})},
		{"cache salt", mustParse(t, chat, body(`,"cache_salt":"tenant-a"`, "m"), ParseConfig{Deployment: "d"})},
	}
	// 1,100 bytes of prompt: blocks whose isolation the subtests check.
	require.GreaterOrEqual(t, len(base.Keys.Blocks), 8)
	seen := map[uint64]bool{}
	for _, b := range base.Keys.Blocks {
		seen[b] = true
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Len(t, tt.req.Keys.Blocks, len(base.Keys.Blocks))
			assert.NotEqual(t, base.Keys.Leading, tt.req.Keys.Leading)
			for i, b := range tt.req.Keys.Blocks {
				assert.False(t, seen[b], "block %d shared", i)
			}
		})
	}
}

func TestChainCapAndPartialBlock(t *testing.T) {
	cfg := ParseConfig{BlockSize: 16, MaxBlocks: 4}
	long := mustParse(t, "/v1/completions", `{"model":"m","prompt":"`+strings.Repeat("x", 1000)+`"}`, cfg)
	assert.Len(t, long.Keys.Blocks, 4, "cap respected")
	assert.Equal(t, 1000, long.PromptBytes, "PromptBytes counts past the cap")

	cfg.MaxBlocks = 100
	exact := mustParse(t, "/v1/completions", `{"model":"m","prompt":"`+strings.Repeat("y", 48)+`"}`, cfg)
	partial := mustParse(t, "/v1/completions", `{"model":"m","prompt":"`+strings.Repeat("y", 63)+`"}`, cfg)
	short := mustParse(t, "/v1/completions", `{"model":"m","prompt":"yyy"}`, cfg)
	assert.Len(t, exact.Keys.Blocks, 3)
	assert.Equal(t, exact.Keys.Blocks, partial.Keys.Blocks, "a trailing partial block is not hashed")
	assert.Empty(t, short.Keys.Blocks)
	assert.NotZero(t, short.Keys.Leading, "a prompt shorter than a block still has a leading key")
	assert.Empty(t, short.NoPrefix)
}

func TestChainBlockSizes(t *testing.T) {
	p := strings.Repeat("z", 1024)
	for _, bs := range []int{1, 7, 64, 128, 1000, 4096} {
		req := mustParse(t, "/v1/completions", `{"model":"m","prompt":"`+p+`"}`, ParseConfig{BlockSize: bs, MaxBlocks: 1 << 20})
		assert.Len(t, req.Keys.Blocks, ChainBlocks(1024, bs), "block size %d", bs)
	}
}

// TestChainLayout holds the block sizes to their schedule: 256 of the
// configured size, then doubling every 64 blocks.
func TestChainLayout(t *testing.T) {
	for _, tt := range []struct{ n, bytes int }{
		{0, 0}, {1, 128}, {256, 32 << 10}, {257, 32<<10 + 256}, {320, 48 << 10},
		{321, 48<<10 + 512}, {384, 80 << 10}, {448, 144 << 10}, {512, 272 << 10}, {576, 528 << 10}, {640, 1040 << 10},
	} {
		assert.Equal(t, tt.bytes, ChainBytes(tt.n, 128), "ChainBytes(%d)", tt.n)
	}
	accepted := 0
	for _, bs := range []int{1, 16, 128} {
		prev := 0
		for n := 1; n <= 1200; n++ {
			b := ChainBytes(n, bs)
			require.Equal(t, blockWeight(n-1)*bs, b-prev, "block %d's size", n-1)
			require.Equal(t, n, ChainBlocks(b, bs), "ChainBlocks(ChainBytes(%d))", n)
			require.Equal(t, n-1, ChainBlocks(b-1, bs), "a byte short of block %d", n-1)
			prev = b
			accepted++
		}
	}
	assert.Equal(t, 3600, accepted)
	assert.Zero(t, ChainBlocks(100, 0))
}

// TestChainPartsWhereThePromptsPart parses pairs of long prompts that part
// at a byte and checks that their chains agree on exactly the blocks that
// lie wholly before it, deep in the sparse part of the chain too.
func TestChainPartsWhereThePromptsPart(t *testing.T) {
	cfg := ParseConfig{BlockSize: 16, MaxBlocks: 600}
	full := ChainBytes(600, 16)
	base := []byte(strings.Repeat("a", full+100))
	a := mustParse(t, "/v1/completions", `{"model":"m","prompt":"`+string(base)+`"}`, cfg)
	require.Len(t, a.Keys.Blocks, 600)
	checked := 0
	for _, at := range []int{0, 15, 16, 4095, 4096, 4100, 6000, 9000, 20000, 40000, full - 1, full} {
		if at >= len(base) {
			continue
		}
		other := append([]byte(nil), base...)
		other[at] = 'b'
		b := mustParse(t, "/v1/completions", `{"model":"m","prompt":"`+string(other)+`"}`, cfg)
		same := 0
		for same < len(b.Keys.Blocks) && b.Keys.Blocks[same] == a.Keys.Blocks[same] {
			same++
		}
		assert.Equal(t, min(ChainBlocks(at, 16), 600), same, "parting at byte %d", at)
		checked++
	}
	assert.Equal(t, 12, checked)
}

// TestToolsFollowTheSystemPrompt proves where tools go: out of the leading
// key and into the chain right after the system prompt, where chat
// templates render them (issue 19 measured Qwen3's: the engine shares the
// system prompt's tokens across requests with other tools). Requests with
// one system prompt and different tools share the leading key and the
// system prompt's blocks, and part where the tools begin.
func TestToolsFollowTheSystemPrompt(t *testing.T) {
	const chat = "/v1/chat/completions"
	sys := strings.Repeat("You are an agent with a long system prompt. ", 24) // ~1,000 bytes: 8 blocks
	body := func(tools string) string {
		return `{"model":"m"` + tools + `,"messages":[{"role":"system","content":"` + sys + `"},{"role":"user","content":"do it"}]}`
	}
	cfg := ParseConfig{Deployment: "d"}
	none := mustParse(t, chat, body(""), cfg)
	a := mustParse(t, chat, body(`,"tools":[{"type":"function","function":{"name":"search","description":"`+strings.Repeat("Search the web. ", 20)+`"}}]`), cfg)
	b := mustParse(t, chat, body(`,"tools":[{"type":"function","function":{"name":"fetch","description":"`+strings.Repeat("Fetch a page. ", 20)+`"}}]`), cfg)
	require.GreaterOrEqual(t, none.Keys.LeadingBlocks, 6)
	assert.Equal(t, none.Keys.Leading, a.Keys.Leading)
	assert.Equal(t, a.Keys.Leading, b.Keys.Leading)
	lead := none.Keys.LeadingBlocks
	assert.Equal(t, none.Keys.Blocks[:lead], a.Keys.Blocks[:lead], "the system prompt's blocks are shared")
	assert.Equal(t, a.Keys.Blocks[:lead], b.Keys.Blocks[:lead])
	assert.Equal(t, lead, a.Keys.LeadingBlocks)
	assert.NotEqual(t, a.Keys.Blocks[lead], b.Keys.Blocks[lead], "the chains part where the tools begin")
	assert.Greater(t, len(a.Keys.Blocks), len(none.Keys.Blocks), "the tools are in the chain")
}

// TestLeadingKeySystemRun: the leading key identifies the leading run by
// the chain's state where it ends, so that the run is hashed once; that
// state must still tell apart every run that differs, in a partial block
// after the last full one, or past the block cap by its length.
func TestLeadingKeySystemRun(t *testing.T) {
	const chat = "/v1/chat/completions"
	user := "What is the capital of France?"
	sys := strings.Repeat("You are a helpful assistant. ", 20) // 580 bytes: full blocks and a partial one
	parse := func(cfg ParseConfig, msgs ...string) *Request {
		return mustParse(t, chat, chatBodyOf(t, "", msgs...), cfg)
	}
	base := parse(ParseConfig{}, "system", sys, "user", user)
	keys := map[uint64]string{base.Keys.Leading: "base"}
	for name, r := range map[string]*Request{
		"last byte":       parse(ParseConfig{}, "system", sys[:len(sys)-1]+"!", "user", user),
		"first byte":      parse(ParseConfig{}, "system", "y"+sys[1:], "user", user),
		"one byte more":   parse(ParseConfig{}, "system", sys+" ", "user", user),
		"no system":       parse(ParseConfig{}, "user", user),
		"as a developer":  parse(ParseConfig{}, "developer", sys, "user", user),
		"two systems":     parse(ParseConfig{}, "system", sys[:100], "system", sys[100:], "user", user),
		"other model cfg": parse(ParseConfig{Deployment: "d2"}, "system", sys, "user", user),
	} {
		prev, dup := keys[r.Keys.Leading]
		assert.False(t, dup, "%s has %s's leading key", name, prev)
		keys[r.Keys.Leading] = name
	}
	assert.Equal(t, base.Keys.Leading, parse(ParseConfig{}, "system", sys, "user", "Something else entirely.").Keys.Leading,
		"the leading key does not depend on what follows the run")

	// Past the cap only the run's length is seen: runs of one length that
	// differ there share a key, as they share every block.
	capped := ParseConfig{BlockSize: 16, MaxBlocks: 4}
	a := parse(capped, "system", sys, "user", user)
	b := parse(capped, "system", sys[:300]+"X"+sys[301:], "user", user)
	c := parse(capped, "system", sys+"!", "user", user)
	require.Len(t, a.Keys.Blocks, 4)
	assert.Equal(t, a.Keys.Blocks, b.Keys.Blocks)
	assert.Equal(t, a.Keys.Leading, b.Keys.Leading)
	assert.NotEqual(t, a.Keys.Leading, c.Keys.Leading, "a longer run past the cap")
}

// TestSinkDirectBlocks: a block lying whole within one write is hashed
// where it lies, any other is copied into the buffer first; both must give
// one chain. Each text is written whole (the direct path from its first
// block) and byte by byte (never direct: a block is wider than a byte),
// and in random pieces through Write, for blocks of 2-40 bytes, chains
// that reach their doubling blocks, and caps in and past the text.
func TestSinkDirectBlocks(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	compared := 0
	for range 300 {
		text := make([]byte, r.IntN(3000))
		for i := range text {
			text[i] = byte('a' + r.IntN(26))
		}
		bs := 2 + r.IntN(39)
		maxBlocks := []int{DefaultMaxBlocks, 1 + r.IntN(8), denseBlocks + 1 + r.IntN(sparseRun)}[r.IntN(3)]
		var whole, bytewise, pieces sink
		for _, c := range []*sink{&whole, &bytewise, &pieces} {
			c.initChain(42, bs, maxBlocks, len(text))
			c.WriteString("<|user|>\n") // the direct path also after a partial block
		}
		whole.WriteString(string(text))
		for i := range text {
			bytewise.WriteString(string(text[i : i+1]))
		}
		for rest := text; len(rest) > 0; {
			k := min(len(rest), 1+r.IntN(3*bs))
			pieces.Write(rest[:k])
			rest = rest[k:]
		}
		for name, c := range map[string]*sink{"byte by byte": &bytewise, "in pieces": &pieces} {
			require.Equal(t, whole.blocks, c.blocks, "%s, block size %d, cap %d", name, bs, maxBlocks)
			require.Equal(t, whole.total, c.total)
			require.Equal(t, whole.end(answerMessage), c.end(answerMessage))
			require.Equal(t, whole.sofar(), c.sofar())
		}
		if len(whole.blocks) > 1 {
			compared++
		}
	}
	assert.Greater(t, compared, 200, "texts of several blocks compared")
}

// leadingKey is the leading key of those fields and run.
func leadingKey(deployment, model, salt string, run uint64) uint64 {
	f := newLeadingFields(deployment, model, salt)
	return f.key(run)
}
