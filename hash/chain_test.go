package hash

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

// allProfiles returns one resolved profile per strategy and algorithm.
func allProfiles(t testing.TB) []Profile {
	return []Profile{
		DefaultProfile(),
		mustResolve(t, Spec{"xxh3", "", "42", ""}),
		mustResolve(t, Spec{"vllm_v1", "sha256_cbor", "0", "low64_be"}),
		mustResolve(t, Spec{"vllm_v1", "sha256", "random", "low64_be"}),
		mustResolve(t, Spec{"vllm_v1", "xxhash_cbor", "0", "low64_be"}),
		mustResolve(t, Spec{"vllm_v1", "xxhash", "4294967295", "low64_be"}),
		mustResolve(t, Spec{"sglang", "sha256_raw", "0", "first64_be"}),
		mustResolve(t, Spec{"sglang_bigram", "sha256_raw", "0", "first64_be"}),
	}
}

func testTokens(n int) []int32 {
	tokens := make([]int32, n)
	for i := range tokens {
		tokens[i] = int32(i*2654435761%151936) + 1
	}
	return tokens
}

// TestChainComputesOnlyRequestedPrefix: 100 blocks, nothing hashed at Reset, At(2)
// hashes exactly 3, repeated and earlier At never re-hash.
func TestChainComputesOnlyRequestedPrefix(t *testing.T) {
	forEachBackend(t, func(t *testing.T) {
		tokens := testTokens(100 * 16)
		for _, p := range allProfiles(t) {
			var c Chain
			if err := c.Reset(&p, tokens, 16, []byte("lora"), []byte("salt")); err != nil {
				t.Fatal(err)
			}
			// bigram: ceil(1599/16) = 100 too
			if c.Blocks() != 100 || c.Computed() != 0 {
				t.Fatalf("%v: blocks %d computed %d", p.Spec, c.Blocks(), c.Computed())
			}
			k2 := c.At(2)
			if c.Computed() != 3 {
				t.Errorf("%v: At(2) computed %d blocks, want 3", p.Spec, c.Computed())
			}
			k0 := c.At(0)
			if c.At(2) != k2 || c.At(0) != k0 || c.Computed() != 3 {
				t.Errorf("%v: re-access changed keys or re-hashed (computed %d)", p.Spec, c.Computed())
			}
			c.At(99)
			if c.Computed() != 100 {
				t.Errorf("%v: At(99) computed %d", p.Spec, c.Computed())
			}
		}
	})
}

// TestChainLazyEqualsEager, for every profile with LoRA, salt and a partial tail:
// At in any order == AppendChain == per-prefix chains (prefix consistency).
func TestChainLazyEqualsEager(t *testing.T) {
	tokens := testTokens(7*5 + 3)
	forEachBackend(t, func(t *testing.T) {
		var c Chain
		for _, p := range allProfiles(t) {
			for _, ns := range [][2]string{{"", ""}, {"adapter-A", ""}, {"", "tenant-salt"}, {"adapter-A", "tenant-salt"}} {
				lora, salt := []byte(ns[0]), []byte(ns[1])
				eager, err := AppendChain(nil, &p, tokens, 5, lora, salt)
				if err != nil {
					t.Fatal(err)
				}
				if err := c.Reset(&p, tokens, 5, lora, salt); err != nil {
					t.Fatal(err)
				}
				if c.Blocks() != len(eager) {
					t.Fatalf("%v: Blocks %d, eager %d", p.Spec, c.Blocks(), len(eager))
				}
				// Out of order: last first, then the rest.
				last := c.Blocks() - 1
				if c.At(last) != eager[last] {
					t.Errorf("%v %q: At(last) differs", p.Spec, ns)
				}
				for i := range eager {
					if c.At(i) != eager[i] {
						t.Errorf("%v %q: block %d lazy %d eager %d", p.Spec, ns, i, c.At(i), eager[i])
					}
				}
				// A prompt cut after k blocks hashes to the first k keys.
				for k := 0; k <= len(eager); k++ {
					n := c.MatchedTokens(k)
					if p.Strategy == StrategySGLangBigram && k > 0 {
						n++
					}
					pre, err := AppendChain(nil, &p, tokens[:n], 5, lora, salt)
					if err != nil {
						t.Fatal(err)
					}
					if !equalU64(pre, eager[:k]) {
						t.Errorf("%v %q: prefix of %d blocks: %v, want %v", p.Spec, ns, k, pre, eager[:k])
					}
				}
			}
		}
	})
}

// TestChainBackendsAgree: every backend yields identical keys for every profile.
func TestChainBackendsAgree(t *testing.T) {
	tokens := testTokens(300)
	defer SetBackend("auto")
	for _, p := range allProfiles(t) {
		var ref []uint64
		for _, be := range backends {
			if err := SetBackend(be); err != nil {
				t.Fatal(err)
			}
			got, err := AppendChain(nil, &p, tokens, 16, []byte("l"), []byte("s"))
			if err != nil {
				t.Fatal(err)
			}
			if ref == nil {
				ref = got
			} else if !equalU64(got, ref) {
				t.Errorf("%v: backend %s differs", p.Spec, be)
			}
		}
	}
}

// TestChainReuse: one Chain and one dst reused across prompts (dst == src[:0]) give
// the same keys as fresh ones, and Reset drops state from the previous prompt.
func TestChainReuse(t *testing.T) {
	forEachBackend(t, func(t *testing.T) {
		var c Chain
		var dst []uint64
		for _, p := range allProfiles(t) {
			for _, n := range []int{64, 3, 0, 130, 17} {
				tokens := testTokens(n)
				fresh, err := AppendChain(nil, &p, tokens, 4, []byte("x"), nil)
				if err != nil {
					t.Fatal(err)
				}
				dst, err = AppendChain(dst[:0], &p, tokens, 4, []byte("x"), nil)
				if err != nil || !equalU64(dst, fresh) {
					t.Errorf("%v n=%d: reused dst %v, want %v", p.Spec, n, dst, fresh)
				}
				if err := c.Reset(&p, tokens, 4, []byte("x"), nil); err != nil {
					t.Fatal(err)
				}
				for i := range fresh {
					if c.At(i) != fresh[i] {
						t.Errorf("%v n=%d: reused chain block %d differs", p.Spec, n, i)
					}
				}
			}
		}
		// Appending keeps what dst held.
		p := DefaultProfile()
		got, _ := AppendChain([]uint64{7}, &p, testTokens(8), 4, nil, nil)
		if len(got) != 3 || got[0] != 7 {
			t.Errorf("append: %v", got)
		}
	})
}

// TestEmptySaltIsNoSalt: "" salt and "" lora are absent, for every profile.
func TestEmptySaltIsNoSalt(t *testing.T) {
	forEachBackend(t, func(t *testing.T) {
		tokens := testTokens(32)
		for _, p := range allProfiles(t) {
			a, _ := AppendChain(nil, &p, tokens, 4, nil, nil)
			b, _ := AppendChain(nil, &p, tokens, 4, []byte{}, []byte{})
			if !equalU64(a, b) {
				t.Errorf("%v: empty salt/lora differs from none", p.Spec)
			}
			c, _ := AppendChain(nil, &p, tokens, 4, nil, []byte("s"))
			if equalU64(a, c) {
				t.Errorf("%v: salt ignored", p.Spec)
			}
		}
	})
}

func TestChainErrors(t *testing.T) {
	vllm := mustResolve(t, Spec{"vllm_v1", "sha256_cbor", "0", "low64_be"})
	def := DefaultProfile()
	var c Chain
	f := func(p *Profile, tokens []int32, bs int, lora, salt string, sentinel error) {
		t.Helper()
		// Start from a chain with state so we see that errors leave it empty.
		if err := c.Reset(&def, testTokens(8), 4, nil, nil); err != nil {
			t.Fatal(err)
		}
		c.At(1)
		err := c.Reset(p, tokens, bs, []byte(lora), []byte(salt))
		if !errors.Is(err, sentinel) {
			t.Errorf("Reset(bs=%d lora=%q salt=%q): %v, want %v", bs, lora, salt, err, sentinel)
		}
		if c.Blocks() != 0 || c.Computed() != 0 || c.MatchedTokens(5) != 0 {
			t.Errorf("chain not empty after error %v", err)
		}
		if got, err := AppendChain([]uint64{1}, p, tokens, bs, []byte(lora), []byte(salt)); !errors.Is(err, sentinel) || len(got) != 1 {
			t.Errorf("AppendChain: %v %v", got, err)
		}
	}
	for _, p := range allProfiles(t) {
		f(&p, testTokens(8), 0, "", "", ErrBlockSize)
		f(&p, testTokens(8), -4, "", "", ErrBlockSize)
	}
	f(&vllm, testTokens(8), 4, "\xff", "", ErrInvalidUTF8)
	f(&vllm, testTokens(8), 4, "", "ok\xc3", ErrInvalidUTF8)
	f(nil, testTokens(8), 4, "", "", ErrUnsupportedStrategy)
	f(&Profile{}, testTokens(8), 4, "", "", ErrUnsupportedStrategy)
	f(&Profile{Strategy: StrategyVLLMv1, Algorithm: AlgoSHA256Raw}, testTokens(8), 4, "", "", ErrUnsupportedAlgorithm)
	f(&Profile{Strategy: StrategyVLLMv1, Algorithm: AlgoXXH3_64}, testTokens(8), 4, "", "", ErrUnsupportedAlgorithm)
	xx := mustResolve(t, Spec{"vllm_v1", "xxhash", "0", "low64_be"})
	f(&xx, testTokens(8), 4, "\xff", "", ErrInvalidUTF8)

	// vLLM and xxh3 accept negative token ids (Python ints).
	for _, p := range []Profile{def, vllm, xx} {
		if _, err := AppendChain(nil, &p, []int32{-1, -2, -3, -4}, 4, nil, nil); err != nil {
			t.Errorf("%v: negative tokens rejected: %v", p.Spec, err)
		}
	}
	// Out-of-range At is a programmer error.
	_ = c.Reset(&def, testTokens(8), 4, nil, nil)
	for _, i := range []int{-1, 2, 1 << 40} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.HasPrefix(r.(string), "BUG: hash.Chain.At(") {
					t.Errorf("At(%d): recovered %v", i, r)
				}
			}()
			c.At(i)
		}()
	}
}

func TestVLLMBlocksAndMatchedTokens(t *testing.T) {
	for _, p := range allProfiles(t)[:6] { // xxh3 and vllm: complete blocks only
		var c Chain
		for _, tc := range []struct{ n, bs, blocks int }{{0, 4, 0}, {3, 4, 0}, {4, 4, 1}, {7, 4, 1}, {8, 4, 2}, {40, 16, 2}} {
			if err := c.Reset(&p, testTokens(tc.n), tc.bs, nil, nil); err != nil {
				t.Fatal(err)
			}
			if c.Blocks() != tc.blocks {
				t.Errorf("%v n=%d bs=%d: %d blocks, want %d", p.Spec, tc.n, tc.bs, c.Blocks(), tc.blocks)
			}
			for k := 0; k <= tc.blocks; k++ {
				if c.MatchedTokens(k) != k*tc.bs {
					t.Errorf("%v: MatchedTokens(%d)=%d", p.Spec, k, c.MatchedTokens(k))
				}
			}
		}
	}
}

// TestTokenBytes proves the unsafe view equals the u32le encoding, negatives included.
func TestTokenBytes(t *testing.T) {
	tokens := []int32{0, 1, -1, 1 << 30, -2147483648, 2147483647, 151643}
	var want []byte
	for _, x := range tokens {
		want = binary.LittleEndian.AppendUint32(want, uint32(x))
	}
	if got := appendU32LE(nil, tokens); string(got) != string(want) {
		t.Errorf("appendU32LE %x, want %x", got, want)
	}
	if nativeLE {
		if got := tokenBytes(tokens); string(got) != string(want) || len(got) != 4*len(tokens) {
			t.Errorf("tokenBytes %x, want %x", got, want)
		}
		if tokenBytes(nil) != nil || tokenBytes(tokens[:0]) != nil {
			t.Error("tokenBytes of empty")
		}
		sub := tokens[2:4]
		if got := tokenBytes(sub); string(got) != string(want[8:16]) {
			t.Errorf("tokenBytes of subslice %x", got)
		}
	}
}

// TestPickBackend: auto's choice for each CPU feature set, with the features
// injected (pickBackend's rule), and on this machine.
func TestPickBackend(t *testing.T) {
	f := func(goarch string, features []string, want backendID) {
		t.Helper()
		if got := pickBackend(goarch, features); got != want {
			t.Errorf("pickBackend(%s, %v) = %s, want %s", goarch, features, got, want)
		}
	}
	// SHA-NI with the SSSE3 and SSE4.1 instructions sha256NI also uses: shani,
	// whatever else the CPU has.
	f("amd64", []string{"sha_ni", "ssse3", "sse4.1"}, backendSHANI)
	f("amd64", []string{"sha_ni", "ssse3", "sse4.1", "avx2"}, backendSHANI)
	f("amd64", []string{"sha_ni", "ssse3", "sse4.1", "avx2", "avx512f"}, backendSHANI)
	// SHA-NI without what sha256NI also needs: stdlib.
	f("amd64", []string{"sha_ni", "ssse3", "avx2"}, backendStdlib)
	f("amd64", []string{"sha_ni", "sse4.1", "avx2"}, backendStdlib)
	// AVX2 or AVX-512 without SHA-NI: stdlib (its AVX2 assembly beats
	// sha256-simd's pure-Go fallback).
	f("amd64", []string{"ssse3", "sse4.1", "avx2"}, backendStdlib)
	f("amd64", []string{"ssse3", "sse4.1", "avx2", "avx512f"}, backendStdlib)
	f("amd64", []string{"ssse3", "sse4.1"}, backendStdlib)
	f("amd64", nil, backendStdlib)
	// arm64, with or without the SHA-2 instructions: stdlib. The x86 names on
	// another architecture never pick the amd64-only shani.
	f("arm64", []string{"arm_sha2"}, backendStdlib)
	f("arm64", nil, backendStdlib)
	f("arm64", []string{"sha_ni", "ssse3", "sse4.1"}, backendStdlib)
	// simd is never auto's pick.
	for _, goarch := range []string{"amd64", "arm64", "386"} {
		for _, fs := range [][]string{nil, {"sha_ni", "ssse3", "sse4.1", "avx2", "avx512f"}, {"avx2", "avx512f"}, {"arm_sha2"}} {
			if pickBackend(goarch, fs) == backendSIMD {
				t.Errorf("pickBackend(%s, %v) = simd", goarch, fs)
			}
		}
	}
	// This machine: shani exactly where sha256NI can run.
	host := autoBackend()
	if (host == backendSHANI) != haveSHANI {
		t.Errorf("auto picks %s here, haveSHANI=%v (features %v)", host, haveSHANI, cpuFeatures())
	}
}

func TestBackendSelection(t *testing.T) {
	defer SetBackend("auto")
	for _, be := range backends {
		if err := SetBackend(be); err != nil {
			t.Fatal(err)
		}
		if info := Backend(); info.Name != be || info.Auto {
			t.Errorf("SetBackend(%s): %+v", be, info)
		}
	}
	if err := SetBackend("auto"); err != nil {
		t.Fatal(err)
	}
	info := Backend()
	if !info.Auto || info.Name != autoBackend().String() {
		t.Errorf("auto: %+v", info)
	}
	t.Logf("auto picks %s on features %v", info.Name, info.Features)
	for _, bad := range []string{"SIMD", "sha-ni", "cgo", " auto"} {
		if err := SetBackend(bad); !errors.Is(err, ErrUnknownBackend) {
			t.Errorf("SetBackend(%q): %v", bad, err)
		}
	}
	if Backend().Name != info.Name {
		t.Error("a rejected name changed the backend")
	}
	if err := SetBackend("stdlib"); err != nil {
		t.Fatal(err)
	}
	if b := Backend(); b.Name != "stdlib" || b.Auto {
		t.Errorf("stdlib: %+v", b)
	}
	// A chain keeps the backend it was Reset with.
	p := mustResolve(t, Spec{"vllm_v1", "sha256", "0", "low64_be"})
	var c Chain
	_ = c.Reset(&p, testTokens(8), 4, nil, nil)
	_ = SetBackend("simd")
	if c.be != backendStdlib {
		t.Error("chain backend changed after Reset")
	}
}
