package jsonscan

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// simdMasks: masks sets esc and slow (SSE2 compares are cheap enough
// to class every byte).
const simdMasks = true

// masks classes the len(ms) chunks of 64 bytes at the start of b (which
// holds them) with AVX2 where the CPU has it, 32 bytes an instruction,
// else SSE2 (part of every amd64), 16: escape-dense text (source code in
// tool results) is most of an agent's body, and eight-byte words cost
// several times as much. A batch of chunks a call spreads the call and
// the constants over them.
func masks(b []byte, ms []chunkMasks) {
	if len(ms) == 0 || len(b) < 64*len(ms) {
		panic("jsonscan: masks past the input")
	}
	if hasAVX512 {
		masksAVX512(unsafe.SliceData(b), len(ms), unsafe.SliceData(ms))
		return
	}
	if hasAVX2 {
		masksAVX2(unsafe.SliceData(b), len(ms), unsafe.SliceData(ms))
		return
	}
	masksSSE2(unsafe.SliceData(b), len(ms), unsafe.SliceData(ms))
}

// hasAVX2 picks masksAVX2 (golang.org/x/sys/cpu checks the OS saves the
// wide registers too).
var hasAVX2 = cpu.X86.HasAVX2

// hasAVX512 picks masksAVX512: byte compares into mask registers (AVX-512
// BW) class a chunk in about a third of AVX2's instructions.
var hasAVX512 = cpu.X86.HasAVX512BW

//go:noescape
func masksAVX512(p *byte, n int, m *chunkMasks)

//go:noescape
func masksSSE2(p *byte, n int, m *chunkMasks)

//go:noescape
func masksAVX2(p *byte, n int, m *chunkMasks)

// escapeOrCtl is the index of b's first backslash or control byte, or
// len(b): with AVX2, 64 bytes a step, where the eight-byte words of
// escapeOrCtlGo cost several times as much over a long plain run (prose,
// a tool's long description).
func escapeOrCtl(b []byte) int {
	if !hasAVX2 || len(b) < 32 {
		return escapeOrCtlGo(b, 0)
	}
	m := len(b) &^ 31
	if k := escapeOrCtlAVX2(unsafe.SliceData(b), m); k < m {
		return k
	}
	return escapeOrCtlGo(b, m)
}

// escapeOrCtlAVX2 is escapeOrCtl of p[:n], n a multiple of 32: the index
// of the first backslash or control byte, or n.
//
//go:noescape
func escapeOrCtlAVX2(p *byte, n int) int

// backslashes64 is the mask of the backslashes of a (bit k for a[k]).
//
//go:noescape
func backslashes64(a *[64]byte) uint64
