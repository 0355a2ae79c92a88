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
// bytes past len(dst) always suffice, plus cborIntSlack (64) of room the token
// encoder may scribble on past the output.
func AppendCBORBlock(dst []byte, parent []byte, tokens []int32, extras [][]byte) []byte {
	switch len(parent) {
	case 32:
		// Every sha256_cbor chain block: a SHA-256 parent, written with two
		// 16-byte moves rather than the generic head and an append's memmove call.
		n := len(dst)
		dst = slices.Grow(dst, 35)[:n+35]
		dst[n], dst[n+1], dst[n+2] = cborArray|3, cborBytes|24, 32
		*(*[32]byte)(dst[n+3:]) = [32]byte(parent)
	case 16:
		// Every xxhash_cbor chain block: an XXH3-128 parent (head 0x50).
		n := len(dst)
		dst = slices.Grow(dst, 18)[:n+18]
		dst[n], dst[n+1] = cborArray|3, cborBytes|16
		*(*[16]byte)(dst[n+2:]) = [16]byte(parent)
	default:
		dst = append(dst, cborArray|3)
		dst = appendCBORHead(dst, cborBytes, uint64(len(parent)))
		dst = append(dst, parent...)
	}
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
	dst = slices.Grow(dst, 5*len(tokens)+cborIntSlack)
	p := putCBORInts(dst[n:n+5*len(tokens)+cborIntSlack], tokens)
	return dst[:n+p]
}

// cborIntTab holds, per width class c of a token's CBOR argument u (0: u < 24,
// inline in the head; 1, 2, 3: one, two, four argument bytes), the head's
// additional info (bits 0-7), the right shift that brings the argument's
// big-endian bytes down to bytes 1.. of bswap64(u) (bits 8-15; for class 0 the
// shift leaves u itself in byte 0), and the bytes written (bits 16-23).
var cborIntTab = [4]uint32{
	0 | 56<<8 | 1<<16,
	24 | 48<<8 | 2<<16,
	25 | 40<<8 | 3<<16,
	26 | 24<<8 | 5<<16,
}

// cborIntSlack is the room putCBORInts needs past 5*len(tokens): the vector
// path's last 64-byte store may reach that far.
const cborIntSlack = 64

// useIntsAVX512 selects the AVX-512 paths of putCBORInts and putPickleInts (8
// tokens per step, about 8x fewer instructions than the scalar loop) where the
// CPU has them, and useIntsAVX the AVX paths (4 tokens per step, about 4x
// fewer) for what the AVX-512 paths leave; tests turn them off to check the
// other paths alone.
var (
	useIntsAVX512 = haveIntsAVX512
	useIntsAVX    = haveIntsAVX
)

// putCBORInts encodes tokens as CBOR ints into out, which needs cborIntSlack
// bytes of slack past the 5*len(tokens) worst case, and returns the bytes used.
// On CPUs with AVX512F/BW/VBMI2 whole groups of 8 tokens go through cborInts8,
// which does per lane what the scalar loop below does per token, and on the
// other CPUs with AVX groups of 4 go through cborInts4. The scalar
// loop is branch-free per token: the width class is the sum of three compares, the
// head and big-endian argument are assembled in a register from the class's
// table entry and written with one 8-byte store (bytes past the token's width
// are overwritten by the next one or cut off by the caller). Real prompts mix
// 1-, 2-, 3- and 5-byte ids unpredictably, and a switch on the width
// mispredicts on a large share of them; this costs the same on any mix (see
// BenchmarkEncodeTokens). TestPutCBORInts checks it against the straightforward
// head encoder over every width class and their boundaries.
func putCBORInts(out []byte, tokens []int32) int {
	p := 0
	if useIntsAVX512 && len(tokens) >= 8 {
		m := len(tokens) &^ 7
		_ = out[5*m+cborIntSlack-1] // its 64-byte stores stay inside out
		p = cborInts8(out, tokens[:m])
		tokens = tokens[m:]
	}
	if useIntsAVX && len(tokens) >= 4 {
		m := len(tokens) &^ 3
		_ = out[p+5*m+16-1] // its 16-byte stores stay inside out
		p += cborInts4(out[p:], tokens[:m], &cborPairTab)
		tokens = tokens[m:]
	}
	for _, t := range tokens {
		s := t >> 31               // -1 for negatives, else 0
		v := uint64(uint32(t ^ s)) // CBOR negative integers carry -1-x = ^x
		c := ((23-v)>>63 + (0xff-v)>>63 + (0xffff-v)>>63) & 3
		e := cborIntTab[c]
		// The argument sits in bytes 4-7 of bswap64(v), most significant first;
		// the shift drops it to byte 1 (byte 0 for class 0, where its high
		// bytes are zero and byte 0 is the head).
		w := uint64(s&0x20) | uint64(e&0xff) | bits.ReverseBytes64(v)>>(e>>8&63)
		// out[p:p+8] rather than out[p:]: a slice of constant length needs
		// no clamp of its base pointer, which saves a third of the
		// instructions per token.
		binary.LittleEndian.PutUint64(out[p:p+8], w)
		p += int(e >> 16)
	}
	return p
}
