//go:build !race

package hash

import "testing"

// TestZeroAllocs proves the steady-state contract of the package doc: a reused Chain
// walked to its end, AppendChain into a pre-sized dst, AppendXXH3Chain and the
// encoders allocate nothing, for every profile and backend. (Excluded under -race,
// whose instrumentation allocates.)
func TestZeroAllocs(t *testing.T) {
	tokens := testTokens(64*16 + 5)
	lora, salt := []byte("adapter-A"), []byte("tenant-salt")
	forEachBackend(t, func(t *testing.T) {
		for _, p := range allProfiles(t) {
			var c Chain
			dst := make([]uint64, 0, 128)
			walk := func() {
				if err := c.Reset(&p, tokens, 16, lora, salt); err != nil {
					t.Fatal(err)
				}
				for i := 0; i < c.Blocks(); i++ {
					c.At(i)
				}
			}
			walk() // grow scratch once
			if n := testing.AllocsPerRun(50, walk); n != 0 {
				t.Errorf("%v: Chain.Reset+At allocates %.1f per walk", p.Spec, n)
			}
			c.SetMemo(NewMemo(1 << 16)) // misses (put) then hits (get)
			walk()
			if n := testing.AllocsPerRun(50, walk); n != 0 {
				t.Errorf("%v: Chain.Reset+At with memo allocates %.1f per walk", p.Spec, n)
			}
			// Recent prompts: the second sight stores the prompt (one
			// allocation); from the third on it is served without any.
			c.SetMemo(NewMemoWithPrompts(1<<16, 1<<20))
			for range 3 {
				walk()
			}
			if n := testing.AllocsPerRun(50, walk); n != 0 {
				t.Errorf("%v: Chain.Reset+At served from a recent prompt allocates %.1f per walk", p.Spec, n)
			}
			if st := c.memo.Stats(); memoServes(&p) && st.PromptHits == 0 {
				t.Errorf("%v: the recent-prompt level served nothing: %+v", p.Spec, st)
			}
			if n := testing.AllocsPerRun(50, func() {
				var err error
				dst, err = AppendChain(dst[:0], &p, tokens, 16, lora, salt)
				if err != nil {
					t.Fatal(err)
				}
			}); n != 0 {
				t.Errorf("%v: AppendChain allocates %.1f per call", p.Spec, n)
			}
		}
	})
	dst := make([]uint64, 0, 128)
	if n := testing.AllocsPerRun(50, func() {
		dst = AppendXXH3Chain(dst[:0], 1337, 0, false, tokens, 16)
		dst = AppendXXH3ChainSeeds(dst, 1, 2, dst[len(dst)-1], true, tokens, 16)
	}); n != 0 {
		t.Errorf("AppendXXH3Chain allocates %.1f per call", n)
	}
	if n := testing.AllocsPerRun(50, func() {
		_ = XXH3Local(tokens[:16], 1337) + XXH3Seq(1, 2, 3) + XXH3NamespaceSeed(1337, lora, salt)
	}); n != 0 {
		t.Errorf("XXH3 primitives allocate %.1f", n)
	}
	buf := make([]byte, 0, 4096)
	parent := make([]byte, 32)
	extras := [][]byte{lora, salt}
	if n := testing.AllocsPerRun(50, func() {
		buf = AppendCBORBlock(buf[:0], parent, tokens[:64], extras)
		buf = AppendPickleBlock(buf[:0], parent, tokens[:64], extras)
		buf = AppendCBORBlock(buf[:0], parent[:16], tokens[:64], extras)
		buf = AppendPickleBlock(buf[:0], parent[:16], tokens[:64], extras)
		buf = AppendCBORSeed(buf[:0], "4294967295")
		buf = AppendPickleSeed(buf[:0], "4294967295")
	}); n != 0 {
		t.Errorf("encoders allocate %.1f", n)
	}
}
