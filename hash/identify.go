package hash

import "slices"

// Sample is what one published event shows of an engine's chain: the token
// ids of the event's first blocks and the hashes the engine published for
// them, folded to u64 as the wire decoder folds them (a digest's last 8 bytes
// big-endian for vLLM, the signed int64's bit pattern for SGLang). The event
// must start a chain (no parent hash): a chain's later blocks depend on the
// parent's full digest, which events carry only as a projection.
type Sample struct {
	// Tokens are the plain token ids of the sampled blocks, at least
	// len(Hashes)*BlockSize of them (SGLang bigram events: the pairs
	// unflattened, one more token than the pairs).
	Tokens    []int32
	Hashes    []uint64
	BlockSize int
	// Lora is the LoRA name the event names (nil: base model); Salt the cache
	// salt it carries (nil: none).
	Lora, Salt []byte
}

// Reproduces reports whether p's chain over the sample's tokens gives the
// sample's hashes, with the LoRA name in the chain's extra keys when withLora
// (vllm_v1; other strategies never hash it). scratch is reused for the keys.
func (s *Sample) Reproduces(p *Profile, withLora bool, scratch *[]uint64) bool {
	n := len(s.Hashes)
	if n == 0 || s.BlockSize <= 0 || len(s.Tokens) < n*s.BlockSize {
		return false
	}
	need := n * s.BlockSize
	if p.Strategy == StrategySGLangBigram {
		need++ // n blocks of pairs span one token more
	}
	if len(s.Tokens) < need {
		return false
	}
	tokens := s.Tokens[:need]
	var lora []byte
	if withLora {
		lora = s.Lora
	}
	keys, err := AppendChain((*scratch)[:0], p, tokens, s.BlockSize, lora, s.Salt)
	*scratch = keys
	return err == nil && len(keys) >= n && slices.Equal(keys[:n], s.Hashes)
}

// Candidates are the profiles an engine's hashes are tried against when the
// registered profile does not reproduce them: each vllm_v1 algorithm with the
// registered seed (a vllm_v1 registration's) and with "0", then sglang and
// sglang_bigram. The registered profile itself is left out; the order is the
// order Identify reports the first match in.
func Candidates(registered Spec) []Profile {
	seeds := []string{"0"}
	if registered.Strategy == "vllm_v1" && registered.PythonHashSeed != "0" {
		seeds = []string{registered.PythonHashSeed, "0"}
	}
	var out []Profile
	add := func(s Spec) {
		if s == registered {
			return
		}
		if p, err := Resolve(s); err == nil {
			out = append(out, p)
		}
	}
	for _, seed := range seeds {
		for _, a := range []string{"sha256", "sha256_cbor", "xxhash", "xxhash_cbor"} {
			add(Spec{Strategy: "vllm_v1", Algorithm: a, PythonHashSeed: seed, IndexProjection: "low64_be"})
		}
	}
	add(Spec{Strategy: "sglang", Algorithm: "sha256_raw", PythonHashSeed: "0", IndexProjection: "first64_be"})
	add(Spec{Strategy: "sglang_bigram", Algorithm: "sha256_raw", PythonHashSeed: "0", IndexProjection: "first64_be"})
	return out
}

// Identify returns the first of cands that reproduces the sample, and whether
// it did so with the LoRA name among the extra keys (tried first when the
// sample names a LoRA, then without it: an engine may hash the adapter or
// not). ok is false when none does.
func Identify(s *Sample, cands []Profile, scratch *[]uint64) (p Profile, withLora bool, ok bool) {
	for i := range cands {
		c := &cands[i]
		if len(s.Lora) > 0 && c.Strategy == StrategyVLLMv1 && s.Reproduces(c, true, scratch) {
			return *c, true, true
		}
		if s.Reproduces(c, false, scratch) {
			return *c, false, true
		}
	}
	return Profile{}, false, false
}
