package hash

import "github.com/klauspost/cpuid/v2"

// haveIntsAVX512 reports whether cborInts8 and pickleInts8 can run.
var haveIntsAVX512 = cpuid.CPU.Supports(cpuid.AVX512F, cpuid.AVX512BW, cpuid.AVX512VBMI2)

// cborInts8 encodes tokens[:len(tokens)&^7] as CBOR ints into out (which needs
// 5*n+64 bytes) and returns the bytes written. Only when haveIntsAVX512.
//
//go:noescape
func cborInts8(out []byte, tokens []int32) int

// pickleInts8 is cborInts8 for pickle BININT1/BININT2/BININT opcodes.
//
//go:noescape
func pickleInts8(out []byte, tokens []int32) int
