package sim

import (
	"strings"
	"testing"

	"github.com/seed-c7a81618/conductor/hash"
)

// truthGroup is a group whose pools tests fill by hand (publishers are bound
// but nothing is published).
func truthGroup(t *testing.T, spec hash.Spec, engines ...EngineConfig) *Group {
	t.Helper()
	g, err := NewGroup(GroupConfig{Model: "m", Profile: spec, StoreBlocks: 100, Engines: engines})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return g
}

// place puts block i of keys on the tiers named by pattern[i] for rs:
// N device, L host (cpu_local), S the shared store, D disk, - nothing.
func place(t *testing.T, g *Group, rs *rankState, keys []uint64, pattern string) {
	t.Helper()
	for i, c := range pattern {
		var l *lru
		switch c {
		case 'N':
			l = rs.tiers[tierDevice]
		case 'L':
			l = rs.tiers[tierHost]
		case 'S':
			l = g.store.pool
		case 'D':
			l = rs.tiers[tierDisk]
		case '-':
			continue
		}
		if _, ok := l.add(keys[i], nil); !ok {
			t.Fatalf("place %c", c)
		}
	}
}

var cborSpec = hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256_cbor", PythonHashSeed: "0", IndexProjection: "low64_be"}

// TestExpectReferenceExamples checks Expect against the four-tier worked
// examples of reference mooncake-conductor.md §6.3 (B=16, 4 blocks), which
// were worked out by hand upstream, not by either implementation.
func TestExpectReferenceExamples(t *testing.T) {
	prompt := make([]int32, 64)
	for i := range prompt {
		prompt[i] = int32(100 + i)
	}
	cases := []struct {
		pattern string
		want    [numTiers]int64
	}{
		{"LNSD", [numTiers]int64{0, 32, 48, 64}},
		{"SLND", [numTiers]int64{0, 0, 48, 64}},
		{"NSL-", [numTiers]int64{16, 16, 48, 48}},
		{"S-SN", [numTiers]int64{0, 0, 16, 16}},
		{"SSSS", [numTiers]int64{0, 0, 64, 64}},
		{"LLLL", [numTiers]int64{0, 64, 64, 64}},
		{"SLDS", [numTiers]int64{0, 0, 32, 64}},
		{"NDSD", [numTiers]int64{16, 16, 16, 64}},
		{"NNNN", [numTiers]int64{64, 64, 64, 64}},
		{"----", [numTiers]int64{0, 0, 0, 0}},
	}
	var a Answer
	for _, c := range cases {
		g := truthGroup(t, cborSpec, EngineConfig{ID: "e", Dialect: VLLMMap, Device: 10, Host: 10, Disk: 10})
		keys, _ := hash.AppendChain(nil, &g.profile, prompt, 16, nil, nil)
		place(t, g, g.engines[0].ranks[0], keys, c.pattern)
		if err := g.Expect(prompt, &a); err != nil {
			t.Fatal(err)
		}
		r := a.Rows[0]
		if r.Ranks[0].Tiers != c.want || r.Tiers != c.want || r.Longest != c.want[tierDisk] {
			t.Errorf("%s: got %+v, want %v", c.pattern, r, c.want)
		}
	}
}

// TestExpectRanksAndInstances: rank-owned tiers count only for their rank
// (rank 0 holds block 0, rank 1 block 1: dp {0:16, 1:0}, no fabricated
// 32-token prefix); the store counts for every rank of every instance; rows
// are sorted by instance id whatever the configuration order.
func TestExpectRanksAndInstances(t *testing.T) {
	g := truthGroup(t, cborSpec,
		EngineConfig{ID: "z", Dialect: VLLMArray, Device: 10},
		EngineConfig{ID: "a", Dialect: VLLMMap, Ranks: 2, Device: 10})
	prompt := make([]int32, 48)
	for i := range prompt {
		prompt[i] = int32(7 * i)
	}
	keys, _ := hash.AppendChain(nil, &g.profile, prompt, 16, nil, nil)
	a0, a1 := g.engines[0].ranks[0], g.engines[0].ranks[1]
	place(t, g, a0, keys, "N--")
	place(t, g, a1, keys, "-N-")
	place(t, g, a0, keys, "--S")
	var a Answer
	if err := g.Expect(prompt, &a); err != nil {
		t.Fatal(err)
	}
	want := Answer{Rows: []Row{
		{Instance: "a", Longest: 16, Tiers: [numTiers]int64{16, 16, 16, 16}, Ranks: []RankRow{
			{Rank: 0, Tiers: [numTiers]int64{16, 16, 16, 16}}, {Rank: 1, Tiers: [numTiers]int64{0, 0, 0, 0}}}},
		{Instance: "z", Longest: 0, Ranks: []RankRow{{Rank: 0}}},
	}}
	if d := Diff(&want, &a); d != "" {
		t.Fatal(d)
	}
	// With block 1 also in the store, rank 0 reaches all three blocks
	// (device, then the store twice); rank 1 still misses block 0.
	place(t, g, a0, keys, "-S-")
	_ = g.Expect(prompt, &a)
	want.Rows[0] = Row{Instance: "a", Longest: 48, Tiers: [numTiers]int64{16, 16, 48, 48}, Ranks: []RankRow{
		{Rank: 0, Tiers: [numTiers]int64{16, 16, 48, 48}}, {Rank: 1}}}
	want.Rows[1] = Row{Instance: "z", Longest: 0, Tiers: [numTiers]int64{0, 0, 0, 0}, Ranks: []RankRow{{Rank: 0}}}
	if d := Diff(&want, &a); d != "" {
		t.Fatal(d)
	}
}

// TestExpectSGLangPartialBlock: the sglang chain includes a final partial
// block and a hit on it counts only the prompt's tokens (40 tokens, B=16, all
// three blocks on device → 40).
func TestExpectSGLangPartialBlock(t *testing.T) {
	spec := hash.Spec{Strategy: "sglang", Algorithm: "sha256_raw", PythonHashSeed: "0", IndexProjection: "first64_be"}
	g := truthGroup(t, spec, EngineConfig{ID: "s", Dialect: SGLangMap, Device: 10})
	prompt := make([]int32, 40)
	for i := range prompt {
		prompt[i] = int32(i + 1)
	}
	keys, _ := hash.AppendChain(nil, &g.profile, prompt, 16, nil, nil)
	if len(keys) != 3 {
		t.Fatalf("%d keys, want 3", len(keys))
	}
	rs := g.engines[0].ranks[0]
	place(t, g, rs, keys, "NN-")
	var a Answer
	_ = g.Expect(prompt, &a)
	if got := a.Rows[0].Tiers; got != [numTiers]int64{32, 32, 32, 32} {
		t.Fatalf("two complete blocks: %v", got)
	}
	place(t, g, rs, keys, "--N")
	_ = g.Expect(prompt, &a)
	if got := a.Rows[0].Tiers; got != [numTiers]int64{40, 40, 40, 40} {
		t.Fatalf("with the partial block: %v", got)
	}
}

func TestDiff(t *testing.T) {
	base := func() *Answer {
		return &Answer{Rows: []Row{{Instance: "a", Longest: 32, Tiers: [numTiers]int64{16, 32, 32, 32},
			Ranks: []RankRow{{Rank: 0, Tiers: [numTiers]int64{16, 32, 32, 32}}}}}}
	}
	if d := Diff(base(), base()); d != "" {
		t.Fatalf("equal answers differ: %s", d)
	}
	f := func(mut func(a *Answer), want string) {
		t.Helper()
		got := base()
		mut(got)
		if d := Diff(base(), got); !strings.Contains(d, want) {
			t.Fatalf("diff %q, want it to mention %q", d, want)
		}
	}
	f(func(a *Answer) { a.Rows[0].Ranks[0].Tiers[tierHost] = 16 }, "instance a rank 0")
	f(func(a *Answer) { a.Rows[0].Longest = 48 }, "longest 48")
	f(func(a *Answer) { a.Rows[0].Ranks = append(a.Rows[0].Ranks, RankRow{Rank: 1}) }, "2 ranks, want 1")
	f(func(a *Answer) { a.Rows[0].Instance = "b" }, "instance a: missing")
	f(func(a *Answer) { a.Rows = append(a.Rows, Row{Instance: "c"}) }, "instance c: unexpected")
}
