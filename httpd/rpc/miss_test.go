package rpc

import (
	"encoding/json"
	"testing"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/internal/apitest"
)

// TestRPCQueryMissReason: over a loopback RPC port, a Query that no context
// serves answers ret 0 and hits {} as before, plus "miss" naming the reason
// (the Mooncake API's X-Conductor-Miss tokens, same precedence), counted in
// conductor_query_context_misses_total{reason}; a hit has no "miss" key. The
// RPC has no response headers: it sets none.
func TestRPCQueryMissReason(t *testing.T) {
	env := startEnv(t, Options{}, core.Options{})
	addr, client := apitest.Serve(t, New(env.c))
	call := func(method string, body any) response {
		t.Helper()
		return responseOf(apitest.Do(t, client, addr, "POST", "/rpc/"+method, "application/json", []byte(jsonEnc(body))))
	}
	// Contexts: (default, my-model, "", 16) and (team-a, my-model, lora-a, 16).
	checkRet(t, call("Register", pyReg()), RetOK, "", "")
	checkRet(t, call("Register", with(pyReg(), "instance_id", "vllm-1", "endpoint", "tcp://127.0.0.1:6001",
		"tenant_id", "team-a", "lora_name", "lora-a")), RetOK, "", "")

	query := func(kv ...any) obj {
		return append(obj{"model_name", "my-model", "block_size", 16, "token_ids", []int32{1, 2}}, kv...)
	}
	cases := []struct {
		name string
		q    obj
		miss string
	}{
		{"hit", query(), ""},
		{"hit with tenant and LoRA", query("tenant_id", "team-a", "lora_name", "lora-a"), ""},
		{"tenant", query("tenant_id", "team-b"), "unknown_tenant"},
		{"model", with(query(), "model_name", "other-model"), "unknown_model"},
		{"block size", with(query(), "block_size", 32), "unknown_block_size"},
		{"LoRA", query("lora_name", "lora-a"), "unknown_lora"},
		{"base model of a LoRA-only tenant", query("tenant_id", "team-a"), "unknown_lora"},
	}
	for _, c := range cases {
		r := call("Query", c.q)
		checkRet(t, r, RetOK, "", "")
		if r.miss != "" {
			t.Errorf("%s: X-Conductor-Miss %q on the RPC port", c.name, r.miss)
		}
		m := decodeMap(t, r)
		miss, has := m["miss"]
		switch {
		case c.miss == "" && has:
			t.Errorf("%s: a hit carries miss %v: %s", c.name, miss, r.body)
		case c.miss == "":
		case miss != c.miss || len(m) != 3 || len(m["hits"].(map[string]any)) != 0:
			t.Errorf("%s: %s, want ret 0, hits {} and miss %q", c.name, r.body, c.miss)
		}
	}
	got := apitest.MissCounts(t, string(env.do(t, "GET", "/metrics", "", nil).body))
	if want := map[string]int{"unknown_tenant": 1, "unknown_model": 1, "unknown_block_size": 1, "unknown_lora": 2}; !deepEqual(got, want) {
		t.Fatalf("misses %v, want %v", got, want)
	}
	// The exact bytes of one miss: the Python client reads ret and hits only.
	if r := call("Query", query("tenant_id", "team-b")); string(r.body) != `{"ret":0,"hits":{},"miss":"unknown_tenant"}` {
		t.Fatalf("miss body %s", r.body)
	}
	var hit map[string]json.RawMessage
	if err := json.Unmarshal(call("Query", query()).body, &hit); err != nil || len(hit) != 2 {
		t.Fatalf("hit keys %v (%v)", hit, err)
	}
}
