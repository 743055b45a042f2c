// Package jsonscan is a validating one-pass JSON scanner for fast paths
// that must agree with encoding/json: a caller walks the fields it wants,
// skips (and so validates) the rest, and declines, falling back to
// encoding/json, whenever the input is anything encoding/json could read
// differently (escaped or non-ASCII keys, keys that equal a wanted name but
// for case, nesting deeper than MaxDepth). Strings decode exactly as
// encoding/json decodes them: the input's own bytes when they need no
// change, encoding/json itself otherwise.
package jsonscan

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math/bits"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// MaxDepth bounds the nesting Skip follows; deeper input declines.
const MaxDepth = 500

// Scanner reads one JSON document. The zero value is not usable; see New.
type Scanner struct {
	b []byte
	i int
	// loose is set whenever WS skips white space (SkipTight reads it).
	loose bool
}

// New returns a scanner at the start of b.
func New(b []byte) Scanner { return Scanner{b: b} }

// At returns a scanner over b at offset i, for a caller that scans b with
// its own code and hands a value over.
func At(b []byte, i int) Scanner { return Scanner{b: b, i: i} }

// Pos returns the scanner's offset in its input.
func (s *Scanner) Pos() int { return s.i }

// WS skips white space.
func (s *Scanner) WS() {
	if s.i < len(s.b) && s.b[s.i] > ' ' {
		return // the common case: no white space at all
	}
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
			s.loose = true
		default:
			return
		}
	}
}

// Peek returns the next byte after white space, 0 at the end.
func (s *Scanner) Peek() byte {
	s.WS()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// Open consumes c ('{' or '[') after white space.
func (s *Scanner) Open(c byte) bool {
	if s.Peek() != c {
		return false
	}
	s.i++
	return true
}

// Empty consumes closer when the object or array just opened is empty.
func (s *Scanner) Empty(closer byte) bool {
	if s.Peek() == closer {
		s.i++
		return true
	}
	return false
}

// Next consumes ',' (more) or closer (done) after white space.
func (s *Scanner) Next(closer byte) (more, ok bool) {
	switch s.Peek() {
	case ',':
		s.i++
		return true, true
	case closer:
		s.i++
		return false, true
	}
	return false, false
}

// Object reads an object (after white space). For each key among names
// (at most 64) it calls field with the key's index in names, and field
// must read the value; the value of any other key is skipped. A key of
// names seen twice, a key Key declines, or field returning false declines
// the object (ok false), as does anything not an object.
func (s *Scanner) Object(names []string, field func(i int) bool) bool {
	if !s.Open('{') {
		return false
	}
	if s.Empty('}') {
		return true
	}
	var seen uint64
	for {
		_, i, ok := s.key(names)
		if !ok {
			return false
		}
		switch {
		case i < 0:
			if _, ok := s.Skip(); !ok {
				return false
			}
		case seen&(1<<i) != 0:
			return false
		default:
			seen |= 1 << i
			if !field(i) {
				return false
			}
		}
		more, ok := s.Next('}')
		if !ok {
			return false
		}
		if !more {
			return true
		}
	}
}

// Array reads an array (after white space), calling elem for each element,
// which must read it; elem returning false, or anything not an array,
// declines (ok false).
func (s *Scanner) Array(elem func() bool) bool {
	if !s.Open('[') {
		return false
	}
	if s.Empty(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		more, ok := s.Next(']')
		if !ok {
			return false
		}
		if !more {
			return true
		}
	}
}

// End reports whether only white space is left.
func (s *Scanner) End() bool {
	s.WS()
	return s.i == len(s.b)
}

// Key reads an object key and its colon. It returns the name of names the
// key equals, or the key itself when it equals none; it declines (ok
// false) escaped or non-ASCII keys and keys that equal one of names but
// for case, which encoding/json would match to that field.
func (s *Scanner) Key(names ...string) (string, bool) {
	k, i, ok := s.key(names)
	if i >= 0 {
		return names[i], ok
	}
	return k, ok
}

// key is Key that also returns the index in names of the name the key
// equals (-1 for none).
func (s *Scanner) key(names []string) (string, int, bool) {
	s.WS()
	k, ok := PlainKey(s.b, s.i)
	if !ok {
		return "", -1, false
	}
	s.i += len(k) + 2
	ks := unsafe.String(unsafe.SliceData(k), len(k))
	i, ok := MatchName(ks, names)
	if !ok || s.Peek() != ':' {
		return "", -1, false
	}
	s.i++
	return ks, i, true
}

// MatchName returns the index of the name of names that key (ASCII, as
// PlainKey reads keys) equals, -1 for none, or ok false when it equals one
// of them but for case, which encoding/json would match to that field.
func MatchName(key string, names []string) (i int, ok bool) {
	for i, n := range names {
		if len(n) != len(key) || len(n) > 0 && key[0]|0x20 != n[0]|0x20 {
			continue // ASCII: no fold changes a length, nor a first byte but for 0x20
		}
		if key == n {
			return i, true
		}
		if strings.EqualFold(key, n) {
			return -1, false
		}
	}
	return -1, true
}

// PlainKey reads the string literal at b[i] as an object key the fast
// paths take: printable ASCII without escapes. It returns the key's bytes
// (quotes excluded), or ok false for anything else: not a string, a
// backslash, a control byte (invalid JSON anyway), a byte past ASCII, no
// closing quote. Keys are short: one byte at a time beats StringEnd's
// probes and calls there.
func PlainKey(b []byte, i int) (key []byte, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], true
		case c < 0x20 || c >= 0x80 || c == '\\':
			return nil, false
		}
	}
	return nil, false
}

// Eight bytes at a time: lo has a one in each byte, hi the top bit.
const (
	lo = 0x0101010101010101
	hi = 0x8080808080808080
)

// escapeOrCtlGo is the index of b's first backslash or control byte
// (below 0x20, invalid in a JSON string), or len(b), eight bytes a step
// from b[from] on (firstEscapeOrCtl).
func escapeOrCtlGo(b []byte, from int) int {
	i := from
	for ; i+8 <= len(b); i += 8 {
		if m := firstEscapeOrCtl(binary.LittleEndian.Uint64(b[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '\\' || c < 0x20 {
			return i
		}
	}
	return len(b)
}

func isHex(c byte) bool { return c-'0' < 10 || (c|0x20)-'a' < 6 }

// Unicode decodes the \u escape whose backslash is b[k] as JSON decoders
// do: the rune (a surrogate pair's as one, U+FFFD for a lone surrogate)
// and the bytes the escape takes (6, or 12 for a pair); ok is false for
// bad hex digits. It is the one rule for \u: the renderer decodes by it and
// StringEndLen counts by it.
func Unicode(b []byte, k int) (r rune, width int, ok bool) {
	r, ok = hex4(b, k+2)
	switch {
	case !ok:
		return 0, 0, false
	case r < 0xd800 || r >= 0xe000:
		return r, 6, true
	case r < 0xdc00 && k+12 <= len(b) && b[k+6] == '\\' && b[k+7] == 'u':
		if r2, ok := hex4(b, k+8); ok && r2 >= 0xdc00 && r2 < 0xe000 {
			return 0x10000 + (r-0xd800)<<10 + (r2 - 0xdc00), 12, true
		}
	}
	return utf8.RuneError, 6, true // a lone surrogate
}

// hex4 decodes the four hex digits at b[i:], or reports false.
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c-'0' < 10:
			c -= '0'
		case (c|0x20)-'a' < 6:
			c = (c | 0x20) - 'a' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// StringEnd scans the string literal whose opening quote is b[i]: it
// returns the index just past its closing quote and whether it holds
// escapes, or ok false when it is not a valid JSON string (a control byte,
// a bad escape, no end). The quote, the backslashes and the control bytes
// are each searched once over the literal (bytes.IndexByte for the first
// two), whatever its escapes.
func StringEnd(b []byte, i int) (end int, esc, ok bool) {
	end, n, ok := StringEndLen(b, i)
	return end, ok && n != end-i-2, ok
}

// StringEndLen is StringEnd that also returns the literal's length once
// decoded (quotes excluded), as the module decodes it: bytes other than
// escapes as they are (invalid UTF-8 too), each one-byte escape one byte,
// \uXXXX the UTF-8 of its rune, a surrogate pair the four bytes of the
// rune it makes, a lone surrogate U+FFFD's three. The scan visits every
// escape anyway, so a caller knows a text's length without decoding it.
func StringEndLen(b []byte, i int) (end, n int, ok bool) {
	end, n, _, ok = StringEndPlain(b, i)
	return end, n, ok
}

// StringEndPlain is StringEndLen that also reports whether the literal is
// plain: none of its escapes is \u or \/, so that its contents are already
// what AppendEscaped makes of the decoded text (JSON leaves a writer no
// other choice for the other escapes) and can be rendered as they are.
func StringEndPlain(b []byte, i int) (end, n int, plain, ok bool) {
	j := i + 1
	escapes, shrink := 0, 0 // shrink: the bytes the escapes lose in decoding
	slow := false           // a \u or \/ escape seen
	// Keys and short values (shortString): eight bytes at a time, the
	// first quote, backslash or control byte ends them sooner than the
	// searches below get going.
	for k := j; k+8 <= len(b) && k < j+shortString; k += 8 {
		m := firstSpecial(binary.LittleEndian.Uint64(b[k:]))
		if m == 0 {
			continue
		}
		at := k + bits.TrailingZeros64(m)/8
		if b[at] == '"' {
			return at + 1, at - i - 1, true, true
		}
		break // an escape or a control byte: the general scan
	}
	q := -1 // the next quote at or after j, once found
	// The runs between the last escapes: short ones (source code) make
	// the chunks pay, long ones (prose with line breaks) do not.
	gap, prevGap := nearEscape+1, nearEscape+1
	for {
		k := -1 // the next backslash
		if (simdMasks && escapes > 0 || gap <= nearEscape && prevGap <= nearEscape) && j+64 <= len(b) {
			// Text full of escapes: 64 bytes at a time, every escape in
			// them resolved with bit operations; the scans below take
			// over where that stops paying (or cannot be done). Where
			// the chunks are classed with SIMD they pay from the first
			// escape on, sparse escapes and plain runs too.
			gap, prevGap = nearEscape+1, nearEscape+1
			end, next, esc, less, sl, ok := escapedChunks(b, j)
			if !ok {
				return 0, 0, false, false
			}
			escapes += esc
			shrink += less
			slow = slow || sl
			if end > 0 {
				return end, end - i - 2 - shrink, !slow, true
			}
			j = next
		}
		if escapes > 0 {
			// Past an escape the next one is often near (source code
			// has a line break, a tab or a quote every 15 bytes or so):
			// the next bytes eight at a time, as above, before the
			// searches, whose calls cost more than such a run.
			p, stop := j, j
			for ; p+8 <= len(b) && p < j+nearEscape; p += 8 {
				if m := firstSpecial(binary.LittleEndian.Uint64(b[p:])); m != 0 {
					p += bits.TrailingZeros64(m) / 8
					stop = p + 1
					break
				}
			}
			if p < stop {
				switch b[p] {
				case '"':
					return p + 1, p - i - 1 - shrink, !slow, true
				case '\\':
					k = p
				default:
					return 0, 0, false, false // a control byte
				}
			}
			j = p
		}
		if k < 0 {
			if q < j {
				n := bytes.IndexByte(b[j:], '"')
				if n < 0 {
					return 0, 0, false, false
				}
				q = j + n
			}
			// One pass over the run up to the quote finds its first
			// backslash or control byte (most often neither).
			seg := b[j:q]
			n := escapeOrCtl(seg)
			if n == len(seg) {
				return q + 1, q - i - 1 - shrink, !slow, true
			}
			if seg[n] != '\\' {
				return 0, 0, false, false
			}
			k = j + n
		}
		escapes++
		gap, prevGap = k-j, gap
		j = k
		if j+1 >= len(b) {
			return 0, 0, false, false
		}
		switch b[j+1] {
		case '"', '\\', 'b', 'f', 'n', 'r', 't':
			j += 2
			shrink++
		case '/':
			j += 2
			shrink++
			slow = true
		case 'u':
			slow = true
			r, width, ok := Unicode(b, j)
			if !ok {
				return 0, 0, false, false
			}
			size := utf8.RuneLen(r)
			if width > 6 {
				escapes++ // a surrogate pair: two escapes
			}
			j += width
			shrink += width - size
		default:
			return 0, 0, false, false
		}
	}
}

// escapedChunks scans a string from b[j] (not an escaped byte), 64 bytes
// at a time, while the chunks hold escapes: each chunk's quotes,
// backslashes and control bytes become bit masks, the runs of backslashes
// are told apart by the parity of where they start (a run of odd length
// escapes the byte after it; a run of L backslashes is L/2 escapes of a
// backslash, and one more of that byte when L is odd), and the escaped
// bytes are checked one by one, a \u escape's hex digits decoded for its
// length.
//
// It returns end (past the closing quote) when the string ends in the
// chunks, else next, where the caller's scans go on: a chunk without
// escapes or with few (they are faster there, unless the chunks are
// classed with SIMD), fewer than 64 bytes left, or a surrogate pair
// across the chunk's end (from that chunk's start). esc is
// the escapes it saw and less the bytes they lose in decoding; slow is
// set when one of them may be a \u or \/ (StringEndPlain); ok is false
// for an invalid string.
func escapedChunks(b []byte, j int) (end, next, esc, less int, slow, ok bool) {
	const even = 0x5555555555555555
	var batch [maskBatch]chunkMasks
	next, left := 0, 0 // batch[next:next+left] class the chunks from j on
	for j+64 <= len(b) {
		if left == 0 {
			next, left = 0, min((len(b)-j)/64, maskBatch)
			masks(b[j:], batch[:left])
		}
		m := &batch[next]
		next, left = next+1, left-1
		bs, qt, ctl := m.bs, m.qt, m.ctl
		if bs == 0 && !simdMasks {
			return 0, j, esc, less, slow, true // plain text again
		}
		if bs == ^uint64(0) {
			// 64 backslashes from an unescaped start: 32 escaped ones.
			esc, less, j = esc+32, less+32, j+64
			continue
		}
		// A run of backslashes reaching the chunk's end is left to the
		// next chunk, which starts with it.
		limit, window := 64, ^uint64(0)
		if bs>>63 != 0 {
			limit = 64 - bits.LeadingZeros64(^bs)
			window = uint64(1)<<limit - 1
		}
		run := bs & window
		starts := run &^ (run << 1)
		evenEnds := (run + starts&even) &^ run
		oddEnds := (run + starts&^even) &^ run
		escaped := evenEnds&^even | oddEnds&even
		n, found := limit, false
		if quotes := qt & window &^ escaped; quotes != 0 {
			n, found = bits.TrailingZeros64(quotes), true
		}
		below := ^uint64(0)
		if n < 64 {
			below = uint64(1)<<n - 1
		}
		if ctl&below != 0 {
			return 0, 0, 0, 0, false, false
		}
		// The escaped bytes: their classes from the masks, or looked up
		// and or'd together without a branch each; only \u escapes
		// (rare) are looked at one by one.
		class := byte(0)
		if simdMasks {
			if escaped&below&^m.esc != 0 {
				class |= escBad
			}
			if escaped&below&m.slow != 0 {
				class |= escU // or a \/: the loop below looks
			}
		} else {
			for e := escaped & below; e != 0; e &= e - 1 {
				class |= escClass[b[j+bits.TrailingZeros64(e)]]
			}
		}
		if class&escBad != 0 {
			return 0, 0, 0, 0, false, false
		}
		slow = slow || class&(escU|escSlash) != 0
		extra := 0 // what \u escapes lose beyond one byte each
		if class&escU != 0 {
			pairLow := -1 // a low surrogate already counted with its high one
			for e := escaped & below; e != 0; e &= e - 1 {
				p := bits.TrailingZeros64(e)
				if b[j+p] != 'u' || p == pairLow {
					continue
				}
				r, width, ok := Unicode(b, j+p-1)
				if !ok {
					return 0, 0, 0, 0, false, false
				}
				size := utf8.RuneLen(r)
				if width > 6 {
					if p+6 >= n {
						return 0, j, esc, less, slow, true // the pair crosses the chunk
					}
					pairLow = p + 6
				}
				// Each six bytes of it are one escape, counted below.
				extra += width - size - width/6
			}
		}
		k := (bits.OnesCount64(bs&below) + bits.OnesCount64(escaped&below)) / 2
		esc, less = esc+k, less+k+extra
		if found {
			return j + n + 1, 0, esc, less, slow, true
		}
		j += limit
		if limit < 64 {
			left = 0 // the batch's chunks no longer start at j
		}
		if k < 4 && !simdMasks {
			return 0, j, esc, less, slow, true // sparse escapes: the searches are faster
		}
	}
	return 0, j, esc, less, slow, true
}

// maskBatch is how many chunks escapedChunks classes at a time: the
// strings it scans are long (a source file in a tool result), and a batch
// spreads the cost of a call over its chunks; the bytes it classes past
// a string's end cost less than the calls.
const maskBatch = 4

// escClass classes the byte after a backslash: a one-byte escape (0, or
// escSlash for \/, which a plain literal does not have), a \u escape
// (escU), or no escape at all (escBad).
var escClass = func() (t [256]byte) {
	for c := range t {
		t[c] = escBad
	}
	for _, c := range []byte{'"', '\\', 'b', 'f', 'n', 'r', 't'} {
		t[c] = 0
	}
	t['/'] = escSlash
	t['u'] = escU
	return t
}()

const (
	escU     = 1
	escBad   = 2
	escSlash = 4
)

// firstSpecial has the top bit of the bytes of w that are a quote, a
// backslash or a control byte, and of some above the first such byte: in
// each mask the lowest set bit is exact (a borrow only reaches the bytes
// above it), so their union's is the first such byte, which is all that
// is read of it. zeroBytes and ctlBytes are exact, and cost more.
func firstSpecial(w uint64) uint64 {
	q := w ^ (lo * '"')
	return (q-lo)&^q&hi | firstEscapeOrCtl(w)
}

// firstEscapeOrCtl is firstSpecial without the quote: the top bit of the
// bytes of w that are a backslash or a control byte, and of some above
// the first such byte.
func firstEscapeOrCtl(w uint64) uint64 {
	bs := w ^ (lo * '\\')
	return ((bs-lo)&^bs | (w-0x20*lo)&^w) & hi
}

// zeroBytes has the top bit of each byte of x that is zero, exactly (no
// borrow reaches another byte).
func zeroBytes(x uint64) uint64 {
	const low7 = 0x7f7f7f7f7f7f7f7f
	return ^((x&low7 + low7) | x) & hi
}

// ctlBytes has the top bit of each byte of x below 0x20, exactly.
func ctlBytes(x uint64) uint64 {
	const low7 = 0x7f7f7f7f7f7f7f7f
	return ^((x&low7 + 0x60*lo) | x) & hi
}

// movemask gathers the top bits of m's bytes into its low 8 bits.
func movemask(m uint64) uint64 {
	return (m >> 7) * 0x0102040810204080 >> 56
}

// shortString is how far StringEndLen reads eight bytes at a time for the
// first quote, backslash or control byte before its searches: far enough
// for keys and for the tens-of-bytes values of a tool's schema (types,
// property descriptions), whose three searches' calls cost more than
// the words.
const shortString = 128

// nearEscape is how far StringEndLen looks, eight bytes at a time, past
// an escape before the searches.
const nearEscape = 16

// String reads a string (after white space) and returns its literal,
// quotes included, and whether it holds escapes.
func (s *Scanner) String() (lit []byte, esc, ok bool) {
	if s.Peek() != '"' {
		return nil, false, false
	}
	end, esc, ok := StringEnd(s.b, s.i)
	if !ok {
		return nil, false, false
	}
	lit = s.b[s.i:end]
	s.i = end
	return lit, esc, true
}

// StringLen is String that returns the literal's decoded length and
// whether it is plain (StringEndPlain) instead: it holds escapes when
// n != len(lit)-2.
func (s *Scanner) StringLen() (lit []byte, n int, plain, ok bool) {
	if s.Peek() != '"' {
		return nil, 0, false, false
	}
	end, n, plain, ok := StringEndPlain(s.b, s.i)
	if !ok {
		return nil, 0, false, false
	}
	lit = s.b[s.i:end]
	s.i = end
	return lit, n, plain, true
}

// Text decodes a string literal as encoding/json does. A literal without
// escapes whose bytes are valid UTF-8 is returned as those bytes, without
// a copy (valid while the input is); any other goes through encoding/json.
func Text(lit []byte, esc bool) (string, bool) {
	if v := lit[1 : len(lit)-1]; !esc && utf8.Valid(v) {
		return unsafe.String(unsafe.SliceData(v), len(v)), true
	}
	var t string
	if json.Unmarshal(lit, &t) != nil {
		return "", false
	}
	return t, true
}

// Lit consumes the literal word (true, false, null) after white space.
func (s *Scanner) Lit(word string) bool {
	s.WS()
	if strings.HasPrefix(unsafe.String(unsafe.SliceData(s.b[s.i:]), len(s.b)-s.i), word) {
		s.i += len(word)
		return true
	}
	return false
}

func isDigit(c byte) bool { return c-'0' < 10 }

// number consumes a number and reports whether it is a plain integer (no
// fraction, no exponent).
func (s *Scanner) number() (integer, ok bool) {
	b, i := s.b, s.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return false, false
	}
	integer = true
	if i < len(b) && b[i] == '.' {
		integer = false
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return false, false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		integer = false
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return false, false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	s.i = i
	return integer, true
}

// Int reads an integer literal of at most 18 digits (so that it fits an
// int64 whatever its digits); anything else declines.
func (s *Scanner) Int() (int64, bool) {
	s.WS()
	start := s.i
	integer, ok := s.number()
	lit := s.b[start:s.i]
	neg := len(lit) > 0 && lit[0] == '-'
	if neg {
		lit = lit[1:]
	}
	if !ok || !integer || len(lit) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range lit {
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// Skip reads any value after white space and returns its bytes.
func (s *Scanner) Skip() ([]byte, bool) { return s.skip(0) }

// SkipTight is Skip that also reports whether the value is tight: no
// white space outside its strings, so that it is its own compact form
// (what json.Compact would make of it), as the bodies clients serialize
// are.
func (s *Scanner) SkipTight() (v []byte, tight, ok bool) {
	s.WS()
	s.loose = false
	v, ok = s.skip(0)
	return v, !s.loose, ok
}

func (s *Scanner) skip(depth int) ([]byte, bool) {
	if depth > MaxDepth {
		return nil, false
	}
	s.WS()
	if s.i >= len(s.b) {
		return nil, false
	}
	start := s.i
	switch c := s.b[s.i]; c {
	case '"':
		if _, _, ok := s.String(); !ok {
			return nil, false
		}
	case '{', '[':
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		s.i++
		if s.Empty(closer) {
			break
		}
		for {
			if c == '{' {
				if _, _, ok := s.String(); !ok || s.Peek() != ':' {
					return nil, false
				}
				s.i++
			}
			if _, ok := s.skip(depth + 1); !ok {
				return nil, false
			}
			more, ok := s.Next(closer)
			if !ok {
				return nil, false
			}
			if !more {
				break
			}
		}
	case 't':
		if !s.Lit("true") {
			return nil, false
		}
	case 'f':
		if !s.Lit("false") {
			return nil, false
		}
	case 'n':
		if !s.Lit("null") {
			return nil, false
		}
	default:
		if _, ok := s.number(); !ok {
			return nil, false
		}
	}
	return s.b[start:s.i], true
}
