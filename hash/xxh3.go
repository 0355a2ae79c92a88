package hash

import (
	"encoding/binary"

	"github.com/zeebo/xxh3"
)

// The RFC #1527 "standard" chain as Dynamo computes it (LocalBlockHash and
// SequenceHash in dynamo's kv-router), pinned by testdata/derived_dynamo_xxh3_hash_vectors.json:
//
//	seed_ns  = S + XXH3_64(lora, 0) [lora != ""] + XXH3_64(salt, 1) [salt != ""]  (wrapping)
//	local_i  = XXH3_64(u32le(tokens of block i), seed_ns)
//	seq_0    = local_0
//	seq_i    = XXH3_64(le64(seq_{i-1}) || le64(local_i), S)
//
// The sequence step uses the base seed S, not seed_ns: the tokens_1_8_bs4_lora and
// tokens_1_8_bs4_salt vectors only verify that way (TestXXH3DynamoVectors). LoRA and
// salt still reach every seq hash through the local hashes.

// XXH3NamespaceSeed mixes a LoRA name and a cache salt into the base seed as Dynamo's
// compute_salt_hash does. Empty lora / salt contribute nothing.
func XXH3NamespaceSeed(base uint64, lora, salt []byte) uint64 {
	s := base
	if len(lora) > 0 {
		s += xxh3.HashSeed(lora, 0)
	}
	if len(salt) > 0 {
		s += xxh3.HashSeed(salt, 1)
	}
	return s
}

// XXH3Local is Dynamo's LocalBlockHash: XXH3-64 of the tokens as u32 little-endian.
// It reads tokens in place (no copy) on little-endian targets.
func XXH3Local(tokens []int32, seed uint64) uint64 {
	if nativeLE {
		return xxh3.HashSeed(tokenBytes(tokens), seed)
	}
	return xxh3.HashSeed(appendU32LE(nil, tokens), seed)
}

// XXH3Seq is one rolling step: XXH3-64(le64(parent) || le64(local), seed), where seed
// is the base seed S (see the package comment above on which seed).
func XXH3Seq(parent, local, seed uint64) uint64 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], parent)
	binary.LittleEndian.PutUint64(b[8:], local)
	return xxh3.HashSeed(b[:], seed)
}

// AppendXXH3Chain appends the sequence hashes of the complete blocks of tokens using
// one seed for both the local and the sequence step, which is the whole recipe when
// no LoRA or salt is mixed in. The first block's sequence hash is its local hash
// unless hasParent, in which case it chains from parent (a continuation, as in an
// event with parent_block_hash). blockSize <= 0 appends nothing.
func AppendXXH3Chain(dst []uint64, seed uint64, parent uint64, hasParent bool, tokens []int32, blockSize int) []uint64 {
	return AppendXXH3ChainSeeds(dst, seed, seed, parent, hasParent, tokens, blockSize)
}

// AppendXXH3ChainSeeds is AppendXXH3Chain with separate seeds: localSeed for the
// block hashes (XXH3NamespaceSeed of the context) and seqSeed for the rolling step
// (the base seed). Profile.XXH3Seeds returns the pair for a context.
func AppendXXH3ChainSeeds(dst []uint64, localSeed, seqSeed uint64, parent uint64, hasParent bool, tokens []int32, blockSize int) []uint64 {
	if blockSize <= 0 {
		return dst
	}
	n := len(tokens) / blockSize
	if !nativeLE {
		buf := make([]byte, 0, 4*blockSize)
		for i := 0; i < n; i++ {
			buf = appendU32LE(buf[:0], tokens[i*blockSize:(i+1)*blockSize])
			local := xxh3.HashSeed(buf, localSeed)
			if hasParent {
				local = XXH3Seq(parent, local, seqSeed)
			}
			parent, hasParent = local, true
			dst = append(dst, parent)
		}
		return dst
	}
	raw := tokenBytes(tokens)
	step := 4 * blockSize
	for i := 0; i < n; i++ {
		h := xxh3.HashSeed(raw[i*step:(i+1)*step], localSeed)
		if hasParent {
			h = XXH3Seq(parent, h, seqSeed)
		}
		parent, hasParent = h, true
		dst = append(dst, h)
	}
	return dst
}

// appendU32LE appends tokens as u32 little-endian (negative ids as their two's
// complement bit pattern).
func appendU32LE(dst []byte, tokens []int32) []byte {
	if nativeLE {
		return append(dst, tokenBytes(tokens)...)
	}
	for _, t := range tokens {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(t))
	}
	return dst
}
