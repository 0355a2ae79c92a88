package hash

import (
	"encoding/binary"
	"math/bits"
	"slices"
)

// Canonical CBOR (RFC 8949 §4.2.1, what cbor2 canonical=True emits) for the one value
// shape vLLM hashes with sha256_cbor: [parent bytes, [tokens...], null | [text...]].
// Every head uses the shortest argument encoding, arrays are definite-length.

const (
	cborUint  = 0 << 5
	cborNeg   = 1 << 5
	cborBytes = 2 << 5
	cborText  = 3 << 5
	cborArray = 4 << 5
	cborNull  = 0xf6
)

// appendCBORHead appends the head of major type major (already shifted) with argument v.
func appendCBORHead(dst []byte, major byte, v uint64) []byte {
	switch {
	case v < 24:
		return append(dst, major|byte(v))
	case v <= 0xff:
		return append(dst, major|24, byte(v))
	case v <= 0xffff:
		return append(dst, major|25, byte(v>>8), byte(v))
	case v <= 0xffffffff:
		return append(dst, major|26, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	return append(dst, major|27, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32),
		byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

// AppendCBORSeed appends the canonical CBOR text string encoding of seed: the bytes
// vLLM's sha256_cbor hashes to derive NONE_HASH from PYTHONHASHSEED ("0" -> 61 30).
func AppendCBORSeed(dst []byte, seed string) []byte {
	dst = appendCBORHead(dst, cborText, uint64(len(seed)))
	return append(dst, seed...)
}

// AppendCBORBlock appends canonical CBOR of the vLLM block value
// (parent, tuple(tokens), extras): a 3-array of a byte string, an array of ints and
// either null (extras empty) or an array of text strings. extras must be UTF-8
// (they are Python str); they are written verbatim.
//
// It allocates only if dst lacks capacity; 50 + 5*len(tokens) + sum(9+len(extra))
// bytes always suffice.
func AppendCBORBlock(dst []byte, parent []byte, tokens []int32, extras [][]byte) []byte {
	dst = append(dst, cborArray|3)
	dst = appendCBORHead(dst, cborBytes, uint64(len(parent)))
	dst = append(dst, parent...)
	dst = appendCBORTokens(dst, tokens)
	if len(extras) == 0 {
		return append(dst, cborNull)
	}
	dst = appendCBORHead(dst, cborArray, uint64(len(extras)))
	for _, e := range extras {
		dst = appendCBORHead(dst, cborText, uint64(len(e)))
		dst = append(dst, e...)
	}
	return dst
}

// appendCBORTokens writes the token array, the encoder's only per-token cost: one
// capacity check per block, then one 8-byte store per token.
func appendCBORTokens(dst []byte, tokens []int32) []byte {
	dst = appendCBORHead(dst, cborArray, uint64(len(tokens)))
	n := len(dst)
	dst = slices.Grow(dst, 5*len(tokens)+8)
	p := putCBORInts(dst[n:n+5*len(tokens)+8], tokens)
	return dst[:n+p]
}

// Per width class c of a token's CBOR argument u (0: u < 24, inline; 1: one
// byte; 2: two; 3: four): the bytes written, the head's additional info, the
// shift that leaves the argument's big-endian bytes in the low bytes of
// bswap32(u), and the mask that keeps u inline in the head for class 0.
var (
	cborIntLen   = [4]uint8{1, 2, 3, 5}
	cborIntInfo  = [4]uint8{0, 24, 25, 26}
	cborIntShift = [4]uint8{32, 24, 16, 0}
	cborIntLow   = [4]uint32{0xff, 0, 0, 0}
)

// putCBORInts encodes tokens as CBOR ints into out, which needs 8 bytes of slack
// past the 5*len(tokens) worst case, and returns the bytes used. It is
// branch-free per token: the width class is the sum of three compares, the
// head and big-endian argument are assembled in a register from the class's
// table entries and written with one 8-byte store (bytes past the token's width
// are overwritten by the next one or cut off by the caller). Real prompts mix
// 1-, 2-, 3- and 5-byte ids unpredictably; a switch on the width mispredicts
// on a large share of them (~4 ns/token at B=512 on random ids here), this
// costs the same on any mix. TestPutCBORInts checks it against the
// straightforward head encoder over every width class and their boundaries.
func putCBORInts(out []byte, tokens []int32) int {
	p := 0
	for _, t := range tokens {
		s := t >> 31              // -1 for negatives, else 0
		u := uint32(t ^ s)        // CBOR negative integers carry -1-x = ^x
		major := uint64(s & 0x20) // cborNeg (1<<5) or cborUint (0)
		v := uint64(u)
		c := (23-v)>>63 + (0xff-v)>>63 + (0xffff-v)>>63
		c &= 3
		w := major | uint64(cborIntInfo[c]) | uint64(u&cborIntLow[c]) |
			uint64(bits.ReverseBytes32(u))>>(cborIntShift[c]&63)<<8
		binary.LittleEndian.PutUint64(out[p:], w)
		p += int(cborIntLen[c])
	}
	return p
}
