package jsonscan

// maskVariants are the classings this CPU can run, each compared with the
// reference by checkMasks.
func maskVariants() map[string]func(p *byte, n int, m *chunkMasks) {
	v := map[string]func(p *byte, n int, m *chunkMasks){"sse2": masksSSE2}
	if hasAVX2 {
		v["avx2"] = masksAVX2
	}
	if hasAVX512 {
		v["avx512"] = masksAVX512
	}
	return v
}
