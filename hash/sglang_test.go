package hash

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"testing"
)

func sglangProfile(t testing.TB, strategy string) Profile {
	return mustResolve(t, Spec{strategy, "sha256_raw", "0", "first64_be"})
}

// TestSGLangVectors: the values of shared/reference §2.3 (verified upstream-side with
// Python hashlib) and SGLang's own 4-block chain from the map-event fixture.
func TestSGLangVectors(t *testing.T) {
	sg, bi := sglangProfile(t, "sglang"), sglangProfile(t, "sglang_bigram")
	in := loadSGLangIntegration(t)
	forEachBackend(t, func(t *testing.T) {
		f := func(p *Profile, tokens []int32, bs int, salt string, want ...uint64) {
			t.Helper()
			got, err := AppendChain(nil, p, tokens, bs, []byte("lora-is-ignored"), []byte(salt))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%v %v salt %q: %d keys, want %d", p.Strategy, tokens, salt, len(got), len(want))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("%v %v salt %q block %d: %#x, want %#x", p.Strategy, tokens, salt, i, got[i], want[i])
				}
			}
		}
		f(&sg, []int32{1, 2, 3, 4}, 4, "", 0xcf97adeedb59e05b)
		f(&sg, []int32{1, 2, 3, 4}, 4, "salty", 0xd98f7292c18ec8dd)
		f(&bi, []int32{10, 20, 30, 40}, 4, "", 15710792592378487421)

		if in.BlockSize != 4 || len(in.TokenIDs) != 16 || len(in.UpstreamHexDigest) != 4 {
			t.Fatalf("integration fixture shape: %+v", in)
		}
		var c Chain
		if err := c.Reset(&sg, in.TokenIDs, in.BlockSize, nil, nil); err != nil {
			t.Fatal(err)
		}
		for i, hx := range in.UpstreamHexDigest {
			key := c.At(i)
			if hexOf(c.parent[:]) != hx {
				t.Errorf("block %d: digest %x, want %s", i, c.parent, hx)
			}
			if want := parseI64AsU64(t, in.BlockHashesSigned[i]); key != want {
				t.Errorf("block %d: key %d, want %d (signed %s)", i, key, want, in.BlockHashesSigned[i])
			}
		}
	})
}

// TestSGLangLayout re-derives the chain from its definition with crypto/sha256, for
// partial tails, salts and bigram positions.
func TestSGLangLayout(t *testing.T) {
	le := func(ts ...int32) []byte {
		var b []byte
		for _, x := range ts {
			b = binary.LittleEndian.AppendUint32(b, uint32(x))
		}
		return b
	}
	tokens := []int32{5, 6, 7, 8, 9, 1 << 30, 11}
	forEachBackend(t, func(t *testing.T) {
		sg, bi := sglangProfile(t, "sglang"), sglangProfile(t, "sglang_bigram")
		for _, salt := range []string{"", "s"} {
			var parent []byte
			if salt != "" {
				r := sha256.Sum256([]byte("sglang-cache-salt-v1\x00" + salt))
				parent = r[:]
			}
			var want []uint64
			p := parent
			for s := 0; s < len(tokens); s += 3 {
				d := sha256.Sum256(append(append([]byte{}, p...), le(tokens[s:min(s+3, len(tokens))]...)...))
				want = append(want, binary.BigEndian.Uint64(d[:8]))
				p = d[:]
			}
			got, err := AppendChain(nil, &sg, tokens, 3, nil, []byte(salt))
			if err != nil || !equalU64(got, want) {
				t.Errorf("sglang salt %q: %v (%v), want %v", salt, got, err, want)
			}
			want, p = nil, parent
			for s := 0; s < len(tokens)-1; s += 4 {
				var blk []byte
				for q := s; q < min(s+4, len(tokens)-1); q++ {
					blk = append(blk, le(tokens[q], tokens[q+1])...)
				}
				d := sha256.Sum256(append(append([]byte{}, p...), blk...))
				want = append(want, binary.BigEndian.Uint64(d[:8]))
				p = d[:]
			}
			got, err = AppendChain(nil, &bi, tokens, 4, nil, []byte(salt))
			if err != nil || !equalU64(got, want) {
				t.Errorf("bigram salt %q: %v (%v), want %v", salt, got, err, want)
			}
		}
	})
}

func TestSGLangBlocksAndMatchedTokens(t *testing.T) {
	sg, bi := sglangProfile(t, "sglang"), sglangProfile(t, "sglang_bigram")
	tokens := make([]int32, 40)
	f := func(p *Profile, n, bs, blocks int, matched ...int) {
		t.Helper()
		var c Chain
		if err := c.Reset(p, tokens[:n], bs, nil, nil); err != nil {
			t.Fatal(err)
		}
		if c.Blocks() != blocks {
			t.Errorf("%v len %d B %d: %d blocks, want %d", p.Strategy, n, bs, c.Blocks(), blocks)
		}
		for k, want := range matched {
			if got := c.MatchedTokens(k); got != want {
				t.Errorf("%v len %d B %d: MatchedTokens(%d)=%d, want %d", p.Strategy, n, bs, k, got, want)
			}
		}
	}
	f(&sg, 40, 16, 3, 0, 16, 32, 40, 40)
	f(&sg, 32, 16, 2, 0, 16, 32, 32)
	f(&sg, 0, 16, 0, 0, 0)
	f(&sg, 1, 16, 1, 0, 1)
	f(&bi, 40, 16, 3, 0, 16, 32, 39) // reference: 40 tokens, B=16, full match -> 39
	f(&bi, 17, 16, 1, 0, 16)
	f(&bi, 18, 16, 2, 0, 16, 17)
	f(&bi, 1, 16, 0, 0, 0)
	f(&bi, 0, 16, 0, 0)
	f(&bi, 2, 1, 1, 0, 1)
	var c Chain
	_ = c.Reset(&sg, tokens, 16, nil, nil)
	if c.MatchedTokens(-1) != 0 || c.MatchedTokens(99) != 40 {
		t.Error("MatchedTokens clamping")
	}
}

func TestSGLangNegativeToken(t *testing.T) {
	for _, strat := range []string{"sglang", "sglang_bigram"} {
		p := sglangProfile(t, strat)
		var c Chain
		err := c.Reset(&p, []int32{1, 2, 3, 4, 5, -7, 8}, 4, nil, nil)
		if !errors.Is(err, ErrNegativeToken) || c.Blocks() != 0 {
			t.Errorf("%s: %v, blocks %d", strat, err, c.Blocks())
		}
		if err == nil || err.Error() != "token_ids[5]=-7: conductor: negative token id" {
			t.Errorf("%s: message %v", strat, err)
		}
		// Even a token the bigram never pairs into a complete position is rejected
		// (deterministic, whole-prompt validation).
		if err := c.Reset(&p, []int32{-1}, 4, nil, nil); !errors.Is(err, ErrNegativeToken) {
			t.Errorf("%s single negative: %v", strat, err)
		}
		if _, err := AppendChain(nil, &p, []int32{-2147483648}, 1, nil, nil); !errors.Is(err, ErrNegativeToken) {
			t.Errorf("%s AppendChain: %v", strat, err)
		}
	}
}

func equalU64(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
