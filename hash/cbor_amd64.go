package hash

import "github.com/klauspost/cpuid/v2"

// haveCBORAVX512 reports whether cborInts8 can run.
var haveCBORAVX512 = cpuid.CPU.Supports(cpuid.AVX512F, cpuid.AVX512BW, cpuid.AVX512VBMI2)

// cborInts8 encodes tokens[:len(tokens)&^7] as CBOR ints into out (which needs
// 5*n+64 bytes) and returns the bytes written. Only when haveCBORAVX512.
//
//go:noescape
func cborInts8(out []byte, tokens []int32) int
