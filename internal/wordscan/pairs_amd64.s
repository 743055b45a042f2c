#include "textflag.h"

// BCAST fills X with the byte at off(R8) in every lane.
#define BCAST(off, X) MOVBQZX off(R8), AX; IMULQ DX, AX; MOVQ AX, X; PUNPCKLQDQ X, X

// PAIR ors into X12 the positions where X0 (the bytes at i) equals A and
// X1 (the bytes at i+1) equals B.
#define PAIR(A, B) \
	MOVO X0, X13; PCMPEQB A, X13; \
	MOVO X1, X14; PCMPEQB B, X14; \
	PAND X14, X13; POR X13, X12

// X15 is left alone: Go's register ABI keeps zero in it.

// func indexPairSSE2(p *byte, n int, pairs *[10]byte) int
TEXT ·indexPairSSE2(SB), NOSPLIT, $0-32
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ pairs+16(FP), R8
	MOVQ $0x0101010101010101, DX
	BCAST(0, X2)
	BCAST(1, X3)
	BCAST(2, X4)
	BCAST(3, X5)
	BCAST(4, X6)
	BCAST(5, X7)
	BCAST(6, X8)
	BCAST(7, X9)
	BCAST(8, X10)
	BCAST(9, X11)
	XORQ BX, BX

loop:
	CMPQ BX, CX
	JGE  none
	MOVOU (SI)(BX*1), X0
	MOVOU 1(SI)(BX*1), X1
	PXOR X12, X12
	PAIR(X2, X3)
	PAIR(X4, X5)
	PAIR(X6, X7)
	PAIR(X8, X9)
	PAIR(X10, X11)
	PMOVMSKB X12, AX
	TESTL AX, AX
	JNZ  found
	ADDQ $16, BX
	JMP  loop

found:
	BSFL AX, AX
	ADDQ AX, BX
	MOVQ BX, ret+24(FP)
	RET

none:
	MOVQ $-1, ret+24(FP)
	RET
