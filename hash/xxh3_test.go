package hash

import (
	"fmt"
	"testing"
)

// TestXXH3DynamoVectors: every case of derived_dynamo_xxh3_hash_vectors.json, through
// the primitives, AppendXXH3ChainSeeds and a Chain under the default profile.
//
// The lora/salt cases pin which seed each step uses: their "seed" is the local-hash
// seed 1337+XXH3(lora,0)+XXH3(salt,1), and their sequence hashes only verify when the
// rolling step keeps the base seed 1337 (with the namespace seed, tokens_1_8_bs4_lora
// block 1 would be 2703259448642831784 instead of 18307416060524397755).
func TestXXH3DynamoVectors(t *testing.T) {
	cases := loadDynamo(t)
	if len(cases) < 8 {
		t.Fatalf("%d cases", len(cases))
	}
	def := DefaultProfile()
	for _, tc := range cases {
		var lora, salt []byte
		if tc.LoraName != nil {
			lora = []byte(*tc.LoraName)
		}
		if tc.CacheSalt != nil {
			salt = []byte(*tc.CacheSalt)
		}
		ns := XXH3NamespaceSeed(1337, lora, salt)
		if ns != parseU64(t, tc.Seed) {
			t.Errorf("%s: namespace seed %d, want %s", tc.Name, ns, tc.Seed)
		}
		if l, s := def.XXH3Seeds(lora, salt); l != ns || s != 1337 {
			t.Errorf("%s: XXH3Seeds %d %d", tc.Name, l, s)
		}
		n := len(tc.TokenIDs) / tc.BlockSize
		if len(tc.LocalHashes) != n || len(tc.SequenceHashes) != n {
			t.Fatalf("%s: %d blocks in fixture, want %d", tc.Name, len(tc.LocalHashes), n)
		}
		var parent uint64
		for i := 0; i < n; i++ {
			local := XXH3Local(tc.TokenIDs[i*tc.BlockSize:(i+1)*tc.BlockSize], ns)
			if local != parseU64(t, tc.LocalHashes[i]) {
				t.Errorf("%s block %d: local %d, want %s", tc.Name, i, local, tc.LocalHashes[i])
			}
			seq := local
			if i > 0 {
				seq = XXH3Seq(parent, local, 1337)
			}
			if seq != parseU64(t, tc.SequenceHashes[i]) {
				t.Errorf("%s block %d: seq %d, want %s", tc.Name, i, seq, tc.SequenceHashes[i])
			}
			parent = seq
		}
		got := AppendXXH3ChainSeeds(nil, ns, 1337, 0, false, tc.TokenIDs, tc.BlockSize)
		chain, err := AppendChain(nil, &def, tc.TokenIDs, tc.BlockSize, lora, salt)
		if err != nil {
			t.Fatal(err)
		}
		var c Chain
		if err := c.Reset(&def, tc.TokenIDs, tc.BlockSize, lora, salt); err != nil {
			t.Fatal(err)
		}
		for i, w := range tc.SequenceHashes {
			want := parseU64(t, w)
			if got[i] != want || chain[i] != want || c.At(i) != want {
				t.Errorf("%s block %d: seeds %d, AppendChain %d, Chain %d, want %d", tc.Name, i, got[i], chain[i], c.At(i), want)
			}
		}
		if lora == nil && salt == nil {
			if one := AppendXXH3Chain(nil, 1337, 0, false, tc.TokenIDs, tc.BlockSize); !equalU64(one, got) {
				t.Errorf("%s: AppendXXH3Chain %v, want %v", tc.Name, one, got)
			}
		}
	}
}

// TestXXH3Continuation: hashing a chain in two pieces, the second with hasParent,
// equals hashing it at once (how core extends an engine event with a parent).
func TestXXH3Continuation(t *testing.T) {
	tokens := make([]int32, 64)
	for i := range tokens {
		tokens[i] = int32(i * 7919)
	}
	all := AppendXXH3Chain(nil, 1337, 0, false, tokens, 8)
	for k := 0; k <= 8; k++ {
		head := AppendXXH3Chain(nil, 1337, 0, false, tokens[:8*k], 8)
		var parent uint64
		if k > 0 {
			parent = head[k-1]
		}
		both := AppendXXH3Chain(head, 1337, parent, k > 0, tokens[8*k:], 8)
		if !equalU64(both, all) {
			t.Errorf("split at %d: %v, want %v", k, both, all)
		}
	}
	if got := AppendXXH3Chain([]uint64{9}, 1337, 0, false, tokens, 0); len(got) != 1 {
		t.Error("blockSize 0 must append nothing")
	}
	if got := AppendXXH3Chain(nil, 1337, 0, false, tokens[:7], 8); len(got) != 0 {
		t.Error("partial block must not be hashed")
	}
}

// TestNamespacesNeverCollide: across the token sets of the vectors, different LoRA /
// salt namespaces (including "" = none) give disjoint keys, for every strategy that
// hashes them. (SGLang ignores LoRA by design; only its salt is a namespace.) Equal
// keys are allowed only for the same namespace and the same covered token prefix:
// the vectors reuse 1..8, and a shared prefix is a match, not a collision.
func TestNamespacesNeverCollide(t *testing.T) {
	forEachBackend(t, func(t *testing.T) {
		var tokenSets [][]int32
		for _, c := range loadDynamo(t) {
			tokenSets = append(tokenSets, c.TokenIDs)
		}
		for _, c := range loadCBORGolden(t).Cases {
			if firstNegative(c.TokenIDs) < 0 {
				tokenSets = append(tokenSets, c.TokenIDs)
			}
		}
		tokenSets = append(tokenSets, loadSGLangIntegration(t).TokenIDs)
		names := []string{"", "adapter-A", "adapter-B", "tenant-salt", "a", "\x00", "模型"}
		profiles := []Profile{
			DefaultProfile(),
			mustResolve(t, Spec{"vllm_v1", "sha256_cbor", "0", "low64_be"}),
			mustResolve(t, Spec{"vllm_v1", "sha256", "0", "low64_be"}),
			sglangProfile(t, "sglang"),
			sglangProfile(t, "sglang_bigram"),
		}
		var c Chain
		for _, p := range profiles {
			sglang := p.Strategy == StrategySGLang || p.Strategy == StrategySGLangBigram
			seen := map[uint64]string{}
			checked := 0
			for _, tokens := range tokenSets {
				for _, lora := range names {
					if sglang && lora != "" {
						continue
					}
					for _, salt := range names {
						if err := c.Reset(&p, tokens, 4, []byte(lora), []byte(salt)); err != nil {
							t.Fatal(err)
						}
						for i := 0; i < c.Blocks(); i++ {
							end := c.MatchedTokens(i + 1)
							if p.Strategy == StrategySGLangBigram {
								end++ // position q covers tokens q and q+1
							}
							ns := fmt.Sprintf("lora=%q salt=%q", lora, salt)
							if p.Strategy == StrategyVLLMv1 && i == 0 {
								// vLLM block 0 hashes the extras list (lora, salt) with empties
								// dropped, so lora=X and salt=X alone give the same block 0
								// (upstream behaviour; contexts differ by LoRA anyway). Block 1
								// tells them apart: lora stays in its extras, salt does not.
								ns = fmt.Sprintf("extras=%q", vllmExtras(0, []byte(lora), []byte(salt)))
							}
							id := fmt.Sprintf("%s %s prefix=%v", p.Spec.Strategy+"/"+p.Spec.Algorithm, ns, tokens[:end])
							k := c.At(i)
							if prev, dup := seen[k]; dup && prev != id {
								t.Errorf("key %#x: %s collides with %s", k, id, prev)
							}
							seen[k] = id
							checked++
						}
					}
				}
			}
			if checked < 100 {
				t.Errorf("%v: only %d keys checked", p.Strategy, checked)
			}
		}
	})
}
