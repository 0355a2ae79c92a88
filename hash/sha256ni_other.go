//go:build !amd64

package hash

import "crypto/sha256"

// haveSHANI is false off amd64: the native backend is never picked there.
const haveSHANI = false

// sha256NI is never called off amd64 (activeBackend never yields backendNative);
// this body only keeps the package portable: it hashes the unpadded message
// whose padding p carries.
func sha256NI(dst *[32]byte, p []byte) {
	n := int(uint64(p[len(p)-8])<<56|uint64(p[len(p)-7])<<48|uint64(p[len(p)-6])<<40|uint64(p[len(p)-5])<<32|
		uint64(p[len(p)-4])<<24|uint64(p[len(p)-3])<<16|uint64(p[len(p)-2])<<8|uint64(p[len(p)-1])) / 8
	*dst = sha256.Sum256(p[:n])
}
