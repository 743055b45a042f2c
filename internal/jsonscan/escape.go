package jsonscan

import "math/bits"

// AppendEscaped appends the contents of the JSON string literal of s (its
// quotes left out) in the one form the module renders text in: a quote, a
// backslash and the control bytes escaped, with the short escapes where
// JSON has them (\" \\ \b \f \n \r \t) and \u00xx for the other control
// bytes, and every other byte as it is (a slash, non-ASCII text, invalid
// UTF-8). Any literal whose escapes are none of \u and \/ (StringEndPlain)
// already is this form of its decoded text, so a renderer can copy such
// a literal instead of decoding it; any other decodes and comes back here.
// It is a function of the decoded text alone, byte by byte, so pieces of a
// text escaped apart join into the escaping of the whole.
func AppendEscaped(dst []byte, s string) []byte {
	for len(s) > 0 {
		i := firstEscaped(s)
		if i == len(s) {
			return append(dst, s...)
		}
		dst = append(dst, s[:i]...)
		c := s[i]
		if e := shortEscape[c]; e != 0 {
			dst = append(dst, '\\', e)
		} else {
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&15])
		}
		s = s[i+1:]
	}
	return dst
}

// EscapedPrefix is the length of the longest prefix of s that needs no
// escaping: AppendEscaped appends it as it is (all of s: none needs any).
func EscapedPrefix(s string) int { return firstEscaped(s) }

// firstEscaped is the index of the first byte of s that AppendEscaped
// escapes, len(s) when there is none: eight bytes at a time (prose runs
// long between them).
func firstEscaped(s string) int {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		if m := firstSpecial(load64(s, i)); m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' {
			return i
		}
	}
	return i
}

// load64 is the eight bytes of s at i, little endian (one load: the
// compiler merges the bytes).
func load64(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// shortEscape is the letter of the byte's short escape, 0 where it has none.
var shortEscape = [256]byte{'"': '"', '\\': '\\', '\b': 'b', '\f': 'f', '\n': 'n', '\r': 'r', '\t': 't'}

const hexDigits = "0123456789abcdef"
