package wordscan

// simdPairs: indexPair compares 16 positions an instruction (SSE2, part
// of every amd64).
const simdPairs = true

// indexPair returns the first i with b[i], b[i+1] one of pairs' pairs,
// or -1.
func indexPair(b []byte, pairs *[2 * MaxWords]byte) int {
	t := 0 // where the 16-byte blocks end
	if n := len(b) - 16; n > 0 {
		if i := indexPairSSE2(&b[0], n, pairs); i >= 0 {
			return i
		}
		t = (n + 15) &^ 15
	}
	// The last positions, fewer than 17 bytes from the end.
	if k := indexPairRef(b[t:], pairs); k >= 0 {
		return t + k
	}
	return -1
}

// indexPairSSE2 returns the first i with p[i], p[i+1] one of the pairs
// in the 16-byte blocks from 0 that start below n, or -1: p holds the
// n+16 bytes they read.
//
//go:noescape
func indexPairSSE2(p *byte, n int, pairs *[2 * MaxWords]byte) int
