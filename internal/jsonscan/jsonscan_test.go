package jsonscan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
)

// docs are valid and invalid documents around the edges of the grammar.
var docs = []string{
	`{}`, `[]`, `null`, `true`, `false`, `0`, `-0`, `1.5e+3`, `"x"`, `""`,
	`{"a":1,"b":[true,false,null],"c":{"d":"e\n\u00e9\ud83d\ude00"}}`,
	` { "a" : [ 1 , 2 ] } `, `{"a":"\u12"}`, `{"a":"\x"}`, `{"a":01}`, `{"a":1.}`,
	`{"a":.5}`, `{"a":1e}`, `{"a":-}`, `{"a":tru}`, `{"a":nul}`, `{"a"}`, `{"a":1,}`,
	`[1,]`, `[,1]`, `{,}`, `{"a":1 "b":2}`, "{\"a\":\"\x01\"}", "\"\xff\"", `{"a":"\/"}`,
	`{"a":[[[[[]]]]]}`, `{"a":{"b":{}}}`, `[1 2]`, `{"a" 1}`, `"unterminated`, `{`, `[`,
	`{"a":1}}`, `1 2`, `{"é":1}`, `{"\"":1}`,
}

// TestSkipMatchesValid proves Skip (then End) accepts exactly what
// json.Valid accepts, on edge cases and on mutations of them.
func TestSkipMatchesValid(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	check := func(doc string) {
		s := New([]byte(doc))
		_, ok := s.Skip()
		ok = ok && s.End()
		if want := json.Valid([]byte(doc)); ok != want {
			t.Fatalf("Skip(%q) = %v, json.Valid = %v", doc, ok, want)
		}
	}
	const alphabet = "{}[]\":,0123456789.eE+-tfnrul \\/u\x01\xffab"
	for _, d := range docs {
		check(d)
		for range 300 {
			b := []byte(d)
			switch n := r.IntN(3); {
			case n == 0 && len(b) > 0:
				b[r.IntN(len(b))] = alphabet[r.IntN(len(alphabet))]
			case n == 1 && len(b) > 0:
				i := r.IntN(len(b))
				b = append(b[:i], b[i+1:]...)
			default:
				i := r.IntN(len(b) + 1)
				b = append(b[:i], append([]byte{alphabet[r.IntN(len(alphabet))]}, b[i:]...)...)
			}
			check(string(b))
		}
	}
}

// TestTextMatchesDecoder proves Text decodes every literal as
// encoding/json does.
func TestTextMatchesDecoder(t *testing.T) {
	for _, lit := range []string{`""`, `"abc"`, `"a\nb"`, `"\u00e9"`, `"\ud83d\ude00"`, `"\ud83d"`, `"\udc00x"`, "\"\xff\xfe\"", "\"caf\xc3\xa9\"", `"\\\/\""`} {
		s := New([]byte(lit))
		l, esc, ok := s.String()
		if !ok {
			t.Fatalf("String(%s) failed", lit)
		}
		got, ok := Text(l, esc)
		var want string
		if err := json.Unmarshal([]byte(lit), &want); err != nil || !ok || got != want {
			t.Fatalf("Text(%s) = %q, %v; encoding/json %q, %v", lit, got, ok, want, err)
		}
	}
}

// TestKeyDeclines proves Key declines what encoding/json could match to a
// wanted field by folding or unescaping.
func TestKeyDeclines(t *testing.T) {
	for doc, want := range map[string]bool{
		`"choices":`: true, `"other":`: true, `"Choices":`: false, `"CHOICES":`: false,
		`"\u0063hoices":`: false, `"choiceſ":`: false, `"choices"`: false,
	} {
		s := New([]byte(doc))
		if _, ok := s.Key("choices"); ok != want {
			t.Errorf("Key(%s) ok = %v, want %v", doc, ok, want)
		}
	}
}

// TestDepthDeclines proves nesting past MaxDepth declines rather than
// recursing without bound.
func TestDepthDeclines(t *testing.T) {
	deep := strings.Repeat("[", MaxDepth+2) + strings.Repeat("]", MaxDepth+2)
	s := New([]byte(deep))
	if _, ok := s.Skip(); ok {
		t.Fatal("accepted nesting past MaxDepth")
	}
}

// TestInt proves Int reads plain integers and declines other numbers.
func TestInt(t *testing.T) {
	for doc, want := range map[string]int64{`0`: 0, `-0`: 0, `7`: 7, `-12`: -12, `123456789012345678`: 123456789012345678} {
		s := New([]byte(doc))
		if n, ok := s.Int(); !ok || n != want {
			t.Errorf("Int(%s) = %d, %v", doc, n, ok)
		}
	}
	for _, doc := range []string{`1.0`, `1e2`, `01`, `-`, `"1"`, `1234567890123456789`} {
		s := New([]byte(doc))
		if n, ok := s.Int(); ok && s.End() {
			t.Errorf("Int(%s) = %d, accepted", doc, n)
		}
	}
}

func FuzzSkip(f *testing.F) {
	for _, d := range docs {
		f.Add(d)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		if strings.Count(doc, "[")+strings.Count(doc, "{") > MaxDepth {
			return
		}
		s := New([]byte(doc))
		_, ok := s.Skip()
		ok = ok && s.End()
		if want := json.Valid([]byte(doc)); ok != want {
			t.Fatalf("Skip(%q) = %v, json.Valid = %v", doc, ok, want)
		}
	})
}

// TestStringEnd proves the literal scan ends where a byte-by-byte
// reading of JSON's string grammar ends, and fails where it fails.
func TestStringEnd(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	// The long runs take StringEnd past its first words into the long scan.
	pieces := []string{`"`, `\`, `\\`, `\"`, `\n`, `\u00e9`, `\uD83D`, `\u00`, `\x`, "\x01", "abcdefgh", "x", " ", "\xff",
		`\ud83d\ude00`, `\udc00`, `\u0041`, `\u20AC`, `\uD83D\u0041`,
		strings.Repeat("p", 40), strings.Repeat("q", 200)}
	tails := []string{"", `,"k":"v\n"}`, `"` + strings.Repeat("y", 40) + `"`}
	longRun := regexp.MustCompile(`[^"\\\x00-\x1f]{40}`) // past the 32-byte word scan
	accepted, escaped, long, counted := 0, 0, 0, 0
	for range 50000 {
		b := []byte{'"'}
		for range r.IntN(12) {
			b = append(b, pieces[r.IntN(len(pieces))]...)
		}
		// What follows the string lies in the word scans' reach too.
		b = append(b, tails[r.IntN(len(tails))]...)
		end, esc, ok := StringEnd(b, 0)
		wend, wesc, wok := stringEndRef(b)
		if ok != wok || (ok && (end != wend || esc != wesc)) {
			t.Fatalf("StringEnd(%q) = %d %v %v, want %d %v %v", b, end, esc, ok, wend, wesc, wok)
		}
		lend, n, plain, lok := StringEndPlain(b, 0)
		if lok != ok || lend != end {
			t.Fatalf("StringEndLen(%q) = %d %v, want %d %v", b, lend, lok, wend, wok)
		}
		if ok {
			checkPlain(t, b[:end], plain)
		}
		// The decoded length is encoding/json's where the raw bytes are
		// valid UTF-8 (json replaces invalid bytes, the module keeps them).
		if ok && utf8.Valid(b[:end]) {
			var dec string
			if err := json.Unmarshal(b[:end], &dec); err != nil || n != len(dec) {
				t.Fatalf("StringEndLen(%q) decoded length %d, encoding/json %d (%v)", b[:end], n, len(dec), err)
			}
			if bytes.Contains(b[:end], []byte(`\u`)) {
				counted++ // a \u escape's length, a pair's or a lone surrogate's
			}
		}
		if ok {
			accepted++
			if esc {
				escaped++
			}
			if longRun.Match(b[:end]) {
				long++
			}
		}
	}
	if accepted < 10000 || escaped < 2000 || accepted-escaped < 2000 || long < 2000 || counted < 1000 {
		t.Fatalf("too few cases exercised: %d accepted, %d of them with escapes, %d with a run past the word scan", accepted, escaped, long)
	}
	t.Logf("%d accepted, %d with escapes (%d with \\u escapes whose decoded length matched encoding/json's), %d with a run past the word scan", accepted, escaped, counted, long)
}

// TestEscapeOrCtl proves the search for a string run's first backslash or
// control byte finds it wherever it is (in a 64-byte step, in the 32-byte
// tail, in the word and byte tails), from any alignment, takes the first
// of two, and takes no other byte for one (the bytes around 0x20, 0x5c and
// 0x80, and the quote): every length to seven steps, each position, both
// the dispatching search (AVX2 where the CPU has it) and the words one.
func TestEscapeOrCtl(t *testing.T) {
	variants := map[string]func([]byte) int{
		"dispatch": escapeOrCtl,
		"words":    func(b []byte) int { return escapeOrCtlGo(b, 0) },
	}
	special := []byte{0x00, 0x01, 0x0a, 0x1f, '\\'}
	other := []byte{0x20, 0x21, '"', 0x5b, 0x5d, 0x7f, 0x80, 0x9f, 0xa0, 0xdc, 0xff}
	for name, find := range variants {
		found := 0
		for _, off := range []int{0, 1, 7} {
			for n := range 224 {
				buf := bytes.Repeat([]byte{'a'}, off+n)
				b := buf[off:]
				if got := find(b); got != n {
					t.Fatalf("%s: %d of %d plain bytes", name, got, n)
				}
				for i := range n {
					for _, c := range special {
						b[i] = c
						if got := find(b); got != i {
							t.Fatalf("%s: %#x at %d of %d (offset %d) found at %d", name, c, i, n, off, got)
						}
						if j := n - 1; j > i {
							b[j] = '\\'
							if got := find(b); got != i {
								t.Fatalf("%s: %#x at %d, %#x at %d of %d found at %d", name, c, i, '\\', j, n, got)
							}
							b[j] = 'a'
						}
						found++
					}
					for _, c := range other {
						b[i] = c
						if got := find(b); got != n {
							t.Fatalf("%s: took %#x at %d of %d for a special byte (%d)", name, c, i, n, got)
						}
					}
					b[i] = 'a'
				}
			}
		}
		if found != 3*len(special)*223*224/2 {
			t.Fatalf("%s: %d special bytes tried", name, found)
		}
	}
}

func TestObjectAndArray(t *testing.T) {
	names := []string{"a", "b"}
	cases := []struct {
		doc  string
		ok   bool
		got  string // the fields read, in order
		elts int
	}{
		{`{}`, true, "", 0},
		{`{"a":[1,2,3],"x":{"a":1},"b":[]}`, true, "ab", 3},
		{`{"x":1,"x":2}`, true, "", 0}, // other keys may repeat: encoding/json keeps the last
		{`{"a":[],"a":[]}`, false, "a", 0},
		{`{"A":[]}`, false, "", 0},    // a case-folded name
		{`{"a":[1,]}`, false, "a", 2}, // the second element is "]": Skip declines
		{`{"a":[1] "b":[]}`, false, "a", 1},
		{`[1]`, false, "", 0},
		{`{"b":7}`, false, "b", 0}, // field declines: not an array
	}
	accepted := 0
	for _, c := range cases {
		s := New([]byte(c.doc))
		got, elts := "", 0
		ok := s.Object(names, func(i int) bool {
			got += names[i]
			return s.Array(func() bool {
				elts++
				_, ok := s.Skip()
				return ok
			})
		}) && s.End()
		assert.Equal(t, c.ok, ok, c.doc)
		assert.Equal(t, c.got, got, c.doc)
		assert.Equal(t, c.elts, elts, c.doc)
		if ok {
			accepted++
		}
	}
	assert.Equal(t, 3, accepted)
}

// BenchmarkStringEnd scans one 256 KiB string literal: plain words, and
// escaped Go source (a line break, tab or quote every 15 bytes or so, as
// in an agent's tool results).
func BenchmarkStringEnd(b *testing.B) {
	src := "func (s *server) handle(w http.ResponseWriter, r *http.Request) {\n\tif r.Method != \"POST\" {\n\t\treturn\n\t}\n}\n"
	for _, c := range []struct{ name, text string }{
		{"plain", strings.Repeat("the quick brown fox jumps over the lazy dog ", 6000)},
		{"escaped", strings.Repeat(src, 2500)},
	} {
		lit, _ := json.Marshal(c.text)
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(lit)))
			for b.Loop() {
				if end, _, ok := StringEnd(lit, 0); !ok || end != len(lit) {
					b.Fatal(end, ok)
				}
			}
		})
	}
}

// TestEscapedChunks drives the 64-byte escape resolution with long
// literals dense in escapes (runs of backslashes of every length, escaped
// quotes, \u escapes, surrogate pairs, lone surrogates, all placed across
// chunk boundaries by random padding) and some invalid pieces, against
// the byte-at-a-time reference of TestStringEnd's kind and
// encoding/json's decoded length. It counts the literals the chunks ended
// themselves, so that the comparison is known to have run on them.
func TestEscapedChunks(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	valid := []string{`\\`, `\\\\`, `\\\\\\`, `\"`, `\n`, `\t`, `\/`, `\b`, `\f`, `\r`, `\u00e9`, `\u0041`, `\u20ac`,
		`\ud83d\ude00`, `\udc00`, `\ud83d`, `\ud83dx`, `\\"`, "a", "bc", "def ", "é", "\xff", strings.Repeat("z", 70),
		strings.Repeat(`\\`, 40)} // 80 backslashes: whole chunks of them
	invalid := []string{"\x01", `\x`, `\u12`, `\uZZZZ`, "\x1f"}
	var plainPieces []string
	for _, p := range valid {
		if !strings.Contains(p, `\u`) && p != `\/` {
			plainPieces = append(plainPieces, p)
		}
	}
	ends, decided, declined, plains, slows := 0, 0, 0, 0, 0
	for range 20000 {
		b := []byte{'"'}
		for range r.IntN(4) { // shift the chunk boundaries
			b = append(b, 'p')
		}
		pool := valid
		if r.IntN(2) == 0 {
			pool = plainPieces // no \u or \/: the literal can be plain
		}
		for range 20 + r.IntN(120) {
			b = append(b, pool[r.IntN(len(pool))]...)
		}
		if r.IntN(8) == 0 {
			at := 1 + r.IntN(len(b)-1)
			b = append(b[:at], append([]byte(invalid[r.IntN(len(invalid))]), b[at:]...)...)
		}
		b = append(b, '"')
		b = append(b, `,"next":"x"}`...)
		wend, wesc, wok := stringEndRef(b)
		end, n, plain, ok := StringEndPlain(b, 0)
		if ok != wok || (ok && end != wend) {
			t.Fatalf("StringEndLen(%q) = %d %v, want %d %v", b, end, ok, wend, wok)
		}
		if ok {
			if checkPlain(t, b[:end], plain) {
				plains++
			} else {
				slows++
			}
		}
		if e, _, ok2 := StringEnd(b, 0); ok2 != wok || (ok && (e != wend || wesc != (n != end-2))) {
			t.Fatalf("StringEnd(%q) disagrees", b)
		}
		if ok && utf8.Valid(b[:end]) {
			var dec string
			if err := json.Unmarshal(b[:end], &dec); err != nil || n != len(dec) {
				t.Fatalf("StringEndLen(%q) decoded length %d, encoding/json %d (%v)", b[:end], n, len(dec), err)
			}
			decided++
		}
		// The chunks alone, from the literal's first byte.
		if cend, _, _, less, _, cok := escapedChunks(b, 1); cok && cend > 0 {
			if !ok || cend != end || cend-2-less != n {
				t.Fatalf("escapedChunks(%q) = %d (less %d), want %d (decoded %d)", b, cend, less, end, n)
			}
			ends++
		} else if !cok {
			if ok {
				t.Fatalf("escapedChunks(%q) refused a valid literal", b)
			}
			declined++
		}
	}
	t.Logf("%d literals decided, %d ended by the chunks alone, %d refused by them; %d plain, %d not", decided, ends, declined, plains, slows)
	if decided < 8000 || ends < 3000 || declined < 300 || plains < 1000 || slows < 1000 {
		t.Fatalf("too few cases: %d decided, %d ended by the chunks, %d refused, %d plain, %d not", decided, ends, declined, plains, slows)
	}
}

// stringEndRef is StringEnd byte by byte: the reference of TestStringEnd,
// TestEscapedChunks and FuzzStringEnd.
func stringEndRef(b []byte) (int, bool, bool) {
	esc := false
	for j := 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return j + 1, esc, true
		case c < 0x20:
			return 0, false, false
		case c == '\\':
			esc = true
			if j+1 >= len(b) {
				return 0, false, false
			}
			switch b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j++
			case 'u':
				if j+6 > len(b) || !isHex(b[j+2]) || !isHex(b[j+3]) || !isHex(b[j+4]) || !isHex(b[j+5]) {
					return 0, false, false
				}
				j += 5
			default:
				return 0, false, false
			}
		}
	}
	return 0, false, false
}

// FuzzStringEnd checks StringEndLen against the byte-by-byte reference on
// any input, and its decoded length against encoding/json's where the
// literal is valid UTF-8; the seeds are dense in escapes, so that the
// 64-byte chunks run.
func FuzzStringEnd(f *testing.F) {
	f.Add([]byte(`"` + strings.Repeat(`a\n\tb\"c\\d`, 20) + `"`))
	f.Add([]byte(`"` + strings.Repeat(`x\u00e9\ud83d\ude00\\\\`, 12) + `",`))
	f.Add([]byte(`"` + strings.Repeat(`\\`, 70) + `\n"`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 || b[0] != '"' {
			b = append([]byte{'"'}, b...)
		}
		wend, _, wok := stringEndRef(b)
		end, n, plain, ok := StringEndPlain(b, 0)
		if ok != wok || (ok && end != wend) {
			t.Fatalf("StringEndLen(%q) = %d %v, want %d %v", b, end, ok, wend, wok)
		}
		if ok {
			checkPlain(t, b[:end], plain)
		}
		if ok && utf8.Valid(b[:end]) {
			var dec string
			if err := json.Unmarshal(b[:end], &dec); err != nil || n != len(dec) {
				t.Fatalf("StringEndLen(%q) decoded length %d, encoding/json %d (%v)", b[:end], n, len(dec), err)
			}
		}
	})
}

// TestUnicode checks the \u rule against encoding/json: random escapes,
// each followed by another (a low surrogate half the time after a high
// one), the rune and the bytes taken as json decodes them.
func TestUnicode(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	pairs, lone := 0, 0
	for range 20000 {
		r1, r2 := r.IntN(0x10000), r.IntN(0x10000)
		if r.IntN(3) == 0 {
			r1 = 0xd800 + r.IntN(0x800) // a surrogate
		}
		if r.IntN(2) == 0 {
			r2 = 0xdc00 + r.IntN(0x400) // a low one
		}
		lit := []byte(fmt.Sprintf(`"\u%04x\u%04X"`, r1, r2))
		var dec string
		if err := json.Unmarshal(lit, &dec); err != nil {
			t.Fatal(err)
		}
		want, _ := utf8.DecodeRuneInString(dec)
		wantWidth := 6
		if utf8.RuneCountInString(dec) == 1 {
			wantWidth = 12
			pairs++
		} else if want == utf8.RuneError {
			lone++
		}
		got, width, ok := Unicode(lit, 1)
		if !ok || got != want || width != wantWidth {
			t.Fatalf("Unicode(%s) = %U %d %v, want %U %d", lit, got, width, ok, want, wantWidth)
		}
	}
	if _, _, ok := Unicode([]byte(`"\u12G4"`), 1); ok {
		t.Fatal("bad hex digits accepted")
	}
	if pairs < 1000 || lone < 1000 {
		t.Fatalf("%d pairs, %d lone surrogates", pairs, lone)
	}
}

// TestPlainKey proves PlainKey takes exactly the keys the fast paths took
// before it (a valid string without escapes whose bytes are all ASCII, by
// StringEnd and a byte check), on a table and on 50,000 random literals
// drawn from quotes, backslashes, control, ASCII and non-ASCII bytes; and
// that it returns the key's bytes.
func TestPlainKey(t *testing.T) {
	ref := func(b []byte, i int) ([]byte, bool) {
		if i >= len(b) || b[i] != '"' {
			return nil, false
		}
		end, esc, ok := StringEnd(b, i)
		if !ok || esc {
			return nil, false
		}
		k := b[i+1 : end-1]
		for _, c := range k {
			if c >= 0x80 {
				return nil, false
			}
		}
		return k, true
	}
	for _, tt := range []struct {
		in   string
		want string
		ok   bool
	}{
		{`"model":1`, "model", true}, {`""`, "", true}, {`"a\"b"`, "", false}, {"\"a\x01\"", "", false},
		{"\"\xc3\xa9\"", "", false}, {`"open`, "", false}, {`x"a"`, "", false}, {"\"\x7f\"", "\x7f", true},
	} {
		k, ok := PlainKey([]byte(tt.in), 0)
		if ok != tt.ok || string(k) != tt.want {
			t.Errorf("PlainKey(%q) = %q, %v; want %q, %v", tt.in, k, ok, tt.want, tt.ok)
		}
	}
	r := rand.New(rand.NewPCG(11, 12))
	alphabet := []byte{'"', '\\', 'a', 'z', ' ', 0x01, 0x1f, 0x7f, 0x80, 0xc3, 0xa9, 'u', '0'}
	accepted := 0
	for range 50000 {
		b := []byte{'"'}
		for range r.IntN(24) {
			b = append(b, alphabet[r.IntN(len(alphabet))])
		}
		if r.IntN(4) > 0 {
			b = append(b, '"')
		}
		got, ok := PlainKey(b, 0)
		want, wok := ref(b, 0)
		if ok != wok || string(got) != string(want) {
			t.Fatalf("PlainKey(%q) = %q, %v; StringEnd's rule %q, %v", b, got, ok, want, wok)
		}
		if ok {
			accepted++
		}
	}
	if accepted < 1000 {
		t.Fatalf("only %d of 50,000 literals accepted", accepted)
	}
}

// TestSkipTight proves SkipTight calls a value tight exactly when
// json.Compact leaves it as it is, on valid edge cases and on spaces
// inserted into them (white space before the value is not part of it).
func TestSkipTight(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	checked, loose := 0, 0
	check := func(doc string) {
		if !json.Valid([]byte(doc)) {
			return
		}
		s := New([]byte(doc))
		v, tight, ok := s.SkipTight()
		if !ok || !s.End() {
			t.Fatalf("SkipTight(%q) declined a valid document", doc)
		}
		var c bytes.Buffer
		if err := json.Compact(&c, v); err != nil {
			t.Fatal(err)
		}
		if want := c.String() == string(v); tight != want {
			t.Fatalf("SkipTight(%q) tight = %v, want %v", doc, tight, want)
		}
		checked++
		if !tight {
			loose++
		}
	}
	for _, d := range docs {
		check(d)
		check(" \n" + d)
		for range 50 {
			b := []byte(d)
			i := r.IntN(len(b) + 1)
			check(string(append(b[:i:i], append([]byte{" \t\n\r"[r.IntN(4)]}, b[i:]...)...)))
		}
	}
	if checked != 661 || loose != 228 {
		t.Errorf("checked %d documents, %d loose; want 661, 228", checked, loose)
	}
}

// TestStringLen checks the Scanner's StringLen against StringEndLen.
func TestStringLen(t *testing.T) {
	for _, c := range []struct {
		lit   string
		plain bool
	}{{`"abc"`, true}, {`"a\nb"`, true}, {`"a\/b"`, false}, {`"\u00e9\ud83d\ude00"`, false}, {`""`, true}} {
		lit := c.lit
		s := New([]byte(" " + lit))
		got, n, plain, ok := s.StringLen()
		end, wantN, wantOK := StringEndLen([]byte(lit), 0)
		if string(got) != lit || n != wantN || plain != c.plain || !ok || !wantOK || end != len(lit) || s.Pos() != len(lit)+1 {
			t.Errorf("StringLen(%s) = %q, %d, %v, %v", lit, got, n, plain, ok)
		}
	}
	for _, bad := range []string{`"abc`, `x`, `"\x"`, ``} {
		s := New([]byte(bad))
		if _, _, _, ok := s.StringLen(); ok {
			t.Errorf("StringLen(%q) accepted", bad)
		}
	}
}

// TestMatchNameFolds checks MatchName against strings.EqualFold on keys
// and names of bytes that fold, bytes 0x20 apart that do not ('@' and
// '`', '[' and '{'), and others.
func TestMatchNameFolds(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const alphabet = "aAbBzZ@`[{_-0 "
	word := func() string {
		b := make([]byte, 1+r.IntN(3))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		return string(b)
	}
	declined := 0
	for range 20000 {
		names := []string{word(), word(), word()}
		key := word()
		wantI, wantOK := -1, true
		for i, n := range names {
			if key == n {
				wantI = i
				break
			}
			if strings.EqualFold(key, n) {
				wantI, wantOK = -1, false
				break
			}
		}
		if i, ok := MatchName(key, names); i != wantI || ok != wantOK {
			t.Fatalf("MatchName(%q, %q) = %d, %v; want %d, %v", key, names, i, ok, wantI, wantOK)
		}
		if !wantOK {
			declined++
		}
	}
	if declined != 265 {
		t.Errorf("%d keys declined, want 265", declined)
	}
}
