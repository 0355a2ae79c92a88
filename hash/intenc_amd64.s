#include "textflag.h"

// Byte shuffles, repeated per 128-bit lane: reverse the bytes of each qword
// (bswap64), and copy byte 0 of each qword to all its 8 bytes.
DATA cborBswap64<>+0(SB)/8, $0x0001020304050607
DATA cborBswap64<>+8(SB)/8, $0x08090a0b0c0d0e0f
GLOBL cborBswap64<>(SB), RODATA|NOPTR, $16
DATA cborByte0<>+0(SB)/8, $0x0000000000000000
DATA cborByte0<>+8(SB)/8, $0x0808080808080808
GLOBL cborByte0<>(SB), RODATA|NOPTR, $16
// Byte index within its qword: 0..7, repeated.
DATA cborIota<>+0(SB)/8, $0x0706050403020100
DATA cborIota<>+8(SB)/8, $0x0706050403020100
GLOBL cborIota<>(SB), RODATA|NOPTR, $16

// Per-lane qword constants, broadcast from memory (one load each).
DATA cborQ<>+0(SB)/8, $24
DATA cborQ<>+8(SB)/8, $256
DATA cborQ<>+16(SB)/8, $65536
DATA cborQ<>+24(SB)/8, $0x20
DATA cborQ<>+32(SB)/8, $56
DATA cborQ<>+40(SB)/8, $48
DATA cborQ<>+48(SB)/8, $40
DATA cborQ<>+56(SB)/8, $1
DATA cborQ<>+64(SB)/8, $3
DATA cborQ<>+72(SB)/8, $2
DATA cborQ<>+80(SB)/8, $0x4b
DATA cborQ<>+88(SB)/8, $0x4d
DATA cborQ<>+96(SB)/8, $0x4a
GLOBL cborQ<>(SB), RODATA|NOPTR, $104

// func cborInts8(out []byte, tokens []int32) int
//
// Encodes the first len(tokens)&^7 tokens as CBOR ints into out, 8 per step,
// one qword lane per token, the same way putCBORInts' scalar loop does: width
// class from three compares (masks K1 ⊇ K2 ⊇ K3), the word = bswap64(u) shifted
// right by the class's shift, OR the head, then VPCOMPRESSB keeps the first
// len bytes of each lane and one 64-byte store writes them. out needs
// 5*n+64 bytes. Requires AVX512F, AVX512BW and AVX512_VBMI2.
//
// Z20 = 24 (class-1 threshold, also the class-1 info bits), Z21 = 256,
// Z22 = 65536, Z23 = 0x20 (negative major type), Z24 bswap64 shuffle, Z25
// byte-0 broadcast shuffle, Z26 iota, Z27..Z30 the shifts 56, 48, 40, 24,
// Z31 = 1, Z19 = 3, Z18 = 2.
TEXT ·cborInts8(SB), NOSPLIT, $0-56
	MOVQ out_base+0(FP), DI
	MOVQ tokens_base+24(FP), SI
	MOVQ tokens_len+32(FP), CX
	SHRQ $3, CX
	XORQ DX, DX
	TESTQ CX, CX
	JEQ done

	VPBROADCASTQ cborQ<>+0(SB), Z20
	VPBROADCASTQ cborQ<>+8(SB), Z21
	VPBROADCASTQ cborQ<>+16(SB), Z22
	VPBROADCASTQ cborQ<>+24(SB), Z23
	VBROADCASTI32X4 cborBswap64<>(SB), Z24
	VBROADCASTI32X4 cborByte0<>(SB), Z25
	VBROADCASTI32X4 cborIota<>(SB), Z26
	VPBROADCASTQ cborQ<>+32(SB), Z27
	VPBROADCASTQ cborQ<>+40(SB), Z28
	VPBROADCASTQ cborQ<>+48(SB), Z29
	VPBROADCASTQ cborQ<>+0(SB), Z30
	VPBROADCASTQ cborQ<>+56(SB), Z31
	VPBROADCASTQ cborQ<>+64(SB), Z19
	VPBROADCASTQ cborQ<>+72(SB), Z18

loop:
	VPMOVSXDQ (SI), Z0           // t, sign-extended
	VPSRAQ $63, Z0, Z1           // s = t >> 63
	VPXORQ Z1, Z0, Z0            // u = t ^ s  (-1-t for negatives)
	VPANDQ Z23, Z1, Z1           // major type bits
	VPCMPUQ $5, Z20, Z0, K1      // u >= 24
	VPCMPUQ $5, Z21, Z0, K2      // u >= 256
	VPCMPUQ $5, Z22, Z0, K3      // u >= 65536
	VPSHUFB Z24, Z0, Z2          // bswap64(u): argument in bytes 4..7
	VMOVDQA64 Z27, Z3            // shift per class
	VMOVDQA64 Z28, K1, Z3
	VMOVDQA64 Z29, K2, Z3
	VMOVDQA64 Z30, K3, Z3
	VPSRLVQ Z3, Z2, Z2
	VPORQ Z1, Z2, Z2             // head: major
	VPORQ Z20, Z2, K1, Z2        // info 24
	VPXORQ Z31, Z2, K2, Z2       // 25
	VPXORQ Z19, Z2, K3, Z2       // 26
	VMOVDQA64 Z31, Z4            // len per class: 1, 2, 3, 5
	VPADDQ Z31, Z4, K1, Z4
	VPADDQ Z31, Z4, K2, Z4
	VPADDQ Z18, Z4, K3, Z4
	VPSHUFB Z25, Z4, Z4          // len in every byte of its lane
	VPCMPUB $1, Z4, Z26, K4      // byte index < len
	VPCOMPRESSB Z2, K4, Z5
	VMOVDQU8 Z5, (DI)(DX*1)
	KMOVQ K4, AX
	POPCNTQ AX, AX
	ADDQ AX, DX
	ADDQ $32, SI
	DECQ CX
	JNZ loop
	VZEROUPPER

done:
	MOVQ DX, ret+48(FP)
	RET

// func pickleInts8(out []byte, tokens []int32) int
//
// putPickleInts' vector path: tokens[:len(tokens)&^7] as BININT1 / BININT2 /
// BININT, 8 per step, one qword lane per token: word = u<<8 | opcode, lengths
// 2, 3, 5 from two compares, then the same compress-and-store as cborInts8.
// out needs 5*n+64 bytes. Requires AVX512F, AVX512BW and AVX512_VBMI2.
TEXT ·pickleInts8(SB), NOSPLIT, $0-56
	MOVQ out_base+0(FP), DI
	MOVQ tokens_base+24(FP), SI
	MOVQ tokens_len+32(FP), CX
	SHRQ $3, CX
	XORQ DX, DX
	TESTQ CX, CX
	JEQ pdone

	VPBROADCASTQ cborQ<>+8(SB), Z21
	VPBROADCASTQ cborQ<>+16(SB), Z22
	VBROADCASTI32X4 cborByte0<>(SB), Z25
	VBROADCASTI32X4 cborIota<>(SB), Z26
	VPBROADCASTQ cborQ<>+80(SB), Z27 // BININT1
	VPBROADCASTQ cborQ<>+88(SB), Z28 // BININT2
	VPBROADCASTQ cborQ<>+96(SB), Z29 // BININT
	VPBROADCASTQ cborQ<>+56(SB), Z31
	VPBROADCASTQ cborQ<>+72(SB), Z18

ploop:
	VPMOVZXDQ (SI), Z0           // u = uint32(t)
	VPCMPUQ $5, Z21, Z0, K1      // u >= 256
	VPCMPUQ $5, Z22, Z0, K2      // u >= 65536 (negatives included)
	VPSLLQ $8, Z0, Z2
	VMOVDQA64 Z27, Z3            // opcode per class
	VMOVDQA64 Z28, K1, Z3
	VMOVDQA64 Z29, K2, Z3
	VPORQ Z3, Z2, Z2
	VMOVDQA64 Z18, Z4            // len per class: 2, 3, 5
	VPADDQ Z31, Z4, K1, Z4
	VPADDQ Z18, Z4, K2, Z4
	VPSHUFB Z25, Z4, Z4
	VPCMPUB $1, Z4, Z26, K4
	VPCOMPRESSB Z2, K4, Z5
	VMOVDQU8 Z5, (DI)(DX*1)
	KMOVQ K4, AX
	POPCNTQ AX, AX
	ADDQ AX, DX
	ADDQ $32, SI
	DECQ CX
	JNZ ploop
	VZEROUPPER

pdone:
	MOVQ DX, ret+48(FP)
	RET

// Dword constants for cborInts4 and pickleInts4 (VEX.128, 4 tokens per step).
DATA ints4K<>+0(SB)/8, $0x0000001700000017 // 23
DATA ints4K<>+8(SB)/8, $0x0000001700000017
DATA ints4K<>+16(SB)/8, $0x000000ff000000ff // 255
DATA ints4K<>+24(SB)/8, $0x000000ff000000ff
DATA ints4K<>+32(SB)/8, $0x0000ffff0000ffff // 65535
DATA ints4K<>+40(SB)/8, $0x0000ffff0000ffff
DATA ints4K<>+48(SB)/8, $0x0000002000000020 // 0x20: CBOR's negative major type
DATA ints4K<>+56(SB)/8, $0x0000002000000020
DATA ints4K<>+64(SB)/8, $0x0000000300000003 // 3: the class code's bits
DATA ints4K<>+72(SB)/8, $0x0000000300000003
DATA ints4K<>+80(SB)/8, $0x0000004b0000004b // BININT1
DATA ints4K<>+88(SB)/8, $0x0000004b0000004b
DATA ints4K<>+96(SB)/8, $0x0000004d0000004d // BININT2
DATA ints4K<>+104(SB)/8, $0x0000004d0000004d
DATA ints4K<>+112(SB)/8, $0x0000004a0000004a // BININT
DATA ints4K<>+120(SB)/8, $0x0000004a0000004a
GLOBL ints4K<>(SB), RODATA|NOPTR, $128

// INTS4_ARGS loads cborInts4's or pickleInts4's arguments: DI = out, SI =
// tokens, CX = the steps (len(tokens)/4), DX = 0 (bytes written), R11 = tab;
// with no step it jumps to done.
#define INTS4_ARGS(done) \
	MOVQ out_base+0(FP), DI; \
	MOVQ tokens_base+24(FP), SI; \
	MOVQ tokens_len+32(FP), CX; \
	SHRQ $2, CX; \
	XORQ DX, DX; \
	TESTQ CX, CX; \
	JEQ done; \
	MOVQ tab+48(FP), R11

// INTS4_PAIRS stores one step's output, given X0 = the four argument dwords
// (little-endian), X7 = the four head dwords (head in byte 0), X5 = the four
// -class dwords (0..-3: a token's code is the low two bits) and R11 = the
// pair table: each pair of
// tokens is one 16-byte source [argument 0, argument 1, head 0, head 1]
// (VPUNPCK), one VPSHUFB by the table row of its two codes, one 16-byte store
// at DI+DX, and DX advanced by the row's byte 15 (the pair's length); then SI
// to the next 4 tokens.
#define INTS4_PAIRS \
	VPAND X14, X5, X5; \
	VPSLLD $4, X5, X5; \
	VPSRLQ $30, X5, X6; \
	VPOR X6, X5, X5; \
	VMOVD X5, R8; \
	VPEXTRD $2, X5, R9; \
	VPUNPCKLQDQ X7, X0, X8; \
	VPUNPCKHQDQ X7, X0, X9; \
	VPSHUFB (R11)(R8*1), X8, X8; \
	VMOVDQU X8, (DI)(DX*1); \
	MOVBLZX 15(R11)(R8*1), AX; \
	ADDQ AX, DX; \
	VPSHUFB (R11)(R9*1), X9, X9; \
	VMOVDQU X9, (DI)(DX*1); \
	MOVBLZX 15(R11)(R9*1), AX; \
	ADDQ AX, DX; \
	ADDQ $16, SI

// func cborInts4(out []byte, tokens []int32, tab *[16][16]byte) int
//
// Encodes the first len(tokens)&^3 tokens as CBOR ints into out, 4 per step,
// one dword lane per token, with AVX only (VEX.128): u = t ^ (t >> 31), the
// width class from three signed compares (u < 2^31), the head per lane
// (major | u for class 0, major | 23+class else), then the pairs' shuffles
// (INTS4_PAIRS, tab = cborPairTab: the argument's bytes most significant
// first). out needs 5*n+16 bytes.
//
// X10 = 23, X11 = 255, X12 = 65535, X13 = 0x20, X14 = 3, per dword.
TEXT ·cborInts4(SB), NOSPLIT, $0-64
	INTS4_ARGS(c4done)
	VMOVDQU ints4K<>+0(SB), X10
	VMOVDQU ints4K<>+16(SB), X11
	VMOVDQU ints4K<>+32(SB), X12
	VMOVDQU ints4K<>+48(SB), X13
	VMOVDQU ints4K<>+64(SB), X14

c4loop:
	VMOVDQU (SI), X0             // t
	VPSRAD $31, X0, X1           // s = t >> 31
	VPXOR X1, X0, X0             // u = t ^ s
	VPAND X13, X1, X1            // major type bits
	VPCMPGTD X10, X0, X2         // u > 23
	VPCMPGTD X11, X0, X3         // u > 255
	VPCMPGTD X12, X0, X4         // u > 65535
	VPADDD X3, X2, X5
	VPADDD X4, X5, X5            // -class
	VPSUBD X5, X10, X6           // 23 + class
	VPBLENDVB X2, X6, X0, X7     // info: u (class 0) or 23 + class
	VPOR X1, X7, X7              // head
	INTS4_PAIRS
	DECQ CX
	JNZ c4loop
	VZEROUPPER

c4done:
	MOVQ DX, ret+56(FP)
	RET

// func pickleInts4(out []byte, tokens []int32, tab *[16][16]byte) int
//
// putPickleInts' AVX path, 4 per step: the classes BININT1 (0..255), BININT2
// (256..65535) and BININT (anything else, negatives included) from two
// signed compares each ORed with the sign, the opcode per lane by blends,
// then the pairs' shuffles (INTS4_PAIRS, tab = picklePairTab: the int's
// bytes little-endian). out needs 5*n+16 bytes.
//
// X11 = 255, X12 = 65535, X14 = 3, X10 = BININT1, X13 = BININT2, X15 = BININT.
TEXT ·pickleInts4(SB), NOSPLIT, $0-64
	INTS4_ARGS(p4done)
	VMOVDQU ints4K<>+16(SB), X11
	VMOVDQU ints4K<>+32(SB), X12
	VMOVDQU ints4K<>+64(SB), X14
	VMOVDQU ints4K<>+80(SB), X10
	VMOVDQU ints4K<>+96(SB), X13
	VMOVDQU ints4K<>+112(SB), X15

p4loop:
	VMOVDQU (SI), X0             // t: its little-endian bytes are the int's
	VPSRAD $31, X0, X1           // negative
	VPCMPGTD X11, X0, X2         // t > 255
	VPOR X1, X2, X2
	VPCMPGTD X12, X0, X3         // t > 65535
	VPOR X1, X3, X3
	VPADDD X3, X2, X5            // -class
	VPBLENDVB X2, X13, X10, X7   // BININT2 or BININT1
	VPBLENDVB X3, X15, X7, X7    // BININT
	INTS4_PAIRS
	DECQ CX
	JNZ p4loop
	VZEROUPPER

p4done:
	MOVQ DX, ret+56(FP)
	RET
