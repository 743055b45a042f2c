package jsonscan

import "unsafe"

// simdMasks: masks sets esc and u (SSE2 compares are cheap enough
// to class every byte).
const simdMasks = true

// masks classes the len(ms) chunks of 64 bytes at the start of b (which
// holds them) with SSE2 (part of every amd64), 16 bytes an instruction:
// escape-dense text (source code in tool results) is most of an agent's
// body, and eight-byte words cost several times as much. A batch of
// chunks a call spreads the call and the constants over them.
func masks(b []byte, ms []chunkMasks) {
	if len(ms) == 0 || len(b) < 64*len(ms) {
		panic("jsonscan: masks past the input")
	}
	masksSSE2(unsafe.SliceData(b), len(ms), unsafe.SliceData(ms))
}

//go:noescape
func masksSSE2(p *byte, n int, m *chunkMasks)

// backslashes64 is the mask of the backslashes of a (bit k for a[k]).
//
//go:noescape
func backslashes64(a *[64]byte) uint64
