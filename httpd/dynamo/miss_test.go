package dynamo

import (
	"testing"

	"github.com/seed-c7a81618/conductor/httpd/internal/apitest"
)

// TestDynamoQueryMissReason: a /query or /query_by_hash whose indexer exists
// but whose context does not is answered with the empty scores as before,
// plus X-Conductor-Miss naming the first context field (tenant = routing
// group, model, block size = the indexer's, LoRA) for which no context exists
// that equals the query in every field before it; each is counted in
// conductor_query_context_misses_total{reason} on the Dynamo /metrics and on
// the main port's. A hit carries no header; an unknown indexer stays 404
// not_found (its own refusal), neither marked nor counted.
func TestDynamoQueryMissReason(t *testing.T) {
	e := startDyn(t, Options{})
	// Contexts (tenant, model, LoRA, block size): the worker's
	// (default, llama-3-8b, "", 16) and a Mooncake registration's
	// (default, shared, "", 16).
	registerDyn(t, e, 1, 0, 16, "llama-3-8b", "")
	if r := e.main.postJSON(t, "/register", `{"endpoint":"tcp://127.0.0.1:5599","type":"vLLM","modelname":"shared",
		"instance_id":"engine-s","block_size":16,"dp_rank":0}`); r.status != 200 {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	// Indexers known (as from a peer's dump) without a context of their own.
	for _, in := range []struct {
		model, group string
		bs           int
	}{{"ghost", "default", 16}, {"llama-3-8b", "g2", 16}, {"shared", "default", 32}} {
		if err := e.d.AddIndexer(in.model, in.group, in.bs); err != nil {
			t.Fatal(err)
		}
	}
	empty := `{"scores":{},"frequencies":[],"instances":{}}`
	cases := []struct {
		name, path, body, miss string
	}{
		{"hit", "/query", `{"token_ids":[1,2],"model_name":"llama-3-8b"}`, ""},
		{"tenant", "/query", `{"token_ids":[1,2],"model_name":"llama-3-8b","routing_group":"g2"}`, "unknown_tenant"},
		{"model", "/query", `{"token_ids":[1,2],"model_name":"ghost"}`, "unknown_model"},
		{"model by hash", "/query_by_hash", `{"block_hashes":[1,2],"model_name":"ghost"}`, "unknown_model"},
		{"block size", "/query", `{"token_ids":[1,2],"model_name":"shared"}`, "unknown_block_size"},
		{"LoRA", "/query", `{"token_ids":[1,2],"model_name":"llama-3-8b","lora_name":"adapter-a"}`, "unknown_lora"},
	}
	for _, c := range cases {
		r := e.do(t, "POST", c.path, c.body)
		if r.status != 200 || r.miss != c.miss {
			t.Errorf("%s: %d X-Conductor-Miss %q, want 200 %q: %s", c.name, r.status, r.miss, c.miss, r.body)
			continue
		}
		if c.miss != "" {
			wantResp(t, r, 200, empty)
		}
	}
	if r := e.do(t, "POST", "/query", `{"token_ids":[1,2],"model_name":"nope"}`); r.status != 404 || r.miss != "" {
		t.Fatalf("unknown indexer: %d %q %s", r.status, r.miss, r.body)
	}
	want := map[string]int{"unknown_tenant": 1, "unknown_model": 2, "unknown_block_size": 1, "unknown_lora": 1}
	if got := apitest.MissCounts(t, string(e.do(t, "GET", "/metrics", "").body)); !apitest.DeepEqual(got, want) {
		t.Errorf("Dynamo /metrics misses %v, want %v", got, want)
	}
	if got := apitest.MissCounts(t, string(e.main.do(t, "GET", "/metrics", "", nil).body)); !apitest.DeepEqual(got, want) {
		t.Errorf("main /metrics misses %v, want %v", got, want)
	}
}
