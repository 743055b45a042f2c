#include "textflag.h"

// QUOTES ors into X0 the quote positions of the 16 bytes at off(SI)(BX).
#define QUOTES(off) MOVOU off(SI)(BX*1), X1; PCMPEQB X2, X1; POR X1, X0

// PAIR ors into X0 the positions where X1 (the bytes at i+1) and X14
// (the bytes at i+2) equal pair k of vec.
#define PAIR(k) \
	MOVOU (16+32*k)(R8), X3; PCMPEQB X1, X3; \
	MOVOU (32+32*k)(R8), X4; PCMPEQB X14, X4; \
	PAND X4, X3; POR X3, X0

// X15 is left alone: Go's register ABI keeps zero in it.

// func indexSSE2(p *byte, n int, vec *[11][16]byte) int
TEXT ·indexSSE2(SB), NOSPLIT, $0-32
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ vec+16(FP), R8
	MOVOU (R8), X2 // the quote
	SUBQ $66, CX   // the last run's start
	XORQ BX, BX

run:
	CMPQ BX, CX
	JGT  none
	PXOR X0, X0
	QUOTES(0)
	QUOTES(16)
	QUOTES(32)
	QUOTES(48)
	PMOVMSKB X0, AX
	TESTL AX, AX
	JNZ  blocks
	ADDQ $64, BX
	JMP  run

blocks:
	// A quote somewhere in the run: each 16-byte block with one is
	// compared with the pairs.
	MOVQ BX, R9
	LEAQ 64(BX), R10

block:
	MOVOU (SI)(R9*1), X0
	PCMPEQB X2, X0
	PMOVMSKB X0, AX
	TESTL AX, AX
	JZ   next
	MOVOU 1(SI)(R9*1), X1
	MOVOU 2(SI)(R9*1), X14
	PXOR X0, X0
	PAIR(0)
	PAIR(1)
	PAIR(2)
	PAIR(3)
	PAIR(4)
	PMOVMSKB X0, DX
	ANDL AX, DX
	JNZ  found

next:
	ADDQ $16, R9
	CMPQ R9, R10
	JLT  block
	MOVQ R10, BX
	JMP  run

found:
	BSFL DX, DX
	ADDQ DX, R9
	MOVQ R9, ret+24(FP)
	RET

none:
	MOVQ $-1, ret+24(FP)
	RET
