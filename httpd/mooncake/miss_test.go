package mooncake

import (
	"bytes"
	"testing"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/internal/apitest"
)

// TestQueryMissReason: a query that no context serves is answered as before
// ({} in either dialect) plus X-Conductor-Miss naming the first context field,
// in the order tenant, model, block size, LoRA, for which no context exists
// that equals the query in every field before it; each miss is counted in
// conductor_query_context_misses_total{reason}, every series there from the
// start. A hit, and a query whose context exists but whose instance filter
// names nobody, carry no header and count nothing.
func TestQueryMissReason(t *testing.T) {
	env := startEnv(t, Options{}, core.Options{})
	misses := func() map[string]int {
		t.Helper()
		return apitest.MissCounts(t, string(env.do(t, "GET", "/metrics", "", nil).body))
	}
	if got, want := misses(), map[string]int{"unknown_tenant": 0, "unknown_model": 0, "unknown_block_size": 0, "unknown_lora": 0}; !deepEqual(got, want) {
		t.Fatalf("misses at start %v, want %v", got, want)
	}

	// Contexts (tenant, model, LoRA, block size):
	//	(default, m, "", 16), (default, m, lora-a, 32), (acme, other, "", 16).
	for _, r := range []obj{
		baseReg(),
		with(baseReg(), "instance_id", "engine-b", "endpoint", "tcp://127.0.0.1:5558", "lora_name", "lora-a", "block_size", 32),
		with(baseReg(), "instance_id", "engine-c", "endpoint", "tcp://127.0.0.1:5559", "tenant_id", "acme", "modelname", "other"),
	} {
		if resp := env.postMP(t, "/register", mp(r)); resp.status != 200 {
			t.Fatalf("register: %d %s", resp.status, resp.body)
		}
	}

	json := func(path, body string) response { return env.postJSON(t, path, body) }
	msgpack := func(path string, body obj) response { return env.postMP(t, path, mp(body)) }
	cases := []struct {
		name string
		resp response
		miss string // "" for a query whose context exists
	}{
		{"hit", json("/query", `{"model":"m","block_size":16,"token_ids":[1,2]}`), ""},
		{"hit with LoRA", json("/query", `{"model":"m","block_size":32,"lora_name":"lora-a","token_ids":[1,2]}`), ""},
		{"instance filter naming nobody", json("/query", `{"model":"m","block_size":16,"instance_id":"nobody","token_ids":[1,2]}`), ""},
		// No context has tenant t9, whatever the other fields.
		{"tenant", json("/query", `{"tenant_id":"t9","model":"m","block_size":16,"token_ids":[1,2]}`), "unknown_tenant"},
		{"tenant before model", json("/query", `{"tenant_id":"t9","model":"zz","block_size":7,"token_ids":[1,2]}`), "unknown_tenant"},
		// Tenant default has only model m; acme only model other.
		{"model", json("/query", `{"model":"other","block_size":16,"token_ids":[1,2]}`), "unknown_model"},
		{"model of another tenant", msgpack("/query", obj{"tenant_id", "acme", "model", "m", "block_size", 16, "token_ids", []int32{1, 2}}), "unknown_model"},
		{"model by hash", json("/query_by_hash", `{"model":"zz","block_size":16,"block_hash":[1,2]}`), "unknown_model"},
		// (default, m) is served at block sizes 16 and 32 only.
		{"block size", json("/query", `{"model":"m","block_size":64,"token_ids":[1,2]}`), "unknown_block_size"},
		{"block size before LoRA", msgpack("/query", obj{"model", "m", "block_size", 64, "lora_name", "lora-a", "token_ids", []int32{1, 2}}), "unknown_block_size"},
		// (default, m, 16) has only the base model, (default, m, 32) only lora-a.
		{"LoRA", json("/query", `{"model":"m","block_size":16,"lora_name":"lora-b","token_ids":[1,2]}`), "unknown_lora"},
		{"base model at a LoRA-only block size", json("/query", `{"model":"m","block_size":32,"token_ids":[1,2]}`), "unknown_lora"},
		{"LoRA by hash", msgpack("/query_by_hash", obj{"model", "m", "block_size", 32, "lora_name", "lora-b", "seq_hashes", []uint64{1, 2}}), "unknown_lora"},
	}
	for _, c := range cases {
		r := c.resp
		if r.status != 200 {
			t.Errorf("%s: status %d: %s", c.name, r.status, r.body)
			continue
		}
		if r.miss != c.miss {
			t.Errorf("%s: X-Conductor-Miss %q, want %q", c.name, r.miss, c.miss)
		}
		// A miss's body is what it was before the header: the JSON
		// dialect's {}, the msgpack dialect's {"instances": {}}.
		empty := []byte("{}")
		if r.ct == "application/msgpack" {
			empty = []byte("\x81\xa9instances\x80")
		}
		if c.miss != "" && !bytes.Equal(r.body, empty) {
			t.Errorf("%s: body %q, want %q", c.name, r.body, empty)
		}
	}
	// 2 tenant, 3 model, 2 block size, 3 LoRA misses.
	if got, want := misses(), map[string]int{"unknown_tenant": 2, "unknown_model": 3, "unknown_block_size": 2, "unknown_lora": 3}; !deepEqual(got, want) {
		t.Fatalf("misses %v, want %v", got, want)
	}
	// A refused query is no miss: it never reaches the index.
	if r := env.postJSON(t, "/query", `{"model":"zz","block_size":0,"token_ids":[1]}`); r.status != 400 || r.miss != "" {
		t.Fatalf("refused query: %d %q %s", r.status, r.miss, r.body)
	}
	if got := misses()["unknown_model"]; got != 3 {
		t.Fatalf("unknown_model misses %d after a refused query, want 3", got)
	}
}
