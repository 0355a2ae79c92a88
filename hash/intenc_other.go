//go:build !amd64

package hash

// haveIntsAVX512 is false off amd64: putCBORInts and putPickleInts use their
// scalar loops only.
const haveIntsAVX512 = false

func cborInts8(out []byte, tokens []int32) int {
	panic("BUG: hash.cborInts8 called without AVX-512")
}

func pickleInts8(out []byte, tokens []int32) int {
	panic("BUG: hash.pickleInts8 called without AVX-512")
}
