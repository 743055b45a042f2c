package jsonscan

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestUnquoteAgainstEncodingJSON decodes random valid literals (runs of
// text, every one-byte escape, \u escapes with surrogate pairs and lone
// surrogates, runs of backslashes across the 64-byte windows) into
// buffers of every size from 0 to past the literal, in one call and in as
// many as it takes, and compares the bytes with encoding/json's. The
// literals and the cut calls are counted.
func TestUnquoteAgainstEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(43, 1))
	pieces := []string{`x`, `abc def `, `\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`, `\u00e9`, `\u20ac`,
		`\ud83d\ude00`, `\ud800`, `\udc00x`, `é`, `\\\\\\\\`, strings.Repeat("y", 70), strings.Repeat(`\\`, 40)}
	literals, cuts := 0, 0
	for range 3000 {
		var b strings.Builder
		b.WriteByte('"')
		for range r.IntN(80) {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		b.WriteByte('"')
		lit := b.String()
		var want string
		if err := json.Unmarshal([]byte(lit), &want); err != nil {
			t.Fatalf("bad test literal %q: %v", lit, err)
		}
		s := []byte(lit[1 : len(lit)-1])
		whole := make([]byte, len(want)+8)
		if w, n := Unquote(whole, s); string(whole[:w]) != want || n != len(s) {
			t.Fatalf("Unquote(%q) = %q (read %d of %d), want %q", lit, whole[:w], n, len(s), want)
		}
		literals++
		// Small buffers: each call writes whole escapes only and makes
		// progress once the buffer holds a rune.
		size := 4 + r.IntN(40)
		var got []byte
		buf := make([]byte, size)
		for rest := s; len(rest) > 0; {
			w, n := Unquote(buf, rest)
			if n == 0 {
				t.Fatalf("no progress on %q with %d bytes", rest, size)
			}
			got, rest = append(got, buf[:w]...), rest[n:]
			cuts++
		}
		if string(got) != want {
			t.Fatalf("Unquote(%q) in %d-byte calls = %q, want %q", lit, size, got, want)
		}
	}
	if literals != 3000 || cuts < 3*literals {
		t.Fatalf("%d literals, %d calls", literals, cuts)
	}
}

// TestBackslashesEveryPosition: a backslash at each position of each
// prefix length of a window, against a byte loop.
func TestBackslashesEveryPosition(t *testing.T) {
	n := 0
	for lim := 1; lim <= 64; lim++ {
		for pos := range 70 {
			b := []byte(strings.Repeat("a\"", 40))
			if pos < len(b) {
				b[pos] = '\\'
			}
			var want uint64
			for k := range lim {
				if b[k] == '\\' {
					want |= 1 << k
				}
			}
			if got := backslashes(b, lim); got != want {
				t.Fatalf("lim %d pos %d: %064b, want %064b", lim, pos, got, want)
			}
			n++
		}
	}
	if n != 64*70 {
		t.Fatal(n)
	}
}

// BenchmarkUnquote: escape-dense source text (agentbody's kind, an
// escape every ~16 bytes) decoded by Unquote and, as the baseline in the
// same run, by a search per escape.
func BenchmarkUnquote(b *testing.B) {
	line := `\tif err := f(x); err != nil {\n\t\treturn fmt.Errorf(\"bad: %w\", err)\n\t}\n`
	s := []byte(strings.Repeat(line, 64<<10/len(line)))
	dst := make([]byte, 512)
	b.Run("masks", func(b *testing.B) {
		b.SetBytes(int64(len(s)))
		for b.Loop() {
			for rest := s; len(rest) > 0; {
				_, n := Unquote(dst, rest)
				rest = rest[n:]
			}
		}
	})
	b.Run("search", func(b *testing.B) {
		b.SetBytes(int64(len(s)))
		for b.Loop() {
			for rest := s; len(rest) > 0; {
				_, n := unquoteSearch(dst, rest)
				rest = rest[n:]
			}
		}
	})
}

// unquoteSearch is Unquote with a bytes.IndexByte per escape.
func unquoteSearch(dst, s []byte) (w, r int) {
	for r < len(s) {
		i := bytes.IndexByte(s[r:], '\\')
		if i < 0 {
			i = len(s) - r
		}
		if w+i > len(dst) {
			n := copy(dst[w:], s[r:r+i])
			return w + n, r + n
		}
		w += copy(dst[w:], s[r:r+i])
		r += i
		if r == len(s) || w+4 > len(dst) {
			return w, r
		}
		if e := s[r+1]; e != 'u' {
			dst[w] = unescaped[e]
			w, r = w+1, r+2
			continue
		}
		c, width, _ := Unicode(s, r)
		w, r = w+len(string(c)), r+width
	}
	return w, r
}
