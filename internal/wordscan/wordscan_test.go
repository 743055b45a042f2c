package wordscan

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

var testPairs = [2 * MaxWords]byte{'i', 'm', 'a', 'u', 'v', 'i', '"', 'f', '"', 'm'}

// TestIndexPairEveryPosition puts each pair's first byte, second byte and
// both at each position of buffers of every length up to 80 (each block
// and each tail length), in a filler of other bytes, and also each pair
// split by one byte: indexPair against indexPairRef.
func TestIndexPairEveryPosition(t *testing.T) {
	n, found := 0, 0
	for size := 0; size <= 80; size++ {
		for p := range MaxWords {
			for pos := range size {
				for _, piece := range [][]byte{
					{testPairs[2*p], testPairs[2*p+1]}, {testPairs[2*p]}, {testPairs[2*p+1]},
					{testPairs[2*p], 'x', testPairs[2*p+1]},
				} {
					b := bytes.Repeat([]byte{'x'}, size)
					copy(b[pos:], piece)
					checkPair(t, b, &n, &found)
				}
			}
		}
	}
	if want := 4 * MaxWords * 80 * 81 / 2; n != want || found < n/5 {
		t.Fatalf("%d cases (want %d), %d with a pair", n, want, found)
	}
}

// TestIndexPairProperty: random buffers of the pairs' bytes and others, at
// random offsets and lengths, against indexPairRef.
func TestIndexPairProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 5))
	const alphabet = "imauvf\"xyz\x00\xff"
	buf := make([]byte, 600)
	n, found := 0, 0
	for range 20000 {
		off := r.IntN(16)
		b := buf[off : off+r.IntN(len(buf)-off)]
		for k := range b {
			b[k] = alphabet[r.IntN(len(alphabet))]
			if r.IntN(3) != 0 {
				b[k] = 'x'
			}
		}
		checkPair(t, b, &n, &found)
	}
	if n != 20000 || found < 10000 || found == n {
		t.Fatalf("%d cases, %d with a pair", n, found)
	}
}

// TestContains compares Contains with one bytes.Contains a word, on
// random bodies made of the words, their near misses and filler, each
// word alone and all together: the bodies with a word and those without
// are counted.
func TestContains(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 6))
	words := []string{"image", "audio", "video", `"file`}
	sets := []*Set{NewSet(words...)}
	for _, w := range words {
		sets = append(sets, NewSet(w))
	}
	pieces := append([]string{"ima", "imag", "au", "vide", `"fil`, "x", "yy z", `{"a":"b"}`, "i", `"`}, words...)
	with, without := 0, 0
	for n := range 20000 {
		var b []byte
		for range r.IntN(60) {
			p := pieces[r.IntN(len(pieces))]
			if r.IntN(4) != 0 {
				p = pieces[r.IntN(10)] // mostly near misses
			}
			b = append(b, p...)
		}
		s := sets[n%len(sets)]
		got, want := Contains(b, s), containsEach(b, s)
		if got != want {
			t.Fatalf("Contains(%q, %v) = %v, bytes.Contains %v", b, s.words, got, want)
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

// checkPair compares indexPair on b with indexPairRef and counts the case
// in n, and in found when b holds a pair.
func checkPair(t *testing.T, b []byte, n, found *int) {
	t.Helper()
	got, want := indexPair(b, &testPairs), indexPairRef(b, &testPairs)
	if got != want {
		t.Fatalf("indexPair(%q) = %d, want %d", b, got, want)
	}
	*n++
	if want >= 0 {
		*found++
	}
}
