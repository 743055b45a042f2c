package policies

import (
	"encoding/json"
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
