package dynamo

import (
	"bytes"
	"testing"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/wire/dump"
)

// loraStore is a vLLM BlockStored of hashes over tokens naming adapter lora.
func loraStore(lora string, hashes []uint64, tokens []int32) *core.Batch {
	b := engineStore("", 16, hashes, 0, false, tokens)
	b.Events[0].LoraName = []byte(lora)
	return b
}

// TestDynamoLoraQuery: a worker's stored event naming adapter A is found by
// a /query with lora_name A, and only by it: the base model's /query,
// /query_by_hash (which takes no lora_name) and adapter B's /query do not
// see it. BlockRemoved names no adapter and still removes it.
func TestDynamoLoraQuery(t *testing.T) {
	e := startDyn(t, Options{})
	s := registerDyn(t, e, 2, 0, 16, "llama", "")
	toks := seqTokens(64, 0)
	apply(t, s, loraStore("A", []uint64{0xA1, 0xA2, 0xA3, 0xA4}, toks))

	q := func(lora string) response {
		t.Helper()
		body := `{"token_ids":` + jsonEnc(toks) + `,"model_name":"llama"`
		if lora != "" {
			body += `,"lora_name":"` + lora + `"`
		}
		return e.do(t, "POST", "/query", body+"}")
	}
	hit := `{"scores":{"2":{"0":64}},"frequencies":[1,1,1,1],"instances":{"2":{"longest_matched":64,"gpu":64,"dp":{"0":64},"cpu":64,"disk":64}}}`
	zero := `{"scores":{"2":{"0":0}},"frequencies":[],"instances":{"2":{"longest_matched":0,"gpu":0,"dp":{"0":0},"cpu":0,"disk":0}}}`
	none := `{"scores":{},"frequencies":[],"instances":{}}`
	wantResp(t, q("A"), 200, hit)
	wantResp(t, q(""), 200, zero)
	r := q("B")
	wantResp(t, r, 200, none)
	if r.miss != "unknown_lora" {
		t.Fatalf("adapter B: miss header %q, want unknown_lora", r.miss)
	}
	// /query_by_hash has no lora_name: it is ignored, the base model answers.
	wantResp(t, e.do(t, "POST", "/query_by_hash", `{"block_hashes":`+jsonEnc(localHashes(toks, 16))+`,"model_name":"llama","lora_name":"A"}`), 200, zero)

	apply(t, s, engineRemove("", 0xA3, 0xA4))
	wantResp(t, q("A"), 200, `{"scores":{"2":{"0":32}},"frequencies":[1,1],"instances":{"2":{"longest_matched":32,"gpu":32,"dp":{"0":32},"cpu":32,"disk":32}}}`)
	apply(t, s, engineRemove("", 0xA1, 0xA2))
	wantResp(t, q("A"), 200, zero)
	if got := e.ix.TierBlocks(); got != [core.NumTiers]int{} {
		t.Fatalf("holdings after store-then-remove: %v", got)
	}

	apply(t, s, loraStore("A", []uint64{0xA1}, toks[:16]))
	wantResp(t, e.do(t, "POST", "/unregister", `{"instance_id": 2, "model_name": "llama"}`), 200, `{"status":"ok"}`)
	wantResp(t, q("A"), 404, "") // the indexer went with its last worker
	if got := e.ix.TierBlocks(); got != [core.NumTiers]int{} {
		t.Fatalf("holdings after unregister: %v", got)
	}
}

// TestDynamoLoraWarmRestart: the main-form dump (what a state-directory
// snapshot holds) keeps a worker's adapter blocks: an index whose worker is
// registered again on this surface restores them into the adapter's
// context, and a later remove without lora_name still reaches them.
func TestDynamoLoraWarmRestart(t *testing.T) {
	a := startDyn(t, Options{})
	s := registerDyn(t, a, 2, 0, 16, "llama", "")
	toks := seqTokens(64, 0)
	apply(t, s, loraStore("A", []uint64{0xA1, 0xA2, 0xA3, 0xA4}, toks))
	apply(t, s, engineStore("", 16, []uint64{0xB1}, 0, false, seqTokens(16, 500)))
	main := a.main.do(t, "GET", "/dump", "", nil)
	if main.status != 200 {
		t.Fatalf("dump %d %s", main.status, main.body)
	}

	b := startDyn(t, Options{})
	sb := registerDyn(t, b, 2, 0, 16, "llama", "")
	st, err := dump.Restore(b.ix, bytes.NewReader(main.body), b.d)
	if err != nil {
		t.Fatal(err)
	}
	if st.Streams != 1 || st.Skipped != 0 || st.Holdings != 5 {
		t.Fatalf("restore stats %+v, want one stream and 5 holdings", st)
	}
	hit := `{"scores":{"2":{"0":64}},"frequencies":[1,1,1,1],"instances":{"2":{"longest_matched":64,"gpu":64,"dp":{"0":64},"cpu":64,"disk":64}}}`
	wantResp(t, b.do(t, "POST", "/query", `{"token_ids":`+jsonEnc(toks)+`,"model_name":"llama","lora_name":"A"}`), 200, hit)
	wantResp(t, b.do(t, "POST", "/query", `{"token_ids":`+jsonEnc(toks)+`,"model_name":"llama"}`), 200,
		`{"scores":{"2":{"0":0}},"frequencies":[],"instances":{"2":{"longest_matched":0,"gpu":0,"dp":{"0":0},"cpu":0,"disk":0}}}`)
	apply(t, sb, engineRemove("", 0xA4))
	wantResp(t, b.do(t, "POST", "/query", `{"token_ids":`+jsonEnc(toks)+`,"model_name":"llama","lora_name":"A"}`), 200,
		`{"scores":{"2":{"0":48}},"frequencies":[1,1,1],"instances":{"2":{"longest_matched":48,"gpu":48,"dp":{"0":48},"cpu":48,"disk":48}}}`)
}

// TestDynamoLoraPeerDump: the Dynamo form of /dump, keyed by model:group,
// names an adapter's holdings and engine hashes with "conductor_lora": a
// peer recovering from it files them in the adapter's context again, never
// as the base model's, and a later remove without lora_name reaches them.
func TestDynamoLoraPeerDump(t *testing.T) {
	a := startDyn(t, Options{})
	s := registerDyn(t, a, 2, 0, 16, "llama", "")
	toks, base := seqTokens(64, 0), seqTokens(16, 500)
	apply(t, s, loraStore("A", []uint64{0xA1, 0xA2, 0xA3, 0xA4}, toks))
	apply(t, s, engineStore("", 16, []uint64{0xB1}, 0, false, base))
	d := a.do(t, "GET", "/dump", "")
	if d.status != 200 {
		t.Fatalf("dump %d %s", d.status, d.body)
	}
	if !bytes.Contains(d.body, []byte(`"conductor_lora":"A"`)) {
		t.Fatalf("the Dynamo dump does not name adapter A: %s", d.body)
	}

	b := startDyn(t, Options{})
	sb := registerDyn(t, b, 2, 0, 16, "llama", "")
	st, err := dump.Restore(b.ix, bytes.NewReader(d.body), b.d)
	if err != nil {
		t.Fatal(err)
	}
	if st.Streams != 1 || st.Skipped != 0 || st.Holdings != 5 || st.Engine != 5 {
		t.Fatalf("restore stats %+v, want one stream, 5 holdings and 5 engine hashes", st)
	}
	zero := `{"scores":{"2":{"0":0}},"frequencies":[],"instances":{"2":{"longest_matched":0,"gpu":0,"dp":{"0":0},"cpu":0,"disk":0}}}`
	wantResp(t, b.do(t, "POST", "/query", `{"token_ids":`+jsonEnc(toks)+`,"model_name":"llama"}`), 200, zero)
	wantResp(t, b.do(t, "POST", "/query", `{"token_ids":`+jsonEnc(toks)+`,"model_name":"llama","lora_name":"A"}`), 200,
		`{"scores":{"2":{"0":64}},"frequencies":[1,1,1,1],"instances":{"2":{"longest_matched":64,"gpu":64,"dp":{"0":64},"cpu":64,"disk":64}}}`)
	wantResp(t, b.do(t, "POST", "/query", `{"token_ids":`+jsonEnc(base)+`,"model_name":"llama"}`), 200,
		`{"scores":{"2":{"0":16}},"frequencies":[1],"instances":{"2":{"longest_matched":16,"gpu":16,"dp":{"0":16},"cpu":16,"disk":16}}}`)
	apply(t, sb, engineRemove("", 0xA4))
	wantResp(t, b.do(t, "POST", "/query", `{"token_ids":`+jsonEnc(toks)+`,"model_name":"llama","lora_name":"A"}`), 200,
		`{"scores":{"2":{"0":48}},"frequencies":[1,1,1],"instances":{"2":{"longest_matched":48,"gpu":48,"dp":{"0":48},"cpu":48,"disk":48}}}`)
}

// TestDynamoIndexerGoesWithItsLastWorker: an indexer's block size is its
// first registration's while it has workers (another is refused, 409), and
// the indexer goes with its last worker: a query is then 404, and the next
// registration, of any identity, sets the block size anew.
func TestDynamoIndexerGoesWithItsLastWorker(t *testing.T) {
	e := startDyn(t, Options{})
	reg := func(inst, bs int) response {
		return e.do(t, "POST", "/register", `{"instance_id":`+jsonEnc(inst)+`,"endpoint":"tcp://127.0.0.1:`+jsonEnc(5700+inst)+`","model_name":"llama","block_size":`+jsonEnc(bs)+`}`)
	}
	wantResp(t, reg(1, 1), 201, `{"status":"ok"}`)
	wantResp(t, reg(2, 1), 201, `{"status":"ok"}`)
	if r := reg(3, 16); r.status != 409 {
		t.Fatalf("a block size other than the indexer's while it has workers: %d %s", r.status, r.body)
	}
	for _, inst := range []string{"1", "2"} {
		wantResp(t, e.do(t, "POST", "/unregister", `{"instance_id":`+inst+`,"model_name":"llama"}`), 200, `{"status":"ok"}`)
	}
	if r := e.do(t, "POST", "/query", `{"token_ids":[1,2,3],"model_name":"llama"}`); r.status != 404 {
		t.Fatalf("query after the last worker went: %d %s", r.status, r.body)
	}
	wantResp(t, reg(3, 16), 201, `{"status":"ok"}`)
}
