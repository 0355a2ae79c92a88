package rpc

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/mooncake"
	"github.com/seed-c7a81618/conductor/httpd/server"
)

// rpcEnv is the Mooncake API and the RPC surface over one Core, without
// listeners: requests run through the handlers directly.
type rpcEnv struct {
	s   *mooncake.Server
	c   *server.Core
	ix  *core.Index
	reg *coreRegistrar
	r   *Server
	// gateReg is the registrar behind the Core's Gate: reg, or what a test
	// puts in its place.
	gateReg *swapRegistrar
}

func newRPCEnv(t testing.TB, opts Options) *rpcEnv {
	t.Helper()
	opts.Logger = quietLogger()
	ix := core.New(core.Options{Logger: opts.Logger})
	reg := newCoreRegistrar(ix)
	gateReg := &swapRegistrar{reg}
	c, err := server.New(ix, gateReg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return &rpcEnv{s: mooncake.New(c), c: c, ix: ix, reg: reg, r: New(c), gateReg: gateReg}
}

// httpDo runs one request through the Mooncake API handler.
func (e *rpcEnv) httpDo(t testing.TB, method, path, ct string, body []byte) response {
	t.Helper()
	var req fasthttp.Request
	req.Header.SetMethod(method)
	req.SetRequestURI(path)
	if ct != "" {
		req.Header.SetContentType(ct)
	}
	req.SetBody(body)
	ctx := &fasthttp.RequestCtx{}
	ctx.Init(&req, nil, nil)
	e.s.Handler(ctx)
	return response{status: ctx.Response.StatusCode(), ct: string(ctx.Response.Header.ContentType()),
		body: append([]byte(nil), ctx.Response.Body()...)}
}

// rpcDo runs one request through the RPC handler.
func rpcDo(t testing.TB, r *Server, method, path, body string) response {
	t.Helper()
	return rpcDoCT(t, r, method, path, "application/json", body)
}

func rpcDoCT(t testing.TB, r *Server, method, path, ct, body string) response {
	t.Helper()
	var req fasthttp.Request
	req.Header.SetMethod(method)
	req.SetRequestURI(path)
	req.Header.SetContentType(ct)
	req.SetBody([]byte(body))
	ctx := &fasthttp.RequestCtx{}
	ctx.Init(&req, nil, nil)
	r.Handler(ctx)
	return response{status: ctx.Response.StatusCode(), ct: string(ctx.Response.Header.ContentType()),
		body: append([]byte(nil), ctx.Response.Body()...), allow: string(ctx.Response.Header.Peek("Allow"))}
}

func rpcCall(t testing.TB, r *Server, method, body string) response {
	t.Helper()
	return rpcDo(t, r, "POST", "/rpc/"+method, body)
}

// checkRet asserts an RPC answer: HTTP 200, ret, and (for failures) the
// reason and field, with exactly the payload keys of the method's failure shape.
func checkRet(t testing.TB, r response, ret int, reason, field string, payload ...string) {
	t.Helper()
	if r.status != 200 || r.ct != "application/json" {
		t.Fatalf("status %d %q, want 200 JSON: %s", r.status, r.ct, r.body)
	}
	m := decodeMap(t, r)
	if got := m["ret"]; got != json.Number(itoa(ret)) {
		t.Fatalf("ret %v, want %d: %s", got, ret, r.body)
	}
	if ret == RetOK {
		return
	}
	if got, _ := m["reason"].(string); got != reason {
		t.Fatalf("reason %q, want %q: %s", got, reason, r.body)
	}
	if got, _ := m["field"].(string); got != field {
		t.Fatalf("field %q, want %q: %s", got, field, r.body)
	}
	if _, ok := m["error"].(string); !ok {
		t.Fatalf("no error text: %s", r.body)
	}
	for _, k := range payload {
		if _, ok := m[k]; !ok {
			t.Fatalf("failure lacks %q: %s", k, r.body)
		}
	}
}

func itoa(i int) string { return strings.TrimSpace(jsonEnc(i)) }

func b64Tokens(tokens []int32) string { return base64.StdEncoding.EncodeToString(leBin(tokens...)) }

// TestRPCQuery: the RPC Query answers the hand-worked tiered example of
// tieredEnv with the Python shape {"ret": 0, "hits": {id: row}} (rows as in the
// msgpack dialect), for token_ids as a JSON array and as base64 of
// little-endian int32s (also with JSON-escaped slashes).
func TestRPCQuery(t *testing.T) {
	env, tokens, _ := tieredEnv(t)
	r := New(env.c)
	prompt := append(append([]int32(nil), tokens...), 7, 7, 7)
	hits := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(tieredMsgpack), `{"instances":`), "}")
	want := `{"ret":0,"hits":` + hits + `}`
	b64 := b64Tokens(prompt)
	if !strings.Contains(b64, "/") && !strings.Contains(b64, "+") {
		t.Logf("base64 has no '/' or '+': the escaped form is the same text")
	}
	cases := []struct{ name, body, want string }{
		{"array", jsonEnc(obj{"model_name", "m", "block_size", 16, "token_ids", prompt}), want},
		{"base64", jsonEnc(obj{"model_name", "m", "block_size", 16, "token_ids", b64}), want},
		{"base64 escaped slashes", `{"model_name":"m","block_size":16,"token_ids":"` + strings.ReplaceAll(b64, "/", `\/`) + `"}`, want},
		{"all arguments", jsonEnc(obj{"model_name", "m", "lora_name", "", "block_size", 16, "tenant_id", "default",
			"token_ids", b64, "cache_salt", "", "instance_filter", ""}), want},
		{"empty tenant is default", jsonEnc(obj{"model_name", "m", "block_size", 16, "tenant_id", "", "token_ids", b64}), want},
		{"instance_filter", jsonEnc(obj{"model_name", "m", "block_size", 16, "token_ids", b64, "instance_filter", "engine-b"}),
			`{"ret":0,"hits":{"engine-b":{"longest_matched":48,"dp":{"0":32},"rank_matches":{"0":{"device":32,"cpu_local":32,"cpu_share":48,"disk":48}},"device":32,"cpu_local":32,"cpu_share":48,"disk":48}}}`},
		{"unknown instance", jsonEnc(obj{"model_name", "m", "block_size", 16, "token_ids", b64, "instance_filter", "nope"}), `{"ret":0,"hits":{}}`},
		// No context: no rows, and the reason (server.MissReason).
		{"unknown model", jsonEnc(obj{"model_name", "other", "block_size", 16, "token_ids", b64}), `{"ret":0,"hits":{},"miss":"unknown_model"}`},
		{"unknown tenant", jsonEnc(obj{"model_name", "m", "block_size", 16, "token_ids", b64, "tenant_id", "t2"}), `{"ret":0,"hits":{},"miss":"unknown_tenant"}`},
		{"empty base64", jsonEnc(obj{"model_name", "m", "block_size", 16, "token_ids", ""}),
			`{"ret":0,"hits":{"engine-a":{"longest_matched":0,"dp":{"0":0,"1":0},"rank_matches":{"0":{"device":0,"cpu_local":0,"cpu_share":0,"disk":0},"1":{"device":0,"cpu_local":0,"cpu_share":0,"disk":0}},"device":0,"cpu_local":0,"cpu_share":0,"disk":0},` +
				`"engine-b":{"longest_matched":0,"dp":{"0":0},"rank_matches":{"0":{"device":0,"cpu_local":0,"cpu_share":0,"disk":0}},"device":0,"cpu_local":0,"cpu_share":0,"disk":0}}}`},
	}
	for _, c := range []struct {
		name string
		q    obj
	}{
		{"msgpack bin", obj{"model_name", "m", "block_size", 16, "token_ids", leBin(prompt...)}},
		{"msgpack bin shifted", obj{"tenant_id", "", "model_name", "m", "block_size", 16, "token_ids", leBin(prompt...)}},
		{"msgpack array", obj{"model_name", "m", "block_size", 16, "token_ids", prompt, "lora_name", "", "cache_salt", "", "instance_filter", ""}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := rpcDoCT(t, r, "POST", "/rpc/Query", "application/msgpack", string(mp(c.q)))
			if got.status != 200 || got.ct != "application/json" || canon(t, got) != canonJSON(t, want) {
				t.Fatalf("%d %s: %s", got.status, got.ct, got.body)
			}
		})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := rpcCall(t, r, "Query", c.body)
			if got.status != 200 {
				t.Fatalf("status %d: %s", got.status, got.body)
			}
			if canon(t, got) != canonJSON(t, c.want) {
				t.Fatalf("got  %s\nwant %s", canon(t, got), canonJSON(t, c.want))
			}
		})
	}
	// The same rows as the HTTP msgpack dialect, by construction of both.
	mpResp := env.postMP(t, "/query", mp(obj{"model", "m", "block_size", 16, "token_ids", prompt}))
	rpcResp := decodeMap(t, rpcCall(t, r, "Query", jsonEnc(obj{"model_name", "m", "block_size", 16, "token_ids", b64})))
	if !deepEqual(decodeMap(t, mpResp)["instances"], rpcResp["hits"]) {
		t.Fatalf("RPC hits differ from msgpack instances:\n%v\n%v", rpcResp["hits"], decodeMap(t, mpResp)["instances"])
	}
}

// TestRPCQueryErrors: parse failures are INVALID_PARAMS with the HTTP API's
// reason and field, and the failure payload hits {}.
func TestRPCQueryErrors(t *testing.T) {
	env, tokens, _ := tieredEnv(t)
	r := New(env.c)
	base := obj{"model_name", "m", "block_size", 16}
	cases := []struct {
		name, body, reason, field string
	}{
		{"not JSON", `{"model_name":`, "invalid_json", ""},
		{"empty body", ``, "invalid_json", ""},
		{"missing model_name", jsonEnc(obj{"block_size", 16, "token_ids", tokens}), "missing", "model_name"},
		{"HTTP key model", jsonEnc(obj{"model", "m", "block_size", 16, "token_ids", tokens}), "unknown_field", "model"},
		{"HTTP key instance_id", jsonEnc(with(base, "token_ids", tokens, "instance_id", "x")), "unknown_field", "instance_id"},
		{"missing block_size", jsonEnc(obj{"model_name", "m", "token_ids", tokens}), "missing", "block_size"},
		{"missing token_ids", jsonEnc(base), "missing", "token_ids"},
		{"empty model_name", jsonEnc(obj{"model_name", "", "block_size", 16, "token_ids", tokens}), "invalid_value", "model_name"},
		{"block_size zero", jsonEnc(obj{"model_name", "m", "block_size", 0, "token_ids", tokens}), "out_of_range", "block_size"},
		{"block_size bool", jsonEnc(obj{"model_name", "m", "block_size", true, "token_ids", tokens}), "invalid_type", "block_size"},
		{"token float", jsonEnc(with(base, "token_ids", rawJSON(`[1, 2.5]`))), "invalid_type", "token_ids"},
		// JSON token ids are u32 in the hashing standard (seed 000): -2^31..2^32-1 pass, 2^32 does not
		{"token beyond u32", jsonEnc(with(base, "token_ids", rawJSON(`[4294967296]`))), "out_of_range", "token_ids"},
		{"token_ids object", jsonEnc(with(base, "token_ids", rawJSON(`{}`))), "invalid_type", "token_ids"},
		{"bad base64", jsonEnc(with(base, "token_ids", "!!!!")), "invalid_value", "token_ids"},
		{"base64 of 6 bytes", jsonEnc(with(base, "token_ids", base64.StdEncoding.EncodeToString([]byte{1, 2, 3, 4, 5, 6}))), "invalid_value", "token_ids"},
		{"duplicate key", `{"model_name":"m","model_name":"m","block_size":16,"token_ids":[]}`, "invalid_value", "model_name"},
	}
	mpCases := []struct {
		name, ct, body, reason, field string
	}{
		{"msgpack HTTP key", "application/msgpack", string(mp(obj{"model", "m", "block_size", 16, "token_ids", tokens})), "unknown_field", "model"},
		{"msgpack odd bin", "application/msgpack", string(mp(obj{"model_name", "m", "block_size", 16, "token_ids", []byte{1, 2, 3}})), "invalid_value", "token_ids"},
		{"msgpack truncated", "application/msgpack", string(trunc(mp(obj{"model_name", "m", "block_size", 16, "token_ids", tokens}), 2)), "invalid_msgpack", ""},
		// a JSON body is read as JSON under any other type (the tolerant reader); anything else is refused
		{"unsupported content type", "text/plain", "model_name=m", "unsupported_content_type", ""},
	}
	for _, c := range mpCases {
		t.Run(c.name, func(t *testing.T) {
			checkRet(t, rpcDoCT(t, r, "POST", "/rpc/Query", c.ct, c.body), RetInvalidParams, c.reason, c.field, "hits")
		})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := rpcCall(t, r, "Query", c.body)
			checkRet(t, got, RetInvalidParams, c.reason, c.field, "hits")
			if m := decodeMap(t, got); len(m["hits"].(map[string]any)) != 0 {
				t.Fatalf("hits not empty: %s", got.body)
			}
		})
	}
}

// TestRPCQueryTokenLimit: more than MaxQueryTokens tokens is out_of_range in
// both token forms.
func TestRPCQueryTokenLimit(t *testing.T) {
	r := newRPCEnv(t, Options{MaxQueryTokens: 8}).r
	for _, tok := range []any{seqTokens(9, 1), b64Tokens(seqTokens(9, 1))} {
		checkRet(t, rpcCall(t, r, "Query", jsonEnc(obj{"model_name", "m", "block_size", 4, "token_ids", tok})),
			RetInvalidParams, "out_of_range", "token_ids", "hits")
	}
	for _, tok := range []any{seqTokens(8, 1), b64Tokens(seqTokens(8, 1))} {
		checkRet(t, rpcCall(t, r, "Query", jsonEnc(obj{"model_name", "m", "block_size", 4, "token_ids", tok})), RetOK, "", "")
	}
}

// pyReg is a valid Python register() config (the seed's example).
func pyReg() obj {
	return obj{
		"instance_id", "vllm-0",
		"endpoint", "tcp://127.0.0.1:5557",
		"publisher_type", "vLLM",
		"model_name", "my-model",
		"block_size", 16,
		"dp_rank", 0,
		"hash_profile", cborSpec(),
	}
}

// httpOf renames the Python keys to the HTTP /register keys.
func httpOf(o obj) obj {
	out := append(obj(nil), o...)
	for i := 0; i < len(out); i += 2 {
		switch out[i] {
		case "publisher_type":
			out[i] = "type"
		case "model_name":
			out[i] = "modelname"
		}
	}
	return out
}

// TestRPCRegisterSharedValidation: the RPC Register and the HTTP /register run
// one validator: the same bad value is refused by both, with the same reason
// and field (RPC: INVALID_PARAMS; HTTP: 400), and the same good configuration
// yields the same registration.
func TestRPCRegisterSharedValidation(t *testing.T) {
	env := newRPCEnv(t, Options{})
	r := env.r
	cases := []struct {
		name          string
		cfg           obj
		reason, field string
	}{
		{"endpoint empty", with(pyReg(), "endpoint", ""), "invalid_value", "endpoint"},
		{"endpoint missing", with(pyReg(), "endpoint", drop), "missing", "endpoint"},
		{"endpoint not a string", with(pyReg(), "endpoint", 5), "invalid_type", "endpoint"},
		{"instance_id missing", with(pyReg(), "instance_id", drop), "missing", "instance_id"},
		{"instance_id empty", with(pyReg(), "instance_id", ""), "invalid_value", "instance_id"},
		{"block_size zero", with(pyReg(), "block_size", 0), "out_of_range", "block_size"},
		{"block_size negative", with(pyReg(), "block_size", -16), "out_of_range", "block_size"},
		{"block_size string", with(pyReg(), "block_size", "16"), "invalid_type", "block_size"},
		{"lora_name not a string", with(pyReg(), "lora_name", 5), "invalid_type", "lora_name"},
		{"cache_group 1", with(pyReg(), "cache_group", 1), "unsupported", "cache_group"},
		{"dp_rank negative", with(pyReg(), "dp_rank", -1), "out_of_range", "dp_rank"},
		{"dp_rank beyond int32", with(pyReg(), "dp_rank", int64(1)<<31), "out_of_range", "dp_rank"},
		{"hash_profile not a map", with(pyReg(), "hash_profile", "vllm_v1"), "invalid_type", "hash_profile"},
		{"hash_profile root_digest", with(pyReg(), "hash_profile", with(cborSpec(), "root_digest", strings.Repeat("0", 64))), "unknown_field", "root_digest"},
		{"hash_profile unknown strategy", with(pyReg(), "hash_profile", with(cborSpec(), "strategy", "vllm_v2")), "invalid_value", "strategy"},
		{"hash_profile bad seed", with(pyReg(), "hash_profile", with(cborSpec(), "python_hash_seed", "x")), "invalid_value", "python_hash_seed"},
		{"hash_profile seed not a string", with(pyReg(), "hash_profile", with(cborSpec(), "python_hash_seed", 0)), "invalid_type", "python_hash_seed"},
		{"hash_profile missing algorithm", with(pyReg(), "hash_profile", with(cborSpec(), "algorithm", drop)), "missing", "algorithm"},
		{"sglang with low64", with(pyReg(), "hash_profile", obj{"strategy", "sglang", "algorithm", "sha256_raw", "index_projection", "low64_be"}), "invalid_value", "index_projection"},
		{"model_name empty", with(pyReg(), "model_name", ""), "invalid_value", ""},
		{"publisher_type empty", with(pyReg(), "publisher_type", ""), "invalid_value", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			field := c.field
			rr := rpcCall(t, r, "Register", jsonEnc(c.cfg))
			hr := env.httpDo(t, "POST", "/register", "application/json", []byte(jsonEnc(httpOf(c.cfg))))
			if field == "" { // the field is named by its dialect's key
				field = decodeMap(t, rr)["field"].(string)
				checkError(t, hr, 400, c.reason, map[string]string{"model_name": "modelname", "publisher_type": "type"}[field], -1)
			} else {
				checkError(t, hr, 400, c.reason, field, -1)
			}
			checkRet(t, rr, RetInvalidParams, c.reason, field)
		})
	}
	if n := len(env.ix.Services()); n != 0 {
		t.Fatalf("%d registrations after refused requests", n)
	}

	// Accepted: the same registration through both surfaces.
	checkRet(t, rpcCall(t, r, "Register", jsonEnc(with(pyReg(), "lora_name", "l", "tenant_id", "", "cache_group", nil,
		"replay_endpoint", "tcp://127.0.0.1:5558"))), RetOK, "", "")
	viaRPC := env.ix.Services()
	if _, err := env.reg.Unregister(core.ServiceKey{InstanceID: "vllm-0", TenantID: "default"}); err != nil {
		t.Fatal(err)
	}
	if resp := env.httpDo(t, "POST", "/register", "application/json", []byte(jsonEnc(with(httpOf(pyReg()), "lora_name", "l", "tenant_id", "", "cache_group", nil,
		"replay_endpoint", "tcp://127.0.0.1:5558")))); resp.status != 200 {
		t.Fatalf("HTTP register: %d %s", resp.status, resp.body)
	}
	if viaHTTP := env.ix.Services(); len(viaRPC) != 1 || !deepEqual(viaRPC, viaHTTP) {
		t.Fatalf("RPC registration %+v, HTTP registration %+v", viaRPC, viaHTTP)
	}
}

// TestRPCRegisterDialect: the Python names and defaults. HTTP names are
// unknown_field; publisher_type defaults to vLLM and is case-sensitive, one of
// vLLM, SGLang, Mooncake; dp_rank defaults to 0; hash_profile is required; a
// conflicting profile for the same context is INVALID_PARAMS.
func TestRPCRegisterDialect(t *testing.T) {
	env := newRPCEnv(t, Options{})
	r := env.r
	bad := []struct {
		name          string
		cfg           obj
		reason, field string
	}{
		{"modelname", with(pyReg(), "model_name", drop, "modelname", "m"), "unknown_field", "modelname"},
		{"type", with(pyReg(), "publisher_type", drop, "type", "vLLM"), "unknown_field", "type"},
		{"additionalsalt", with(pyReg(), "additionalsalt", "s"), "unknown_field", "additionalsalt"},
		{"model", with(pyReg(), "model_name", drop, "model", "m"), "unknown_field", "model"},
		{"model_name missing", with(pyReg(), "model_name", drop), "missing", "model_name"},
		{"lower-case vllm", with(pyReg(), "publisher_type", "vllm"), "invalid_value", "publisher_type"},
		{"standard", with(pyReg(), "publisher_type", "standard"), "invalid_value", "publisher_type"},
		{"hash_profile missing", with(pyReg(), "hash_profile", drop), "missing", "hash_profile"},
		{"hash_profile null", with(pyReg(), "hash_profile", nil), "missing", "hash_profile"},
		{"not an object", obj{}, "missing", "endpoint"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			checkRet(t, rpcCall(t, r, "Register", jsonEnc(c.cfg)), RetInvalidParams, c.reason, c.field)
		})
	}
	checkRet(t, rpcCall(t, r, "Register", `[1]`), RetInvalidParams, "invalid_json", "")

	checkRet(t, rpcCall(t, r, "Register", jsonEnc(with(pyReg(), "publisher_type", drop, "dp_rank", drop))), RetOK, "", "")
	checkRet(t, rpcCall(t, r, "Register", jsonEnc(with(pyReg(), "instance_id", "sg", "publisher_type", "SGLang", "dp_rank", 3, "endpoint", "tcp://127.0.0.1:6000",
		"hash_profile", obj{"strategy", "sglang", "algorithm", "sha256_raw", "index_projection", "first64_be"}, "model_name", "s"))), RetOK, "", "")
	svcs := env.ix.Services()
	if len(svcs) != 2 || svcs[0].InstanceID != "sg" || svcs[0].Type != core.PublisherSGLang || svcs[0].DPRank != 3 ||
		svcs[0].Profile.Spec.PythonHashSeed != "0" ||
		svcs[1].InstanceID != "vllm-0" || svcs[1].Type != core.PublisherVLLM || svcs[1].DPRank != 0 || svcs[1].TenantID != "default" {
		t.Fatalf("services %+v", svcs)
	}
	// idempotent repeat, then a conflicting profile for the same context
	checkRet(t, rpcCall(t, r, "Register", jsonEnc(pyReg())), RetOK, "", "")
	checkRet(t, rpcCall(t, r, "Register", jsonEnc(with(pyReg(), "instance_id", "vllm-1", "endpoint", "tcp://127.0.0.1:6001",
		"hash_profile", with(cborSpec(), "python_hash_seed", "7")))), RetInvalidParams, "invalid_registration", "")

	// A token the context's hash strategy refuses (negative, under sglang) is
	// INVALID_PARAMS naming the element, in both token forms.
	for _, tok := range []any{[]int32{1, 2, -3, 4}, b64Tokens([]int32{1, 2, -3, 4})} {
		got := rpcCall(t, r, "Query", jsonEnc(obj{"model_name", "s", "block_size", 16, "token_ids", tok}))
		checkRet(t, got, RetInvalidParams, "out_of_range", "token_ids", "hits")
		if decodeMap(t, got)["index"] != json.Number("2") {
			t.Fatalf("index: %s", got.body)
		}
	}
}

// TestRPCUnregister: an unknown subscription is SERVICE_NOT_FOUND; dp_rank and
// tenant_id default as in the Python signature.
func TestRPCUnregister(t *testing.T) {
	env := newRPCEnv(t, Options{})
	r := env.r
	checkRet(t, rpcCall(t, r, "Register", jsonEnc(pyReg())), RetOK, "", "")
	checkRet(t, rpcCall(t, r, "Register", jsonEnc(with(pyReg(), "dp_rank", 2, "tenant_id", "t", "endpoint", "tcp://127.0.0.1:6000"))), RetOK, "", "")

	get := func(body string) int {
		m := decodeMap(t, rpcCall(t, r, "Unregister", body))
		n, _ := m["ret"].(json.Number).Int64()
		return int(n)
	}
	cases := []struct {
		body string
		ret  int
	}{
		{`{"instance_id":"nope"}`, RetServiceNotFound},
		{`{"instance_id":"vllm-0","tenant_id":"t"}`, RetServiceNotFound},
		{`{"instance_id":"vllm-0","tenant_id":"t","dp_rank":2}`, RetOK},
		{`{"instance_id":"vllm-0","tenant_id":"t","dp_rank":2}`, RetServiceNotFound},
		{`{"instance_id":"vllm-0","tenant_id":""}`, RetOK},
		{`{"instance_id":"vllm-0"}`, RetServiceNotFound},
	}
	for i, c := range cases {
		if got := get(c.body); got != c.ret {
			t.Fatalf("case %d %s: ret %d, want %d", i, c.body, got, c.ret)
		}
	}
	checkRet(t, rpcCall(t, r, "Unregister", `{"tenant_id":"t"}`), RetInvalidParams, "missing", "instance_id")
	checkRet(t, rpcCall(t, r, "Unregister", `{"instance_id":"a","dp_rank":-1}`), RetInvalidParams, "invalid_value", "dp_rank")
	checkRet(t, rpcCall(t, r, "Unregister", `{"instance_id":"a","modelname":"m"}`), RetInvalidParams, "unknown_field", "modelname")
	if len(env.ix.Services()) != 0 {
		t.Fatal("registrations left")
	}
}

// TestRPCViews: GetGlobalView and ListServices carry the HTTP views' content
// (the services without the HTTP view's own keys, AdditionalSalt, Source,
// Connection, GapPolicy, MaxBlocks and HeldBlocks: the 11 export keys and
// HashCheck) after "ret".
func TestRPCViews(t *testing.T) {
	env, _, _ := tieredEnv(t)
	r := New(env.c)
	for _, c := range []struct{ method, httpPath, list string }{
		{"GetGlobalView", "/global_view", "contexts"},
		{"ListServices", "/services", "services"},
	} {
		for _, body := range []string{"", "{}", " { } "} {
			got := decodeMap(t, rpcCall(t, r, c.method, body))
			want := decodeMap(t, env.do(t, "GET", c.httpPath, "", nil))
			if c.method == "ListServices" {
				for _, s := range want["services"].([]any) {
					for _, k := range []string{"AdditionalSalt", "Source", "Connection", "GapPolicy", "MaxBlocks", "HeldBlocks"} {
						delete(s.(map[string]any), k)
					}
				}
			}
			want["ret"] = json.Number("0")
			if !deepEqual(got, want) {
				t.Fatalf("%s(%q):\n got %v\nwant %v", c.method, body, got, want)
			}
			if len(got[c.list].([]any)) == 0 {
				t.Fatalf("%s: empty", c.method)
			}
		}
		checkRet(t, rpcCall(t, r, c.method, `{"x":1}`), RetInvalidParams, "unknown_field", "x")
		checkRet(t, rpcCall(t, r, c.method, `{`), RetInvalidParams, "invalid_json", "")
	}
	svc := decodeMap(t, rpcCall(t, r, "ListServices", ""))["services"].([]any)[0].(map[string]any)
	if got := strings.Join(keys(svc), ","); got != "BlockSize,CacheGroup,DPRank,Endpoint,HashCheck,HashProfile,InstanceID,LoraName,ModelName,ReplayEndpoint,TenantID,Type" {
		t.Fatalf("service keys %s", got)
	}
	failed := decodeMap(t, rpcCall(t, r, "GetGlobalView", `{"x":1}`))
	if failed["context_count"] != json.Number("0") || len(failed["contexts"].([]any)) != 0 {
		t.Fatalf("failure payload %v", failed)
	}
}

// TestRPCRouting: unknown methods are 404 and other verbs 405, both with ret
// RPC_FAIL; the RPC handler serves no HTTP API route.
func TestRPCRouting(t *testing.T) {
	env := newRPCEnv(t, Options{})
	r := env.r
	for _, c := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{"POST", "/rpc/Nope", 404, ""},
		{"POST", "/query", 404, ""},
		{"POST", "/rpc/query", 404, ""},
		{"GET", "/rpc/ListServices", 405, "POST"},
		{"PUT", "/rpc/Query", 405, "POST"},
	} {
		got := rpcDo(t, r, c.method, c.path, "{}")
		m := decodeMap(t, got)
		if got.status != c.status || got.allow != c.allow || m["ret"] != json.Number("-900") {
			t.Fatalf("%s %s: %d allow=%q %s", c.method, c.path, got.status, got.allow, got.body)
		}
	}
}

// TestRPCMetrics: requests are counted by method and ret on the server's set.
func TestRPCMetrics(t *testing.T) {
	env := newRPCEnv(t, Options{})
	r := env.r
	rpcCall(t, r, "ListServices", "")
	rpcCall(t, r, "ListServices", "")
	rpcCall(t, r, "Unregister", `{"instance_id":"x"}`)
	var b bytes.Buffer
	env.c.Metrics().WritePrometheus(&b)
	for _, want := range []string{
		`conductor_rpc_requests_total{method="ListServices",ret="0"} 2`,
		`conductor_rpc_requests_total{method="Unregister",ret="-2001"} 1`,
		`conductor_rpc_request_duration_seconds_count{method="ListServices"} 2`,
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestRPCServeKeepAlive: a real listener answers several calls on one
// keep-alive connection and shuts down cleanly.
func TestRPCServeKeepAlive(t *testing.T) {
	env := newRPCEnv(t, Options{MaxBodyBytes: 1024})
	r := env.r
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Serve(ln) }()
	c := &fasthttp.HostClient{Addr: ln.Addr().String(), MaxConns: 1}
	for i := 0; i < 3; i++ {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://" + ln.Addr().String() + "/rpc/ListServices")
		req.Header.SetMethod("POST")
		if err := c.DoTimeout(req, resp, 5e9); err != nil {
			t.Fatal(err)
		}
		if string(resp.Body()) != `{"ret":0,"count":0,"services":[]}` || resp.ConnectionClose() {
			t.Fatalf("call %d: %s close=%v", i, resp.Body(), resp.ConnectionClose())
		}
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
	}
	// a body over MaxBodyBytes is refused before the handler: 413, INVALID_PARAMS
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	req.SetRequestURI("http://" + ln.Addr().String() + "/rpc/Query")
	req.Header.SetMethod("POST")
	req.SetBody(bytes.Repeat([]byte{' '}, 4096))
	if err := c.DoTimeout(req, resp, 5e9); err != nil {
		t.Fatal(err)
	}
	if m := decodeMap(t, response{status: resp.StatusCode(), ct: string(resp.Header.ContentType()), body: resp.Body()}); resp.StatusCode() != 413 ||
		m["ret"] != json.Number("-600") || m["reason"] != "limit_exceeded" {
		t.Fatalf("oversized body: %d %s", resp.StatusCode(), resp.Body())
	}
	c.CloseIdleConnections()
	if err := r.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func jsonNumber(i int) json.Number { return json.Number(itoa(i)) }

// unregisterFailing fails Unregister with an error that is not ErrNotFound.
type unregisterFailing struct{ *coreRegistrar }

func (f unregisterFailing) Unregister(core.ServiceKey) (core.Registration, error) {
	return core.Registration{}, errors.New("zmq: context terminated")
}

// TestRPCInternalError: failures the request did not cause are INTERNAL_ERROR
// (a subscriber that cannot start; an unregister that fails for another
// reason than an unknown subscription), with the cause in "error" and reason
// internal.
func TestRPCInternalError(t *testing.T) {
	env := newRPCEnv(t, Options{})
	env.gateReg.Registrar = failingRegistrar{env.reg}
	got := rpcCall(t, env.r, "Register", jsonEnc(pyReg()))
	checkRet(t, got, RetInternalError, "internal", "")
	if m := decodeMap(t, got); !strings.Contains(m["error"].(string), "Failed to subscribe") || len(m) != 3 {
		t.Fatalf("body %s", got.body)
	}
	env.gateReg.Registrar = unregisterFailing{env.reg}
	checkRet(t, rpcCall(t, env.r, "Unregister", `{"instance_id":"x"}`), RetInternalError, "internal", "")
}

// TestRPCRegisterMooncakeWithoutInstanceID: the Python API requires
// instance_id for vLLM and SGLang publishers only. A Mooncake store master
// registered without one is named by its endpoint, which unregister then
// takes; the engine types without one are refused as missing instance_id.
func TestRPCRegisterMooncakeWithoutInstanceID(t *testing.T) {
	env := newRPCEnv(t, Options{})
	r := env.r
	for _, typ := range []string{"vLLM", "SGLang"} {
		checkRet(t, rpcCall(t, r, "Register", jsonEnc(with(pyReg(), "instance_id", drop, "publisher_type", typ))),
			RetInvalidParams, "missing", "instance_id")
	}
	const ep = "tcp://127.0.0.1:7001"
	checkRet(t, rpcCall(t, r, "Register", jsonEnc(with(pyReg(), "instance_id", drop, "publisher_type", "Mooncake", "endpoint", ep))), RetOK, "", "")
	svcs := env.ix.Services()
	if len(svcs) != 1 || svcs[0].InstanceID != ep || svcs[0].Type != core.PublisherMooncake {
		t.Fatalf("services %+v", svcs)
	}
	checkRet(t, rpcCall(t, r, "Unregister", jsonEnc(obj{"instance_id", ep})), RetOK, "", "")
	if n := len(env.ix.Services()); n != 0 {
		t.Fatalf("%d services after unregister", n)
	}
}
