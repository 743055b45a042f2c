#include "textflag.h"

// BCAST fills X with the byte c in every lane.
#define BCAST(c, X) MOVQ $c, AX; MOVQ AX, X; PUNPCKLQDQ X, X

// LANE classes the 16 bytes at off(SI) into the 16 bits at sh of R9
// (backslashes), R10 (quotes), R11 (control bytes), R12 (escape letters)
// and R13 (u's and slashes). X5..X14 hold the bytes compared against.
#define LANE(off, sh) \
	MOVOU off(SI), X0; \
	MOVO X0, X1; PCMPEQB X5, X1; \
	MOVO X0, X2; PCMPEQB X6, X2; \
	MOVO X0, X3; PMINUB X7, X3; PCMPEQB X0, X3; \
	PMOVMSKB X1, AX; SHLQ $sh, AX; ORQ AX, R9; \
	PMOVMSKB X2, AX; SHLQ $sh, AX; ORQ AX, R10; \
	PMOVMSKB X3, AX; SHLQ $sh, AX; ORQ AX, R11; \
	POR X1, X2; \
	MOVO X0, X3; PCMPEQB X8, X3; POR X3, X2; \
	MOVO X0, X1; PCMPEQB X9, X1; POR X1, X2; \
	MOVO X0, X1; PCMPEQB X10, X1; POR X1, X2; \
	MOVO X0, X1; PCMPEQB X11, X1; POR X1, X2; \
	MOVO X0, X1; PCMPEQB X12, X1; POR X1, X2; \
	MOVO X0, X1; PCMPEQB X13, X1; POR X1, X2; \
	MOVO X0, X4; PCMPEQB X14, X4; POR X4, X2; POR X3, X4; \
	PMOVMSKB X2, AX; SHLQ $sh, AX; ORQ AX, R12; \
	PMOVMSKB X4, AX; SHLQ $sh, AX; ORQ AX, R13

// ZEROMASKS clears the five masks of a chunk.
#define ZEROMASKS XORQ R9, R9; XORQ R10, R10; XORQ R11, R11; XORQ R12, R12; XORQ R13, R13

// STOREMASKS writes the chunk's masks to the chunkMasks at DI (its
// layout: TestChunkMasksLayout) and moves on to the next chunk.
#define STOREMASKS \
	MOVQ R9, 0(DI); MOVQ R10, 8(DI); MOVQ R11, 16(DI); MOVQ R12, 24(DI); MOVQ R13, 32(DI); \
	ADDQ $64, SI; ADDQ $40, DI; DECQ CX

// X15 is left alone: Go's register ABI keeps zero in it.

// func masksSSE2(p *byte, n int, m *chunkMasks)
TEXT ·masksSSE2(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ m+16(FP), DI
	BCAST(0x5c5c5c5c5c5c5c5c, X5)  // '\\'
	BCAST(0x2222222222222222, X6)  // '"'
	BCAST(0x1f1f1f1f1f1f1f1f, X7)  // the last control byte
	BCAST(0x2f2f2f2f2f2f2f2f, X8)  // '/'
	BCAST(0x6262626262626262, X9)  // 'b'
	BCAST(0x6666666666666666, X10) // 'f'
	BCAST(0x6e6e6e6e6e6e6e6e, X11) // 'n'
	BCAST(0x7272727272727272, X12) // 'r'
	BCAST(0x7474747474747474, X13) // 't'
	BCAST(0x7575757575757575, X14) // 'u'

loop:
	TESTQ CX, CX
	JZ    done
	ZEROMASKS
	LANE(0, 0)
	LANE(16, 16)
	LANE(32, 32)
	LANE(48, 48)
	STOREMASKS
	JMP   loop

done:
	RET

// LANE32 is LANE for the 32 bytes at off(SI) with AVX2, into the 32 bits
// at sh; Y5..Y14 hold the bytes compared against.
#define LANE32(off, sh) \
	VMOVDQU off(SI), Y0; \
	VPCMPEQB Y5, Y0, Y1; \
	VPCMPEQB Y6, Y0, Y2; \
	VPMINUB Y7, Y0, Y3; VPCMPEQB Y0, Y3, Y3; \
	VPMOVMSKB Y1, AX; SHLQ $sh, AX; ORQ AX, R9; \
	VPMOVMSKB Y2, AX; SHLQ $sh, AX; ORQ AX, R10; \
	VPMOVMSKB Y3, AX; SHLQ $sh, AX; ORQ AX, R11; \
	VPOR Y1, Y2, Y2; \
	VPCMPEQB Y8, Y0, Y3; VPOR Y3, Y2, Y2; \
	VPCMPEQB Y9, Y0, Y1; VPOR Y1, Y2, Y2; \
	VPCMPEQB Y10, Y0, Y1; VPOR Y1, Y2, Y2; \
	VPCMPEQB Y11, Y0, Y1; VPOR Y1, Y2, Y2; \
	VPCMPEQB Y12, Y0, Y1; VPOR Y1, Y2, Y2; \
	VPCMPEQB Y13, Y0, Y1; VPOR Y1, Y2, Y2; \
	VPCMPEQB Y14, Y0, Y4; VPOR Y4, Y2, Y2; VPOR Y3, Y4, Y4; \
	VPMOVMSKB Y2, AX; SHLQ $sh, AX; ORQ AX, R12; \
	VPMOVMSKB Y4, AX; SHLQ $sh, AX; ORQ AX, R13

// YBCAST fills Y (a Y or a Z register) with the byte c in every lane.
#define YBCAST(c, X, Y) MOVQ $c, AX; MOVQ AX, X; VPBROADCASTQ X, Y

// func masksAVX2(p *byte, n int, m *chunkMasks)
TEXT ·masksAVX2(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ m+16(FP), DI
	YBCAST(0x5c5c5c5c5c5c5c5c, X5, Y5)   // '\\'
	YBCAST(0x2222222222222222, X6, Y6)   // '"'
	YBCAST(0x1f1f1f1f1f1f1f1f, X7, Y7)   // the last control byte
	YBCAST(0x2f2f2f2f2f2f2f2f, X8, Y8)   // '/'
	YBCAST(0x6262626262626262, X9, Y9)   // 'b'
	YBCAST(0x6666666666666666, X10, Y10) // 'f'
	YBCAST(0x6e6e6e6e6e6e6e6e, X11, Y11) // 'n'
	YBCAST(0x7272727272727272, X12, Y12) // 'r'
	YBCAST(0x7474747474747474, X13, Y13) // 't'
	YBCAST(0x7575757575757575, X14, Y14) // 'u'

yloop:
	TESTQ CX, CX
	JZ    ydone
	ZEROMASKS
	LANE32(0, 0)
	LANE32(32, 32)
	STOREMASKS
	JMP   yloop

ydone:
	VZEROUPPER
	RET

// BSLANE ors into AX the backslashes of the 16 bytes at off(SI), at sh.
#define BSLANE(off, sh) \
	MOVOU off(SI), X0; PCMPEQB X1, X0; \
	PMOVMSKB X0, DX; SHLQ $sh, DX; ORQ DX, AX

// func backslashes64(a *[64]byte) uint64
TEXT ·backslashes64(SB), NOSPLIT, $0-16
	MOVQ a+0(FP), SI
	BCAST(0x5c5c5c5c5c5c5c5c, X1)
	XORQ AX, AX
	BSLANE(0, 0)
	BSLANE(16, 16)
	BSLANE(32, 32)
	BSLANE(48, 48)
	MOVQ AX, ret+8(FP)
	RET

// SPECIAL32 sets in Y the bytes of the 32 at off(SI)(BX*1) that are a
// backslash (Y5) or a control byte (at most Y7's 0x1f), through Y8.
#define SPECIAL32(off, Y, YT) \
	VMOVDQU off(SI)(BX*1), YT; \
	VPCMPEQB Y5, YT, Y; \
	VPMINUB Y7, YT, Y8; VPCMPEQB YT, Y8, Y8; \
	VPOR Y8, Y, Y

// func escapeOrCtlAVX2(p *byte, n int) int
TEXT ·escapeOrCtlAVX2(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	YBCAST(0x5c5c5c5c5c5c5c5c, X5, Y5) // '\\'
	YBCAST(0x1f1f1f1f1f1f1f1f, X7, Y7) // the last control byte
	XORQ BX, BX

eloop:
	MOVQ CX, DX
	SUBQ BX, DX
	CMPQ DX, $64
	JB   etail
	SPECIAL32(0, Y1, Y0)
	SPECIAL32(32, Y2, Y3)
	VPOR  Y1, Y2, Y4
	VPTEST Y4, Y4
	JNZ  efound64
	ADDQ $64, BX
	JMP  eloop

efound64:
	VPMOVMSKB Y1, AX
	VPMOVMSKB Y2, DX
	SHLQ $32, DX
	ORQ  DX, AX
	BSFQ AX, AX
	ADDQ BX, AX
	JMP  eret

etail:
	CMPQ DX, $32
	JB   enone
	SPECIAL32(0, Y1, Y0)
	VPMOVMSKB Y1, AX
	TESTQ AX, AX
	JNZ  efound32
	ADDQ $32, BX

enone:
	MOVQ BX, AX

eret:
	VZEROUPPER
	MOVQ AX, ret+16(FP)
	RET

efound32:
	BSFQ AX, AX
	ADDQ BX, AX
	JMP  eret

// The AVX-512 classing looks each byte's class up by its two nibbles
// (VPSHUFB), the class being the AND of the two lookups, one bit a set:
// 0x80 backslash, 0x40 quote, 0x20 control byte (high nibble 0 or 1),
// 0x01 '/', 0x02 b f n (high nibble 6), 0x04 r t u (high nibble 7), 0x08
// u. Each set is one row of high nibbles by one of low nibbles, so the
// AND is exact; the escape letters are the bytes with a bit of 0xc7 set,
// the slow ones those with a bit of 0x09. VPTESTMB turns each set into a
// chunk's mask in one instruction, where AVX2 needs a compare a letter
// and a VPMOVMSKB, shift and OR a half.
DATA nibLo<>+0x00(SB)/8, $0x20222c2420662020
DATA nibLo<>+0x08(SB)/8, $0x212220a020202020
GLOBL nibLo<>(SB), RODATA|NOPTR, $16
DATA nibHi<>+0x00(SB)/8, $0x0c02800000412020
DATA nibHi<>+0x08(SB)/8, $0x0000000000000000
GLOBL nibHi<>(SB), RODATA|NOPTR, $16

// func masksAVX512(p *byte, n int, m *chunkMasks)
TEXT ·masksAVX512(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ m+16(FP), DI
	YBCAST(0x0f0f0f0f0f0f0f0f, X5, Z5)
	VBROADCASTI32X4 nibLo<>(SB), Z6
	VBROADCASTI32X4 nibHi<>(SB), Z7
	YBCAST(0x8080808080808080, X8, Z8)
	YBCAST(0x4040404040404040, X9, Z9)
	YBCAST(0x2020202020202020, X10, Z10)
	YBCAST(0xc7c7c7c7c7c7c7c7, X11, Z11)
	YBCAST(0x0909090909090909, X12, Z12)

zloop:
	TESTQ CX, CX
	JZ    zdone
	VMOVDQU64 (SI), Z0
	VPSRLW    $4, Z0, Z1
	VPANDQ    Z5, Z0, Z0
	VPANDQ    Z5, Z1, Z1
	VPSHUFB   Z0, Z6, Z0
	VPSHUFB   Z1, Z7, Z1
	VPANDQ    Z1, Z0, Z0
	VPTESTMB  Z8, Z0, K1
	VPTESTMB  Z9, Z0, K2
	VPTESTMB  Z10, Z0, K3
	VPTESTMB  Z11, Z0, K4
	VPTESTMB  Z12, Z0, K5
	KMOVQ     K1, 0(DI)
	KMOVQ     K2, 8(DI)
	KMOVQ     K3, 16(DI)
	KMOVQ     K4, 24(DI)
	KMOVQ     K5, 32(DI)
	ADDQ      $64, SI
	ADDQ      $40, DI
	DECQ      CX
	JMP       zloop

zdone:
	VZEROUPPER
	RET
