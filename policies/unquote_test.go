package policies

import (
	"bytes"
	"encoding/json"
	"github.com/llmroute/caddy-llmroute/internal/jsonscan"
	"math/rand/v2"
	"slices"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
)

func TestUnquote(t *testing.T) {
	tests := []string{
		`""`, `"plain"`, `"line\nbreak\ttab\\slash\/quote\"end"`, `"\b\f\r"`,
		`"caf\u00e9 \u4e16\u754c"`, `"emoji \ud83d\ude00!"`, `"lone \ud83d surrogate"`,
		`"lone low \ude00"`, `"high then text \ud83dxyz"`, `"\u0000nul"`, `"ünïcödé raw"`,
		`"trailing escape \n"`, `"\\\\"`,
	}
	for _, lit := range tests {
		var want string
		assert.NoError(t, json.Unmarshal([]byte(lit), &want), lit)
		got, ok := unquote([]byte(lit))
		assert.True(t, ok, lit)
		assert.Equal(t, want, got, lit)
	}
	for _, bad := range []string{``, `"`, `x`, `"\"`, `"\x"`, `"\u12"`, `"\u12g4"`} {
		_, ok := unquote([]byte(bad))
		assert.False(t, ok, bad)
	}
}

func FuzzUnquote(f *testing.F) {
	for _, s := range []string{"", "a\nb", "\u00e9", "\U0001F600", "\x00", "\\\"/"} {
		b, _ := json.Marshal(s)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, lit []byte) {
		var want string
		// The decoder hands over exactly one literal, no spaces around.
		if json.Unmarshal(lit, &want) != nil || lit[0] != '"' || lit[len(lit)-1] != '"' {
			return
		}
		got, ok := unquote(lit)
		if !ok {
			t.Fatalf("unquote(%q) failed", lit)
		}
		// encoding/json replaces invalid UTF-8; unquote keeps it.
		if utf8.Valid(lit) && got != want {
			t.Fatalf("unquote(%q) = %q, want %q", lit, got, want)
		}
	})
}

// TestWriteLitMatchesText proves rendering a literal straight into the
// sink (copied when plain, else decoded and escaped again) gives the
// blocks and byte count that rendering unquote's string as text gives,
// and appendUnquoted unquote's bytes, on escapes of every kind (surrogate
// pairs, lone surrogates, invalid UTF-8 left as it is) at every split of
// the blocks; it counts the plain literals and the others.
func TestWriteLitMatchesText(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	pieces := []string{`\n`, `\"`, `\\`, `\/`, `\b`, `\f`, `\r`, `\t`, `\u00e9`, `\u20ac`, `\ud83d\ude00`, `\ud83d`, `\udc00`, `\ud83dx`, `\ud83d\u0041`, `\u000a`, `\u0022`, "abc", "é", "\xff", " ", "0123456789abcdef"}
	plainPieces := []string{`\n`, `\"`, `\\`, `\t`, "abc", "é", "\xff", " ", "0123456789abcdef"}
	plains, others := 0, 0
	for range 5000 {
		pool := pieces
		if r.IntN(2) == 0 {
			pool = plainPieces
		}
		lit := []byte{'"'}
		for range r.IntN(200) { // past writeLit's 512-byte buffers too
			lit = append(lit, pool[r.IntN(len(pool))]...)
		}
		lit = append(lit, '"')
		want, ok := unquote(lit)
		if !ok {
			t.Fatalf("unquote(%s) failed", lit)
		}
		end, n, plain, ok := jsonscan.StringEndPlain(lit, 0)
		if !ok || end != len(lit) || n != len(want) {
			t.Fatalf("StringEndPlain(%s) = %d %d %v", lit, end, n, ok)
		}
		if plain {
			plains++
		} else {
			others++
		}
		bs := 1 + r.IntN(16)
		for _, max := range []int{64, 1 + r.IntN(3)} { // past the cap only the length counts
			var a, b sink
			a.initChain(7, bs, max, len(lit))
			b.initChain(7, bs, max, len(lit))
			a.writeLit(lit, plain)
			b.writeText(want)
			if a.total != b.total || !slices.Equal(a.blocks, b.blocks) || a.n != b.n || len(a.buf) != len(b.buf) || !bytes.Equal(a.buf[:8+a.n], b.buf[:8+b.n]) {
				t.Fatalf("writeLit(%s) at %d blocks: %d bytes, %v; writeText: %d bytes, %v", lit, max, a.total, a.blocks, b.total, b.blocks)
			}
		}
		if got := appendUnquoted([]byte("x"), lit); string(got) != "x"+want {
			t.Fatalf("appendUnquoted(%s) = %q, unquote %q", lit, got[1:], want)
		}
	}
	if plains < 1000 || others < 1000 {
		t.Fatalf("%d plain literals, %d others: too few", plains, others)
	}
}
