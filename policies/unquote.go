package policies

import (
	"bytes"
	"strings"
	"unicode/utf8"
	"unsafe"

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

// writeLit renders the text of a string literal of the body (quotes
// included, valid JSON: jsonscan.StringEndPlain accepted it) escaped as
// writeText escapes: a plain literal is that already and is copied as it
// is (past the block cap only its length counts: most of an agent's tool
// results lie there); another is decoded and escaped again through
// buffers on the stack.
func (c *sink) writeLit(lit []byte, plain bool) {
	s := lit[1 : len(lit)-1]
	if plain {
		c.Write(s)
		return
	}
	var dec [512]byte
	var esc [6 * 512]byte
	for len(s) > 0 {
		w, r := jsonscan.Unquote(dec[:], s)
		c.Write(jsonscan.AppendEscaped(esc[:0], unsafe.String(&dec[0], w)))
		s = s[r:]
	}
}

// writeBodyText renders a string the fast paths read from the body, or the
// general path decoded: lit, its literal, when it kept one, else text;
// plain says that either is escaped already.
func (c *sink) writeBodyText(text string, lit []byte, plain bool) {
	switch {
	case lit != nil:
		c.writeLit(lit, plain)
	case plain:
		c.WriteString(text)
	default:
		c.writeText(text)
	}
}

// writeText renders text (decoded) escaped as in a JSON string
// (jsonscan.AppendEscaped), so that it renders as a plain literal of it
// does: the general path's decoded strings and an answer's text go this
// way. The rendering's length counts the escapes. The run before the
// first byte that needs escaping is written as it is, without a copy.
func (c *sink) writeText(s string) {
	k := jsonscan.EscapedPrefix(s)
	c.WriteString(s[:k])
	if k == len(s) {
		return
	}
	s = s[k:]
	var esc [6 * 512]byte
	for len(s) > 0 {
		k := min(len(s), 512)
		c.Write(jsonscan.AppendEscaped(esc[:0], s[:k]))
		s = s[k:]
	}
}

// appendUnquoted appends the string literal lit (quotes included, valid
// JSON) to out decoded as unquote decodes it, without building the
// string (the canonical form of tools).
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
