//go:build 386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64 || wasm

package hash

import "unsafe"

// nativeLE reports that int32 tokens are already laid out as u32 little-endian in
// memory, so the byte view below is exactly the u32le encoding the hashes consume.
const nativeLE = true

// tokenBytes views tokens as their in-memory bytes without copying.
//
// Safety: the result aliases tokens (same backing array, 4*len(tokens) bytes, which
// int32's alignment and size guarantee are addressable); it is only read, only
// while tokens is live, and never retained past the hash call. On little-endian
// targets (this file's build tags) the bytes equal u32le(tokens). Proved by
// TestTokenBytes.
func tokenBytes(tokens []int32) []byte {
	if len(tokens) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&tokens[0])), 4*len(tokens))
}
