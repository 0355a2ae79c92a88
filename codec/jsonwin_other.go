//go:build !amd64

package codec

// haveJSONWindowAVX512 is false off amd64: scanUint31s uses its scalar loops.
const haveJSONWindowAVX512 = false

func jsonWindowAVX512(w *[64]byte, out *[32]int32) (n, next int) {
	panic("BUG: codec.jsonWindowAVX512 called without AVX-512")
}
