package simengine

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const english = `The router keeps a small index of which prompt prefixes each replica
probably holds in its KV cache, and sends every request to the replica that
shares the longest prefix with it, unless that replica is overloaded. When
two replicas are equally good, it prefers the one with fewer requests in
flight. Conversations, agents and retrieval pipelines resend the same long
system prompt many times, so keeping them on one replica saves prefill work.`

func pieces(text string) []string {
	var out []string
	TokenizeFunc(text, func(tok string) { out = append(out, tok) })
	return out
}

func TestTokenizeIsLosslessAndDeterministic(t *testing.T) {
	for _, text := range []string{english, "", "  a\t\tb\n\nc", "héllo wörld ünïcode", `{"k": [1, 2.5]}`} {
		assert.Equal(t, text, strings.Join(pieces(text), ""))
		assert.Equal(t, Tokenize(text), Tokenize(text))
		assert.Len(t, Tokenize(text), len(pieces(text)))
	}
}

func TestTokenizeBoundaries(t *testing.T) {
	assert.Equal(t, []string{"Hello", ",", " world", "!"}, pieces("Hello, world!"))
	assert.Equal(t, []string{"a", "\n", "\n", " b"}, pieces("a\n\n b"))
	assert.Equal(t, []string{"x", "   ", " y"}, pieces("x    y"))
	// Long words are cut into chunks of 4 to 6 bytes.
	for _, tok := range pieces(" internationalization hyperparameterisation") {
		assert.GreaterOrEqual(t, len(tok), 1)
		assert.LessOrEqual(t, len(tok), 6, tok)
	}
	assert.Greater(t, len(pieces(" internationalization")), 3)
}

func TestTokenizeAboutFourBytesPerToken(t *testing.T) {
	toks := Tokenize(english)
	bpt := float64(len(english)) / float64(len(toks))
	assert.InDelta(t, 4.0, bpt, 1.0, "bytes per token %.2f", bpt)
}

func TestTokenizeSharedPrefix(t *testing.T) {
	a := Tokenize(english + " Apples are red.")
	b := Tokenize(english + " Bananas are yellow.")
	base := Tokenize(english)
	require.GreaterOrEqual(t, len(a), len(base))
	assert.Equal(t, base, a[:len(base)])
	assert.Equal(t, base, b[:len(base)])
	assert.NotEqual(t, a[len(base)], b[len(base)])
}

func TestOutputWordsAreSingleTokens(t *testing.T) {
	// The engine picks its answers from these words; a short list would
	// make the loop below prove little.
	require.GreaterOrEqual(t, len(outputWords), 100)
	seen := map[uint32]bool{}
	for _, w := range outputWords {
		ids := Tokenize(" " + w)
		require.Len(t, ids, 1, w)
		assert.False(t, seen[ids[0]], "duplicate id for %q", w)
		seen[ids[0]] = true
		text, ok := TokenText(ids[0])
		assert.True(t, ok)
		assert.Equal(t, " "+w, text)
	}
	_, ok := TokenText(Tokenize("zzzzzz")[0])
	assert.False(t, ok)
}

// An answer's text, pasted back into the next prompt, tokenizes to the
// generated ids, so a multi-turn conversation hits on the previous answer.
func TestGeneratedTextRoundTrips(t *testing.T) {
	prompt := Tokenize("<|user|>\nhi\n<|assistant|>\n")
	var answer []uint32
	var text strings.Builder
	for i := range 40 {
		id := outputToken(promptSeed(prompt), i)
		answer = append(answer, id)
		s, ok := TokenText(id)
		require.True(t, ok)
		text.WriteString(s)
	}
	next := Tokenize("<|user|>\nhi\n<|assistant|>\n" + text.String() + "\n<|user|>\nmore\n")
	assert.Equal(t, concat(prompt, answer), next[:len(prompt)+len(answer)])
}

func TestBlockHashesChain(t *testing.T) {
	a := synth(1, 64)
	b := append(append([]uint32{}, a[:16]...), synth(2, 48)...)
	ha, hb := BlockHashes(a, 16), BlockHashes(b, 16)
	require.Len(t, ha, 4)
	assert.Len(t, BlockHashes(a[:63], 16), 3)
	assert.Equal(t, ha[0], hb[0])
	for i := 1; i < 4; i++ {
		assert.NotEqual(t, ha[i], hb[i])
	}
	// A block's hash depends on everything before it.
	c := append(append([]uint32{}, synth(3, 16)...), a[16:]...)
	hc := BlockHashes(c, 16)
	assert.NotEqual(t, ha[1], hc[1])
	assert.Nil(t, BlockHashes(a, 0))
}
