//go:build !amd64

package hash

// haveIntsAVX512 and haveIntsAVX are false off amd64: putCBORInts and
// putPickleInts use their scalar loops only.
const (
	haveIntsAVX512 = false
	haveIntsAVX    = false
)

func cborInts8(out []byte, tokens []int32) int {
	panic("BUG: hash.cborInts8 called without AVX-512")
}

func pickleInts8(out []byte, tokens []int32) int {
	panic("BUG: hash.pickleInts8 called without AVX-512")
}

func cborInts4(out []byte, tokens []int32, tab *[16][16]byte) int {
	panic("BUG: hash.cborInts4 called without AVX")
}

func pickleInts4(out []byte, tokens []int32, tab *[16][16]byte) int {
	panic("BUG: hash.pickleInts4 called without AVX")
}
