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
