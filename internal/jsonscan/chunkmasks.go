package jsonscan

import "encoding/binary"

// chunkMasks are the byte classes of 64 bytes of a string's contents, one
// bit a byte (bit k for byte k), that escapedChunks resolves escapes with.
type chunkMasks struct {
	bs  uint64 // backslashes
	qt  uint64 // quotes
	ctl uint64 // control bytes (below 0x20, invalid in a string)
	// esc has the bytes that may follow a backslash (" \ / b f n r t u)
	// and slow the u's and slashes of them, the escapes a plain literal
	// does not have (a \/ is rare, and only costs the \u loop a look);
	// masks sets them only where simdMasks is, else escapedChunks looks
	// the escaped bytes up.
	esc  uint64
	slow uint64
}

// masks64Go classes one chunk eight bytes at a time, without esc and u:
// classing seven more bytes a word would cost more than looking up the
// few escaped ones.
func masks64Go(a *[64]byte) chunkMasks {
	var m chunkMasks
	var anyCtl uint64
	for w := 0; w < 8; w++ {
		x := binary.LittleEndian.Uint64(a[8*w:])
		m.bs |= movemask(zeroBytes(x^(lo*'\\'))) << (8 * w)
		m.qt |= movemask(zeroBytes(x^(lo*'"'))) << (8 * w)
		anyCtl |= ctlBytes(x)
	}
	if anyCtl != 0 { // rare: where, to tell whether it is inside the string
		for w := 0; w < 8; w++ {
			m.ctl |= movemask(ctlBytes(binary.LittleEndian.Uint64(a[8*w:]))) << (8 * w)
		}
	}
	return m
}
