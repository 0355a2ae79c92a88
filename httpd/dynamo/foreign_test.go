package dynamo

import (
	"bytes"
	"testing"
)

// TestDynamoQueryForeignInstanceIDs: a Mooncake-API registration of the same
// model, tenant "default" and block size feeds the Dynamo indexer's context
// (doc.go), so its holdings are scored, but a Dynamo answer carries only
// instance ids a Dynamo client parses as a u64: "mc-node" and the
// non-canonical "07" are left out of scores, frequencies and instances alike,
// while the numeric Mooncake holder "42" stays.
//
// Hand-worked, block 16, a 48-token (3-block) prompt, everything on the
// device: worker 1 holds blocks 0-1 (32 tokens); "42" all 3 (48); "mc-node"
// and "07" all 3, dropped. Frequencies count the kept (instance, rank) pairs
// covering block i: [2, 2, 1] (all four rows would give [4, 4, 3]).
func TestDynamoQueryForeignInstanceIDs(t *testing.T) {
	e := startDyn(t, Options{})
	w1 := registerDyn(t, e, 1, 0, 16, "llama", "")
	toks := seqTokens(48, 1)
	apply(t, w1, engineStore("GPU", 16, []uint64{100, 101}, 0, false, toks[:32]))
	for i, id := range []string{"mc-node", "42", "07"} {
		if r := e.main.postJSON(t, "/register", `{"endpoint":"tcp://127.0.0.1:`+jsonEnc(5600+i)+`","type":"vLLM","modelname":"llama",
			"instance_id":`+jsonEnc(id)+`,"block_size":16,"dp_rank":0}`); r.status != 200 {
			t.Fatalf("mooncake register %s: %d %s", id, r.status, r.body)
		}
		apply(t, e.reg.sub(t, id, "default", 0), engineStore("GPU", 16, []uint64{uint64(200 + 10*i), uint64(201 + 10*i), uint64(202 + 10*i)}, 0, false, toks))
	}
	want := `{"scores":{"1":{"0":32},"42":{"0":48}},"frequencies":[2,2,1],
	  "instances":{"1":{"longest_matched":32,"gpu":32,"dp":{"0":32},"cpu":32,"disk":32},
	               "42":{"longest_matched":48,"gpu":48,"dp":{"0":48},"cpu":48,"disk":48}}}`
	wantResp(t, e.do(t, "POST", "/query", `{"token_ids":`+jsonEnc(toks)+`,"model_name":"llama"}`), 200, want)
	wantResp(t, e.do(t, "POST", "/query_by_hash", `{"block_hashes":`+jsonEnc(localHashes(toks, 16))+`,"model_name":"llama"}`), 200, want)
	// The Mooncake API still answers every holder of the context.
	r := e.main.postJSON(t, "/query", `{"token_ids":`+jsonEnc(toks)+`,"modelname":"llama","block_size":16}`)
	if r.status != 200 {
		t.Fatalf("mooncake query: %d %s", r.status, r.body)
	}
	for _, id := range []string{`"mc-node"`, `"07"`, `"42"`, `"1"`} {
		if !bytes.Contains(r.body, []byte(id)) {
			t.Errorf("mooncake /query lacks %s: %s", id, r.body)
		}
	}
}

// TestDynamoInstanceID: the canonical u64 decimal text and nothing else.
func TestDynamoInstanceID(t *testing.T) {
	f := func(id string, want bool) {
		t.Helper()
		if got := dynamoInstanceID(id); got != want {
			t.Errorf("dynamoInstanceID(%q) = %v, want %v", id, got, want)
		}
	}
	f("0", true)
	f("1", true)
	f("42", true)
	f("1844674407370955161", true)  // 19 digits
	f("18446744073709551615", true) // 2^64-1
	f("18446744073709551616", false)
	f("99999999999999999999", false)
	f("184467440737095516150", false)
	f("", false)
	f("00", false)
	f("07", false)
	f("+7", false)
	f("-1", false)
	f(" 7", false)
	f("7 ", false)
	f("1e3", false)
	f("mc-node", false)
	f("engine-a", false)
}
