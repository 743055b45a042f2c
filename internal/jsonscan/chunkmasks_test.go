package jsonscan

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
	"unsafe"
)

// masksRef classes each byte of a chunk one at a time: what masks must
// give (esc and u only where simdMasks says masks sets them).
func masksRef(a []byte) chunkMasks {
	var m chunkMasks
	for k, c := range a[:64] {
		bit := uint64(1) << k
		switch {
		case c == '\\':
			m.bs |= bit
		case c == '"':
			m.qt |= bit
		case c < 0x20:
			m.ctl |= bit
		}
		if simdMasks && escClass[c] != escBad {
			m.esc |= bit
		}
		if simdMasks && (c == 'u' || c == '/') {
			m.slow |= bit
		}
	}
	return m
}

// checkMasks compares masks over the chunks of b (a batch of len(b)/64)
// with masksRef, and each classing the CPU can run (SSE2 and AVX2 on
// amd64) and masks64Go's word masks with it too, so that the other
// architectures' classing is checked here as well.
func checkMasks(t *testing.T, b []byte, what string) {
	t.Helper()
	ms := make([]chunkMasks, len(b)/64)
	masks(b, ms)
	vs := make(map[string][]chunkMasks)
	for name, f := range maskVariants() {
		vs[name] = make([]chunkMasks, len(ms))
		f(&b[0], len(ms), &vs[name][0])
	}
	for c := range ms {
		want := masksRef(b[64*c:])
		if ms[c] != want {
			t.Fatalf("%s: chunk %d: masks = %+v, want %+v", what, c, ms[c], want)
		}
		for name, v := range vs {
			if v[c] != want {
				t.Fatalf("%s: chunk %d: %s masks = %+v, want %+v", what, c, name, v[c], want)
			}
		}
		g := masks64Go((*[64]byte)(b[64*c:]))
		if g.bs != want.bs || g.qt != want.qt || g.ctl != want.ctl {
			t.Fatalf("%s: chunk %d: masks64Go = %+v, want %+v", what, c, g, want)
		}
	}
}

// TestMasksEveryByteEveryPosition puts each of the 256 byte values at each
// position of a batch of maskBatch chunks, in a filler of plain letters
// and in a filler of the value's neighbours (so that a class boundary,
// 0x1f against 0x20 or 'u' against 't', sits on both sides of it).
func TestMasksEveryByteEveryPosition(t *testing.T) {
	n := 0
	for v := range 256 {
		for _, filler := range []func(k int) byte{
			func(int) byte { return 'a' },
			func(k int) byte { return byte(v + 1 - 2*(k%2)) },
		} {
			b := make([]byte, 64*maskBatch)
			for k := range b {
				b[k] = filler(k)
			}
			for pos := range b {
				old := b[pos]
				b[pos] = byte(v)
				checkMasks(t, b, fmt.Sprintf("byte %#x at %d", v, pos))
				b[pos] = old
				n++
			}
		}
	}
	if want := 256 * 2 * 64 * maskBatch; n != want {
		t.Fatalf("checked %d cases, want %d", n, want)
	}
}

// TestMasksProperty compares masks with masksRef on random batches of
// one to maskBatch chunks, drawn mostly from the bytes that matter (the
// special ones and their neighbours), at random alignments.
func TestMasksProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 3))
	const alphabet = "\"\\/bfnrtu\x00\x1f\x20\x7f\x80\xffatvs!#[]{}"
	buf := make([]byte, 64*maskBatch+8)
	n, special := 0, 0
	for range 20000 {
		off := r.IntN(8)
		b := buf[off : off+64*(1+r.IntN(maskBatch))]
		for k := range b {
			if r.IntN(4) == 0 {
				b[k] = byte(r.IntN(256))
			} else {
				b[k] = alphabet[r.IntN(len(alphabet))]
			}
		}
		checkMasks(t, b, "random batch")
		n++
		if ms := masksRef(b); ms.bs != 0 && ms.qt != 0 && ms.ctl != 0 {
			special++
		}
	}
	if n != 20000 || special < 10000 {
		t.Fatalf("checked %d batches, %d with every special class; want 20000 and most", n, special)
	}
	var names []string
	for name := range maskVariants() {
		names = append(names, name)
	}
	t.Logf("classings compared besides masks: %v", names)
}

// TestChunkMasksLayout holds chunkMasks to the layout masksSSE2 writes:
// five words in this order.
func TestChunkMasksLayout(t *testing.T) {
	var m chunkMasks
	got := []uintptr{unsafe.Offsetof(m.bs), unsafe.Offsetof(m.qt), unsafe.Offsetof(m.ctl), unsafe.Offsetof(m.esc), unsafe.Offsetof(m.slow), unsafe.Sizeof(m)}
	want := []uintptr{0, 8, 16, 24, 32, 40}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("chunkMasks layout %v, want %v", got, want)
		}
	}
}

// TestSparseEscapes drives StringEndLen over prose with an escape every
// 30 to 300 bytes, where the SIMD-classed chunks keep on through the plain
// runs after the first escape: its end and decoded length against the
// byte-at-a-time reference and encoding/json, with control bytes, bad
// escapes and non-ASCII bytes dropped in, the string's end at every
// alignment. It counts the valid and the invalid literals it checked.
func TestSparseEscapes(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 4))
	escapes := []string{`\n`, `\"`, `\\`, `\t`, `\u0026`, `\ud83d\ude00`, `\/`}
	invalid := []string{"\x01", "\x1f", `\x`, `\u12g4`, `\`}
	valid, refused := 0, 0
	for range 10000 {
		b := []byte{'"'}
		for range 1 + r.IntN(8) {
			for range 30 + r.IntN(270) {
				c := byte('a' + r.IntN(26))
				if r.IntN(50) == 0 {
					c = 0xc3 // half a rune: not for encoding/json's length check
				}
				b = append(b, c)
			}
			b = append(b, escapes[r.IntN(len(escapes))]...)
		}
		if r.IntN(4) == 0 {
			at := 1 + r.IntN(len(b)-1)
			b = append(b[:at], append([]byte(invalid[r.IntN(len(invalid))]), b[at:]...)...)
		}
		b = append(b, '"')
		b = append(b, strings.Repeat("x", r.IntN(64))...)
		wend, _, wok := stringEndRef(b)
		end, n, ok := StringEndLen(b, 0)
		if ok != wok || (ok && end != wend) {
			t.Fatalf("StringEndLen(%q) = %d %v, want %d %v", b, end, ok, wend, wok)
		}
		if !ok {
			refused++
			continue
		}
		if utf8.Valid(b[:end]) {
			var dec string
			if err := json.Unmarshal(b[:end], &dec); err != nil || n != len(dec) {
				t.Fatalf("StringEndLen(%q) decoded length %d, encoding/json %d (%v)", b[:end], n, len(dec), err)
			}
		}
		valid++
	}
	if valid+refused != 10000 || valid < 7000 || refused < 1500 {
		t.Fatalf("%d valid and %d invalid literals checked", valid, refused)
	}
}

// BenchmarkMasks classes 256 KiB of escape-dense text (what the agent
// bodies' tool results are) a batch of chunks at a time, as escapedChunks
// does.
func BenchmarkMasks(b *testing.B) {
	src := []byte(`\tif err != nil {\n\t\treturn fmt.Errorf(\"read %q: %w\", p, err)\n\t}\n`)
	buf := make([]byte, 0, 256<<10)
	for len(buf)+len(src) <= cap(buf) {
		buf = append(buf, src...)
	}
	buf = buf[:len(buf)&^(64*maskBatch-1)]
	var ms [maskBatch]chunkMasks
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		for off := 0; off < len(buf); off += 64 * maskBatch {
			masks(buf[off:], ms[:])
		}
	}
}
