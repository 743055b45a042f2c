package jsonscan

import (
	"math/bits"
	"unicode/utf8"
)

// Unquote decodes s, the contents of a valid JSON string literal (its
// quotes left out: StringEnd accepted it), into dst as far as dst holds
// whole escapes, the way encoding/json decodes it, and returns the bytes
// it wrote and the bytes of s it read (none only when dst cannot hold the
// next escape's bytes, at most utf8.UTFMax). The backslashes of 64 bytes at a
// time are found in one mask (with SSE2 on amd64), so that escape-dense
// text (source code in an agent's tool results, an escape every 15-20
// bytes) costs a copy per run rather than a search per escape.
func Unquote(dst, s []byte) (w, r int) {
	for r < len(s) {
		win := s[r:]
		lim := min(64, len(win))
		m := backslashes(win, lim)
		q := 0 // bytes of win read
		for {
			j := lim
			if m != 0 {
				j = bits.TrailingZeros64(m)
			}
			if w+j-q > len(dst) {
				n := copy(dst[w:], win[q:j])
				return w + n, r + q + n
			}
			w += copy(dst[w:], win[q:j])
			q = j
			if m == 0 {
				break
			}
			if e := win[q+1]; e != 'u' {
				if w == len(dst) {
					return w, r + q
				}
				dst[w] = unescaped[e]
				w, q = w+1, q+2
			} else {
				if w+utf8.UTFMax > len(dst) {
					return w, r + q
				}
				c, width, _ := Unicode(win, q)
				w, q = w+utf8.EncodeRune(dst[w:], c), q+width
			}
			if q >= lim {
				break
			}
			m &= ^uint64(0) << q // the escaped byte may be a backslash
		}
		r += q
	}
	return w, r
}

// unescaped maps the byte after a backslash to the byte it stands for,
// for the one-byte escapes ('u' is not among them).
var unescaped = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// backslashes is the mask of the backslashes among the first lim (at
// most 64) bytes of b.
func backslashes(b []byte, lim int) uint64 {
	if lim == 64 {
		return backslashes64((*[64]byte)(b))
	}
	var a [64]byte
	copy(a[:], b[:lim])
	return backslashes64(&a)
}
