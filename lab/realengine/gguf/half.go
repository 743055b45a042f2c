package gguf

import "math"

// Float16 returns the IEEE 754 half-precision bits nearest to x (round to
// nearest, ties to even), with subnormals, infinities and NaN. The Qwen3
// model stores its 151,936-row embedding in F16, which halves the file.
func Float16(x float32) uint16 {
	b := math.Float32bits(x)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	switch {
	case exp == 0xff: // Inf or NaN
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp == 0: // zero, or a float32 subnormal: far below half's range
		return sign
	}
	// Unbiased exponent, and the mantissa with its implicit leading 1.
	e := exp - 127
	m := mant | 0x800000
	if e > 15 {
		return sign | 0x7c00
	}
	if e >= -14 { // normal half: keep 10 of the 23 mantissa bits
		h := uint32(e+15)<<10 | (m>>13)&0x3ff
		rest := m & 0x1fff
		if rest > 0x1000 || (rest == 0x1000 && h&1 == 1) {
			h++ // may carry into the exponent, up to Inf: still correct
		}
		return sign | uint16(h)
	}
	// Subnormal half: value = m × 2^(e-23) = h × 2^-24, so h = m >> (-e-1).
	shift := uint(-e - 1)
	if shift > 24 {
		return sign
	}
	h := m >> shift
	rest := m & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rest > half || (rest == half && h&1 == 1) {
		h++
	}
	return sign | uint16(h)
}

// Float16To32 decodes half-precision bits (the inverse of Float16 on the
// values it produces); the tests use it to read weights back.
func Float16To32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: mant × 2^-24
		v := float32(mant) * float32(math.Ldexp(1, -24))
		if sign != 0 {
			return -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}
