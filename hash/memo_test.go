package hash

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/zeebo/xxh3"
)

// memoProfiles are the profiles the memo serves, with seed texts that differ
// only in ways the root digest captures ("0" vs "00").
func memoProfiles(t testing.TB) []Profile {
	return []Profile{
		mustResolve(t, Spec{"vllm_v1", "sha256_cbor", "0", "low64_be"}),
		mustResolve(t, Spec{"vllm_v1", "sha256_cbor", "00", "low64_be"}),
		mustResolve(t, Spec{"vllm_v1", "sha256_cbor", "random", "low64_be"}),
		mustResolve(t, Spec{"vllm_v1", "sha256", "0", "low64_be"}),
		mustResolve(t, Spec{"vllm_v1", "sha256", "7", "low64_be"}),
		mustResolve(t, Spec{"sglang", "sha256_raw", "0", "first64_be"}),
		mustResolve(t, Spec{"sglang_bigram", "sha256_raw", "0", "first64_be"}),
	}
}

// refChain is an independent, eager reference: stdlib SHA-256 (or XXH3-128 in
// canonical order) over the byte layouts of the package doc, built block by
// block with no Chain and no memo.
func refChain(p *Profile, tokens []int32, bs int, lora, salt []byte) []uint64 {
	var keys []uint64
	switch p.Strategy {
	case StrategyVLLMv1:
		enc, h := AppendCBORBlock, sha256Digest
		switch p.Algorithm {
		case AlgoSHA256Pickle:
			enc = AppendPickleBlock
		case AlgoXXHashCBOR:
			h = xxh128Digest
		case AlgoXXHashPickle:
			enc, h = AppendPickleBlock, xxh128Digest
		}
		parent := p.RootDigest[:p.Algorithm.DigestSize()]
		for i := 0; (i+1)*bs <= len(tokens); i++ {
			parent = h(enc(nil, parent, tokens[i*bs:(i+1)*bs], vllmExtras(i, lora, salt)))
			keys = append(keys, binary.BigEndian.Uint64(parent[len(parent)-8:]))
		}
	case StrategySGLang, StrategySGLangBigram:
		var units [][]int32 // per logical position: the tokens it hashes
		if p.Strategy == StrategySGLang {
			for i := range tokens {
				units = append(units, tokens[i:i+1])
			}
		} else {
			for i := 0; i+1 < len(tokens); i++ {
				units = append(units, tokens[i:i+2])
			}
		}
		var parent []byte
		if len(salt) > 0 {
			root := sha256.Sum256(append([]byte("sglang-cache-salt-v1\x00"), salt...))
			parent = root[:]
		}
		for start := 0; start < len(units); start += bs {
			msg := slices.Clone(parent)
			for _, u := range units[start:min(start+bs, len(units))] {
				for _, tok := range u {
					msg = binary.LittleEndian.AppendUint32(msg, uint32(tok))
				}
			}
			d := sha256.Sum256(msg)
			parent = d[:]
			keys = append(keys, binary.BigEndian.Uint64(d[:8]))
		}
	}
	return keys
}

// walkChain returns every key of the prompt through c (memo set by the caller).
func walkChain(t testing.TB, c *Chain, p *Profile, tokens []int32, bs int, lora, salt []byte) []uint64 {
	t.Helper()
	if err := c.Reset(p, tokens, bs, lora, salt); err != nil {
		t.Fatal(err)
	}
	keys := make([]uint64, c.Blocks())
	for i := range keys {
		keys[i] = c.At(i)
	}
	return keys
}

// memoCase is one random query: prompts come from a few shared bases, cut at
// random (partial blocks included), so namespaces collide on equal tokens and
// prefixes repeat.
type memoCase struct {
	p          *Profile
	bs         int
	tokens     []int32
	lora, salt []byte
}

func randomMemoCases(t testing.TB, rng *rand.Rand, n int) []memoCase {
	// The xxhash profiles are not served (memoServes) but share the memo.
	profiles := append(memoProfiles(t),
		mustResolve(t, Spec{"vllm_v1", "xxhash_cbor", "0", "low64_be"}),
		mustResolve(t, Spec{"vllm_v1", "xxhash", "0", "low64_be"}))
	bases := make([][]int32, 8)
	for i := range bases {
		bases[i] = make([]int32, 200)
		for j := range bases[i] {
			bases[i][j] = int32(rng.IntN(70000))
		}
		switch {
		case i >= 3: // the first base with one token changed: a memo key
			// that left out any block's tokens would serve the first
			// base's digest for it
			copy(bases[i], bases[0])
			bases[i][rng.IntN(len(bases[i]))] = int32(rng.IntN(70000))
		case i > 0: // bases share leading runs of different lengths
			copy(bases[i], bases[0][:rng.IntN(100)])
		}
	}
	loras := [][]byte{nil, []byte("adapter-a"), []byte("adapter-b")}
	salts := [][]byte{nil, []byte("s1"), []byte("s2")}
	sizes := []int{1, 2, 3, 16}
	cases := make([]memoCase, n)
	for i := range cases {
		base := bases[rng.IntN(len(bases))]
		cases[i] = memoCase{
			p:      &profiles[rng.IntN(len(profiles))],
			bs:     sizes[rng.IntN(len(sizes))],
			tokens: base[:rng.IntN(len(base)+1)],
			lora:   loras[rng.IntN(len(loras))],
			salt:   salts[rng.IntN(len(salts))],
		}
	}
	return cases
}

// TestMemoDifferential: over random profiles, seeds, block sizes, LoRAs, salts
// and prompt lengths (partial blocks included), a chain with a shared memo, a
// chain without one and the independent reference agree on every key, while
// the memo does serve hits. Any memo key field left out (salt, LoRA, seed text,
// strategy, block size) would return another namespace's digest for equal tokens.
func TestMemoDifferential(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	forEachBackend(t, func(t *testing.T) {
		memo := NewMemo(1 << 20)
		var on, off Chain
		on.SetMemo(memo)
		for i, tc := range randomMemoCases(t, rng, 600) {
			want := refChain(tc.p, tc.tokens, tc.bs, tc.lora, tc.salt)
			gotOff := walkChain(t, &off, tc.p, tc.tokens, tc.bs, tc.lora, tc.salt)
			gotOn := walkChain(t, &on, tc.p, tc.tokens, tc.bs, tc.lora, tc.salt)
			if !equalU64(gotOff, want) || !equalU64(gotOn, want) {
				t.Fatalf("case %d %v bs=%d len=%d lora=%q salt=%q:\nref %x\noff %x\non  %x",
					i, tc.p.Spec, tc.bs, len(tc.tokens), tc.lora, tc.salt, want, gotOff, gotOn)
			}
		}
		on.FlushMemoStats()
		st := memo.Stats()
		if st.Hits == 0 || st.Misses == 0 {
			t.Fatalf("memo not exercised: %+v", st)
		}
		t.Logf("%+v", st)
	})
}

// TestMemoRepeatIsAllHits: a repeated prompt is answered from the memo for
// every block, with the same keys; xxh3 and the xxhash algorithms never touch
// the memo.
func TestMemoRepeatIsAllHits(t *testing.T) {
	tokens := testTokens(40*16 + 7)
	for _, p := range allProfiles(t) {
		memo := NewMemo(1 << 20)
		var c Chain
		c.SetMemo(memo)
		first := walkChain(t, &c, &p, tokens, 16, []byte("l"), []byte("s"))
		c.FlushMemoStats()
		s1 := memo.Stats()
		second := walkChain(t, &c, &p, tokens, 16, []byte("l"), []byte("s"))
		c.FlushMemoStats()
		s2 := memo.Stats()
		if !equalU64(first, second) {
			t.Fatalf("%v: keys differ between cold and warm walks", p.Spec)
		}
		if !memoServes(&p) {
			if s2 != (MemoStats{Slots: s2.Slots, Bytes: s2.Bytes}) {
				t.Fatalf("%v used the memo: %+v", p.Spec, s2)
			}
			continue
		}
		n := uint64(len(first))
		if s1.Hits != 0 || s1.Misses != n || s2.Hits != n || s2.Misses != n {
			t.Fatalf("%v: %d blocks: cold %+v warm %+v", p.Spec, n, s1, s2)
		}
	}
}

// TestMemoEvictionExact: a one-bucket memo (4 digests) under many distinct
// prompts evicts constantly and never returns a wrong digest.
func TestMemoEvictionExact(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	memo := NewMemo(MinMemoBytes)
	if st := memo.Stats(); st.Slots != memoWays || st.Bytes != MinMemoBytes {
		t.Fatalf("tiny memo: %+v", st)
	}
	var c Chain
	c.SetMemo(memo)
	cases := randomMemoCases(t, rng, 100)
	for round := 0; round < 3; round++ {
		for i, tc := range cases {
			want := refChain(tc.p, tc.tokens, tc.bs, tc.lora, tc.salt)
			if got := walkChain(t, &c, tc.p, tc.tokens, tc.bs, tc.lora, tc.salt); !equalU64(got, want) {
				t.Fatalf("round %d case %d %v: got %x want %x", round, i, tc.p.Spec, got, want)
			}
		}
	}
	c.FlushMemoStats()
	st := memo.Stats()
	if st.Evictions == 0 || st.Hits == 0 {
		t.Fatalf("want evictions and hits: %+v", st)
	}
	t.Logf("%+v", st)
}

// TestMemoConcurrentExact: goroutines with their own chains share a tiny memo
// (constant overwrites while others read) and every key stays exact. Run under
// -race this also checks the seqlock protocol is free of data races.
func TestMemoConcurrentExact(t *testing.T) {
	memo := NewMemo(2 * MinMemoBytes)
	concurrentWalks(t, memo, 40, 150, 3)
	if st := memo.Stats(); st.Hits == 0 || st.Evictions == 0 {
		t.Fatalf("want hits and evictions: %+v", st)
	}
}

// concurrentWalks has 4 goroutines, each with its own chain on memo, walk
// iters random prompts of n random cases in full and checks every key
// against the reference (stream picks the seeded random streams).
func concurrentWalks(t *testing.T, memo *Memo, n, iters int, stream uint64) {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, stream))
	cases := randomMemoCases(t, rng, n)
	want := make([][]uint64, len(cases))
	for i, tc := range cases {
		want[i] = refChain(tc.p, tc.tokens, tc.bs, tc.lora, tc.salt)
	}
	const workers = 4
	var wg sync.WaitGroup
	errs := make(chan string, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, stream*100+uint64(w)))
			var c Chain
			c.SetMemo(memo)
			for range iters {
				i := r.IntN(len(cases))
				tc := cases[i]
				if err := c.Reset(tc.p, tc.tokens, tc.bs, tc.lora, tc.salt); err != nil {
					errs <- err.Error()
					return
				}
				for b := 0; b < c.Blocks(); b++ {
					if k := c.At(b); k != want[i][b] {
						errs <- fmt.Sprintf("case %d block %d: wrong key", i, b)
						return
					}
				}
			}
			c.FlushMemoStats()
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}

// TestMemoSlotProtocol drives get and put on one bucket directly: a slot being
// written (odd seq) or holding another key is a miss; an existing key is not
// re-inserted; a full bucket evicts the hinted way.
func TestMemoSlotProtocol(t *testing.T) {
	m := newMemoSeed(MinMemoBytes, 1)
	d := func(b byte) *[32]byte {
		var v [32]byte
		for i := range v {
			v[i] = b + byte(i)
		}
		return &v
	}
	k := func(i uint64) xxh3.Uint128 { return xxh3.Uint128{Lo: i << 8, Hi: i} } // all in bucket 0
	get := func(k xxh3.Uint128) ([32]byte, bool) {
		dst := *d(200) // a miss must leave it untouched
		ok := m.get(k, &dst)
		if !ok && dst != *d(200) {
			t.Fatalf("miss on %v wrote the destination", k)
		}
		return dst, ok
	}
	if _, ok := get(k(1)); ok {
		t.Fatal("empty memo hit")
	}
	if _, ok := get(xxh3.Uint128{}); ok {
		t.Fatal("zero key matched an empty slot")
	}
	for i := uint64(1); i <= memoWays; i++ {
		if m.put(k(i), d(byte(i)), 0) {
			t.Fatalf("put %d evicted from a bucket with room", i)
		}
	}
	for i := uint64(1); i <= memoWays; i++ {
		got, ok := get(k(i))
		if !ok || got != *d(byte(i)) {
			t.Fatalf("get %d: %v %x", i, ok, got)
		}
	}
	if m.put(k(2), d(99), 0) {
		t.Fatal("re-put of a present key evicted")
	}
	if got, _ := get(k(2)); got != *d(2) {
		t.Fatal("re-put replaced the value")
	}
	// Way 2 holds k(3); hint 2 evicts it.
	if !m.put(k(9), d(9), 2) {
		t.Fatal("full bucket did not evict")
	}
	if _, ok := get(k(3)); ok {
		t.Fatal("evicted key still present")
	}
	if got, ok := get(k(9)); !ok || got != *d(9) {
		t.Fatal("new key missing")
	}
	// A slot mid-write is invisible, and put leaves it alone.
	s := &m.slots[0]
	seq := s.seq.Load()
	s.seq.Store(seq + 1)
	if _, ok := get(k(1)); ok {
		t.Fatal("hit on a slot being written")
	}
	if m.put(k(10), d(10), 0); s.k[0].Load() != k(1).Lo {
		t.Fatal("put overwrote a slot being written")
	}
	s.seq.Store(seq + 2)
	if got, ok := get(k(1)); !ok || got != *d(1) {
		t.Fatal("slot not readable after the write completed")
	}
}

// TestNewMemoBound: the table never exceeds the byte bound, rounds down to a
// power of two buckets, and a non-positive bound means off (nil).
func TestNewMemoBound(t *testing.T) {
	f := func(maxBytes, wantBytes int) {
		t.Helper()
		m := NewMemo(maxBytes)
		if wantBytes == 0 {
			if m != nil {
				t.Fatalf("NewMemo(%d) = %+v, want nil", maxBytes, m.Stats())
			}
			return
		}
		if st := m.Stats(); st.Bytes != wantBytes || st.Slots*memoSlotSize != wantBytes {
			t.Fatalf("NewMemo(%d): %+v, want %d bytes", maxBytes, st, wantBytes)
		}
	}
	f(0, 0)
	f(-1, 0)
	f(1, MinMemoBytes)
	f(MinMemoBytes, MinMemoBytes)
	f(3*MinMemoBytes, 2*MinMemoBytes)
	f(1000_000, 2048*MinMemoBytes) // 3906 buckets round down to 2048
	f(DefaultMemoBytes, DefaultMemoBytes)
	var nilMemo *Memo
	if nilMemo.Stats() != (MemoStats{}) {
		t.Fatal("nil memo stats")
	}
}

// TestMemoSlotIsOneCacheLine pins the slot layout the memory bound is computed from.
func TestMemoSlotIsOneCacheLine(t *testing.T) {
	if got := unsafe.Sizeof(memoSlot{}); got != memoSlotSize {
		t.Fatalf("slot size %d, want %d", got, memoSlotSize)
	}
	if got := unsafe.Sizeof(paddedCounter{}); got != 64 {
		t.Fatalf("counter size %d, want 64", got)
	}
}

// TestChainHugeBlockSize: a block size far beyond the prompt (any positive
// int64 is a valid registration) gives one partial block under the sglang
// strategies, hashed with scratch sized by the prompt, not by the block size
// (sized by the block size, it would ask for terabytes), memo on or off.
func TestChainHugeBlockSize(t *testing.T) {
	tokens := testTokens(10)
	for _, sp := range []Spec{{"sglang", "sha256_raw", "0", "first64_be"}, {"sglang_bigram", "sha256_raw", "0", "first64_be"}} {
		p := mustResolve(t, sp)
		for _, bs := range []int{1 << 40, 1<<62 + 3} {
			want := refChain(&p, tokens, bs, nil, []byte("s"))
			for _, memo := range []*Memo{nil, NewMemo(1 << 16), NewMemoWithPrompts(1<<16, 1<<16)} {
				var c Chain
				c.SetMemo(memo)
				got := walkChain(t, &c, &p, tokens, bs, nil, []byte("s"))
				if len(want) != 1 || !equalU64(got, want) || cap(c.buf) > 1<<12 {
					t.Fatalf("%v bs=%d memo=%v: got %x want %x (scratch %d B)", sp.Strategy, bs, memo != nil, got, want, cap(c.buf))
				}
			}
		}
	}
}

// TestMemoRoll16 checks memoRoll16 against xxh3.Hash128Seed over the built
// 80-byte input (the definition of the memo key) for random keys, tokens and
// seeds, including negative tokens and the seed edges.
func TestMemoRoll16(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 9))
	var toks [16]int32
	buf := make([]byte, 80)
	for i := range 5000 {
		s := r.Uint64()
		switch i {
		case 0:
			s = 0
		case 1:
			s = ^uint64(0)
		}
		m := newMemoSeed(MinMemoBytes, s)
		prev := xxh3.Uint128{Lo: r.Uint64(), Hi: r.Uint64()}
		for j := range toks {
			toks[j] = int32(r.Uint32())
		}
		binary.LittleEndian.PutUint64(buf[0:], prev.Lo)
		binary.LittleEndian.PutUint64(buf[8:], prev.Hi)
		for j, tk := range toks {
			binary.LittleEndian.PutUint32(buf[16+4*j:], uint32(tk))
		}
		if got, want := memoRoll16(m, prev, &toks), xxh3.Hash128Seed(buf, s); got != want {
			t.Fatalf("seed %#x: memoRoll16 %x, want %x", s, got, want)
		}
		if got := memoRoll(nil, m, prev, toks[:]); got != xxh3.Hash128Seed(buf, s) {
			t.Fatal("memoRoll does not take the 16-token path consistently")
		}
	}
}

// TestMemoSlotLayout pins the word offsets memofill_amd64.s stores to.
func TestMemoSlotLayout(t *testing.T) {
	var s memoSlot
	base := uintptr(unsafe.Pointer(&s))
	got := []uintptr{uintptr(unsafe.Pointer(&s.seq)) - base, uintptr(unsafe.Pointer(&s.k[0])) - base,
		uintptr(unsafe.Pointer(&s.k[1])) - base, uintptr(unsafe.Pointer(&s.d[0])) - base,
		uintptr(unsafe.Pointer(&s.d[3])) - base, unsafe.Sizeof(s)}
	want := []uintptr{0, 8, 16, 24, 48, memoSlotSize}
	if !slices.Equal(got, want) {
		t.Fatalf("memoSlot offsets (seq, k0, k1, d0, d3, size) = %v, want %v", got, want)
	}
	memoFill(&s, 1, 2, 3, 4, 5, 6, 8)
	if s.seq.Load() != 8 || s.k[0].Load() != 1 || s.k[1].Load() != 2 || s.d[0].Load() != 3 || s.d[3].Load() != 6 {
		t.Fatalf("memoFill stored %+v", &s)
	}
}

// TestMemoAheadKeys: after each block of a walk, the keys computed ahead
// (memoAhead) are those of the next min(memoAheadBlocks, blocks left)
// blocks, each the rolling key over every block's tokens up to it, computed
// here one block at a time from the prompt's tag.
func TestMemoAheadKeys(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	tokens := make([]int32, 301)
	for i := range tokens {
		tokens[i] = int32(rng.IntN(70000))
	}
	for _, p := range memoProfiles(t) {
		for _, bs := range []int{1, 3, 16} {
			var c Chain
			c.SetMemo(NewMemo(1 << 20))
			if err := c.Reset(&p, tokens, bs, nil, nil); err != nil {
				t.Fatal(err)
			}
			want := make([]xxh3.Uint128, c.Blocks())
			k := c.mKey // the tag
			buf := make([]byte, 0, 16+4*(bs+2))
			for j := range want {
				k = memoRoll(buf[:cap(buf)], c.memo, k, c.memoTokens(j))
				want[j] = k
			}
			for i := range c.Blocks() {
				c.At(i)
				if c.mKey != want[i] {
					t.Fatalf("%v bs=%d block %d: key %x, want %x", p.Spec, bs, i, c.mKey, want[i])
				}
				if n := min(memoAheadBlocks, c.Blocks()-i-1); c.mN != n || n > 0 && c.mAt != i+1 {
					t.Fatalf("%v bs=%d after block %d: %d keys ahead from block %d, want %d from %d", p.Spec, bs, i, c.mN, c.mAt, n, i+1)
				}
				for j := range c.mN {
					if got := c.mAhead[(c.mHead+j)&(memoAheadBlocks-1)]; got != want[c.mAt+j] {
						t.Fatalf("%v bs=%d after block %d: key ahead of block %d %x, want %x", p.Spec, bs, i, c.mAt+j, got, want[c.mAt+j])
					}
				}
			}
		}
	}
}
