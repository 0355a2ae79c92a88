package hash

import (
	"slices"
	"testing"
)

// identifyCase is one vector chain seen as a published root event: the
// hashes are the vector's projections (computed upstream or by independent
// tools), never by this package.
type identifyCase struct {
	name   string
	truth  Spec
	sample Sample
	lora   bool // the vector hashes the LoRA name
}

func identifyCases(t *testing.T) []identifyCase {
	var out []identifyCase
	add := func(g *vllmGolden) {
		for _, tc := range g.Cases {
			if len(tc.Expected) == 0 || tc.TokenIDsRepeat != nil || tc.LoraNameRepeat != nil {
				continue
			}
			n := min(len(tc.Expected), 4)
			if len(tc.TokenIDs) < n*tc.BlockSize {
				n = len(tc.TokenIDs) / tc.BlockSize
			}
			if n == 0 {
				continue
			}
			s := Sample{Tokens: tc.TokenIDs, BlockSize: tc.BlockSize, Lora: tc.lora(t), Salt: tc.salt()}
			for _, e := range tc.Expected[:n] {
				s.Hashes = append(s.Hashes, parseU64(t, e.ProjectedDecimal))
			}
			out = append(out, identifyCase{g.Profile.Algorithm + "/" + tc.Name, g.spec(), s, tc.LoraName != ""})
		}
	}
	add(loadPickleGolden(t))
	add(loadCBORGolden(t))
	xx := loadXXHashDerived(t)
	add(&xx.XXHashPickle)
	add(&xx.XXHashCBOR)

	sg := loadSGLangIntegration(t)
	s := Sample{Tokens: sg.TokenIDs, BlockSize: sg.BlockSize}
	for _, h := range sg.BlockHashesSigned[:len(sg.TokenIDs)/sg.BlockSize] {
		s.Hashes = append(s.Hashes, parseI64AsU64(t, h))
	}
	out = append(out, identifyCase{"sglang/integration", Spec{"sglang", "sha256_raw", "0", "first64_be"}, s, false})
	return out
}

// TestIdentifyVectors: for every vector chain, registered under every other
// profile Candidates knows, Identify names the vector's own profile (and
// whether the LoRA name is hashed); registered under its own profile, the
// registration reproduces it and no other candidate does.
func TestIdentifyVectors(t *testing.T) {
	cases := identifyCases(t)
	if n := len(cases); n < 10 || !slices.ContainsFunc(cases, func(c identifyCase) bool { return c.lora }) {
		t.Fatalf("%d vector chains, none or some with a LoRA name", n)
	}
	var scratch []uint64
	all := append(Candidates(Spec{}), mustResolve(t, Spec{"vllm_v1", "sha256", "42", "low64_be"}))
	for _, c := range cases {
		own := mustResolve(t, c.truth)
		if !c.sample.Reproduces(&own, c.lora, &scratch) {
			t.Fatalf("%s: its own profile does not reproduce it", c.name)
		}
		for i := range all {
			reg := all[i].Spec
			cands := Candidates(reg)
			if slices.ContainsFunc(cands, func(p Profile) bool { return p.Spec == reg }) {
				t.Fatalf("Candidates(%v) holds the registered profile", reg)
			}
			p, withLora, ok := Identify(&c.sample, cands, &scratch)
			if reg == c.truth {
				if ok {
					t.Errorf("%s registered as itself: %v also reproduces it", c.name, p.Spec)
				}
				continue
			}
			if !ok || p.Spec != c.truth || withLora != c.lora {
				t.Errorf("%s registered as %v: identified %v (lora %v, ok %v), want %v (lora %v)",
					c.name, reg, p.Spec, withLora, ok, c.truth, c.lora)
			}
		}
	}
}

// TestIdentifyNone: hashes no candidate gives (one bit flipped, or a root
// seeded from a text no candidate tries) are identified as nothing.
func TestIdentifyNone(t *testing.T) {
	var scratch []uint64
	for _, c := range identifyCases(t) {
		s := c.sample
		s.Hashes = slices.Clone(s.Hashes)
		s.Hashes[0] ^= 1
		if p, _, ok := Identify(&s, Candidates(Spec{}), &scratch); ok {
			t.Errorf("%s with a flipped bit: identified %v", c.name, p.Spec)
		}
	}
	random := mustResolve(t, Spec{"vllm_v1", "sha256", "random", "low64_be"})
	tokens := []int32{1, 2, 3, 4, 5, 6, 7, 8}
	hs, err := AppendChain(nil, &random, tokens, 4, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p, _, ok := Identify(&Sample{Tokens: tokens, Hashes: hs, BlockSize: 4}, Candidates(Spec{}), &scratch); ok {
		t.Errorf("a root no candidate seeds: identified %v", p.Spec)
	}
}

// TestReproducesShortSample: a sample without enough tokens for its hashes,
// or without hashes, reproduces nothing.
func TestReproducesShortSample(t *testing.T) {
	var scratch []uint64
	p := DefaultProfile()
	for _, s := range []Sample{
		{Tokens: []int32{1, 2, 3}, Hashes: []uint64{1}, BlockSize: 4},
		{Tokens: []int32{1, 2, 3, 4}, BlockSize: 4},
		{Tokens: []int32{1, 2, 3, 4}, Hashes: []uint64{1}},
	} {
		if s.Reproduces(&p, false, &scratch) {
			t.Errorf("%+v reproduced", s)
		}
	}
}
