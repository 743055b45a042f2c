package wordscan

// index returns the first i with s.pair(b, i), or -1: 64 bytes at a time
// with SSE2 (part of every amd64), the last ones a byte at a time.
func index(b []byte, s *Set) int {
	t := 0 // where the 64-byte runs end
	if len(b) >= runReach {
		if i := indexSSE2(&b[0], len(b), &s.vec); i >= 0 {
			return i
		}
		t = ((len(b)-runReach)/64 + 1) * 64
	}
	if k := indexRef(b[t:], s); k >= 0 {
		return t + k
	}
	return -1
}

// runReach is how many bytes from its start a 64-byte run reads: its
// last position's pair lies two bytes past it.
const runReach = 64 + 2

// indexSSE2 returns the first i with s.pair in the 64-byte runs of the n
// bytes at p that start at or below n-runReach, or -1.
//
//go:noescape
func indexSSE2(p *byte, n int, vec *[1 + 2*MaxWords][16]byte) int
