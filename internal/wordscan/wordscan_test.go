package wordscan

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
)

var testWords = []string{"image", "audio", "video", "file", "document"}

// containsEach is Contains one bytes.Contains a quoted word.
func containsEach(b []byte, s *Set) bool {
	for _, w := range s.words {
		if bytes.Contains(b, append([]byte{'"'}, w...)) {
			return true
		}
	}
	return false
}

// TestIndexEveryPosition puts each candidate (a quote and a word's first
// two bytes), and each of its near misses (the quote alone, the pair
// alone, the quote and one byte, the pair split), at each position of
// buffers of every length up to 200 (each run, block and tail length), in
// a filler of other bytes: index against indexRef.
func TestIndexEveryPosition(t *testing.T) {
	s := NewSet(testWords...)
	n, found := 0, 0
	for size := 0; size <= 200; size++ {
		for _, w := range testWords {
			for pos := range size {
				for _, piece := range []string{`"` + w[:2], `"`, w[:2], `"` + w[:1], `"` + w[:1] + "x" + w[1:2]} {
					b := bytes.Repeat([]byte{'x'}, size)
					copy(b[pos:], piece)
					checkIndex(t, b, s, &n, &found)
				}
			}
		}
	}
	if want := 5 * len(testWords) * 200 * 201 / 2; n != want || found < n/6 {
		t.Fatalf("%d cases (want %d), %d with a candidate", n, want, found)
	}
}

// TestIndexProperty: random buffers of the candidates' bytes and others,
// half of them with a candidate planted, at random offsets and lengths,
// against indexRef.
func TestIndexProperty(t *testing.T) {
	s := NewSet(testWords...)
	r := rand.New(rand.NewPCG(41, 5))
	const alphabet = "imauvidfo\"xyz\x00\xff"
	buf := make([]byte, 700)
	n, found := 0, 0
	for range 20000 {
		off := r.IntN(16)
		b := buf[off : off+r.IntN(len(buf)-off)]
		for k := range b {
			b[k] = 'x'
			if r.IntN(4) == 0 {
				b[k] = alphabet[r.IntN(len(alphabet))]
			}
		}
		if len(b) > 3 && r.IntN(2) == 0 { // a candidate somewhere, half the time
			copy(b[r.IntN(len(b)-2):], `"`+testWords[r.IntN(len(testWords))][:2])
		}
		checkIndex(t, b, s, &n, &found)
	}
	if n != 20000 || found < 8000 || found == n {
		t.Fatalf("%d cases, %d with a candidate", n, found)
	}
}

// TestContains compares Contains with one bytes.Contains a quoted word,
// on random bodies made of the words, their near misses and filler, each
// word alone and all together, short and past a run: the bodies with a
// word and those without are counted.
func TestContains(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 6))
	sets := []*Set{NewSet(testWords...)}
	for _, w := range testWords {
		sets = append(sets, NewSet(w))
	}
	pieces := []string{`"ima`, `"imag`, `image`, `"au`, `"vide`, `"fil`, `"do`, "x", "yy z", `{"a":"b"}`, `"i`, `"`}
	for _, w := range testWords {
		pieces = append(pieces, `"`+w)
	}
	with, without := 0, 0
	for n := range 20000 {
		var b []byte
		for range r.IntN(60) {
			p := pieces[r.IntN(len(pieces))]
			if r.IntN(4) != 0 {
				p = pieces[r.IntN(12)] // mostly near misses
			}
			b = append(b, p...)
		}
		s := sets[n%len(sets)]
		got, want := Contains(b, s), containsEach(b, s)
		if got != want {
			t.Fatalf("Contains(%q, %q) = %v, bytes.Contains %v", b, s.words, got, want)
		}
		if want {
			with++
		} else {
			without++
		}
	}
	if with+without != 20000 || with < 4000 || without < 4000 {
		t.Fatalf("%d bodies with a word, %d without", with, without)
	}
}

// checkIndex compares index on b with indexRef and counts the case in n,
// and in found when b holds a candidate.
func checkIndex(t *testing.T, b []byte, s *Set, n, found *int) {
	t.Helper()
	got, want := index(b, s), indexRef(b, s)
	if got != want {
		t.Fatalf("index(%q) = %d, want %d", b, got, want)
	}
	*n++
	if want >= 0 {
		*found++
	}
}

// BenchmarkContains: Contains against one bytes.Contains a quoted word
// (the baseline, in the same run) on a body of long prompt text and on a
// tool-heavy agent body, neither holding a word (the whole body is read).
func BenchmarkContains(b *testing.B) {
	s := NewSet(testWords...)
	prose := []byte(`{"messages":[{"role":"user","content":"` +
		strings.Repeat("the quick brown fox imagines a view of audiences; provide evidence, \\\"quoted\\\" ", 8000)[:512<<10] + `"}]}`)
	tool := `{"name":"run_%d","description":"Runs a command in the shell and returns its output.","input_schema":{"type":"object","properties":{"command":{"type":"string","description":"The command"},"timeout":{"type":"integer"}},"required":["command"]}},`
	agent := []byte(`{"tools":[` + strings.Repeat(tool, 220)[:51<<10] + `]}`)
	for _, c := range []struct {
		name string
		body []byte
	}{{"prose512KiB", prose}, {"agent51KiB", agent}} {
		if Contains(c.body, s) || containsEach(c.body, s) {
			b.Fatalf("%s holds a word", c.name)
		}
		b.Run(c.name+"/wordscan", func(b *testing.B) {
			b.SetBytes(int64(len(c.body)))
			for b.Loop() {
				Contains(c.body, s)
			}
		})
		b.Run(c.name+"/bytes.Contains", func(b *testing.B) {
			b.SetBytes(int64(len(c.body)))
			for b.Loop() {
				containsEach(c.body, s)
			}
		})
	}
}
