package hash

import (
	"errors"
	"strings"
	"testing"
)

func TestResolveVLLMSeeds(t *testing.T) {
	// Roots from shared/reference/mooncake-conductor.md §2.1 and the pickle golden.
	roots := map[string]map[string]string{
		"sha256_cbor": {
			"0":          "4e1195df020de59e0d65a33a4279f1183e7ae4e5d980e309f8b55adff2e61c3e",
			"00":         "8d912e4e62b3cc377b1d1c7a14ef61dffbdaa0990237035c05401c29414c4172",
			"random":     "78d6ac7e28de859e492449dcea03e3807377d69998c5af819fed33a6df490cad",
			"4294967295": "177f280a5695322a18f16c96a26dc99d9c03f905940103dfe24a9c646fe446a8",
		},
		"sha256": {
			"0":          "1973e23848344dc43a988a9b478663803cfffe1243480253f9a3cf004b14aa7c",
			"00":         "67c61e0f70ad5d3fc0eacb59744008ac6f2a8bd2edad43540a743eaf0fb4993c",
			"random":     "fa1326fc0ad784c54e10f808051a77f999f7b675b12fba49cbef92b3e1a09cb7",
			"4294967295": "670c2eca46f5f7e11b9dce5c3bd2ff0e9e19567fd45b50c2db5cc0c9aae470d9",
		},
		// "0": loxilb's none_hash_xxhash_hex (vLLM 0.17.0); the rest from
		// derived_vllm_xxhash_vectors.json (xxHash C library).
		"xxhash_cbor": {
			"0":  "1ebe36576dcb573f26b99533a20aaeca",
			"00": "988a64041c9f9ff99e35e798308cac49",
		},
		"xxhash": {
			"0":          "6fb31cc38bba6066183f7f2104b9c051",
			"00":         "e6810c5b798027ca5af1a92e1be6ef11",
			"random":     "c65c9b784048f08f9df9ee060f014076",
			"4294967295": "5f72b99583547474687016a1e960f962",
		},
	}
	wantAlgos := map[string]Algorithm{"sha256_cbor": AlgoSHA256CBOR, "sha256": AlgoSHA256Pickle, "xxhash_cbor": AlgoXXHashCBOR, "xxhash": AlgoXXHashPickle}
	seen := map[[32]byte]string{}
	for algo, m := range roots {
		for seed, want := range m {
			s := Spec{"vllm_v1", algo, seed, "low64_be"}
			p := mustResolve(t, s)
			if p.RootHex() != want {
				t.Errorf("%s %q: root %s, want %s", algo, seed, p.RootHex(), want)
			}
			if p.Spec != s {
				t.Errorf("%s %q: canonical spec %+v, want the input verbatim", algo, seed, p.Spec)
			}
			if p.Strategy != StrategyVLLMv1 || p.Algorithm != wantAlgos[algo] || p.Projection != ProjLow64BE {
				t.Errorf("%s %q: enums %v %v %v", algo, seed, p.Strategy, p.Algorithm, p.Projection)
			}
			if prev, dup := seen[p.RootDigest]; dup {
				t.Errorf("%s %q: root equals %s", algo, seed, prev)
			}
			seen[p.RootDigest] = algo + "/" + seed
		}
	}
	// Profiles compare with ==: same input, same profile; "0" != "00".
	a := mustResolve(t, Spec{"vllm_v1", "sha256_cbor", "0", "low64_be"})
	b := mustResolve(t, Spec{"vllm_v1", "sha256_cbor", "0", "low64_be"})
	c := mustResolve(t, Spec{"vllm_v1", "sha256_cbor", "00", "low64_be"})
	if a != b || a == c {
		t.Error("Profile equality broken")
	}
}

func TestResolveRejects(t *testing.T) {
	vllm := func(seed string) Spec { return Spec{"vllm_v1", "sha256_cbor", seed, "low64_be"} }
	f := func(s Spec, field string, sentinel error) {
		t.Helper()
		p, err := Resolve(s)
		if err == nil {
			t.Errorf("%+q: accepted", s)
			return
		}
		if p != (Profile{}) {
			t.Errorf("%+q: non-zero profile on error", s)
		}
		var pe *ProfileError
		if !errors.As(err, &pe) {
			t.Fatalf("%+q: %T is not *ProfileError", s, err)
		}
		if pe.Field != field {
			t.Errorf("%+q: field %q, want %q (%v)", s, pe.Field, field, err)
		}
		if !errors.Is(err, sentinel) {
			t.Errorf("%+q: %v is not %v", s, err, sentinel)
		}
		if !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), pe.Err.Error()) {
			t.Errorf("%+q: message %q lacks field or cause", s, err)
		}
	}
	for _, seed := range []string{"+1", "-1", " 0", "0 ", "0\n", "1.0", "Random", "random ",
		"4294967296", "99999999999999999999", "not-a-seed", "٣", "０", "\xff", "0\xff", "\xc3\x28"} {
		f(vllm(seed), FieldSeed, ErrInvalidSeed)
	}
	f(vllm(""), FieldSeed, ErrEmptyField)
	f(vllm(""), FieldSeed, ErrInvalidSeed) // "" is also an invalid seed text

	f(Spec{"", "sha256", "0", "low64_be"}, FieldStrategy, ErrEmptyField)
	for _, s := range []string{"vllm_v2", "VLLM_V1", "vllm", "legacy", "xxh3 "} {
		f(Spec{s, "sha256", "0", "low64_be"}, FieldStrategy, ErrUnsupportedStrategy)
	}
	// The C++ conductor also refuses xxhash; conductor accepts vLLM's four
	// algorithms (TestResolveVLLMSeeds) and nothing else.
	for _, a := range []string{"md5", "sha512", "SHA256", "sha256_raw", "xxh3_64", "XXHASH", "xxhash_64", "xxhash_cbor ", "xxh3_128", "xxhash_msgpack"} {
		f(Spec{"vllm_v1", a, "0", "low64_be"}, FieldAlgorithm, ErrUnsupportedAlgorithm)
	}
	for _, a := range []string{"xxhash", "xxhash_cbor"} {
		f(Spec{"xxh3", a, "", ""}, FieldAlgorithm, ErrUnsupportedAlgorithm)
		f(Spec{"sglang", a, "0", "first64_be"}, FieldAlgorithm, ErrUnsupportedAlgorithm)
		f(Spec{"sglang_bigram", a, "0", "first64_be"}, FieldAlgorithm, ErrUnsupportedAlgorithm)
		f(Spec{"vllm_v1", a, "0", "first64_be"}, FieldProjection, ErrUnsupportedProjection)
		f(Spec{"vllm_v1", a, "", "low64_be"}, FieldSeed, ErrEmptyField)
	}
	f(Spec{"vllm_v1", "", "0", "low64_be"}, FieldAlgorithm, ErrEmptyField)
	for _, pr := range []string{"high64_be", "first64_be", "LOW64_BE", "seq64"} {
		f(Spec{"vllm_v1", "sha256", "0", pr}, FieldProjection, ErrUnsupportedProjection)
	}
	f(Spec{"vllm_v1", "sha256", "0", ""}, FieldProjection, ErrEmptyField)

	// Check order: strategy, algorithm, index_projection, python_hash_seed.
	f(Spec{"nope", "md5", "-1", "high64_be"}, FieldStrategy, ErrUnsupportedStrategy)
	f(Spec{"vllm_v1", "md5", "-1", "high64_be"}, FieldAlgorithm, ErrUnsupportedAlgorithm)
	f(Spec{"vllm_v1", "sha256", "-1", "high64_be"}, FieldProjection, ErrUnsupportedProjection)

	// xxh3 and sglang selectors.
	f(Spec{"xxh3", "sha256", "", ""}, FieldAlgorithm, ErrUnsupportedAlgorithm)
	f(Spec{"xxh3", "", "", "low64_be"}, FieldProjection, ErrUnsupportedProjection)
	f(Spec{"xxh3", "", "-5", ""}, FieldSeed, ErrInvalidSeed)
	f(Spec{"xxh3", "", "18446744073709551616", ""}, FieldSeed, ErrInvalidSeed)
	f(Spec{"sglang", "sha256", "0", "first64_be"}, FieldAlgorithm, ErrUnsupportedAlgorithm)
	f(Spec{"sglang", "", "0", "first64_be"}, FieldAlgorithm, ErrEmptyField)
	f(Spec{"sglang_bigram", "sha256_raw", "0", "low64_be"}, FieldProjection, ErrUnsupportedProjection)
	f(Spec{"sglang_bigram", "sha256_raw", "0", ""}, FieldProjection, ErrEmptyField)
}

func TestResolveXXH3AndSGLang(t *testing.T) {
	def := DefaultProfile()
	for _, s := range []Spec{{"xxh3", "", "", ""}, {"xxh3", "xxh3_64", "1337", "seq64"}, {"xxh3", "", "0001337", ""}} {
		if p := mustResolve(t, s); p != def {
			t.Errorf("%+v: %+v, want default %+v", s, p, def)
		}
	}
	p := mustResolve(t, Spec{"xxh3", "", "18446744073709551615", ""})
	if p.XXH3Seed != 1<<64-1 || p.Spec.PythonHashSeed != "18446744073709551615" {
		t.Errorf("max seed: %+v", p)
	}
	if def.Spec != (Spec{"xxh3", "xxh3_64", "1337", "seq64"}) || def.XXH3Seed != 1337 || def.RootDigest != [32]byte{} {
		t.Errorf("default %+v", def)
	}
	// SGLang pins the seed to "0" whatever it was given: these bind one context.
	for _, strat := range []string{"sglang", "sglang_bigram"} {
		a := mustResolve(t, Spec{strat, "sha256_raw", "0", "first64_be"})
		for _, seed := range []string{"", "00", "random", "junk"} {
			if b := mustResolve(t, Spec{strat, "sha256_raw", seed, "first64_be"}); a != b {
				t.Errorf("%s seed %q: %+v != %+v", strat, seed, b, a)
			}
		}
		if a.Spec.PythonHashSeed != "0" || a.RootHex() != strings.Repeat("0", 64) || a.Projection != ProjFirst64BE || a.Algorithm != AlgoSHA256Raw {
			t.Errorf("%s: %+v", strat, a)
		}
	}
	if s := mustResolve(t, Spec{"sglang", "sha256_raw", "0", "first64_be"}); s.Strategy != StrategySGLang {
		t.Error("sglang strategy")
	}
	if s := mustResolve(t, Spec{"sglang_bigram", "sha256_raw", "0", "first64_be"}); s.Strategy != StrategySGLangBigram {
		t.Error("bigram strategy")
	}
}

func TestEnumStrings(t *testing.T) {
	f := func(got, want string) {
		t.Helper()
		if got != want {
			t.Errorf("%q, want %q", got, want)
		}
	}
	f(StrategyXXH3.String(), "xxh3")
	f(StrategyVLLMv1.String(), "vllm_v1")
	f(StrategySGLang.String(), "sglang")
	f(StrategySGLangBigram.String(), "sglang_bigram")
	f(Strategy(0).String(), "invalid")
	f(AlgoXXH3_64.String(), "xxh3_64")
	f(AlgoSHA256Pickle.String(), "sha256")
	f(AlgoSHA256CBOR.String(), "sha256_cbor")
	f(AlgoSHA256Raw.String(), "sha256_raw")
	f(AlgoXXHashPickle.String(), "xxhash")
	f(AlgoXXHashCBOR.String(), "xxhash_cbor")
	f(Algorithm(0).String(), "invalid")
	f(ProjSeq64.String(), "seq64")
	f(ProjLow64BE.String(), "low64_be")
	f(ProjFirst64BE.String(), "first64_be")
	f(Projection(0).String(), "invalid")
}

// TestDigestSizeAndRootHex: digest lengths per algorithm, and RootHex renders
// the root at that length (32 hex characters for xxhash*, as vLLM's NONE_HASH).
func TestDigestSizeAndRootHex(t *testing.T) {
	for a, n := range map[Algorithm]int{AlgoXXH3_64: 8, AlgoSHA256Pickle: 32, AlgoSHA256CBOR: 32, AlgoSHA256Raw: 32, AlgoXXHashPickle: 16, AlgoXXHashCBOR: 16} {
		if a.DigestSize() != n {
			t.Errorf("%v: DigestSize %d, want %d", a, a.DigestSize(), n)
		}
	}
	for _, s := range []Spec{{"vllm_v1", "xxhash", "0", "low64_be"}, {"vllm_v1", "xxhash_cbor", "7", "low64_be"}} {
		if p := mustResolve(t, s); len(p.RootHex()) != 32 || p.Spec != s {
			t.Errorf("%+v: root %q, spec %+v", s, p.RootHex(), p.Spec)
		}
	}
	for _, p := range []Profile{DefaultProfile(), mustResolve(t, Spec{"sglang", "sha256_raw", "0", "first64_be"})} {
		if p.RootHex() != strings.Repeat("0", 64) {
			t.Errorf("%v: root %q", p.Spec, p.RootHex())
		}
	}
}

func TestParseDigits(t *testing.T) {
	f := func(s string, max uint64, want uint64, ok bool) {
		t.Helper()
		v, gotOK := parseDigits(s, max)
		if v != want || gotOK != ok {
			t.Errorf("parseDigits(%q,%d)=%d,%v want %d,%v", s, max, v, gotOK, want, ok)
		}
	}
	f("0", 9, 0, true)
	f("9", 9, 9, true)
	f("10", 9, 0, false)
	f("4294967295", maxPythonHashSeed, 4294967295, true)
	f("4294967296", maxPythonHashSeed, 0, false)
	f("00000000000000000000004294967295", maxPythonHashSeed, 4294967295, true)
	f("18446744073709551615", ^uint64(0), ^uint64(0), true)
	f("18446744073709551616", ^uint64(0), 0, false)
	f("", 9, 0, false)
	f("1a", 99, 0, false)
}
