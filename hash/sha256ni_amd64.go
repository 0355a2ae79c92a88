package hash

import "github.com/klauspost/cpuid/v2"

// haveSHANI reports whether sha256NI can run: the SHA extensions plus the SSSE3
// (PSHUFB, PALIGNR) and SSE4.1 (PBLENDW) instructions it also uses.
var haveSHANI = cpuid.CPU.Supports(cpuid.SHA, cpuid.SSSE3, cpuid.SSE4)

// sha256NI writes the SHA-256 digest of a message already padded as FIPS 180-4
// §5.1.1 says (p: message, 0x80, zeros, 64-bit big-endian bit length; len(p) a
// multiple of 64) to dst. It keeps no state between calls and only reads p. It
// must only be called when haveSHANI.
//
//go:noescape
func sha256NI(dst *[32]byte, p []byte)
