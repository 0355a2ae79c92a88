//go:build !race

package core

import (
	"testing"

	"github.com/seed-c7a81618/conductor/hash"
)

// TestQueryAllocs proves the query hot path allocates nothing in steady
// state, by tokens (lazy sha256_cbor chain) and by hashes, over several
// instances and ranks.
func TestQueryAllocs(t *testing.T) {
	t.Run("memo=off", func(t *testing.T) { testQueryAllocs(t, nil) })
	t.Run("memo=on", func(t *testing.T) { testQueryAllocs(t, hash.NewMemo(1<<20)) })
	t.Run("memo=prompts", func(t *testing.T) {
		m := hash.NewMemoWithPrompts(1<<20, 1<<20)
		testQueryAllocs(t, m)
		if st := m.Stats(); st.PromptHits == 0 {
			t.Fatalf("the repeated query was never served from a recent prompt: %+v", st)
		}
	})
}

func testQueryAllocs(t *testing.T, memo *hash.Memo) {
	ix := New(Options{HashMemo: memo})
	p := cborProfile(t)
	tokens := make([]int32, 64*testBS)
	for i := range tokens {
		tokens[i] = int32(i)
	}
	keys, err := hash.AppendChain(nil, &p, tokens, testBS, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ {
		s := mustRegister(t, ix, engineReg(t, string(rune('a'+i)), int32(i%2), p))
		s.Apply(stored("GPU", keys[:8*(i+1)]...))
	}
	res := &QueryResult{}
	byTokens := &QueryRequest{Model: "m", BlockSize: testBS, Tokens: tokens}
	byHash := &QueryRequest{Model: "m", BlockSize: testBS, Hashes: keys, ByHash: true}
	for _, req := range []*QueryRequest{byTokens, byHash} {
		// Warm up the reused buffers (and, with recent prompts, store the
		// prompt: AllocsPerRun's own warm-up run is its second sight).
		_ = ix.Query(req, res)
		if n := testing.AllocsPerRun(100, func() { _ = ix.Query(req, res) }); n != 0 {
			t.Fatalf("ByHash=%v: %v allocs per query", req.ByHash, n)
		}
		if row(res, "h").Device != 64*testBS {
			t.Fatalf("unexpected result %+v", res.Instances)
		}
	}
}

// TestSaltedQueryAllocs: the xxh3 query in a salt namespace (plain chain,
// namespace mix per block) allocates nothing in steady state either.
func TestSaltedQueryAllocs(t *testing.T) {
	ix := New(Options{})
	s := mustRegister(t, ix, stdReg("a", "", "w8a8"))
	tokens := nsTokens(32 * testBS)
	std := plainChain(tokens, testBS, 1337)
	s.Apply(stored("gpu", std...))
	res := &QueryResult{}
	salt := []byte("w8a8")
	for _, req := range []*QueryRequest{
		{Model: "m", BlockSize: testBS, Tokens: tokens, CacheSalt: salt, PerMedium: true},
		{Model: "m", BlockSize: testBS, Hashes: std, ByHash: true, CacheSalt: salt, PerMedium: true},
	} {
		_ = ix.Query(req, res)
		if r := row(res, "a"); r == nil || r.Device != 32*testBS {
			t.Fatalf("ByHash=%v: %+v", req.ByHash, res.Instances)
		}
		if n := testing.AllocsPerRun(100, func() { _ = ix.Query(req, res) }); n != 0 {
			t.Fatalf("ByHash=%v: %v allocs per salted query", req.ByHash, n)
		}
	}
}

// TestPartitionedQueryAllocs: a context split into two partitions (two
// identities, two profiles, one instance id in both) is answered, both walks
// and the merge of rows included, without allocating in steady state.
func TestPartitionedQueryAllocs(t *testing.T) {
	profs := testProfiles(t)
	ix := New(Options{})
	tokens := nsTokens(64 * testBS)
	var cborKeys []uint64
	for i, side := range []struct{ owner, prof string }{{"a", "pickle"}, {"b", "cbor"}} {
		p := profs[side.prof]
		keys, err := hash.AppendChain(nil, &p, tokens, testBS, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		cborKeys = keys
		for j, inst := range []string{side.owner + "0", "x"} {
			r := partReg(profs, side.owner, inst, side.prof, false)
			r.DPRank = int32(i) // x: rank 0 under pickle, rank 1 under cbor
			r.Endpoint += "/" + side.prof
			mustRegister(t, ix, r).Apply(stored("GPU", keys[:8*(j+1)]...))
		}
	}
	res := &QueryResult{}
	for _, req := range []*QueryRequest{
		{Model: "m", BlockSize: testBS, Tokens: tokens, PerMedium: true},
		{Model: "m", BlockSize: testBS, Hashes: cborKeys, ByHash: true},
	} {
		_ = ix.Query(req, res)
		if n := testing.AllocsPerRun(100, func() { _ = ix.Query(req, res) }); n != 0 {
			t.Fatalf("ByHash=%v: %v allocs per query over two partitions", req.ByHash, n)
		}
		if x := row(res, "x"); len(res.Instances) != 3 || x == nil || len(x.Ranks) != 2 || x.Device != 16*testBS {
			t.Fatalf("ByHash=%v: %+v", req.ByHash, res.Instances)
		}
	}
}
