//go:build 386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64 || wasm

package server

// littleEndian enables zero-copy views of little-endian token bins.
const littleEndian = true
