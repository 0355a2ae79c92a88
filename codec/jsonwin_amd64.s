#include "textflag.h"

// Byte constants for jsonWindowAVX512.
// jwIota: 0..63, the byte offsets of a window.
DATA jwIota<>+0(SB)/8, $0x0706050403020100
DATA jwIota<>+8(SB)/8, $0x0f0e0d0c0b0a0908
DATA jwIota<>+16(SB)/8, $0x1716151413121110
DATA jwIota<>+24(SB)/8, $0x1f1e1d1c1b1a1918
DATA jwIota<>+32(SB)/8, $0x2726252423222120
DATA jwIota<>+40(SB)/8, $0x2f2e2d2c2b2a2928
DATA jwIota<>+48(SB)/8, $0x3736353433323130
DATA jwIota<>+56(SB)/8, $0x3f3e3d3c3b3a3938
GLOBL jwIota<>(SB), RODATA|NOPTR, $64
// jwLane: byte j*8+k = j, so VPERMB copies packed entry j to all of lane j.
DATA jwLane<>+0(SB)/8, $0x0000000000000000
DATA jwLane<>+8(SB)/8, $0x0101010101010101
DATA jwLane<>+16(SB)/8, $0x0202020202020202
DATA jwLane<>+24(SB)/8, $0x0303030303030303
DATA jwLane<>+32(SB)/8, $0x0404040404040404
DATA jwLane<>+40(SB)/8, $0x0505050505050505
DATA jwLane<>+48(SB)/8, $0x0606060606060606
DATA jwLane<>+56(SB)/8, $0x0707070707070707
GLOBL jwLane<>(SB), RODATA|NOPTR, $64
// jwBack: byte k of each qword = k-7 (-7..0): the 8 bytes ending at an end.
DATA jwBack<>+0(SB)/8, $0x00fffefdfcfbfaf9
GLOBL jwBack<>(SB), RODATA|NOPTR, $8
// jwMul: bytes 10,1 (digit pairs); words 100,1 (pairs of pairs); 10000.
DATA jwMul<>+0(SB)/8, $0x010a010a010a010a
DATA jwMul<>+8(SB)/8, $0x0001006400010064
DATA jwMul<>+16(SB)/8, $10000
GLOBL jwMul<>(SB), RODATA|NOPTR, $24
// jwChars: '0', 10, ',', ' ' (one byte each, broadcast).
DATA jwChars<>+0(SB)/4, $0x202c0a30
GLOBL jwChars<>(SB), RODATA|NOPTR, $4

// func jsonWindowAVX512(w *[64]byte, out *[32]int32) (n, next int)
//
// Masks of the window's bytes (bit i = byte i): D digits, C ',', SP ' ',
// Z '0'. Element starts S = D &^ (D<<1), ends E = D &^ (D>>1). A byte is bad
// when it is another non-digit, a ',' not right after a digit, a ' ' not right
// after a ',', the '0' starting a multi-digit id, or the first of 9 digits in
// a row; fb is the first bad byte. The elements taken are those whose start
// and the following element's start are below fb: k = popcount(S below fb) - 1.
// Between two such starts there is exactly "," or ", ", so nothing else needs
// checking. Their starts and ends are packed with VPCOMPRESSB; 8 at a time,
// VPERMB gathers into qword lane j the 8 bytes ending at end j (bytes before
// start j zeroed: leading zeros), and three multiply-adds (digit pairs, then
// pairs of pairs, then the two 4-digit halves) give the value.
TEXT ·jsonWindowAVX512(SB), NOSPLIT, $0-32
	MOVQ w+0(FP), SI
	MOVQ out+8(FP), DI
	XORQ AX, AX
	MOVQ AX, n+16(FP)
	MOVQ AX, next+24(FP)

	VPBROADCASTB jwChars<>+0(SB), Z31   // '0'
	VPBROADCASTB jwChars<>+1(SB), Z30   // 10
	VPBROADCASTB jwChars<>+2(SB), Z29   // ','
	VPBROADCASTB jwChars<>+3(SB), Z28   // ' '
	VMOVDQU8 (SI), Z0
	VPSUBB Z31, Z0, Z1                   // byte - '0'
	VPCMPUB $1, Z30, Z1, K1              // digit: byte - '0' < 10
	VPCMPEQB Z29, Z0, K2
	VPCMPEQB Z28, Z0, K3
	VPCMPEQB Z31, Z0, K4
	KMOVQ K1, AX                         // D
	KMOVQ K2, BX                         // C
	KMOVQ K3, CX                         // SP
	KMOVQ K4, DX                         // Z
	TESTQ $1, AX
	JEQ none                             // the window does not start with a digit

	MOVQ AX, R8
	SHLQ $1, R8                          // D<<1: the byte before is a digit
	MOVQ AX, R9
	SHRQ $1, R9                          // D>>1: the byte after is a digit
	MOVQ AX, R10
	ORQ BX, R10
	ORQ CX, R10
	NOTQ R10                             // other non-digits
	ANDNQ BX, R8, R11                    // ',' not after a digit
	ORQ R11, R10
	MOVQ BX, R11
	SHLQ $1, R11
	ANDNQ CX, R11, R11                   // ' ' not after a ','
	ORQ R11, R10
	ANDNQ AX, R8, R12                    // S = D &^ (D<<1)
	MOVQ R12, R11
	ANDQ DX, R11
	ANDQ R9, R11                         // zero-led: S & Z & (D>>1)
	ORQ R11, R10
	MOVQ AX, R11
	ANDQ R9, R11                         // 2 digits from here
	MOVQ R11, R13
	SHRQ $2, R13
	ANDQ R13, R11                        // 4
	MOVQ R11, R13
	SHRQ $4, R13
	ANDQ R13, R11                        // 8
	MOVQ AX, R13
	SHRQ $8, R13
	ANDQ R13, R11                        // 9
	ORQ R11, R10                         // bad
	TZCNTQ R10, R10                      // fb (64 when none)
	BZHIQ R10, R12, R12                  // starts below fb
	ANDNQ AX, R9, R13                    // E = D &^ (D>>1)
	BZHIQ R10, R13, R13                  // ends below fb
	POPCNTQ R12, R11
	SUBQ $1, R11                         // k
	JLE none
	BSRQ R12, R10                        // next: the start of element k
	MOVQ R11, n+16(FP)
	MOVQ R10, next+24(FP)

	KMOVQ R12, K5
	KMOVQ R13, K6
	VMOVDQU8 jwIota<>(SB), Z27
	VPCOMPRESSB Z27, K5, Z2              // starts, packed
	VPCOMPRESSB Z27, K6, Z3              // ends, packed
	VMOVDQU8 jwLane<>(SB), Z26
	VPBROADCASTQ jwBack<>(SB), Z25
	VPBROADCASTQ jwMul<>+0(SB), Z24
	VPBROADCASTQ jwMul<>+8(SB), Z23
	VPBROADCASTQ jwMul<>+16(SB), Z22
	MOVQ $8, R9
	VPBROADCASTB R9, Z21                 // lane index step: 8 elements

group:
	VPERMB Z3, Z26, Z4                   // lane j: end j, in every byte
	VPERMB Z2, Z26, Z5                   // lane j: start j
	VPADDB Z25, Z4, Z4                   // the 8 offsets ending at end j
	VPCMPB $5, Z5, Z4, K7                // offset >= start j (signed: may be < 0)
	VPERMB.Z Z1, Z4, K7, Z6              // digits, zeros before the element
	VPMADDUBSW Z24, Z6, Z6               // words: 10*d + d
	VPMADDWD Z23, Z6, Z6                 // dwords: 100*w + w
	VPMULUDQ Z22, Z6, Z7                 // first half * 10000
	VPSRLQ $32, Z6, Z6
	VPADDQ Z6, Z7, Z7
	VPMOVQD Z7, Y7
	VMOVDQU32 Y7, (DI)
	ADDQ $32, DI
	VPADDB Z21, Z26, Z26                 // next 8 elements
	SUBQ $8, R11
	JGT group
	VZEROUPPER
	RET

none:
	VZEROUPPER
	RET
