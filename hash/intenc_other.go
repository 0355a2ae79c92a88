//go:build !amd64

package hash

const haveIntsAVX512 = false

// cborInts8 is never called off amd64.
func cborInts8(out []byte, tokens []int32) int { return 0 }

// pickleInts8 is never called off amd64.
func pickleInts8(out []byte, tokens []int32) int { return 0 }
