package policies

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// randText returns n bytes of words, with the odd character JSON escapes.
func randText(rng *rand.Rand, n int) string {
	words := []string{"cache", "route", "the", "a", "prefix", "é", "\"quoted\"", "tab\there", "line\nbreak", "replica", "token"}
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(words[rng.IntN(len(words))])
		b.WriteByte(' ')
	}
	return b.String()
}

// chunks splits s at random points, as a stream's deltas split an answer.
func chunks(rng *rand.Rand, s string) []string {
	var out []string
	for len(s) > 0 {
		k := min(1+rng.IntN(40), len(s))
		out = append(out, s[:k])
		s = s[k:]
	}
	return out
}

func chatJSON(t *testing.T, msgs ...string) []byte {
	t.Helper()
	var m []map[string]string
	for i := 0; i+1 < len(msgs); i += 2 {
		m = append(m, map[string]string{"role": msgs[i], "content": msgs[i+1]})
	}
	b, err := json.Marshal(map[string]any{"model": "m", "stream": true, "messages": m})
	require.NoError(t, err)
	return b
}

// TestAnswerExtendsTheNextTurn is a differential test: the chain an Answer
// builds from a prompt's keys and the streamed answer must be where the
// next turn's own chain begins, block for block, whatever the block size,
// however the stream splits the answer and whichever parser path reads
// the bodies.
func TestAnswerExtendsTheNextTurn(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	accepted, extended := 0, 0
	for i := range 300 {
		cfg := ParseConfig{BlockSize: []int{16, 64, 128, 256}[i%4], MaxBlocks: 1 << 12}
		sys, u1, ans, u2 := randText(rng, rng.IntN(600)), randText(rng, 1+rng.IntN(300)), randText(rng, rng.IntN(900)), randText(rng, 1+rng.IntN(200))
		turn1 := mustParse(t, "/v1/chat/completions", string(chatJSON(t, "system", sys, "user", u1)), cfg)
		turn2 := mustParse(t, "/v1/chat/completions", string(chatJSON(t, "system", sys, "user", u1, "assistant", ans, "user", u2)), cfg)
		a := NewAnswer(turn1.Keys)
		if len(turn1.Keys.Blocks) == 0 {
			assert.Nil(t, a, "no blocks: nothing to extend")
			continue
		}
		require.NotNil(t, a)
		for _, c := range chunks(rng, ans) {
			a.WriteString(c)
		}
		chain := a.Chain()
		if chain == nil {
			// The answer completed no block: the next turn's chain still
			// begins with the prompt's.
			require.True(t, slices.Equal(turn1.Keys.Blocks, turn2.Keys.Blocks[:len(turn1.Keys.Blocks)]))
			accepted++
			continue
		}
		require.Greater(t, len(chain), len(turn1.Keys.Blocks))
		require.LessOrEqual(t, len(chain), len(turn2.Keys.Blocks), "case %d", i)
		require.True(t, slices.Equal(chain, turn2.Keys.Blocks[:len(chain)]), "case %d: answer chain is not the next turn's prefix", i)
		// The answer starts from the prompt's chain without copying it,
		// but never writes where the prompt's chain could grow.
		p := len(turn1.Keys.Blocks)
		_ = append(turn1.Keys.Blocks, ^chain[p])
		require.Equal(t, turn2.Keys.Blocks[p], chain[p], "case %d: the answer's chain shares the prompt's spare capacity", i)
		// The answer's chain reaches at most one block into what follows it
		// (the end tag, then the next user message).
		accepted++
		extended++
	}
	t.Logf("%d cases accepted, %d extended by the answer", accepted, extended)
	assert.GreaterOrEqual(t, accepted, 250)
	assert.GreaterOrEqual(t, extended, 150)
}

// TestAnswerCompletions: a completion continues a string prompt as is.
func TestAnswerCompletions(t *testing.T) {
	cfg := ParseConfig{BlockSize: 32}
	body := func(prompt string) string {
		b, _ := json.Marshal(map[string]any{"model": "m", "prompt": prompt})
		return string(b)
	}
	prompt, ans := strings.Repeat("step by step ", 20), strings.Repeat("then the answer ", 20)
	r1 := mustParse(t, "/v1/completions", body(prompt), cfg)
	r2 := mustParse(t, "/v1/completions", body(prompt+ans+"and more"), cfg)
	a := NewAnswer(r1.Keys)
	require.NotNil(t, a)
	a.WriteString(ans)
	chain := a.Chain()
	require.Greater(t, len(chain), len(r1.Keys.Blocks))
	assert.Equal(t, r2.Keys.Blocks[:len(chain)], chain)

	tokens := mustParse(t, "/v1/completions", `{"model":"m","prompt":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20]}`, ParseConfig{BlockSize: 16})
	require.NotEmpty(t, tokens.Keys.Blocks)
	assert.Nil(t, NewAnswer(tokens.Keys), "token prompts have no text continuation")
}

// TestAnswerResponses: the responses API's next input repeats the answer
// as an assistant message item, rendered like a chat message.
func TestAnswerResponses(t *testing.T) {
	cfg := ParseConfig{BlockSize: 32}
	ans := strings.Repeat("an answer ", 30)
	r1 := mustParse(t, "/v1/responses", `{"model":"m","instructions":"be brief","input":[{"role":"user","content":"`+strings.Repeat("q ", 40)+`"}]}`, cfg)
	r2 := mustParse(t, "/v1/responses", `{"model":"m","instructions":"be brief","input":[{"role":"user","content":"`+strings.Repeat("q ", 40)+`"},{"role":"assistant","content":"`+ans+`"},{"role":"user","content":"more"}]}`, cfg)
	a := NewAnswer(r1.Keys)
	require.NotNil(t, a)
	a.WriteString(ans)
	chain := a.Chain()
	require.Greater(t, len(chain), len(r1.Keys.Blocks))
	assert.Equal(t, r2.Keys.Blocks[:len(chain)], chain)
}

func TestAnswerAtTheBlockCap(t *testing.T) {
	cfg := ParseConfig{BlockSize: 16, MaxBlocks: 4}
	r := mustParse(t, "/v1/chat/completions", string(chatJSON(t, "user", strings.Repeat("long ", 40))), cfg)
	require.Len(t, r.Keys.Blocks, 4)
	assert.Nil(t, NewAnswer(r.Keys), "the chain is capped: an answer cannot extend it")
	assert.Nil(t, NewAnswer(Keys{}), "no keys")

	// Below the cap, the answer's chain stops at the cap too.
	cfg.MaxBlocks = 8
	r = mustParse(t, "/v1/chat/completions", string(chatJSON(t, "user", strings.Repeat("x", 70))), cfg)
	require.Less(t, len(r.Keys.Blocks), 8)
	a := NewAnswer(r.Keys)
	require.NotNil(t, a)
	a.WriteString(strings.Repeat("answer ", 100))
	assert.Len(t, a.Chain(), 8)
}

func TestLeadingBlocks(t *testing.T) {
	cfg := ParseConfig{BlockSize: 16}
	sys := strings.Repeat("s", 100)
	r := mustParse(t, "/v1/chat/completions", string(chatJSON(t, "system", sys, "user", strings.Repeat("u", 100))), cfg)
	// "<|system|>\n" + 100 + "\n<|end|>\n" = 120 bytes: 7 whole blocks.
	assert.Equal(t, 7, r.Keys.LeadingBlocks)
	r = mustParse(t, "/v1/chat/completions", string(chatJSON(t, "user", strings.Repeat("u", 100))), cfg)
	assert.Zero(t, r.Keys.LeadingBlocks, "no system prompt")
	r = mustParse(t, "/v1/chat/completions", string(chatJSON(t, "system", sys)), cfg)
	assert.Equal(t, len(r.Keys.Blocks), r.Keys.LeadingBlocks, "only a system prompt")
	assert.Equal(t, r.PromptBytes, r.Keys.Bytes)
}

func TestUncachedBytes(t *testing.T) {
	k := Keys{Bytes: 1000, BlockBytes: 128}
	assert.Equal(t, 1000, UncachedBytes(k, 0))
	assert.Equal(t, 1000-3*128, UncachedBytes(k, 3))
	assert.Zero(t, UncachedBytes(k, 100), "never negative")
}
