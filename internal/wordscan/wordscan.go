// Package wordscan tells whether a large buffer holds any of a few short
// words, in one pass over it: a request body is searched for several words
// whose first bytes are frequent in JSON and prose (a quote, an 'i', an
// 'a'), where one bytes.Contains a word stops at every such byte.
package wordscan

import "bytes"

// MaxWords is how many words a Set holds.
const MaxWords = 5

// Set is a set of words, each of two bytes or more, for Contains.
type Set struct {
	words []string
	// pairs holds each word's first two bytes, the last word's repeated
	// to fill MaxWords: the candidates a pass stops at.
	pairs [2 * MaxWords]byte
}

// NewSet returns the set of words (1 to MaxWords of them, each of two
// bytes or more).
func NewSet(words ...string) *Set {
	if len(words) == 0 || len(words) > MaxWords {
		panic("wordscan: 1 to MaxWords words")
	}
	s := &Set{words: words}
	for i := range MaxWords {
		w := words[min(i, len(words)-1)]
		if len(w) < 2 {
			panic("wordscan: a word of fewer than two bytes")
		}
		s.pairs[2*i], s.pairs[2*i+1] = w[0], w[1]
	}
	return s
}

// Contains reports whether b holds a word of s.
func Contains(b []byte, s *Set) bool {
	if !simdPairs {
		return containsEach(b, s)
	}
	for i := 0; i+1 < len(b); i++ {
		k := indexPair(b[i:], &s.pairs)
		if k < 0 {
			return false
		}
		i += k
		for _, word := range s.words {
			if bytes.HasPrefix(b[i:], []byte(word)) {
				return true
			}
		}
	}
	return false
}

// containsEach is Contains one bytes.Contains a word.
func containsEach(b []byte, s *Set) bool {
	for _, word := range s.words {
		if bytes.Contains(b, []byte(word)) {
			return true
		}
	}
	return false
}

// indexPairRef is indexPair a byte at a time.
func indexPairRef(b []byte, pairs *[2 * MaxWords]byte) int {
	for i := 0; i+1 < len(b); i++ {
		for p := 0; p < MaxWords; p++ {
			if b[i] == pairs[2*p] && b[i+1] == pairs[2*p+1] {
				return i
			}
		}
	}
	return -1
}
