//go:build !amd64

package jsonscan

// maskVariants are the classings this CPU can run besides masks: none.
func maskVariants() map[string]func(p *byte, n int, m *chunkMasks) { return nil }
