package workload

import (
	"math/rand/v2"
	"strings"

	"github.com/llmroute/caddy-llmroute/simengine"
)

// Text generation. Prompts are made of pseudo-words so that they tokenize
// like English under the engine's tokenizer (about 4 to 5 bytes per token)
// and so that two texts share nothing unless they were built to. The token
// count of a generated text is exact: words and punctuation never merge
// into one token, so the count is the sum over its parts.

// vocabSize is the number of distinct pseudo-words.
const vocabSize = 4096

// word is one vocabulary entry and its token counts.
type word struct {
	text      string
	tokSpaced int // tokens of " " + text
	tokBare   int // tokens of text at the start of a text
}

// vocabulary is a deterministic list of pseudo-words.
type vocabulary []word

// wordLengths follows the length distribution of English running text
// (letters per word, 1 to 12), weighted so that the mean is about 4.7.
var wordLengths = []int{1, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 6, 6, 6, 7, 7, 8, 8, 9, 10, 11, 12}

const letters = "etaoinshrdlcumwfgypbvkjxqz"

func newVocabulary(seed uint64) vocabulary {
	rng := rand.New(rand.NewPCG(seed, 0x766f636162))
	v := make(vocabulary, 0, vocabSize)
	seen := map[string]bool{}
	for len(v) < vocabSize {
		n := wordLengths[rng.IntN(len(wordLengths))]
		var b strings.Builder
		for range n {
			// Skew towards frequent letters, like English.
			i := min(rng.IntN(len(letters)), rng.IntN(len(letters)))
			b.WriteByte(letters[i])
		}
		s := b.String()
		if seen[s] {
			continue
		}
		seen[s] = true
		v = append(v, word{text: s, tokSpaced: countTokens(" " + s), tokBare: countTokens(s)})
	}
	return v
}

func countTokens(s string) int {
	n := 0
	simengine.TokenizeFunc(s, func(string) { n++ })
	return n
}

// text returns a text of exactly tokens tokens (at least 1): sentences of
// 6 to 18 words, each closed by a full stop (one token).
func (v vocabulary) text(rng *rand.Rand, tokens int) string {
	if tokens < 1 {
		tokens = 1
	}
	var b strings.Builder
	b.Grow(tokens * 5)
	n := 0
	sentence := 0
	for n < tokens {
		if sentence > 0 && rng.IntN(12) == 0 && n+1 <= tokens && sentence >= 6 {
			b.WriteByte('.')
			n++
			sentence = 0
			continue
		}
		w := &v[rng.IntN(len(v))]
		t := w.tokSpaced
		if b.Len() == 0 {
			t = w.tokBare
		}
		if n+t > tokens {
			// Fill the rest with one-token words (" a", " an", ...).
			w = v.short(rng)
			t = w.tokSpaced
			if b.Len() == 0 {
				t = w.tokBare
			}
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(w.text)
		n += t
		sentence++
	}
	return b.String()
}

// short returns a random one-token word.
func (v vocabulary) short(rng *rand.Rand) *word {
	for {
		w := &v[rng.IntN(len(v))]
		if w.tokSpaced == 1 && w.tokBare == 1 {
			return w
		}
	}
}
