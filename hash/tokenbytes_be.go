//go:build !(386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64 || wasm)

package hash

// nativeLE is false on big-endian targets: callers encode tokens with appendU32LE.
const nativeLE = false

// tokenBytes is unreachable on big-endian targets (guarded by nativeLE).
func tokenBytes([]int32) []byte { panic("BUG: tokenBytes on a big-endian target") }
