//go:build !amd64

package hash

// haveSHANI is false off amd64: the shani backend is never picked there and
// SetBackend("shani") fails.
const haveSHANI = false

func sha256NI(dst *[32]byte, p []byte) {
	panic("BUG: hash.sha256NI called without SHA-NI")
}
