// Package wordscan tells whether a large JSON buffer holds a string (or a
// key) that starts with one of a few words, in one pass over it: a
// request body is searched for several words, where one bytes.Contains
// a word would stop at every frequent first byte and a pass a word would
// read the body as many times.
//
// A candidate is a quote followed by a word's first two bytes; most of a
// body's 64-byte runs hold no quote at all (long prompt text) and cost
// one compare per 16 bytes, and only the runs with a quote pay for the
// pairs.
package wordscan

import "bytes"

// MaxWords is how many words a Set holds.
const MaxWords = 5

// Set is a set of words, each of two bytes or more, for Contains.
type Set struct {
	words [][]byte
	// vec holds the quote and each word's first two bytes, each byte
	// repeated across 16 lanes (the last word's pair fills MaxWords):
	// the candidates a pass stops at.
	vec [1 + 2*MaxWords][16]byte
}

// NewSet returns the set of words (1 to MaxWords of them, each of two
// bytes or more).
func NewSet(words ...string) *Set {
	if len(words) == 0 || len(words) > MaxWords {
		panic("wordscan: 1 to MaxWords words")
	}
	s := &Set{}
	for _, w := range words {
		if len(w) < 2 {
			panic("wordscan: a word of fewer than two bytes")
		}
		s.words = append(s.words, []byte(w))
	}
	s.vec[0] = lanes('"')
	for i := range MaxWords {
		w := words[min(i, len(words)-1)]
		s.vec[1+2*i], s.vec[2+2*i] = lanes(w[0]), lanes(w[1])
	}
	return s
}

func lanes(c byte) (v [16]byte) {
	for i := range v {
		v[i] = c
	}
	return v
}

// Contains reports whether b holds a quote followed by a word of s: a
// JSON string or key that starts with it (an escaped quote counts too).
func Contains(b []byte, s *Set) bool {
	for i := 0; i < len(b); i++ {
		k := index(b[i:], s)
		if k < 0 {
			return false
		}
		i += k
		for _, w := range s.words {
			if bytes.HasPrefix(b[i+1:], w) {
				return true
			}
		}
	}
	return false
}

// pair reports whether b[i] is a quote and b[i+1], b[i+2] one of s's
// pairs (i+2 < len(b)).
func (s *Set) pair(b []byte, i int) bool {
	if b[i] != '"' {
		return false
	}
	for p := range MaxWords {
		if b[i+1] == s.vec[1+2*p][0] && b[i+2] == s.vec[2+2*p][0] {
			return true
		}
	}
	return false
}

// indexRef is index a byte at a time: the first i with s.pair(b, i), or
// -1.
func indexRef(b []byte, s *Set) int {
	for i := 0; i+2 < len(b); i++ {
		if s.pair(b, i) {
			return i
		}
	}
	return -1
}
