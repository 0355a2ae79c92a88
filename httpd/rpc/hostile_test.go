package rpc

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/seed-c7a81618/conductor/httpd/internal/apitest"
)

// TestHostileBodies: every hostile body on every POST endpoint of the
// Mooncake API (both Content-Types) and of the RPC surface is refused with a
// 4xx (RPC: a negative ret) and a reason, never a 5xx, and the index is
// unchanged.
func TestHostileBodies(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	env := newRPCEnv(t, Options{})
	// a registration and a block, so "unchanged" is not trivially empty
	if r := env.httpDo(t, "POST", "/register", "application/json", []byte(jsonEnc(baseReg()))); r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	before := apitest.SnapshotIndex(env.ix)
	corpus := apitest.HostileCorpus(seed)
	for _, path := range []string{"/register", "/unregister", "/query", "/query_by_hash"} {
		for _, ct := range []string{"application/json", "application/msgpack", ""} {
			for i, body := range corpus {
				r := env.httpDo(t, "POST", path, ct, []byte(body))
				if r.status >= 500 || (r.status < 400 && !(path == "/query" || path == "/query_by_hash")) {
					t.Fatalf("%s %q body %d %q: status %d %s", path, ct, i, body, r.status, r.body)
				}
				if r.status >= 400 && !strings.Contains(string(r.body), "reason") && r.status != 404 {
					t.Fatalf("%s %q body %d %q: %d without a reason: %s", path, ct, i, body, r.status, r.body)
				}
			}
		}
	}
	for _, m := range []string{"Query", "Register", "Unregister", "GetGlobalView", "ListServices"} {
		for i, body := range corpus {
			r := rpcCall(t, env.r, m, body)
			if r.status >= 500 {
				t.Fatalf("RPC %s body %d %q: status %d %s", m, i, body, r.status, r.body)
			}
			var ans map[string]any
			if err := json.Unmarshal(r.body, &ans); err != nil {
				t.Fatalf("RPC %s body %d: answer not JSON: %s", m, i, r.body)
			}
			if ret, _ := ans["ret"].(float64); ret == 0 && (m == "Register" || m == "Unregister") {
				t.Fatalf("RPC %s accepted hostile body %d %q", m, i, body)
			} else if ret < 0 && ans["error"] == nil {
				t.Fatalf("RPC %s body %d: failure without a cause: %s", m, i, r.body)
			}
		}
	}
	if after := apitest.SnapshotIndex(env.ix); !reflect.DeepEqual(before, after) {
		t.Fatalf("index changed by refused requests:\nbefore %+v\nafter  %+v", before, after)
	}
}
