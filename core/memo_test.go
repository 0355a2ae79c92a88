package core

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/hash"
)

// TestQueryMemoMatchesNoMemo: the same registrations and events in an index
// without a memo, one with a roomy memo, one with a one-bucket memo (constant
// eviction), and two with recent prompts (roomy; tiny, over a one-bucket
// table, so that entries hold only their leading blocks; eviction is
// hash.TestMemoPromptDifferential's) give identical query results over random prompts that share
// prefixes, with and without cache salts, for vllm_v1 and sglang profiles.
func TestQueryMemoMatchesNoMemo(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	memo, tiny := hash.NewMemo(1<<20), hash.NewMemo(hash.MinMemoBytes)
	prompts, tinyPrompts := hash.NewMemoWithPrompts(1<<20, 1<<20), hash.NewMemoWithPrompts(hash.MinMemoBytes, 4096)
	idx := []*Index{New(Options{}), New(Options{HashMemo: memo}), New(Options{HashMemo: tiny}),
		New(Options{HashMemo: prompts}), New(Options{HashMemo: tinyPrompts})}
	sg, err := hash.Resolve(hash.Spec{Strategy: "sglang", Algorithm: "sha256_raw", PythonHashSeed: "0", IndexProjection: "first64_be"})
	if err != nil {
		t.Fatal(err)
	}
	profiles := map[string]hash.Profile{"m": cborProfile(t), "s": sg}
	base := make([]int32, 40*testBS+5)
	for i := range base {
		base[i] = int32(rng.IntN(50000))
	}
	for model, p := range profiles {
		// Instance <model>a holds the first 30 blocks of base, <model>b the first 10.
		keys, err := hash.AppendChain(nil, &p, base, testBS, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, ix := range idx {
			for inst, n := range map[string]int{"a": 30, "b": 10} {
				r := engineReg(t, model+inst, 0, p)
				r.ModelName = model
				mustRegister(t, ix, r).Apply(stored("GPU", keys[:n]...))
			}
		}
	}
	res := make([]QueryResult, len(idx))
	hits := 0
	var req QueryRequest
	for q := 0; q < 300; q++ {
		if q == 0 || rng.IntN(3) != 0 { // else repeat the last query (recent prompts store repeats)
			tokens := append([]int32(nil), base[:rng.IntN(len(base)+1)]...)
			if len(tokens) > 0 && rng.IntN(4) == 0 { // diverge somewhere
				tokens[rng.IntN(len(tokens))]++
			}
			req = QueryRequest{Model: []string{"m", "s"}[rng.IntN(2)], BlockSize: testBS, Tokens: tokens}
			if rng.IntN(3) == 0 {
				req.CacheSalt = []byte("salt")
			}
		}
		for i, ix := range idx {
			if err := ix.Query(&req, &res[i]); err != nil {
				t.Fatal(err)
			}
		}
		for _, r := range res[0].Instances {
			if r.LongestMatched > 0 {
				hits++
			}
		}
		for i := 1; i < len(idx); i++ {
			if !reflect.DeepEqual(res[0].Instances, res[i].Instances) {
				t.Fatalf("query %d (%s, %d tokens, salt %q): index %d differs:\n%+v\n%+v",
					q, req.Model, len(req.Tokens), req.CacheSalt, i, res[0].Instances, res[i].Instances)
			}
		}
	}
	if hits == 0 {
		t.Fatal("no query matched anything: the comparison is vacuous")
	}
	for _, m := range []*hash.Memo{memo, tiny, prompts, tinyPrompts} {
		if st := m.Stats(); st.Hits == 0 || st.Misses == 0 {
			t.Fatalf("memo not exercised: %+v", st)
		}
	}
	for _, m := range []*hash.Memo{prompts, tinyPrompts} {
		if st := m.Stats(); st.PromptHits == 0 || st.PromptAdmissions == 0 {
			t.Fatalf("recent prompts not exercised: %+v", st)
		}
	}
	if tiny.Stats().Evictions == 0 {
		t.Fatalf("tiny memo never evicted: %+v", tiny.Stats())
	}
}
