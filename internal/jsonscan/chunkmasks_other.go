//go:build !amd64

package jsonscan

// simdMasks: masks leaves esc and u unset; escapedChunks looks the
// escaped bytes up.
const simdMasks = false

// masks classes the len(ms) chunks of 64 bytes at the start of b.
func masks(b []byte, ms []chunkMasks) {
	for c := range ms {
		ms[c] = masks64Go((*[64]byte)(b[64*c:]))
	}
}
