package core

import (
	"bytes"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/hash"
)

func resolveSpec(t testing.TB, strategy, algo, seed, proj string) hash.Profile {
	t.Helper()
	p, err := hash.Resolve(hash.Spec{Strategy: strategy, Algorithm: algo, PythonHashSeed: seed, IndexProjection: proj})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// rootStored is a stored event that starts a chain: the engine's hashes of
// tokens under the engine's profile (hash's chains are held to the vectors in
// package hash), with the tokens.
func rootStored(t testing.TB, engine *hash.Profile, tokens []int32, lora string) *Batch {
	t.Helper()
	hs, err := hash.AppendChain(nil, engine, tokens, testBS, []byte(lora), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := stored("", hs...)
	e := &b.Events[0]
	e.Tokens, e.HasTokens = tokens, true
	if lora != "" {
		e.LoraName = []byte(lora)
	}
	return b
}

func seqTokens(start, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(start + i)
	}
	return out
}

// checkLog captures the index's WARN lines.
func checkLog() (*slog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	return slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})), &buf
}

// TestHashCheckNamesTheProfile: a registration whose algorithm or seed
// differs from the engine's is a mismatch from the first root event with
// token_ids, naming the engine's profile, with one WARN however many events
// follow; the right registration is verified by the same event.
func TestHashCheckNamesTheProfile(t *testing.T) {
	pickle0 := resolveSpec(t, "vllm_v1", "sha256", "0", "low64_be")
	cbor0 := resolveSpec(t, "vllm_v1", "sha256_cbor", "0", "low64_be")
	cbor42 := resolveSpec(t, "vllm_v1", "sha256_cbor", "42", "low64_be")
	xx7 := resolveSpec(t, "vllm_v1", "xxhash", "7", "low64_be")
	sgl := resolveSpec(t, "sglang", "sha256_raw", "0", "first64_be")
	for _, c := range []struct {
		name           string
		engine, reg    hash.Profile
		want           HashCheckState
		found, details string
	}{
		{"algorithm", pickle0, cbor0, HashMismatch, "sha256",
			"engine e publishes vllm_v1 sha256 with PYTHONHASHSEED=0; registration says vllm_v1 sha256_cbor with PYTHONHASHSEED=0"},
		{"seed", cbor0, cbor42, HashMismatch, "sha256_cbor",
			"engine e publishes vllm_v1 sha256_cbor with PYTHONHASHSEED=0; registration says vllm_v1 sha256_cbor with PYTHONHASHSEED=42"},
		{"registered seed, other algorithm", xx7, resolveSpec(t, "vllm_v1", "sha256", "7", "low64_be"), HashMismatch, "xxhash",
			"engine e publishes vllm_v1 xxhash with PYTHONHASHSEED=7; registration says vllm_v1 sha256 with PYTHONHASHSEED=7"},
		{"strategy", sgl, cbor0, HashMismatch, "sha256_raw",
			"engine e publishes sglang sha256_raw; registration says vllm_v1 sha256_cbor with PYTHONHASHSEED=0"},
		{"right", cbor42, cbor42, HashVerified, "", ""},
		{"right sglang", sgl, sgl, HashVerified, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			lg, logs := checkLog()
			ix := New(Options{Logger: lg})
			r := engineReg(t, "e", 0, c.reg)
			if c.engine.Strategy == hash.StrategySGLang {
				r.Type = PublisherSGLang
			}
			s := mustRegister(t, ix, r)
			if got := s.HashCheck(); got.State != HashUnverified {
				t.Fatalf("before any event: %+v", got)
			}
			for i := 0; i < 20; i++ {
				s.Apply(rootStored(t, &c.engine, seqTokens(100*i, 3*testBS), ""))
				if i == 0 {
					got := s.HashCheck()
					if got.State != c.want || got.Found.Algorithm != c.found || got.Detail != c.details {
						t.Fatalf("after the first event: %+v, want %v found %q detail %q", got, c.want, c.found, c.details)
					}
				}
			}
			if got := s.HashCheck(); got.State != c.want {
				t.Fatalf("after 20 events: %+v", got)
			}
			if n := strings.Count(logs.String(), "hash profile mismatch"); (c.want == HashMismatch) != (n == 1) || n > 1 {
				t.Fatalf("%d mismatch WARNs:\n%s", n, logs)
			}
		})
	}
}

// TestHashCheckLora: an engine that does not hash the adapter's name (the
// registered profile reproduces its hashes only without it) is a mismatch
// saying so; one that does is verified.
func TestHashCheckLora(t *testing.T) {
	cbor0 := cborProfile(t)
	for _, c := range []struct {
		engineLora string
		want       HashCheckState
	}{{"", HashMismatch}, {"adapter", HashVerified}} {
		ix := New(Options{Logger: quietLogger()})
		r := engineReg(t, "e", 0, cbor0)
		r.LoraName = "adapter"
		s := mustRegister(t, ix, r)
		b := rootStored(t, &cbor0, seqTokens(1, 2*testBS), c.engineLora)
		b.Events[0].LoraName = []byte("adapter")
		s.Apply(b)
		got := s.HashCheck()
		if got.State != c.want || (c.want == HashMismatch) != got.FoundWithoutLora {
			t.Fatalf("engine hashing lora %q: %+v, want %v", c.engineLora, got, c.want)
		}
		if c.want == HashMismatch && !strings.Contains(got.Detail, "without the LoRA name") {
			t.Fatalf("detail %q", got.Detail)
		}
	}
}

// TestHashCheckNoMatch: hashes no profile gives (vLLM without PYTHONHASHSEED)
// make a mismatch only after hashCheckNoMatch samples, and never once the
// registration was verified (a salted prompt hashes extra keys).
func TestHashCheckNoMatch(t *testing.T) {
	cbor0 := cborProfile(t)
	unknown := resolveSpec(t, "vllm_v1", "sha256_cbor", "123456", "low64_be") // a seed no candidate tries
	ix := New(Options{Logger: quietLogger()})
	s := mustRegister(t, ix, engineReg(t, "e", 0, cbor0))
	for i := 1; i <= hashCheckNoMatch; i++ {
		s.Apply(rootStored(t, &unknown, seqTokens(1000*i, testBS), ""))
		got := s.HashCheck()
		want := HashUnverified
		if i == hashCheckNoMatch {
			want = HashMismatch
		}
		if got.State != want || got.Found != (hash.Spec{}) {
			t.Fatalf("after %d unmatched samples: %+v, want %v", i, got, want)
		}
	}
	if d := s.HashCheck().Detail; !strings.Contains(d, "PYTHONHASHSEED") || !strings.Contains(d, "no known profile") {
		t.Fatalf("detail %q", d)
	}

	ix = New(Options{Logger: quietLogger()})
	s = mustRegister(t, ix, engineReg(t, "e", 0, cbor0))
	s.Apply(rootStored(t, &cbor0, seqTokens(1, testBS), ""))
	for i := 1; i <= hashCheckBurst; i++ {
		s.Apply(rootStored(t, &unknown, seqTokens(1000*i, testBS), ""))
	}
	if got := s.HashCheck(); got.State != HashVerified {
		t.Fatalf("verified, then unmatched samples: %+v", got)
	}
}

// TestHashCheckUnverified: events that cannot show the chain (no token_ids,
// or a parent: the chain continues from a digest the event does not carry)
// leave the registration unverified.
func TestHashCheckUnverified(t *testing.T) {
	cbor0 := cborProfile(t)
	ix := New(Options{Logger: quietLogger()})
	s := mustRegister(t, ix, engineReg(t, "e", 0, cbor0))
	s.Apply(stored("", 1, 2, 3))
	b := rootStored(t, &cbor0, seqTokens(1, testBS), "")
	b.Events[0].Parent, b.Events[0].HasParent = 1, true
	s.Apply(b)
	if got := s.HashCheck(); got.State != HashUnverified || got.Samples != 0 {
		t.Fatalf("%+v", got)
	}
}

// TestHashCheckRehash: under the xxh3 strategy conductor computes the keys
// from token_ids, so any engine hashing is verified.
func TestHashCheckRehash(t *testing.T) {
	ix := New(Options{Logger: quietLogger()})
	r := engineReg(t, "e", 0, hash.DefaultProfile())
	s := mustRegister(t, ix, r)
	pickle0 := resolveSpec(t, "vllm_v1", "sha256", "0", "low64_be")
	s.Apply(rootStored(t, &pickle0, seqTokens(1, 2*testBS), ""))
	if got := s.HashCheck(); got.State != HashVerified {
		t.Fatalf("%+v", got)
	}
}

// TestHashCheckBigram: SGLang's flattened bigram pairs are checked as the
// token run they come from.
func TestHashCheckBigram(t *testing.T) {
	big := resolveSpec(t, "sglang_bigram", "sha256_raw", "0", "first64_be")
	plain := seqTokens(10, 2*testBS+1)
	hs, err := hash.AppendChain(nil, &big, plain, testBS, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var pairs []int32
	for i := 0; i+1 < len(plain); i++ {
		pairs = append(pairs, plain[i], plain[i+1])
	}
	if got, ok := unflattenBigram(nil, pairs); !ok || !slices.Equal(got, plain) {
		t.Fatalf("unflatten: %v %v", got, ok)
	}
	if _, ok := unflattenBigram(nil, []int32{1, 2, 3, 4}); ok {
		t.Fatal("pairs that do not chain unflattened")
	}
	for _, reg := range []hash.Profile{big, resolveSpec(t, "sglang", "sha256_raw", "0", "first64_be")} {
		ix := New(Options{Logger: quietLogger()})
		r := engineReg(t, "e", 0, reg)
		r.Type = PublisherSGLang
		s := mustRegister(t, ix, r)
		b := stored("", hs...)
		b.Events[0].Tokens, b.Events[0].HasTokens, b.Events[0].Bigram = pairs, true, true
		s.Apply(b)
		got := s.HashCheck()
		if reg == big && got.State != HashVerified || reg != big && (got.State != HashMismatch || got.Found.Strategy != "sglang_bigram") {
			t.Fatalf("registered %v: %+v", reg.Spec, got)
		}
	}
}

// TestHashCheckSampling: after the first hashCheckBurst samples, at most one
// more per hashCheckInterval of elapsed time.
func TestHashCheckSampling(t *testing.T) {
	cbor0 := cborProfile(t)
	ix := New(Options{Logger: quietLogger()})
	s := mustRegister(t, ix, engineReg(t, "e", 0, cbor0))
	start := time.Now()
	for i := 0; i < 200; i++ {
		s.Apply(rootStored(t, &cbor0, seqTokens(i, testBS), ""))
	}
	elapsed := time.Since(start)
	max := uint64(hashCheckBurst) + uint64(elapsed/hashCheckInterval) + 1
	if got := s.HashCheck(); got.State != HashVerified || got.Samples < hashCheckBurst || got.Samples > max {
		t.Fatalf("%+v: want %d to %d samples over %v", got, hashCheckBurst, max, elapsed)
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
