//go:build !amd64

package jsonscan

import "encoding/binary"

// simdMasks: masks leaves esc and slow unset; escapedChunks looks the
// escaped bytes up.
const simdMasks = false

// masks classes the len(ms) chunks of 64 bytes at the start of b.
func masks(b []byte, ms []chunkMasks) {
	for c := range ms {
		ms[c] = masks64Go((*[64]byte)(b[64*c:]))
	}
}

// backslashes64 is the mask of the backslashes of a (bit k for a[k]).
func backslashes64(a *[64]byte) uint64 {
	var m uint64
	for w := 0; w < 8; w++ {
		x := binary.LittleEndian.Uint64(a[8*w:])
		m |= movemask(zeroBytes(x^(lo*'\\'))) << (8 * w)
	}
	return m
}

// escapeOrCtl is the index of b's first backslash or control byte, or
// len(b).
func escapeOrCtl(b []byte) int { return escapeOrCtlGo(b, 0) }
