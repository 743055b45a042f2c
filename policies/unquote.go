package policies

import (
	"bytes"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// unquote decodes a JSON string literal, quotes included, with one copy and
// one pass. The literal comes from a body encoding/json has already
// validated, so unquote only has to be correct on valid input; it reports
// false on anything it does not understand and the caller falls back to
// encoding/json. Unlike encoding/json it leaves invalid UTF-8 as it is,
// which is deterministic, and that is all the rendering needs.
//
// It exists because prompt text is most of a body: decoding it through a
// nested json.Unmarshal would scan it twice more.
func unquote(lit []byte) (string, bool) {
	if len(lit) < 2 || lit[0] != '"' || lit[len(lit)-1] != '"' {
		return "", false
	}
	s := lit[1 : len(lit)-1]
	i := bytes.IndexByte(s, '\\')
	if i < 0 {
		return string(s), true
	}
	var b strings.Builder
	b.Grow(len(s))
	for {
		b.Write(s[:i])
		s = s[i:]
		if len(s) < 2 {
			return "", false
		}
		switch c := s[1]; c {
		case '"', '\\', '/':
			b.WriteByte(c)
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			r, ok := hex4(s[2:])
			if !ok {
				return "", false
			}
			s = s[6:]
			if utf16.IsSurrogate(r) {
				r2, ok := rune(-1), false
				if len(s) >= 6 && s[0] == '\\' && s[1] == 'u' {
					r2, ok = hex4(s[2:])
				}
				if dec := utf16.DecodeRune(r, r2); ok && dec != utf8.RuneError {
					r = dec
					s = s[6:]
				} else {
					r = utf8.RuneError
				}
			}
			b.WriteRune(r)
			goto next
		default:
			return "", false
		}
		s = s[2:]
	next:
		i = bytes.IndexByte(s, '\\')
		if i < 0 {
			b.Write(s)
			return b.String(), true
		}
	}
}

// hex4 decodes four hex digits.
func hex4(s []byte) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range s[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// unescaped maps the character after a backslash to the byte it stands
// for, for the one-byte escapes ('u' is not among them).
var unescaped = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// writeLit renders an escaped literal whose decoded length is n: past the
// block cap only the length counts, so it is added without decoding (most
// of an agent's tool results lie there).
func (c *sink) writeLit(lit []byte, n int) {
	if c.capped() {
		c.total += n
		return
	}
	c.writeUnquoted(lit)
}

// writeUnquoted renders the string literal lit (quotes included, valid
// JSON: jsonscan.StringEnd accepted it) into the sink as unquote decodes
// it, byte for byte, without building the string: the runs between
// escapes go to the sink from lit itself. It is how fastChat renders an
// escaped prompt string without a copy.
func (c *sink) writeUnquoted(lit []byte) {
	s := lit[1 : len(lit)-1]
	for {
		i := bytes.IndexByte(s, '\\')
		if i < 0 {
			c.Write(s)
			return
		}
		c.Write(s[:i])
		s = s[i:]
		if e := s[1]; e != 'u' {
			c.Write(unescaped[int(e) : int(e)+1])
			s = s[2:]
			continue
		}
		r, _ := hex4(s[2:])
		s = s[6:]
		if utf16.IsSurrogate(r) {
			r2, ok := rune(-1), false
			if len(s) >= 6 && s[0] == '\\' && s[1] == 'u' {
				r2, ok = hex4(s[2:])
			}
			if dec := utf16.DecodeRune(r, r2); ok && dec != utf8.RuneError {
				r = dec
				s = s[6:]
			} else {
				r = utf8.RuneError
			}
		}
		n := utf8.EncodeRune(c.rune[:], r)
		c.Write(c.rune[:n])
	}
}
