package hash

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unsafe"
)

// TestMemoPromptDifferential: with the recent-prompt level on (roomy, and so
// small that it keeps evicting and truncating), random prompts from shared
// bases, each asked several times and walked to a random depth (a query stops
// at its first index miss), give the reference keys, while the level serves
// blocks. Prompts diverge from stored ones anywhere, extend them, stop inside
// them, and differ only in namespace (profile, seed text, B, LoRA, salt).
func TestMemoPromptDifferential(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 11))
	cases := randomMemoCases(t, rng, 120)
	want := make([][]uint64, len(cases))
	for i, tc := range cases {
		want[i] = refChain(tc.p, tc.tokens, tc.bs, tc.lora, tc.salt)
	}
	for _, budget := range []int{1 << 20, 2048} {
		memo := NewMemoWithPrompts(1<<20, budget)
		var c Chain
		c.SetMemo(memo)
		for q := range 2500 {
			i := rng.IntN(len(cases))
			tc := cases[i]
			if err := c.Reset(tc.p, tc.tokens, tc.bs, tc.lora, tc.salt); err != nil {
				t.Fatal(err)
			}
			depth := c.Blocks()
			if rng.IntN(3) == 0 {
				depth = rng.IntN(depth + 1)
			}
			for b := range depth {
				if k := c.At(b); k != want[i][b] {
					t.Fatalf("budget %d query %d case %d %v bs=%d len=%d lora=%q salt=%q: block %d key %x, want %x",
						budget, q, i, tc.p.Spec, tc.bs, len(tc.tokens), tc.lora, tc.salt, b, k, want[i][b])
				}
			}
			c.FlushMemoStats()
			// After the flush the same prompt still walks correctly (no level).
			for b := depth; b < min(depth+2, c.Blocks()); b++ {
				if k := c.At(b); k != want[i][b] {
					t.Fatalf("budget %d query %d: block %d after flush differs", budget, q, b)
				}
			}
		}
		st := memo.Stats()
		t.Logf("budget %d: %+v", budget, st)
		if st.PromptHits == 0 || st.PromptAdmissions == 0 || st.PromptHits > st.Hits {
			t.Fatalf("budget %d: recent prompts not exercised: %+v", budget, st)
		}
		if st.PromptBytes > st.PromptLimit || st.PromptLimit != budget {
			t.Fatalf("budget %d: %d bytes stored", budget, st.PromptBytes)
		}
		if budget == 2048 && st.PromptEvictions == 0 {
			t.Fatalf("tiny budget never evicted: %+v", st)
		}
	}
}

// TestMemoPromptLifecycle walks one prompt through the admission rule by hand:
// the first sight hashes, the second hits the digest table and is admitted,
// the third is served whole from the stored prompt; then a longer prompt, a
// diverging one and a short one.
func TestMemoPromptLifecycle(t *testing.T) {
	for _, p := range memoProfiles(t) {
		const bs, n = 16, 64
		tokens := testTokens(n*bs + 1) // bigram needs the extra token for n full blocks
		memo := NewMemoWithPrompts(1<<20, 1<<20)
		var c Chain
		c.SetMemo(memo)
		walk := func(toks []int32) []uint64 {
			keys := walkChain(t, &c, &p, toks, bs, []byte("l"), []byte("s"))
			c.FlushMemoStats()
			if want := refChain(&p, toks, bs, []byte("l"), []byte("s")); !equalU64(keys, want) {
				t.Fatalf("%v: keys differ from the reference", p.Spec)
			}
			return keys
		}
		full := (len(tokens) - btoi(p.Strategy == StrategySGLangBigram)) / bs
		check := func(step string, hits, promptHits, admissions uint64) {
			t.Helper()
			st := memo.Stats()
			if st.Hits != hits || st.PromptHits != promptHits || st.PromptAdmissions != admissions {
				t.Fatalf("%v %s: %+v, want hits %d prompt hits %d admissions %d", p.Spec, step, st, hits, promptHits, admissions)
			}
		}
		walk(tokens)
		check("first sight", 0, 0, 0)
		walk(tokens)
		blocks := uint64(c.Blocks())
		check("second sight", blocks, 0, 1)
		walk(tokens)
		check("third sight", 2*blocks, uint64(full), 1)
		if st := memo.Stats(); st.PromptBytes < full*(4*bs+promptStateSize) {
			t.Fatalf("%v: entry of %d blocks takes %d bytes", p.Spec, full, st.PromptBytes)
		}

		// A longer prompt: the stored blocks are served, the rest hashed.
		longer := append(slices.Clone(tokens), testTokens(5*bs)...)
		h0 := memo.Stats()
		walk(longer)
		if st := memo.Stats(); st.PromptHits-h0.PromptHits != uint64(full) || st.Misses-h0.Misses == 0 {
			t.Fatalf("%v longer: %+v after %+v", p.Spec, st, h0)
		}
		// Diverging inside block 10: blocks 0-9 served (bigram's block 9 reads
		// token 160, so it diverges one block earlier).
		div := slices.Clone(tokens)
		div[10*bs] ^= 1
		h0 = memo.Stats()
		walk(div)
		wantServed := uint64(10 - btoi(p.Strategy == StrategySGLangBigram))
		if st := memo.Stats(); st.PromptHits-h0.PromptHits != wantServed {
			t.Fatalf("%v diverging: served %d, want %d", p.Spec, st.PromptHits-h0.PromptHits, wantServed)
		}
		// Too short to be stored, however often it comes.
		short := tokens[:3*bs+1]
		h0 = memo.Stats()
		for range 3 {
			walk(short)
		}
		if st := memo.Stats(); st.PromptHits != h0.PromptHits || st.PromptAdmissions != h0.PromptAdmissions {
			t.Fatalf("%v: a 3-block prompt used the level: %+v after %+v", p.Spec, st, h0)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestMemoPromptBound: entries never hold more than a quarter of the budget
// (a long prompt stores its leading blocks), the stored bytes never exceed the
// budget however many prompts repeat, and full buckets evict.
func TestMemoPromptBound(t *testing.T) {
	p := mustResolve(t, Spec{"vllm_v1", "sha256_cbor", "0", "low64_be"})
	const budget, bs = 64 << 10, 16
	memo := NewMemoWithPrompts(1<<20, budget)
	pc := memo.prompts
	maxB := pc.maxBlocks(bs, 0)
	if per := pc.maxBlocks(bs, 0) * (4*bs + promptStateSize); per > budget/4 || per < budget/4-4*bs-promptStateSize-int(promptEntryOverhead) {
		t.Fatalf("an entry of %d blocks takes %d bytes, budget/4 = %d", maxB, per, budget/4)
	}
	var c Chain
	c.SetMemo(memo)
	long := testTokens(3 * maxB * bs)
	for range 3 {
		walkChain(t, &c, &p, long, bs, nil, nil)
		c.FlushMemoStats()
	}
	if st := memo.Stats(); st.PromptHits != uint64(maxB) || st.PromptAdmissions != 1 {
		t.Fatalf("long prompt: %+v, want %d blocks served from one entry", st, maxB)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		toks := make([]int32, (8+rng.IntN(maxB))*bs)
		for j := range toks {
			toks[j] = int32(rng.IntN(1000))
		}
		for range 2 {
			want := refChain(&p, toks, bs, nil, nil)
			if got := walkChain(t, &c, &p, toks, bs, nil, nil); !equalU64(got, want) {
				t.Fatalf("prompt %d: keys differ", i)
			}
			c.FlushMemoStats()
			if st := memo.Stats(); st.PromptBytes > budget {
				t.Fatalf("prompt %d: %d bytes stored, budget %d", i, st.PromptBytes, budget)
			}
		}
	}
	var sum int64
	for i := range pc.slots {
		if e := pc.slots[i].Load(); e != nil {
			sum += e.bytes
		}
	}
	if st := memo.Stats(); st.PromptEvictions == 0 || int64(st.PromptBytes) != sum {
		t.Fatalf("%+v: want evictions, and bytes = sum of entries (%d)", st, sum)
	}
}

// TestMemoPromptConcurrentExact: goroutines with their own chains share a
// memo whose recent-prompt level is tiny (admissions and evictions race with
// lookups) and every key stays exact; under -race this checks the
// publication protocol.
func TestMemoPromptConcurrentExact(t *testing.T) {
	memo := NewMemoWithPrompts(2*MinMemoBytes, 4096)
	concurrentWalks(t, memo, 20, 300, 12)
	if st := memo.Stats(); st.PromptHits == 0 || st.PromptEvictions == 0 || st.PromptBytes > st.PromptLimit {
		t.Fatalf("want prompt hits and evictions within the bound: %+v", st)
	}
}

// TestPromptStateSize pins the per-block size the bound is computed from.
func TestPromptStateSize(t *testing.T) {
	if got := unsafe.Sizeof(promptState{}); got != promptStateSize {
		t.Fatalf("promptState is %d bytes, want %d", got, promptStateSize)
	}
}
