package sim

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/seed-c7a81618/conductor/hash"
)

func readTestTrace(t *testing.T) []TraceRecord {
	t.Helper()
	f, err := os.Open("testdata/mooncake_conversation_trace_head200.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := ReadTrace(f, 0)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// sharedIDs is how many leading hash ids two records share.
func sharedIDs(a, b *TraceRecord) int {
	n := 0
	for n < len(a.HashIDs) && n < len(b.HashIDs) && a.HashIDs[n] == b.HashIDs[n] {
		n++
	}
	return n
}

func TestTraceExpand(t *testing.T) {
	recs := readTestTrace(t)
	if len(recs) != 200 {
		t.Fatalf("%d records, want 200", len(recs))
	}
	// First record of the file, checked by hand: input_length 6758, 14 ids.
	if r := recs[0]; r.InputLength != 6758 || len(r.HashIDs) != 14 || r.HashIDs[13] != 13 {
		t.Fatalf("record 0 = %+v", r)
	}
	for i := range recs[:20] {
		toks := recs[i].Expand()
		if len(toks) != recs[i].InputLength {
			t.Fatalf("record %d: %d tokens, want %d", i, len(toks), recs[i].InputLength)
		}
		for j, tk := range toks {
			if tk < 0 || tk >= Vocab {
				t.Fatalf("record %d token %d = %d out of [0,%d)", i, j, tk, Vocab)
			}
		}
		if !slices.Equal(toks, recs[i].Expand()) {
			t.Fatalf("record %d: expansion not deterministic", i)
		}
	}
	// Re-blocked to every engine block size, two prompts' chains agree exactly
	// on the blocks inside their shared hash-id prefix and nowhere after.
	p, err := hash.Resolve(hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256_cbor", PythonHashSeed: "0", IndexProjection: "low64_be"})
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, bs := range []int{16, 64, 128} {
		for i := 1; i < 12; i++ {
			a, b := &recs[0], &recs[i]
			ta, tb := a.Expand(), b.Expand()
			shared := min(sharedIDs(a, b)*TraceBlockTokens, len(ta), len(tb))
			ka, _ := hash.AppendChain(nil, &p, ta, bs, nil, nil)
			kb, _ := hash.AppendChain(nil, &p, tb, bs, nil, nil)
			same := 0
			for same < len(ka) && same < len(kb) && ka[same] == kb[same] {
				same++
			}
			want := shared / bs
			if want == min(len(ka), len(kb)) {
				want = min(len(ka), len(kb))
			}
			if same != want {
				t.Fatalf("B=%d records 0,%d: %d equal leading keys, want %d (shared %d tokens)", bs, i, same, want, shared)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("nothing checked")
	}
}

func TestReadTraceErrors(t *testing.T) {
	f := func(in, want string) {
		t.Helper()
		_, err := ReadTrace(strings.NewReader(in), 0)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("ReadTrace(%q) = %v, want error containing %q", in, err, want)
		}
	}
	f(`{"timestamp":0,"input_length":1025,"hash_ids":[1,2]}`, "line 1: input_length 1025")
	f("\n{\"timestamp\":0,\"input_length\":-1,\"hash_ids\":[]}", "line 2")
	f(`{"timestamp":0,"input_length":3,"hash_ids":[1]}`+"\n"+`{"hash_ids":"x"}`, "line 2")
	recs, err := ReadTrace(strings.NewReader(`{"input_length":3,"hash_ids":[1]}`+"\n"+`{"input_length":4,"hash_ids":[1]}`), 1)
	if err != nil || len(recs) != 1 || recs[0].InputLength != 3 {
		t.Fatalf("limit 1: %v %+v", err, recs)
	}
}

func TestSynthetic(t *testing.T) {
	o := SyntheticOptions{Seed: 3, SystemPrompts: 2, SystemTokens: 64, Conversations: 3, Turns: 4, TurnTokens: 16, AnswerTokens: 8}
	a, b := NewSynthetic(o), NewSynthetic(o)
	var prompts [][]int32
	for i := 0; i < 60; i++ {
		p := a.Next()
		if !slices.Equal(p, b.Next()) {
			t.Fatalf("prompt %d differs between generators with one seed", i)
		}
		prompts = append(prompts, p)
	}
	// Every prompt starts with one of the system prompts; some extend an
	// earlier prompt (a later turn of the same conversation).
	extends := 0
	for i, p := range prompts {
		if len(p) <= 64 {
			t.Fatalf("prompt %d has %d tokens, want a system prompt plus a turn", i, len(p))
		}
		if !slices.Equal(p[:64], prompts[0][:64]) && !slices.Equal(p[:64], a.sys[0]) && !slices.Equal(p[:64], a.sys[1]) {
			t.Fatalf("prompt %d does not start with a system prompt", i)
		}
		for _, q := range prompts[:i] {
			if len(q) < len(p) && slices.Equal(p[:len(q)], q) {
				extends++
				break
			}
		}
	}
	if extends < 10 {
		t.Fatalf("%d of 60 prompts extend an earlier one; multi-turn reuse missing", extends)
	}
}

func TestLRU(t *testing.T) {
	l := newLRU(3)
	l.startRequest()
	for _, k := range []uint64{1, 2, 3} {
		if ev, ok := l.add(k, nil); !ok || len(ev) != 0 {
			t.Fatalf("add %d: %v %v", k, ev, ok)
		}
	}
	// All three are pinned by the running request: nothing can be evicted.
	if _, ok := l.add(4, nil); ok {
		t.Fatal("evicted a block pinned by the running request")
	}
	l.startRequest()
	l.touch(1) // order now 1, 3, 2 (most recent first)
	ev, ok := l.add(4, nil)
	if !ok || !slices.Equal(ev, []uint64{2}) {
		t.Fatalf("add 4 evicted %v (ok %v), want [2]", ev, ok)
	}
	if got := l.keys(nil); !slices.Equal(got, []uint64{4, 1, 3}) {
		t.Fatalf("keys %v, want [4 1 3]", got)
	}
	if !l.remove(3) || l.remove(3) || l.len() != 2 || l.has(3) {
		t.Fatal("remove")
	}
	if _, ok := newLRU(0).add(1, nil); ok {
		t.Fatal("a zero-capacity pool accepted a block")
	}
}
