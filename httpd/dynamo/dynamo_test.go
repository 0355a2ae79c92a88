package dynamo

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/zeebo/xxh3"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/server"
)

// dynEnv is a Dynamo listener on a loopback port over an index fed directly
// (coreRegistrar: no ZMQ), plus the Mooncake server over the same index.
type dynEnv struct {
	d      *Server
	ix     *core.Index
	reg    *coreRegistrar
	addr   string
	client *fasthttp.HostClient
	main   *testEnv

	mu     sync.Mutex
	states map[core.ServiceKey]ListenerInfo
}

// newDynamo is a Dynamo surface over a fresh Core of ix and reg.
func newDynamo(ix *core.Index, reg server.Registrar, opts Options) (*Server, error) {
	lg := opts.Logger
	if lg == nil {
		lg = quietLogger()
	}
	c, err := server.New(ix, reg, server.Options{Logger: lg})
	if err != nil {
		return nil, err
	}
	return New(c, opts)
}

func startDyn(t testing.TB, opts Options) *dynEnv {
	t.Helper()
	return startDynWith(t, server.Options{}, opts)
}

// startDynWith starts the Mooncake API over a Core with sopts (its Access,
// Limiter, Gate) and the Dynamo surface over the same Core.
func startDynWith(t testing.TB, sopts server.Options, opts Options) *dynEnv {
	t.Helper()
	m := startEnv(t, sopts, core.Options{})
	e := &dynEnv{ix: m.ix, reg: m.reg, main: m, states: map[core.ServiceKey]ListenerInfo{}}
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	opts.Listeners = func() []ListenerInfo {
		e.mu.Lock()
		defer e.mu.Unlock()
		var out []ListenerInfo
		for _, l := range e.states {
			out = append(out, l)
		}
		return out
	}
	d, err := New(m.c, opts)
	if err != nil {
		t.Fatal(err)
	}
	e.d = d
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Serve(ln) }()
	e.addr = ln.Addr().String()
	e.client = &fasthttp.HostClient{Addr: e.addr, MaxResponseBodySize: 256 << 20}
	t.Cleanup(func() {
		e.client.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := d.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return e
}

func (e *dynEnv) do(t testing.TB, method, path, body string, hdr ...string) response {
	t.Helper()
	te := &testEnv{addr: e.addr, client: e.client}
	var b []byte
	ct := ""
	if body != "" {
		b, ct = []byte(body), "application/json"
	}
	return te.do(t, method, path, ct, b, hdr...)
}

func (e *dynEnv) setState(inst string, group string, rank int32, state, lastErr string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	k := core.ServiceKey{InstanceID: inst, TenantID: group, DPRank: rank}
	e.states[k] = ListenerInfo{Key: k, State: state, LastError: lastErr}
}

// want checks status and canonical JSON body.
func wantResp(t testing.TB, r response, status int, body string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	if body != "" {
		if got, want := canonJSON(t, string(r.body)), canonJSON(t, body); got != want {
			t.Fatalf("body\n got %s\nwant %s", got, want)
		}
	}
}

// localHashes is an independent Dynamo LocalBlockHash: XXH3-64 of each
// complete block's u32 little-endian tokens, seed 1337.
func localHashes(tokens []int32, bs int) []uint64 {
	var out []uint64
	for i := 0; i+bs <= len(tokens); i += bs {
		b := make([]byte, 0, 4*bs)
		for _, t := range tokens[i : i+bs] {
			b = binary.LittleEndian.AppendUint32(b, uint32(t))
		}
		out = append(out, xxh3.HashSeed(b, 1337))
	}
	return out
}

func engineStore(medium string, bs int, hashes []uint64, parent uint64, hasParent bool, tokens []int32) *core.Batch {
	b := storeBatch(medium, bs, hashes, tokens)
	b.Events[0].Parent, b.Events[0].HasParent = parent, hasParent
	return b
}

func engineRemove(medium string, hashes ...uint64) *core.Batch {
	b := &core.Batch{}
	ev := b.NextEvent()
	ev.Kind = core.EventRemoved
	ev.Hashes = append(ev.Hashes, hashes...)
	if medium != "" {
		ev.Medium = []byte(medium)
	}
	return b
}

// TestDynamoRegisterSeed runs the seed's /register examples and its conflict
// rules.
func TestDynamoRegisterSeed(t *testing.T) {
	e := startDyn(t, Options{})
	wantResp(t, e.do(t, "POST", "/register", `{
    "instance_id": 1,
    "endpoint": "tcp://127.0.0.1:5557",
    "model_name": "llama-3-8b",
    "block_size": 16
  }`), 201, `{"status":"ok"}`)
	wantResp(t, e.do(t, "POST", "/register", `{
    "instance_id": 2,
    "endpoint": "tcp://127.0.0.1:5558",
    "model_name": "llama-3-8b",
    "routing_group": "customer-a",
    "block_size": 16,
    "dp_rank": 0
  }`), 201, `{"status":"ok"}`)
	// A string instance id, the ignored fields and a replay endpoint.
	wantResp(t, e.do(t, "POST", "/register", `{"instance_id":"18446744073709551615","endpoint":"tcp://127.0.0.1:5559",
		"model_name":"llama-3-8b","block_size":16,"dp_rank":1,"replay_endpoint":"tcp://127.0.0.1:5560",
		"additional_salt":"s","additionalsalt":"s2","tenant_id":"t"}`), 201, `{"status":"ok"}`)

	// The registrations landed in the mapped contexts with the xxh3 profile.
	want := map[core.ServiceKey]core.ContextKey{
		{InstanceID: "1", TenantID: "default", DPRank: 0}:                    {TenantID: "default", ModelName: "llama-3-8b", BlockSize: 16},
		{InstanceID: "2", TenantID: "customer-a", DPRank: 0}:                 {TenantID: "customer-a", ModelName: "llama-3-8b", BlockSize: 16},
		{InstanceID: "18446744073709551615", TenantID: "default", DPRank: 1}: {TenantID: "default", ModelName: "llama-3-8b", BlockSize: 16},
	}
	svcs := e.ix.Services()
	if len(svcs) != len(want) {
		t.Fatalf("services %+v", svcs)
	}
	for _, r := range svcs {
		if ck, ok := want[r.Key()]; !ok || r.ContextKey() != ck || r.Profile.Spec.Strategy != "xxh3" ||
			r.Profile.Spec.PythonHashSeed != "1337" || r.Type != core.PublisherVLLM || r.AdditionalSalt != "" {
			t.Fatalf("registration %+v", r)
		}
		if r.InstanceID == "18446744073709551615" && r.ReplayEndpoint != "tcp://127.0.0.1:5560" {
			t.Fatalf("replay endpoint lost: %+v", r)
		}
	}

	for _, c := range []struct{ name, body string }{
		{"duplicate_instance_rank", `{"instance_id":1,"endpoint":"tcp://127.0.0.1:6001","model_name":"llama-3-8b","block_size":16}`},
		{"instance_in_other_group", `{"instance_id":1,"endpoint":"tcp://127.0.0.1:6002","model_name":"llama-3-8b","routing_group":"g2","block_size":16,"dp_rank":3}`},
		{"instance_in_other_model", `{"instance_id":2,"endpoint":"tcp://127.0.0.1:6003","model_name":"other","block_size":16,"dp_rank":3}`},
		{"block_size_mismatch", `{"instance_id":9,"endpoint":"tcp://127.0.0.1:6004","model_name":"llama-3-8b","block_size":32}`},
		{"endpoint_in_use", `{"instance_id":9,"endpoint":"tcp://127.0.0.1:5557","model_name":"llama-3-8b","block_size":16}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(t, "POST", "/register", c.body)
			if r.status != 409 {
				t.Fatalf("status %d body %s", r.status, r.body)
			}
		})
	}
	for _, c := range []struct{ name, body, reason, field string }{
		{"missing_instance", `{"endpoint":"tcp://x:1","model_name":"m","block_size":16}`, "missing", "instance_id"},
		{"missing_endpoint", `{"instance_id":3,"model_name":"m","block_size":16}`, "missing", "endpoint"},
		{"missing_model", `{"instance_id":3,"endpoint":"tcp://x:1","block_size":16}`, "missing", "model_name"},
		{"missing_block_size", `{"instance_id":3,"endpoint":"tcp://x:1","model_name":"m"}`, "missing", "block_size"},
		{"negative_instance", `{"instance_id":-3,"endpoint":"tcp://x:1","model_name":"m","block_size":16}`, "out_of_range", "instance_id"},
		{"bad_instance_text", `{"instance_id":"w1","endpoint":"tcp://x:1","model_name":"m","block_size":16}`, "invalid_value", "instance_id"},
		{"zero_block_size", `{"instance_id":3,"endpoint":"tcp://x:1","model_name":"m","block_size":0}`, "out_of_range", "block_size"},
		{"bad_dp_rank", `{"instance_id":3,"endpoint":"tcp://x:1","model_name":"m","block_size":16,"dp_rank":-1}`, "invalid_value", "dp_rank"},
		{"bad_type", `{"instance_id":3,"endpoint":"tcp://x:1","model_name":"m","block_size":16,"type":"Mooncake"}`, "invalid_value", "type"},
		{"empty_model", `{"instance_id":3,"endpoint":"tcp://x:1","model_name":"","block_size":16}`, "invalid_value", "model_name"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(t, "POST", "/register", c.body)
			checkError(t, r, 400, c.reason, c.field, -1)
		})
	}
	if r := e.do(t, "POST", "/register", `{"instance_id":3,`); r.status != 400 {
		t.Fatalf("malformed JSON: %d", r.status)
	}
	if r := e.do(t, "GET", "/register", ""); r.status != 405 || r.allow != "POST" {
		t.Fatalf("GET /register: %d %q", r.status, r.allow)
	}
}

// TestDynamoUnregister: every group, one group, one dp_rank; 404 when
// nothing matched.
func TestDynamoUnregister(t *testing.T) {
	e := startDyn(t, Options{})
	reg := func(inst, rank int, group string) {
		t.Helper()
		wantResp(t, e.do(t, "POST", "/register", fmt.Sprintf(`{"instance_id":%d,"endpoint":"tcp://127.0.0.1:%d","model_name":"llama-3-8b","routing_group":%q,"block_size":16,"dp_rank":%d}`,
			inst, 7000+10*inst+rank, group, rank)), 201, "")
	}
	reg(1, 0, "default")
	reg(1, 1, "default")
	reg(2, 0, "customer-a")
	reg(3, 0, "default")

	wantResp(t, e.do(t, "POST", "/unregister", `{"instance_id": 1, "model_name": "llama-3-8b", "routing_group": "default", "dp_rank": 0}`), 200, `{"status":"ok"}`)
	if _, ok := e.ix.Lookup(core.ServiceKey{InstanceID: "1", TenantID: "default", DPRank: 0}); ok {
		t.Fatal("rank 0 still registered")
	}
	if _, ok := e.ix.Lookup(core.ServiceKey{InstanceID: "1", TenantID: "default", DPRank: 1}); !ok {
		t.Fatal("rank 1 removed")
	}
	// The seed's "remove from all routing groups".
	wantResp(t, e.do(t, "POST", "/unregister", `{"instance_id": 1, "model_name": "llama-3-8b"}`), 200, `{"status":"ok"}`)
	// One routing group; the wrong group is 404.
	wantResp(t, e.do(t, "POST", "/unregister", `{"instance_id": 2, "model_name": "llama-3-8b", "routing_group": "default"}`), 404, "")
	wantResp(t, e.do(t, "POST", "/unregister", `{"instance_id": 2, "model_name": "llama-3-8b", "routing_group": "customer-a"}`), 200, `{"status":"ok"}`)
	for _, body := range []string{
		`{"instance_id": 1, "model_name": "llama-3-8b"}`,               // already gone
		`{"instance_id": 3, "model_name": "other"}`,                    // other model
		`{"instance_id": 3, "model_name": "llama-3-8b", "dp_rank": 4}`, // no such rank
	} {
		wantResp(t, e.do(t, "POST", "/unregister", body), 404, "")
	}
	checkError(t, e.do(t, "POST", "/unregister", `{"model_name": "llama-3-8b"}`), 400, "missing", "instance_id", -1)
	if got := len(e.ix.Services()); got != 1 {
		t.Fatalf("%d services left, want 1 (instance 3)", got)
	}
}

// TestDynamoWorkers: the seed's response shape, filters and status
// aggregation (failed > pending > active > paused) with last_error.
func TestDynamoWorkers(t *testing.T) {
	e := startDyn(t, Options{})
	for _, b := range []string{
		`{"instance_id":1,"endpoint":"tcp://127.0.0.1:5557","model_name":"llama-3-8b","block_size":16}`,
		`{"instance_id":1,"endpoint":"tcp://127.0.0.1:5558","model_name":"llama-3-8b","block_size":16,"dp_rank":1}`,
		`{"instance_id":2,"endpoint":"tcp://127.0.0.1:5559","model_name":"llama-3-8b","routing_group":"customer-a","block_size":16}`,
		`{"instance_id":3,"endpoint":"tcp://127.0.0.1:5561","model_name":"mistral","block_size":32}`,
	} {
		wantResp(t, e.do(t, "POST", "/register", b), 201, "")
	}
	e.setState("1", "default", 0, "active", "")
	e.setState("1", "default", 1, "active", "")
	e.setState("2", "customer-a", 0, "failed", "recv: connection refused")
	e.setState("3", "default", 0, "paused", "")

	seedRow := `{"instance_id":1,"source":"zmq","status":"active","model_name":"llama-3-8b","routing_group":"default","block_size":16,
	  "endpoints":{"0":"tcp://127.0.0.1:5557","1":"tcp://127.0.0.1:5558"},
	  "listeners":{"0":{"endpoint":"tcp://127.0.0.1:5557","status":"active","hash_check":{"state":"unverified","samples":0,"detail":"","found":null}},"1":{"endpoint":"tcp://127.0.0.1:5558","status":"active","hash_check":{"state":"unverified","samples":0,"detail":"","found":null}}}}`
	row2 := `{"instance_id":2,"source":"zmq","status":"failed","model_name":"llama-3-8b","routing_group":"customer-a","block_size":16,
	  "endpoints":{"0":"tcp://127.0.0.1:5559"},"listeners":{"0":{"endpoint":"tcp://127.0.0.1:5559","status":"failed","last_error":"recv: connection refused","hash_check":{"state":"unverified","samples":0,"detail":"","found":null}}}}`
	row3 := `{"instance_id":3,"source":"zmq","status":"paused","model_name":"mistral","routing_group":"default","block_size":32,
	  "endpoints":{"0":"tcp://127.0.0.1:5561"},"listeners":{"0":{"endpoint":"tcp://127.0.0.1:5561","status":"paused","hash_check":{"state":"unverified","samples":0,"detail":"","found":null}}}}`
	wantResp(t, e.do(t, "GET", "/workers", ""), 200, "["+seedRow+","+row2+","+row3+"]")
	wantResp(t, e.do(t, "GET", "/workers?model_name=llama-3-8b", ""), 200, "["+seedRow+","+row2+"]")
	wantResp(t, e.do(t, "GET", "/workers?model_name=llama-3-8b&routing_group=customer-a", ""), 200, "["+row2+"]")
	wantResp(t, e.do(t, "GET", "/workers?routing_group=default", ""), 200, "["+seedRow+","+row3+"]")
	wantResp(t, e.do(t, "GET", "/workers?model_name=none", ""), 200, "[]")

	// Aggregation: one pending rank beats active; failed beats pending.
	e.setState("1", "default", 1, "pending", "publisher not reachable")
	r := decodeList(t, e.do(t, "GET", "/workers?model_name=llama-3-8b&routing_group=default", ""))
	if r[0]["status"] != "pending" {
		t.Fatalf("aggregate %v", r[0]["status"])
	}
	e.setState("1", "default", 0, "failed", "x")
	r = decodeList(t, e.do(t, "GET", "/workers?model_name=llama-3-8b&routing_group=default", ""))
	if r[0]["status"] != "failed" {
		t.Fatalf("aggregate %v", r[0]["status"])
	}
	// A registration removed through the Mooncake API leaves /workers.
	if rr := e.main.postJSON(t, "/unregister", `{"instance_id":"3","tenant_id":"default","dp_rank":0}`); rr.status != 200 {
		t.Fatalf("mooncake unregister %d %s", rr.status, rr.body)
	}
	wantResp(t, e.do(t, "GET", "/workers?model_name=mistral", ""), 200, "[]")
}

func decodeList(t testing.TB, r response) []map[string]any {
	t.Helper()
	var out []map[string]any
	if err := json.Unmarshal(r.body, &out); err != nil || r.status != 200 {
		t.Fatalf("status %d body %s: %v", r.status, r.body, err)
	}
	return out
}

func registerDyn(t testing.TB, e *dynEnv, inst, rank, bs int, model, extra string) *core.Subscription {
	t.Helper()
	wantResp(t, e.do(t, "POST", "/register", fmt.Sprintf(`{"instance_id":%d,"endpoint":"tcp://127.0.0.1:%d","model_name":%q,"block_size":%d,"dp_rank":%d%s}`,
		inst, 20000+100*inst+rank, model, bs, rank, extra)), 201, "")
	return e.reg.sub(t, strconv.Itoa(inst), "default", int32(rank))
}

// TestDynamoQueryTierBreakdown is reference §C.6's per-instance example:
// block 16, device {r0: 2, r1: 1}, host extension {r0: 1}, disk extension
// {r0: 2, r1: 1} → dp {0: 32, 1: 16}, gpu 32, cpu 48, disk 80.
func TestDynamoQueryTierBreakdown(t *testing.T) {
	e := startDyn(t, Options{})
	r0 := registerDyn(t, e, 1, 0, 16, "llama-3-8b", "")
	r1 := registerDyn(t, e, 1, 1, 16, "llama-3-8b", "")
	toks := seqTokens(96, 1)
	apply(t, r0, engineStore("GPU", 16, []uint64{100, 101}, 0, false, toks[:32]))
	apply(t, r0, engineStore("CPU", 16, []uint64{102}, 101, true, toks[32:48]))
	apply(t, r0, engineStore("DISK", 16, []uint64{103, 104}, 102, true, toks[48:80]))
	apply(t, r1, engineStore("GPU", 16, []uint64{200}, 0, false, toks[:16]))
	apply(t, r1, engineStore("DISK", 16, []uint64{201}, 200, true, toks[16:32]))

	want := `{"scores":{"1":{"0":32,"1":16}},"frequencies":[2,1],
	  "instances":{"1":{"longest_matched":80,"gpu":32,"dp":{"0":32,"1":16},"cpu":48,"disk":80}}}`
	wantResp(t, e.do(t, "POST", "/query", `{"token_ids":`+jsonEnc(toks)+`,"model_name":"llama-3-8b"}`), 200, want)
	// The same by Dynamo local block hashes (computed independently).
	wantResp(t, e.do(t, "POST", "/query_by_hash", `{"block_hashes":`+jsonEnc(localHashes(toks, 16))+`,"model_name":"llama-3-8b"}`), 200, want)
	// gpu ≤ cpu ≤ disk also for a prompt that stops inside the host tier.
	wantResp(t, e.do(t, "POST", "/query", `{"token_ids":`+jsonEnc(toks[:40])+`,"model_name":"llama-3-8b","routing_group":"default"}`), 200,
		`{"scores":{"1":{"0":32,"1":16}},"frequencies":[2,1],"instances":{"1":{"longest_matched":32,"gpu":32,"dp":{"0":32,"1":16},"cpu":32,"disk":32}}}`)
}

// TestDynamoQueryByHashVectors: /query_by_hash takes Dynamo's LocalBlockHash
// values (the reference's literal vector for tokens 1..12, block 4), signed
// or unsigned, and refuses cache_salt.
func TestDynamoQueryByHashVectors(t *testing.T) {
	e := startDyn(t, Options{})
	s := registerDyn(t, e, 7, 0, 4, "m4", "")
	apply(t, s, engineStore("", 4, []uint64{1, 2, 3}, 0, false, seqTokens(12, 1)))
	local := []uint64{14643705804678351452, 16777012769546811212, 483935686894639516}
	if got := localHashes(seqTokens(12, 1), 4); fmt.Sprint(got) != fmt.Sprint(local) {
		t.Fatalf("independent local hashes %v, vector %v", got, local)
	}
	full := `{"scores":{"7":{"0":12}},"frequencies":[1,1,1],"instances":{"7":{"longest_matched":12,"gpu":12,"dp":{"0":12},"cpu":12,"disk":12}}}`
	wantResp(t, e.do(t, "POST", "/query_by_hash", `{"block_hashes":[14643705804678351452,16777012769546811212,483935686894639516],"model_name":"m4"}`), 200, full)
	// The same hashes as i64 (two's complement), with cache_salt null.
	signed := fmt.Sprintf(`[%d,%d,%d]`, int64(local[0]), int64(local[1]), int64(local[2]))
	wantResp(t, e.do(t, "POST", "/query_by_hash", `{"block_hashes":`+signed+`,"model_name":"m4","cache_salt":null}`), 200, full)
	// Out of order: only the first block matches (the hashes roll).
	wantResp(t, e.do(t, "POST", "/query_by_hash", fmt.Sprintf(`{"block_hashes":[%d,%d],"model_name":"m4"}`, local[0], local[2])), 200,
		`{"scores":{"7":{"0":4}},"frequencies":[1],"instances":{"7":{"longest_matched":4,"gpu":4,"dp":{"0":4},"cpu":4,"disk":4}}}`)
	for _, salt := range []string{`"x"`, `""`} {
		checkError(t, e.do(t, "POST", "/query_by_hash", `{"block_hashes":[1],"model_name":"m4","cache_salt":`+salt+`}`), 400, "unsupported", "cache_salt", -1)
	}
	checkError(t, e.do(t, "POST", "/query_by_hash", `{"block_hashes":[1.5],"model_name":"m4"}`), 400, "invalid_type", "block_hashes", 0)
	checkError(t, e.do(t, "POST", "/query_by_hash", `{"block_hashes":[18446744073709551616],"model_name":"m4"}`), 400, "out_of_range", "block_hashes", 0)
	checkError(t, e.do(t, "POST", "/query_by_hash", `{"model_name":"m4"}`), 400, "missing", "block_hashes", -1)
}

// TestDynamoQuerySaltLoraAndErrors: cache_salt and lora_name select other
// namespaces (equal tokens do not match); unknown model/group 404; body
// limit 413.
func TestDynamoQuerySaltLoraAndErrors(t *testing.T) {
	e := startDyn(t, Options{MaxBodyBytes: 4096})
	s := registerDyn(t, e, 1, 0, 16, "llama-3-8b", "")
	toks := seqTokens(32, 1)
	apply(t, s, engineStore("", 16, []uint64{10, 11}, 0, false, toks))
	// The seed's /query example body shape.
	hit := `{"scores":{"1":{"0":32}},"frequencies":[1,1],"instances":{"1":{"longest_matched":32,"gpu":32,"dp":{"0":32},"cpu":32,"disk":32}}}`
	miss := `{"scores":{"1":{"0":0}},"frequencies":[],"instances":{"1":{"longest_matched":0,"gpu":0,"dp":{"0":0},"cpu":0,"disk":0}}}`
	wantResp(t, e.do(t, "POST", "/query", `{"token_ids":`+jsonEnc(toks)+`,"model_name":"llama-3-8b"}`), 200, hit)
	wantResp(t, e.do(t, "POST", "/query", `{"token_ids":`+jsonEnc(toks)+`,"model_name":"llama-3-8b","cache_salt":"tenant-a"}`), 200, miss)
	wantResp(t, e.do(t, "POST", "/query", `{"token_ids":`+jsonEnc(toks)+`,"model_name":"llama-3-8b","cache_salt":null}`), 200, hit)
	r := e.do(t, "POST", "/query", `{"token_ids":`+jsonEnc(toks)+`,"model_name":"llama-3-8b","lora_name":"adapter-a"}`)
	if r.status != 200 || strings.Contains(string(r.body), `"gpu":32`) {
		t.Fatalf("lora query matched base blocks: %d %s", r.status, r.body)
	}
	wantResp(t, e.do(t, "POST", "/query", `{"token_ids":[1,2],"model_name":"nope"}`), 404, "")
	wantResp(t, e.do(t, "POST", "/query", `{"token_ids":[1,2],"model_name":"llama-3-8b","routing_group":"g9"}`), 404, "")
	wantResp(t, e.do(t, "POST", "/query_by_hash", `{"block_hashes":[1],"model_name":"nope"}`), 404, "")
	checkError(t, e.do(t, "POST", "/query", `{"model_name":"llama-3-8b"}`), 400, "missing", "token_ids", -1)
	checkError(t, e.do(t, "POST", "/query", `{"token_ids":[1]}`), 400, "missing", "model_name", -1)
	big := `{"model_name":"llama-3-8b","token_ids":[` + strings.Repeat("1,", 4096) + `1]}`
	if r := e.do(t, "POST", "/query", big); r.status != 413 {
		t.Fatalf("oversized body: %d %s", r.status, r.body)
	}
	if r := e.do(t, "GET", "/nope", ""); r.status != 404 {
		t.Fatalf("unknown path: %d", r.status)
	}
}

// TestDynamoHealthMetricsPeers covers /health, /metrics names and the peer
// endpoints.
func TestDynamoHealthMetricsPeers(t *testing.T) {
	e := startDyn(t, Options{Peers: []string{"http://peer0:8090"}})
	if r := e.do(t, "GET", "/health", ""); r.status != 200 {
		t.Fatalf("health %d", r.status)
	}
	registerDyn(t, e, 1, 0, 16, "m", "")
	e.setState("1", "default", 0, "active", "")
	e.do(t, "POST", "/query", `{"token_ids":[1],"model_name":"m"}`)
	e.do(t, "POST", "/query", `{"token_ids":[1],"model_name":"zz"}`)
	m := string(e.do(t, "GET", "/metrics", "").body)
	for _, want := range []string{
		`dynamo_kvindexer_request_duration_seconds_bucket{endpoint="/query",le="0.0001"}`,
		`dynamo_kvindexer_requests_total{endpoint="/query",method="POST"} 2`,
		`dynamo_kvindexer_errors_total{endpoint="/query",status_class="4xx"} 1`,
		`dynamo_kvindexer_models 1`,
		`dynamo_kvindexer_workers 1`,
		`dynamo_kvindexer_listeners{status="active"} 1`,
		`dynamo_kvindexer_listeners{status="pending"} 0`,
		`dynamo_kvrouter_kv_cache_events_applied{event_type="stored",status="ok"}`,
		`dynamo_kvrouter_kv_cache_event_warnings{warning_kind=`,
		`conductor_contexts 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	wantResp(t, e.do(t, "GET", "/peers", ""), 200, `["http://peer0:8090"]`)
	wantResp(t, e.do(t, "POST", "/register_peer", `{"url": "http://peer:8091"}`), 201, `{"status":"ok"}`)
	wantResp(t, e.do(t, "GET", "/peers", ""), 200, `["http://peer0:8090","http://peer:8091"]`)
	wantResp(t, e.do(t, "POST", "/deregister_peer", `{"url": "http://peer:8091"}`), 200, `{"status":"ok"}`)
	wantResp(t, e.do(t, "POST", "/deregister_peer", `{"url": "http://peer:8091"}`), 404, "")
	checkError(t, e.do(t, "POST", "/register_peer", `{"url": "ftp://x"}`), 400, "invalid_value", "url", -1)
	checkError(t, e.do(t, "POST", "/register_peer", `{}`), 400, "missing", "url", -1)
	wantResp(t, e.do(t, "GET", "/peers", ""), 200, `["http://peer0:8090"]`)
}

// TestDynamoAccessLog: one JSON line per request with the trace header,
// UTC timestamps, reopened after a rename on POST /reopen_logs.
func TestDynamoAccessLog(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "access.log")
	e := startDyn(t, Options{AccessLog: path, TraceIDHeader: "x-req"})
	registerDyn(t, e, 1, 0, 16, "llama", "")
	e.do(t, "POST", "/query", `{"token_ids":[1,2],"model_name":"llama"}`, "x-req", "trace-42")
	e.do(t, "GET", "/health", "")
	lines := readLines(t, path)
	if len(lines) != 3 {
		t.Fatalf("%d lines: %q", len(lines), lines)
	}
	var rec struct {
		TS         string   `json:"ts"`
		Method     string   `json:"method"`
		Path       string   `json:"path"`
		Model      *string  `json:"model"`
		Status     int      `json:"status"`
		DurationMS *float64 `json:"duration_ms"`
		TraceID    *string  `json:"trace_id"`
	}
	if err := json.Unmarshal([]byte(lines[1]), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Method != "POST" || rec.Path != "/query" || rec.Model == nil || *rec.Model != "llama" || rec.Status != 200 ||
		rec.DurationMS == nil || rec.TraceID == nil || *rec.TraceID != "trace-42" {
		t.Fatalf("record %s", lines[1])
	}
	ts, err := time.Parse(time.RFC3339Nano, rec.TS)
	if err != nil || !strings.HasSuffix(rec.TS, "Z") || time.Since(ts) > time.Minute {
		t.Fatalf("ts %q: %v", rec.TS, err)
	}
	if err := json.Unmarshal([]byte(lines[2]), &rec); err != nil || rec.Model != nil || rec.TraceID != nil {
		t.Fatalf("health record %s: %v", lines[2], err)
	}
	// Rotation: rename, reopen, new lines go to a new file at the path.
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	e.do(t, "GET", "/health", "") // still written to the renamed file
	wantResp(t, e.do(t, "POST", "/reopen_logs", ""), 200, `{"status":"ok"}`)
	e.do(t, "GET", "/workers", "")
	old, cur := readLines(t, path+".1"), readLines(t, path)
	if len(old) != 4 || !strings.Contains(old[3], `"path":"/health"`) {
		t.Fatalf("rotated file: %q", old)
	}
	if len(cur) != 2 || !strings.Contains(cur[0], `"path":"/reopen_logs"`) || !strings.Contains(cur[1], `"path":"/workers"`) {
		t.Fatalf("new file: %q", cur)
	}
}

// TestDynamoAccessLogLocalTime: --access-log-local-time writes the zone's
// offset instead of Z (the location is injected: time.Local itself is
// process-global).
func TestDynamoAccessLogLocalTime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.log")
	a, err := openAccessLog(path, time.FixedZone("T", 3*3600))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 30, 18, 0, 0, 5e6, time.UTC)
	a.write(start, []byte("GET"), []byte("/health"), nil, 200, 1500*time.Microsecond, []byte("t-1"))
	a.close()
	lines := readLines(t, path)
	want := `{"ts":"2026-11-30T21:00:00.005+03:00","method":"GET","path":"/health","model":null,"status":200,"duration_ms":1.500,"trace_id":"t-1"}`
	if len(lines) != 1 || lines[0] != want {
		t.Fatalf("lines %q\nwant %s", lines, want)
	}
	// The option reaches the log: a listener with local time writes a
	// timestamp in time.Local's offset.
	p2 := filepath.Join(t.TempDir(), "b.log")
	e := startDyn(t, Options{AccessLog: p2, AccessLogLocalTime: true})
	e.do(t, "GET", "/health", "")
	l2 := readLines(t, p2)
	if len(l2) != 1 || !strings.Contains(l2[0], time.Now().In(time.Local).Format("-07:00")+`","method"`) &&
		!(time.Now().In(time.Local).Format("Z07:00") == "Z" && strings.Contains(l2[0], `Z","method"`)) {
		t.Fatalf("local-time line %q", l2)
	}
}

func readLines(t testing.TB, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// TestDynamoNoReopenWithoutLog: /reopen_logs is a successful no-op without
// an access log.
func TestDynamoNoReopenWithoutLog(t *testing.T) {
	e := startDyn(t, Options{})
	wantResp(t, e.do(t, "POST", "/reopen_logs", ""), 200, `{"status":"ok"}`)
}

// TestDynamoPerCopyRemovesAndReclaim (reference §C.9): a block cached in two
// physical copies survives the first per-copy remove; removing the last copy
// drops it, and once every block is gone the context's entries are gone too
// (its memory is returned with it).
func TestDynamoPerCopyRemovesAndReclaim(t *testing.T) {
	e := startDyn(t, Options{})
	s := registerDyn(t, e, 1, 0, 4, "m", "")
	toks := seqTokens(8, 1)
	apply(t, s, engineStore("", 4, []uint64{1, 2}, 0, false, toks))
	apply(t, s, engineStore("", 4, []uint64{1, 2}, 0, false, toks)) // a second copy
	q := `{"token_ids":` + jsonEnc(toks) + `,"model_name":"m"}`
	gpu := func() string {
		var v struct {
			Instances map[string]struct{ GPU int } `json:"instances"`
		}
		r := e.do(t, "POST", "/query", q)
		if err := json.Unmarshal(r.body, &v); err != nil {
			t.Fatal(err)
		}
		return strconv.Itoa(v.Instances["1"].GPU)
	}
	apply(t, s, engineRemove("", 2))
	if g := gpu(); g != "8" {
		t.Fatalf("after one per-copy remove gpu=%s, want 8", g)
	}
	apply(t, s, engineRemove("", 2))
	if g := gpu(); g != "4" {
		t.Fatalf("after both copies removed gpu=%s, want 4", g)
	}
	apply(t, s, engineRemove("", 1, 1))
	gv := e.ix.GlobalView()
	if len(gv.Contexts) != 1 || gv.Contexts[0].PrefixCount != 0 {
		t.Fatalf("blocks left: %+v", gv.Contexts)
	}
	if tb := e.ix.TierBlocks(); tb != [core.NumTiers]int{} {
		t.Fatalf("holdings left: %v", tb)
	}
}
