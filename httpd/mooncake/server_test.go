package mooncake

import (
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
	"github.com/seed-c7a81618/conductor/httpd/internal/apitest"
)

func TestRoutesAndMethods(t *testing.T) {
	env := startEnv(t, Options{}, core.Options{})
	cases := []struct {
		method, path, ct string
		status           int
		allow            string
		wantCT           string
	}{
		{"GET", "/query", "", 405, "POST", "application/json"},
		{"GET", "/query", "application/msgpack", 405, "POST", "application/msgpack"},
		{"PUT", "/register", "", 405, "POST", "application/json"},
		{"GET", "/unregister", "", 405, "POST", "application/json"},
		{"GET", "/query_by_hash", "", 405, "POST", "application/json"},
		{"POST", "/global_view", "application/msgpack", 405, "GET, HEAD", "application/msgpack"},
		{"POST", "/services", "", 405, "GET, HEAD", "application/json"},
		{"DELETE", "/health", "", 405, "GET, HEAD", "application/json"},
		{"POST", "/metrics", "", 405, "GET, HEAD", "application/json"},
		{"POST", "/v2/query", "application/msgpack", 404, "", "application/msgpack"},
		{"GET", "/", "", 404, "", "application/json"},
		{"GET", "/query/", "", 404, "", "application/json"},
	}
	for _, c := range cases {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			r := env.do(t, c.method, c.path, c.ct, nil)
			if r.status != c.status || r.allow != c.allow || r.ct != c.wantCT {
				t.Fatalf("got %d allow=%q ct=%q, want %d allow=%q ct=%q", r.status, r.allow, r.ct, c.status, c.allow, c.wantCT)
			}
			m := decodeMap(t, r)
			want := map[int]string{404: "not_found", 405: "method_not_allowed"}[c.status]
			if len(m) != 2 || m["error"] == nil || m["reason"] != want {
				t.Fatalf("body %v, want the envelope with reason %s", m, want)
			}
		})
	}
	r := env.do(t, "HEAD", "/health", "", nil)
	if r.status != 200 || len(r.body) != 0 {
		t.Fatalf("HEAD /health: %d %q", r.status, r.body)
	}
}

func TestBodyLimit(t *testing.T) {
	env := startEnv(t, Options{MaxBodyBytes: 1 << 10}, core.Options{})
	big := mp(obj{"model", "m", "block_size", 16, "token_ids", leBin(seqTokens(1024, 0)...)})
	r := env.postMP(t, "/query", big)
	if r.status != 413 {
		t.Fatalf("status %d", r.status)
	}
	checkError(t, r, 413, "limit_exceeded", "", -1)
	r = env.postJSON(t, "/query", jsonEnc(obj{"model", "m", "block_size", 16, "token_ids", seqTokens(1024, 0)}))
	checkError(t, r, 413, "limit_exceeded", "", -1)
	if r.ct != "application/json" {
		t.Fatalf("ct %q", r.ct)
	}
	// bodies are streamed, so the refusal is counted under the route it was for
	if m := string(env.do(t, "GET", "/metrics", "", nil).body); !strings.Contains(m, `conductor_http_requests_total{path="/query",code="413"} 2`) ||
		!strings.Contains(m, `conductor_http_request_errors_total{path="/query",reason="limit_exceeded"} 2`) {
		t.Errorf("413s not counted:\n%s", m)
	}
	// a body under the limit still works on a fresh connection
	r = env.postMP(t, "/query", mp(obj{"model", "m", "block_size", 16, "token_ids", []int32{1}}))
	if r.status != 200 {
		t.Fatalf("status %d", r.status)
	}
}

func TestServicesAndGlobalView(t *testing.T) {
	env := startEnv(t, Options{}, core.Options{})
	// empty
	for _, ct := range []string{"", "application/msgpack"} {
		r := env.do(t, "GET", "/services", "", nil, "Accept", ct)
		if r.status != 200 || canon(t, r) != canonJSON(t, `{"count":0,"services":[]}`) {
			t.Fatalf("%d %s", r.status, canon(t, r))
		}
		r = env.do(t, "GET", "/global_view", "", nil, "Accept", ct)
		if r.status != 200 || canon(t, r) != canonJSON(t, `{"context_count":0,"contexts":[]}`) {
			t.Fatalf("%d %s", r.status, canon(t, r))
		}
	}
	for _, o := range []obj{
		with(baseReg(), "cache_group", 0, "replay_endpoint", "tcp://127.0.0.1:5558"),
		with(baseReg(), "instance_id", "engine-b", "endpoint", "tcp://b:1", "dp_rank", 3),
		with(baseReg(), "instance_id", "engine-b", "endpoint", "tcp://b:2", "dp_rank", 1),
		with(baseReg(), "instance_id", "x", "endpoint", "tcp://x:1", "modelname", "std", "type", "standard", "hash_profile", drop, "tenant_id", "t1", "additionalsalt", "s"),
		with(baseReg(), "instance_id", "pool", "endpoint", "tcp://pool:1", "type", "Mooncake"),
	} {
		var r response
		if o.Has("additionalsalt") { // a JSON-only key
			r = env.postJSON(t, "/register", jsonEnc(o))
		} else {
			r = env.postMP(t, "/register", mp(o))
		}
		if r.status != 200 {
			t.Fatalf("%d %s", r.status, canon(t, r))
		}
	}
	// populate two blocks so prefix_count is visible
	h := chain(t, cborProfile(t), seqTokens(32, 1), 16, "", "")
	apply(t, env.reg.sub(t, "engine-a", "default", 0), storeBatch("GPU", 16, h, nil))

	cbor := `{"strategy":"vllm_v1","algorithm":"sha256_cbor","python_hash_seed":"0","root_digest":"4e1195df020de59e0d65a33a4279f1183e7ae4e5d980e309f8b55adff2e61c3e","index_projection":"low64_be"}`
	xxh3 := `{"strategy":"xxh3","algorithm":"xxh3_64","python_hash_seed":"1337","root_digest":"0000000000000000000000000000000000000000000000000000000000000000","index_projection":"seq64"}`
	unverified := `{"state":"unverified","samples":0,"detail":"","found":null}` // no event carried token_ids
	// held: the blocks each registration holds (engine-a stored two);
	// policy and bound are the defaults.
	svc := func(ep, replay, typ, model, tenant, inst string, rank int, group, profile, salt string, held int) string {
		return `{"Endpoint":"` + ep + `","ReplayEndpoint":"` + replay + `","Type":"` + typ + `","ModelName":"` + model +
			`","LoraName":"","TenantID":"` + tenant + `","InstanceID":"` + inst + `","BlockSize":16,"DPRank":` +
			string(rune('0'+rank)) + `,"CacheGroup":` + group + `,"HashProfile":` + profile + `,"HashCheck":` + unverified + `,"AdditionalSalt":"` + salt +
			`","Source":"api","Connection":null,"GapPolicy":"keep","MaxBlocks":16777216,"HeldBlocks":` + string(rune('0'+held)) + `}`
	}
	wantServices := `{"count":5,"services":[` + strings.Join([]string{
		svc("tcp://127.0.0.1:5557", "tcp://127.0.0.1:5558", "vLLM", "m", "default", "engine-a", 0, "0", cbor, "", 2),
		svc("tcp://b:2", "", "vLLM", "m", "default", "engine-b", 1, "null", cbor, "", 0),
		svc("tcp://b:1", "", "vLLM", "m", "default", "engine-b", 3, "null", cbor, "", 0),
		svc("tcp://pool:1", "", "Mooncake", "m", "default", "pool", 0, "null", cbor, "", 0),
		svc("tcp://x:1", "", "standard", "std", "t1", "x", 0, "null", xxh3, "s", 0),
	}, ",") + `]}`
	wantView := `{"context_count":2,"contexts":[
  {"model_name":"m","lora_name":"","block_size":16,"tenant_id":"default","prefix_count":2,"hash_profile":` + cbor + `,
   "instances":{"engine-a":[0],"engine-b":[1,3]}},
  {"model_name":"std","lora_name":"","block_size":16,"tenant_id":"t1","prefix_count":0,"hash_profile":` + xxh3 + `,
   "instances":{"x":[0]}}]}`
	for _, neg := range [][]string{
		{"Accept", "application/json"},
		{"Accept", "application/msgpack"},
		{"Accept", "*/*"},
		{"Content-Type", "application/msgpack"},
	} {
		for _, c := range []struct{ path, want string }{{"/services", wantServices}, {"/global_view", wantView}} {
			r := env.do(t, "GET", c.path, "", nil, neg...)
			wantCT := "application/json"
			if strings.Contains(neg[1], "msgpack") {
				wantCT = "application/msgpack"
			}
			if r.status != 200 || r.ct != wantCT {
				t.Fatalf("%s %v: %d %q", c.path, neg, r.status, r.ct)
			}
			if got := canon(t, r); got != canonJSON(t, c.want) {
				t.Fatalf("%s %v:\n got %s\nwant %s", c.path, neg, got, canonJSON(t, c.want))
			}
		}
	}
	for _, f := range []struct{ q, ct string }{{"?format=msgpack", "application/msgpack"}, {"?format=json", "application/json"}} {
		r := env.do(t, "GET", "/services"+f.q, "", nil, "Accept", "application/msgpack")
		if f.q == "?format=json" && r.ct != f.ct || f.q == "?format=msgpack" && r.ct != f.ct {
			t.Fatalf("%s: %q", f.q, r.ct)
		}
	}
}

func TestHealth(t *testing.T) {
	env := startEnv(t, Options{Version: "v1.2.3"}, core.Options{})
	r := env.do(t, "GET", "/health", "", nil)
	if r.status != 200 || r.ct != "application/json" {
		t.Fatalf("%d %q", r.status, r.ct)
	}
	m := decodeMap(t, r)
	be := hash.Backend()
	if m["status"] != "ok" || m["version"] != "v1.2.3" || !strings.HasPrefix(m["go"].(string), "go") || m["hash_backend"] != be.Name {
		t.Fatalf("%v", m)
	}
	if feats, _ := m["cpu_features"].([]any); len(feats) != len(be.Features) {
		t.Fatalf("cpu_features %v, want %v", m["cpu_features"], be.Features)
	}
	if _, ok := m["uptime_s"]; !ok || len(m) != 6 {
		t.Fatalf("%v", m)
	}
	r = env.do(t, "GET", "/health?format=msgpack", "", nil)
	if mm := decodeMap(t, r); r.ct != "application/msgpack" || mm["status"] != "ok" || len(mm) != 6 {
		t.Fatalf("%q %v", r.ct, mm)
	}
}

// TestHealthNotReady: Options.Ready's error turns /health into 503
// not_ready with the error envelope (the error's text, reason not_ready; a
// NATS replica catching up), in both
// encodings; back to 200 ok once it returns nil.
func TestHealthNotReady(t *testing.T) {
	var ready atomic.Bool
	env := startEnv(t, Options{Ready: func() error {
		if ready.Load() {
			return nil
		}
		return errors.New("catching up (12 messages behind, max 5)")
	}}, core.Options{})
	for _, q := range []string{"", "?format=msgpack"} {
		r := env.do(t, "GET", "/health"+q, "", nil)
		m := decodeMap(t, r)
		if r.status != 503 || m["status"] != "not_ready" || m["error"] != "catching up (12 messages behind, max 5)" || m["reason"] != "not_ready" || len(m) != 8 {
			t.Fatalf("%q: %d %v", q, r.status, m)
		}
	}
	// /livez is the liveness probe: 200 whatever Ready says.
	if r := env.do(t, "GET", "/livez", "", nil); r.status != 200 || string(r.body) != `{"status":"alive"}` {
		t.Fatalf("/livez while not ready: %d %s", r.status, r.body)
	}
	ready.Store(true)
	r := env.do(t, "GET", "/health", "", nil)
	if m := decodeMap(t, r); r.status != 200 || m["status"] != "ok" || len(m) != 6 {
		t.Fatalf("%d %v", r.status, m)
	}
	if r := env.do(t, "POST", "/livez", "", nil); r.status == 200 {
		t.Fatalf("POST /livez: %d", r.status)
	}
}

func TestMetrics(t *testing.T) {
	extra := metrics.NewSet()
	extra.NewCounter(`conductor_ingest_test_total`).Add(7)
	env := startEnv(t, Options{ExtraMetrics: []*metrics.Set{extra}}, core.Options{})
	if r := env.postMP(t, "/register", mp(baseReg())); r.status != 200 {
		t.Fatal(r.status)
	}
	h := chain(t, cborProfile(t), seqTokens(32, 1), 16, "", "")
	apply(t, env.reg.sub(t, "engine-a", "default", 0), storeBatch("GPU", 16, h, nil))
	env.postMP(t, "/query", mp(obj{"model", "m", "block_size", 16, "token_ids", seqTokens(32, 1)}))
	env.postMP(t, "/query", mp(obj{"model", "m", "block_size", 0, "token_ids", seqTokens(32, 1)}))
	env.postJSON(t, "/query", `{"model":"zz","block_size":16,"token_ids":[1]}`)
	env.do(t, "GET", "/nope", "", nil)

	r := env.do(t, "GET", "/metrics", "", nil)
	if r.status != 200 || !strings.HasPrefix(r.ct, "text/plain") {
		t.Fatalf("%d %q", r.status, r.ct)
	}
	text := string(r.body)
	for _, want := range []string{
		`conductor_http_requests_total{path="/query",code="200"} 2`,
		`conductor_http_requests_total{path="/query",code="400"} 1`,
		`conductor_http_requests_total{path="/register",code="200"} 1`,
		`conductor_http_requests_total{path="other",code="404"} 1`,
		`conductor_http_request_errors_total{path="/query",reason="out_of_range"} 1`,
		`conductor_http_request_duration_seconds_bucket{path="/query",le="+Inf"} 3`,
		`conductor_query_tokens_total 33`,
		`conductor_query_context_misses_total{reason="unknown_model"} 1`,
		`conductor_query_context_misses_total{reason="unknown_tenant"} 0`,
		`conductor_query_hit_rows_total 1`,
		`conductor_contexts 1`,
		`conductor_prefixes 2`,
		`conductor_blocks{tier="device"} 2`,
		`conductor_blocks{tier="disk"} 0`,
		`conductor_registrations{type="vLLM"} 1`,
		`conductor_index_blocks_stored_total 2`,
		`conductor_ingest_test_total 7`,
		`go_goroutines`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if t.Failed() {
		t.Log(text)
	}
}

// TestMalformedHTTPRequest: a request fasthttp cannot parse gets a fixed 400
// invalid_request answer that does not echo the request back.
func TestMalformedHTTPRequest(t *testing.T) {
	env := startEnv(t, Options{}, core.Options{})
	c, err := net.DialTimeout("tcp", env.addr, apitest.WaitBound)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(apitest.WaitBound))
	secret := "SECRET-" + strings.Repeat("x", 64)
	if _, err := c.Write([]byte("POST /query HTTP/1.1\r\nHost: h\r\nContent-Length: nope-" + secret + "\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(c)
	resp := string(out)
	if !strings.HasPrefix(resp, "HTTP/1.1 400") || !strings.Contains(resp, `"reason":"invalid_request"`) || strings.Contains(resp, "SECRET") {
		t.Fatalf("response:\n%s", resp)
	}
}
