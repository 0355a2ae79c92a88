package hash

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/klauspost/cpuid/v2"
	simd "github.com/minio/sha256-simd"
)

// ErrUnknownBackend is returned by SetBackend for a name other than auto, stdlib,
// simd, shani (or shani on a CPU without the SHA extensions).
var ErrUnknownBackend = errors.New("conductor: unknown SHA-256 backend")

// backendID is the dispatch enum captured by each Chain at Reset, so the per-block
// cost of dispatch is one predictable branch rather than an interface call.
type backendID uint32

const (
	backendStdlib backendID = iota // crypto/sha256 (SHA-NI / AVX2 / ARMv8 assembly in Go 1.26)
	backendSIMD                    // github.com/minio/sha256-simd (own SHA-NI / ARMv8 assembly)
	backendSHANI                   // sha256NI: this package's one-shot SHA-NI routine (amd64)
)

func (b backendID) String() string {
	switch b {
	case backendSIMD:
		return "simd"
	case backendSHANI:
		return "shani"
	}
	return "stdlib"
}

// BackendInfo describes the SHA-256 backend in use.
type BackendInfo struct {
	Name     string   // "stdlib", "simd" or "shani"
	Features []string // CPU features relevant to SHA-256, e.g. "sha_ni", "avx2", "avx512f"
	Auto     bool     // true when picked by auto rather than forced
}

// The backend is a process-wide choice: auto until SetBackend says otherwise
// (the conductor command's --sha256-backend flag; the library reads no
// environment).
var (
	backendOnce sync.Once
	backendCur  atomic.Uint32 // backendID
	backendAuto atomic.Bool
)

// activeBackend returns the backend new chains use (auto until SetBackend).
func activeBackend() backendID {
	backendOnce.Do(func() { _ = setBackend("auto") })
	return backendID(backendCur.Load())
}

// Backend reports the SHA-256 backend new chains use and the CPU features behind
// the choice. Safe for concurrent use.
func Backend() BackendInfo {
	be := activeBackend()
	return BackendInfo{Name: be.String(), Features: cpuFeatures(), Auto: backendAuto.Load()}
}

// SetBackend sets the SHA-256 backend for chains Reset afterwards: "auto" (or
// "") picks by this CPU's features (shani where it runs, else stdlib; see
// pickBackend), "stdlib", "simd" and "shani" force one ("shani" only where the
// CPU has the SHA extensions). Every backend produces identical digests; tests
// run every vector under each. Safe for concurrent use, but a Chain keeps the
// backend it was Reset with.
func SetBackend(name string) error {
	activeBackend()
	return setBackend(name)
}

func setBackend(name string) error {
	switch name {
	case "", "auto":
		backendCur.Store(uint32(autoBackend()))
		backendAuto.Store(true)
	case "stdlib":
		backendCur.Store(uint32(backendStdlib))
		backendAuto.Store(false)
	case "simd":
		backendCur.Store(uint32(backendSIMD))
		backendAuto.Store(false)
	case "shani":
		if !haveSHANI {
			return errors.Join(ErrUnknownBackend, errors.New(`backend="shani": this CPU lacks the SHA extensions (or is not amd64)`))
		}
		backendCur.Store(uint32(backendSHANI))
		backendAuto.Store(false)
	default:
		return errors.Join(ErrUnknownBackend, errors.New("backend="+strconv.Quote(name)+`: want "auto", "stdlib", "simd" or "shani"`))
	}
	return nil
}

// autoBackend is the backend "auto" picks on this machine: pickBackend over
// the CPU features Backend reports.
func autoBackend() backendID { return pickBackend(runtime.GOARCH, cpuFeatures()) }

// pickBackend is the auto rule, by CPU feature set (names as cpuFeatures
// reports them):
//
//   - amd64 with sha_ni, ssse3 and sse4.1 (haveSHANI): shani. All three
//     backends run the same SHA-NI compression there, and shani spends the
//     least per message around it: it pads in the chain's scratch and hashes
//     every block in one call with the state in registers, where the libraries
//     set up a digest, buffer the tail through Write and pad into a copy
//     (BenchmarkSum256, BenchmarkVLLMChain; figures in BENCHMARKS.md,
//     "Generated tables").
//   - anything else, AVX2 or AVX-512 without SHA-NI and arm64 included: stdlib.
//     sha256-simd's Sum256 has assembly only for SHA-NI and the ARMv8 SHA-2
//     instructions and runs pure Go otherwise (its AVX-512 code serves only
//     its 16-lane Server API, which this package does not use), while
//     crypto/sha256 keeps its AVX2 assembly, so simd is slower than stdlib on
//     every x86 CPU without SHA-NI. On arm64 both run the SHA-2 instructions;
//     stdlib stays the pick there until a measurement shows simd ahead.
//
// simd is therefore never auto's pick; SetBackend("simd") still forces it.
// TestPickBackend checks the rule for each feature set.
func pickBackend(goarch string, features []string) backendID {
	if goarch == "amd64" && slices.Contains(features, "sha_ni") &&
		slices.Contains(features, "ssse3") && slices.Contains(features, "sse4.1") {
		return backendSHANI
	}
	return backendStdlib
}

func cpuFeatures() []string {
	var f []string
	for _, c := range []struct {
		id   cpuid.FeatureID
		name string
	}{
		{cpuid.SHA, "sha_ni"},
		{cpuid.SSSE3, "ssse3"},
		{cpuid.SSE4, "sse4.1"},
		{cpuid.AVX2, "avx2"},
		{cpuid.AVX512F, "avx512f"},
		{cpuid.SHA2, "arm_sha2"},
	} {
		if cpuid.CPU.Supports(c.id) {
			f = append(f, c.name)
		}
	}
	return f
}

// sum256 hashes b with backend be. The shani backend pads the message in place:
// it may overwrite b[len(b):cap(b)], and it allocates unless cap(b)-len(b) >=
// sha256PadMax (the chain sizes its scratch for that). The digest stays on the
// stack.
func sum256(be backendID, b []byte) (d [32]byte) {
	switch be {
	case backendSHANI:
		sha256NI(&d, padSHA256(b))
		return d
	case backendSIMD:
		return simd.Sum256(b)
	}
	return sha256.Sum256(b)
}

// sum256To is sum256 writing the digest to *dst (the chain's parent) directly.
func sum256To(be backendID, dst *[32]byte, b []byte) {
	if be == backendSHANI {
		sha256NI(dst, padSHA256(b))
		return
	}
	*dst = sum256(be, b)
}

// sha256PadMax is the most padding a message takes: 0x80, up to 63 zero bytes
// and the 8-byte length.
const sha256PadMax = 72

// padSHA256 returns b extended by its FIPS 180-4 §5.1.1 padding (0x80, zeros to
// 56 mod 64, the message length in bits as a 64-bit big-endian integer), in place
// when b's capacity allows.
func padSHA256(b []byte) []byte {
	n := len(b)
	total := (n + sha256PadMax) &^ 63
	if cap(b) < total {
		b = append(b, make([]byte, total-n)...)
	}
	b = b[:total]
	b[n] = 0x80
	clear(b[n+1 : total-8])
	binary.BigEndian.PutUint64(b[total-8:], uint64(n)<<3)
	return b
}
