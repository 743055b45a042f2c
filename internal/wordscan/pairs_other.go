//go:build !amd64

package wordscan

import "bytes"

// index returns the first i with s.pair(b, i), or -1: from quote to
// quote.
func index(b []byte, s *Set) int {
	for i := 0; ; {
		k := bytes.IndexByte(b[i:], '"')
		if k < 0 || i+k+2 >= len(b) {
			return -1
		}
		if i += k; s.pair(b, i) {
			return i
		}
		i++
	}
}
