package core

import (
	"github.com/seed-c7a81618/conductor/hash"
	"github.com/zeebo/xxh3"
)

// Salt namespaces under the xxh3 standard profile.
//
// Seed 000's hashing standard has no salt and no LoRA in its formula: a block's
// identity is the plain RFC #1527 rolling hash with seed S,
//
//	local_i = XXH3_64(u32le(tokens of block i), S)
//	seq_0   = local_0,  seq_i = XXH3_64(le64(seq_{i-1}) || le64(local_i), S)
//
// and `lora_name`, `additional_salt` / `cache_salt` are identity dimensions that
// separate namespaces. The LoRA name is part of the context key (one block map
// per LoRA). The salt selects a namespace inside the context: the map key of a
// block with sequence hash seq in the namespace of salt s is
//
//	key = seq                                                   when s is empty
//	key = XXH3_64(le64(seq) || le64(tag(s)), S + nsSeedOffset)  otherwise,
//	tag(s) = XXH3_64(s, S) | 1
//
// so a publisher's seq_hashes, conductor's re-hash of token_ids, /query and
// /query_by_hash (whose cache_salt selects the namespace) all agree, and blocks
// of different salts never meet. Engine profiles (vllm_v1, sglang) hash the salt
// into the engine's own block hashes and use no namespace tag.

// nsSeedOffset separates the namespace mix from the chain's own rolling step
// (which hashes the same 16-byte shape with seed S). It is the 64-bit golden
// ratio constant; any fixed non-zero value would do.
const nsSeedOffset = 0x9E3779B97F4A7C15

// namespace is a resolved salt namespace of one context.
type namespace struct {
	tag  uint64 // 0: the unsalted namespace (keys are the plain hashes)
	seed uint64
}

// saltNamespace returns the namespace of salt under profile p: the unsalted
// namespace for an empty salt or a non-xxh3 profile.
func saltNamespace(p *hash.Profile, salt []byte) namespace {
	if len(salt) == 0 || p.Strategy != hash.StrategyXXH3 {
		return namespace{}
	}
	return namespace{tag: xxh3.HashSeed(salt, p.XXH3Seed) | 1, seed: p.XXH3Seed + nsSeedOffset}
}

// key maps a plain sequence hash to its index key in the namespace.
func (n namespace) key(seq uint64) uint64 {
	if n.tag == 0 {
		return seq
	}
	return hash.XXH3Seq(seq, n.tag, n.seed)
}
