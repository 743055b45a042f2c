package policies

import (
	"bytes"
	"strings"
	"unicode/utf8"

	"github.com/llmroute/caddy-llmroute/internal/jsonscan"
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
			r, width, ok := jsonscan.Unicode(s, 0)
			if !ok {
				return "", false
			}
			s = s[width:]
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

// unescaped maps the character after a backslash to the byte it stands
// for, for the one-byte escapes ('u' is not among them).
var unescaped = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// writeLit renders an escaped literal whose decoded length is n: past the
// block cap only the length counts, so it is added without decoding (most
// of an agent's tool results lie there), and a literal that reaches the
// cap is decoded only up to it.
func (c *sink) writeLit(lit []byte, n int) {
	if c.capped() {
		c.total += n
		return
	}
	c.writeUnquotedN(lit, n)
}

// writeUnquoted renders the string literal lit (quotes included, valid
// JSON: jsonscan.StringEnd accepted it) into the sink as unquote decodes
// it, byte for byte, without building the string. It is how fastChat
// renders an escaped prompt string without a copy.
func (c *sink) writeUnquoted(lit []byte) { c.writeUnquotedN(lit, -1) }

// writeUnquotedN is writeUnquoted for a literal whose decoded length is n
// (-1: unknown). The literal is decoded straight into the block being
// filled (jsonscan.Unquote: source code has an escape every 15 bytes or
// so, and it finds them 64 bytes at a time), each block hashed as it
// fills; once the sink has all its blocks the rest only counts (n known)
// or is decoded through a buffer on the stack (n unknown, or a digest).
func (c *sink) writeUnquotedN(lit []byte, n int) {
	s := lit[1 : len(lit)-1]
	done := 0 // bytes decoded so far
	for len(s) > 0 && c.digest == nil && len(c.blocks) < c.max {
		w, r := jsonscan.Unquote(c.buf[8+c.n:], s)
		if r == 0 {
			// Too little room left in the block for the next escape's
			// bytes: decode it apart and let Write split it.
			var one [utf8.UTFMax]byte
			w, r = jsonscan.Unquote(one[:], s)
			c.Write(one[:w])
		} else {
			c.n += w
			c.total += w
			c.flush()
		}
		done += w
		s = s[r:]
	}
	if len(s) == 0 {
		return
	}
	if n >= 0 && c.capped() {
		c.total += n - done
		return
	}
	var buf [512]byte
	for len(s) > 0 {
		w, r := jsonscan.Unquote(buf[:], s)
		c.Write(buf[:w])
		s = s[r:]
	}
}

// appendUnquoted appends the string literal lit (quotes included, valid
// JSON) to out decoded as unquote decodes it, without building the
// string: writeUnquoted for a byte slice (the canonical form of tools).
func appendUnquoted(out, lit []byte) []byte {
	s := lit[1 : len(lit)-1]
	for {
		i := bytes.IndexByte(s, '\\')
		if i < 0 {
			return append(out, s...)
		}
		out = append(out, s[:i]...)
		s = s[i:]
		if e := s[1]; e != 'u' {
			out = append(out, unescaped[e])
			s = s[2:]
			continue
		}
		r, width, _ := jsonscan.Unicode(s, 0)
		s = s[width:]
		out = utf8.AppendRune(out, r)
	}
}
