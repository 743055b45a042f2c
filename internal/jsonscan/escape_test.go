package jsonscan

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// plainRef reports, byte by byte, whether the valid literal lit (quotes
// included) has no \u and no \/ escape.
func plainRef(lit []byte) bool {
	for i := 1; i < len(lit)-1; i++ {
		if lit[i] == '\\' {
			if lit[i+1] == 'u' || lit[i+1] == '/' {
				return false
			}
			i++
		}
	}
	return true
}

// checkPlain checks StringEndPlain's plain for the valid literal lit
// against plainRef, and that a plain literal's contents are AppendEscaped
// of its decoded text (what lets the renderer copy it); it returns plain.
func checkPlain(t *testing.T, lit []byte, plain bool) bool {
	t.Helper()
	if want := plainRef(lit); plain != want {
		t.Fatalf("StringEndPlain(%q): plain %v, want %v", lit, plain, want)
	}
	dec := make([]byte, 4*len(lit))
	w, r := Unquote(dec, lit[1:len(lit)-1])
	if r != len(lit)-2 {
		t.Fatalf("Unquote(%q) read %d of %d", lit, r, len(lit)-2)
	}
	text := string(dec[:w])
	esc := AppendEscaped(nil, text)
	if plain && string(esc) != string(lit[1:len(lit)-1]) {
		t.Fatalf("plain literal %q escapes back to %q", lit, esc)
	}
	// Whatever the literal, its escaping decodes to the same text.
	if w2, _ := Unquote(dec, esc); string(dec[:w2]) != text {
		t.Fatalf("AppendEscaped of %q's text does not decode back", lit)
	}
	return plain
}

// TestAppendEscaped checks the escaping against encoding/json's decoder
// (it must decode back to the text, for valid UTF-8) and against its one
// form: random texts of every byte class, each escaped whole and in
// random pieces, which must join into the same bytes.
func TestAppendEscaped(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"plain text / é", "plain text / é"},
		{"a\"b\\c", `a\"b\\c`},
		{"\b\f\n\r\t", `\b\f\n\r\t`},
		{"\x00\x01\x1f\x7f", `\u0000\u0001\u001f` + "\x7f"},
		{"\xff<>&", "\xff<>&"},
	} {
		if got := string(AppendEscaped(nil, c.in)); got != c.want {
			t.Errorf("AppendEscaped(%q) = %q, want %q", c.in, got, c.want)
		}
		k := EscapedPrefix(c.in)
		if (k == len(c.in)) != (c.in == c.want) || string(AppendEscaped(nil, c.in[:k])) != c.in[:k] ||
			(k < len(c.in) && string(AppendEscaped(nil, c.in[k:k+1])) == c.in[k:k+1]) {
			t.Errorf("EscapedPrefix(%q) = %d", c.in, k)
		}
	}
	r := rand.New(rand.NewPCG(5, 6))
	pieces := []string{"a", "word ", "é", "€", "😀", "\"", "\\", "/", "\n", "\t", "\x00", "\x1f", "\x7f", "<", strings.Repeat("x", 20)}
	checked := 0
	for range 5000 {
		var b strings.Builder
		for range r.IntN(40) {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		s := b.String()
		whole := AppendEscaped(nil, s)
		var dec string
		if err := json.Unmarshal([]byte(`"`+string(whole)+`"`), &dec); err != nil || dec != s {
			t.Fatalf("AppendEscaped(%q) = %q: decodes to %q (%v)", s, whole, dec, err)
		}
		var parts []byte
		for rest := s; len(rest) > 0; {
			k := 1 + r.IntN(len(rest))
			parts = AppendEscaped(parts, rest[:k])
			rest = rest[k:]
		}
		if string(parts) != string(whole) {
			t.Fatalf("AppendEscaped(%q) in pieces = %q, whole %q", s, parts, whole)
		}
		// Encoded by encoding/json, the text's literal is plain exactly
		// when json chose no \u escape (it escapes <, >, & and the other
		// controls with them), and then it is the escaping itself.
		lit, _ := json.Marshal(s)
		end, _, plain, ok := StringEndPlain(lit, 0)
		if !ok || end != len(lit) {
			t.Fatalf("StringEndPlain(%s) = %d %v", lit, end, ok)
		}
		if checkPlain(t, lit, plain) {
			checked++
		}
	}
	if checked < 500 {
		t.Fatalf("only %d plain literals from encoding/json", checked)
	}
}

func BenchmarkAppendEscaped(b *testing.B) {
	src := strings.Repeat("func main() {\n\tfmt.Println(\"hello\")\n}\n", 200)
	prose := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 200)
	for _, c := range []struct{ name, s string }{{"code", src}, {"prose", prose}} {
		buf := make([]byte, 0, 2*len(c.s))
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.s)))
			for b.Loop() {
				buf = AppendEscaped(buf[:0], c.s)
			}
		})
	}
}
