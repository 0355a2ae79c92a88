package hash

import "github.com/klauspost/cpuid/v2"

// haveIntsAVX512 reports whether cborInts8 and pickleInts8 can run.
var haveIntsAVX512 = cpuid.CPU.Supports(cpuid.AVX512F, cpuid.AVX512BW, cpuid.AVX512VBMI2)

// haveIntsAVX reports whether cborInts4 and pickleInts4 can run (VEX.128
// integer instructions: every x86-64 CPU since 2011 without AVX-512 VBMI2).
var haveIntsAVX = cpuid.CPU.Supports(cpuid.AVX)

// cborInts8 encodes tokens[:len(tokens)&^7] as CBOR ints into out (which needs
// 5*n+64 bytes) and returns the bytes written. Only when haveIntsAVX512.
//
//go:noescape
func cborInts8(out []byte, tokens []int32) int

// pickleInts8 is cborInts8 for pickle BININT1/BININT2/BININT opcodes.
//
//go:noescape
func pickleInts8(out []byte, tokens []int32) int

// cborInts4 encodes tokens[:len(tokens)&^3] as CBOR ints into out (which needs
// 5*n+16 bytes) by the shuffle rows tab (cborPairTab) and returns the bytes
// written. Only when haveIntsAVX.
//
//go:noescape
func cborInts4(out []byte, tokens []int32, tab *[16][16]byte) int

// pickleInts4 is cborInts4 for pickle BININT1/BININT2/BININT opcodes
// (picklePairTab).
//
//go:noescape
func pickleInts4(out []byte, tokens []int32, tab *[16][16]byte) int
