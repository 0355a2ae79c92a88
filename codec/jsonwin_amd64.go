package codec

import "github.com/klauspost/cpuid/v2"

// haveJSONWindowAVX512 reports whether jsonWindowAVX512 can run: AVX-512 F,
// BW, VBMI (VPERMB) and VBMI2 (VPCOMPRESSB), with BMI1/BMI2 and POPCNT for
// the masks.
var haveJSONWindowAVX512 = cpuid.CPU.Supports(cpuid.AVX512F, cpuid.AVX512BW, cpuid.AVX512VBMI, cpuid.AVX512VBMI2,
	cpuid.BMI1, cpuid.BMI2, cpuid.POPCNT)

// jsonWindowAVX512 reads the token ids of one 64-byte window of a JSON array
// whose first byte starts an element. It stores the ids of the elements it
// takes in out and returns how many (n) and the offset of the first element it
// left (next, meaningful when n > 0). It takes an element only when the
// element and everything up to the start of the following one lie in the
// window and have the fast shape: 1 to 8 digits without a leading zero, then
// ',' and at most one ' ' (anything else — a ']', other whitespace, a 9-digit
// id — is left to scanUint31s' scalar loops, which take the same elements).
// Only when haveJSONWindowAVX512.
//
//go:noescape
func jsonWindowAVX512(w *[64]byte, out *[32]int32) (n, next int)
