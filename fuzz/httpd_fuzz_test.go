package fuzz

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"runtime/debug"
	"testing"

	"github.com/tinylib/msgp/msgp"
	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
	"github.com/seed-c7a81618/conductor/httpd/mooncake"
	"github.com/seed-c7a81618/conductor/httpd/server"
)

// Fuzz targets for the indexer API's request parsers (packages server and mooncake), driven
// through the real fasthttp handler so every dialect, route and limit is in
// play. Properties: no panic; status 200 or 400; the response is exactly one
// document of the request's dialect; a 400 carries a known reason (and an index
// only with a field); a 200 query row satisfies device ≤ cpu_local ≤ cpu_share ≤
// disk = longest_matched ≤ the prompt's complete blocks. The JSON number
// scanners must agree with encoding/json + strconv on every valid input, and
// the query path must not allocate on random valid input.

const httpdMaxInput = 64 << 10

// httpdReasons are the reason tokens a 400 may carry.
var httpdReasons = map[string]bool{
	"unsupported_content_type": true, "invalid_msgpack": true, "invalid_json": true, "unknown_field": true,
	"missing": true, "invalid_type": true, "invalid_value": true, "out_of_range": true, "unsupported": true,
	"invalid_registration": true, "limit_exceeded": true,
}

// httpdRegistrar registers straight into the index (no ZMQ).
type httpdRegistrar struct{ ix *core.Index }

func (r httpdRegistrar) Register(reg core.Registration) (bool, error) {
	_, created, err := r.ix.Register(reg)
	return created, err
}

func (r httpdRegistrar) Unregister(k core.ServiceKey) (core.Registration, error) {
	return r.ix.Unregister(k)
}

// httpdFixture is a server whose index holds, for instance "engine-a" (vLLM
// sha256_cbor seed "0", B=16, model "m"), the first 32 blocks of httpdPrompt:
// blocks 0-15 on GPU, 16-31 on CPU.
type httpdFixture struct {
	s      *mooncake.Server
	c      *server.Core
	prompt []int32
	hashes []uint64
}

func newHTTPDFixture(f *testing.F) *httpdFixture {
	f.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ix := core.New(core.Options{Logger: log})
	c, err := server.New(ix, httpdRegistrar{ix}, server.Options{Logger: log, MaxQueryTokens: 4096})
	if err != nil {
		f.Fatal(err)
	}
	p, err := hash.Resolve(hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256_cbor", PythonHashSeed: "0", IndexProjection: "low64_be"})
	if err != nil {
		f.Fatal(err)
	}
	sub, _, err := ix.Register(core.Registration{Endpoint: "tcp://127.0.0.1:1", Type: core.PublisherVLLM, ModelName: "m",
		InstanceID: "engine-a", BlockSize: 16, Profile: p, ProfileExplicit: true})
	if err != nil {
		f.Fatal(err)
	}
	fx := &httpdFixture{s: mooncake.New(c), c: c, prompt: make([]int32, 32*16)}
	for i := range fx.prompt {
		fx.prompt[i] = int32(i * 31 % 50000)
	}
	if fx.hashes, err = hash.AppendChain(nil, &p, fx.prompt, 16, nil, nil); err != nil {
		f.Fatal(err)
	}
	for _, part := range []struct {
		medium string
		lo, hi int
	}{{"GPU", 0, 16}, {"CPU", 16, 32}} {
		b := &core.Batch{}
		e := b.NextEvent()
		e.Kind, e.BlockSize, e.Medium = core.EventStored, 16, []byte(part.medium)
		e.Hashes = append(e.Hashes, fx.hashes[part.lo:part.hi]...)
		if st := sub.Apply(b); st.Dropped != 0 {
			f.Fatalf("apply: %+v", st)
		}
	}
	return fx
}

// serve runs one request through the handler.
func (fx *httpdFixture) serve(path, ct string, body []byte) *fasthttp.RequestCtx {
	var req fasthttp.Request
	req.Header.SetMethod("POST")
	req.SetRequestURI(path)
	if ct != "" {
		req.Header.SetContentType(ct)
	}
	req.SetBody(body)
	ctx := &fasthttp.RequestCtx{}
	ctx.Init(&req, nil, nil)
	fx.s.Handler(ctx)
	return ctx
}

// decodeResponse returns the response as a generic map, failing on anything
// but one document of the expected dialect.
func decodeResponse(t *testing.T, ctx *fasthttp.RequestCtx, wantCT string) map[string]any {
	t.Helper()
	ct := string(ctx.Response.Header.ContentType())
	body := ctx.Response.Body()
	if ct != wantCT {
		t.Fatalf("Content-Type %q, want %q", ct, wantCT)
	}
	var v any
	if ct == "application/msgpack" {
		x, rest, err := msgp.ReadIntfBytes(body)
		if err != nil || len(rest) != 0 {
			t.Fatalf("response is not one msgpack object: %v (%d trailing)", err, len(rest))
		}
		v = x
	} else {
		if !json.Valid(body) {
			t.Fatalf("response is not JSON: %q", body)
		}
		d := json.NewDecoder(bytes.NewReader(body))
		d.UseNumber()
		if err := d.Decode(&v); err != nil {
			t.Fatal(err)
		}
	}
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("response is not a map: %T", v)
	}
	return m
}

func num(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case uint64:
		return int64(x), x <= math.MaxInt64
	case json.Number:
		i, err := x.Int64()
		return i, err == nil
	}
	return 0, false
}

// checkQueryResponse applies the response properties of a /query* call.
func checkQueryResponse(t *testing.T, ctx *fasthttp.RequestCtx, isJSON bool, limit int64) {
	t.Helper()
	ct := "application/msgpack"
	if isJSON {
		ct = "application/json"
	}
	status := ctx.Response.StatusCode()
	m := decodeResponse(t, ctx, ct)
	switch status {
	case 400:
		reason, _ := m["reason"].(string)
		if _, ok := m["error"].(string); !ok || !httpdReasons[reason] {
			t.Fatalf("bad error envelope %v", m)
		}
		if _, hasIndex := m["index"]; hasIndex {
			if _, hasField := m["field"]; !hasField {
				t.Fatalf("index without field: %v", m)
			}
		}
		return
	case 200:
	default:
		t.Fatalf("status %d: %v", status, m)
	}
	rows := m
	if !isJSON {
		inst, ok := m["instances"].(map[string]any)
		if !ok || len(m) != 1 {
			t.Fatalf("msgpack response %v", m)
		}
		rows = inst
	} else if len(m) > 0 {
		if len(m) != 1 {
			t.Fatalf("JSON response has %d tenants", len(m))
		}
		for _, v := range m {
			rows, _ = v.(map[string]any)
		}
	}
	for id, rv := range rows {
		row, ok := rv.(map[string]any)
		if !ok {
			t.Fatalf("row %s: %T", id, rv)
		}
		var tiers [5]int64
		for i, k := range []string{"device", "cpu_local", "cpu_share", "disk", "longest_matched"} {
			v, ok := num(row[k])
			if !ok {
				t.Fatalf("row %s: %s = %v", id, k, row[k])
			}
			tiers[i] = v
		}
		if !(0 <= tiers[0] && tiers[0] <= tiers[1] && tiers[1] <= tiers[2] && tiers[2] <= tiers[3] && tiers[3] == tiers[4] && tiers[4] <= limit) {
			t.Fatalf("row %s violates the tier order (limit %d): %v", id, limit, tiers)
		}
	}
}

func httpdMsgpackQuery(model string, bs int, key string, tokens any) []byte {
	b := msgp.AppendMapHeader(nil, 3)
	b = msgp.AppendString(b, "model")
	b = msgp.AppendString(b, model)
	b = msgp.AppendString(b, "block_size")
	b = msgp.AppendInt(b, bs)
	b = msgp.AppendString(b, key)
	switch v := tokens.(type) {
	case []int32:
		b = msgp.AppendArrayHeader(b, uint32(len(v)))
		for _, t := range v {
			b = msgp.AppendInt32(b, t)
		}
	case []uint64:
		b = msgp.AppendArrayHeader(b, uint32(len(v)))
		for _, t := range v {
			b = msgp.AppendUint64(b, t)
		}
	case []byte:
		b = msgp.AppendBytes(b, v)
	}
	return b
}

func FuzzHTTPQueryMsgpack(f *testing.F) {
	fx := newHTTPDFixture(f)
	le := make([]byte, 4*len(fx.prompt))
	for i, t := range fx.prompt {
		binary.LittleEndian.PutUint32(le[4*i:], uint32(t))
	}
	for _, seed := range [][]byte{
		httpdMsgpackQuery("m", 16, "token_ids", fx.prompt),
		httpdMsgpackQuery("m", 16, "token_ids", fx.prompt[:100]),
		httpdMsgpackQuery("m", 16, "token_ids", le),
		httpdMsgpackQuery("m", 16, "token_ids", le[:7]),
		httpdMsgpackQuery("m", 0, "token_ids", []int32{1}),
		httpdMsgpackQuery("x", 16, "token_ids", []int32{1}),
		httpdMsgpackQuery("m", 16, "seq_hashes", fx.hashes),
		httpdMsgpackQuery("m", 16, "token_ids", []uint64{1, math.MaxUint64}),
		{0x80}, {0x81, 0xa1, 'x', 0xc0}, {0xc1}, {0xdd, 0xff, 0xff, 0xff, 0xff},
	} {
		f.Add(seed, false)
		f.Add(seed, true)
	}
	f.Fuzz(func(t *testing.T, body []byte, byHash bool) {
		if len(body) > httpdMaxInput {
			return
		}
		path := "/query"
		if byHash {
			path = "/query_by_hash"
		}
		ctx := fx.serve(path, "application/msgpack", body)
		checkQueryResponse(t, ctx, false, int64(len(fx.prompt)))
		if ctx.Response.StatusCode() == 200 {
			checkAcceptedMsgpackQuery(t, body, byHash)
		}
	})
}

// checkAcceptedMsgpackQuery cross-checks an accepted body with msgp's generic
// decoder: one map, string keys, model a non-empty string, block_size a
// positive int, and token_ids int32s (array or a bin of 4-byte words) or
// seq_hashes non-negative ints.
func checkAcceptedMsgpackQuery(t *testing.T, body []byte, byHash bool) {
	t.Helper()
	v, rest, err := msgp.ReadIntfBytes(body)
	if err != nil || len(rest) != 0 {
		t.Fatalf("accepted a body msgp rejects: %v (%d trailing)", err, len(rest))
	}
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("accepted a non-map body %T", v)
	}
	if s, ok := m["model"].(string); !ok || s == "" {
		t.Fatalf("accepted model %#v", m["model"])
	}
	if bs, ok := num(m["block_size"]); !ok || bs <= 0 {
		t.Fatalf("accepted block_size %#v", m["block_size"])
	}
	key := "token_ids"
	if byHash {
		key = "seq_hashes"
		if _, ok := m[key]; !ok {
			key = "block_hash"
		}
	}
	switch x := m[key].(type) {
	case []byte:
		if byHash || len(x)%4 != 0 {
			t.Fatalf("accepted %s bin of %d bytes", key, len(x))
		}
	case []any:
		for i, e := range x {
			switch n := e.(type) {
			case int64:
				if !byHash && (n < math.MinInt32 || n > math.MaxInt32) || byHash && n < 0 {
					t.Fatalf("accepted %s[%d] = %d", key, i, n)
				}
			case uint64:
				if !byHash && n > math.MaxInt32 {
					t.Fatalf("accepted %s[%d] = %d", key, i, n)
				}
			default:
				t.Fatalf("accepted %s[%d] of type %T", key, i, e)
			}
		}
	default:
		t.Fatalf("accepted %s of type %T", key, x)
	}
}

func FuzzHTTPQueryJSON(f *testing.F) {
	fx := newHTTPDFixture(f)
	toks, _ := json.Marshal(fx.prompt[:200])
	hs, _ := json.Marshal(fx.hashes)
	for _, seed := range []string{
		`{"model":"m","block_size":16,"token_ids":` + string(toks) + `}`,
		`{"model":"m","block_size":16,"token_ids":[1,2,3],"tenant_id":null,"lora_id":null,"cache_salt":"s"}`,
		`{"model":"m","block_size":16,"seq_hashes":` + string(hs) + `}`,
		`{"model":"m","block_size":16,"block_hash":[18446744073709551615]}`,
		`{"model":"m","block_size":16,"token_ids":[1.5,"x",null,2147483648]}`,
		`{"model":"m\u00e9\ud83d\ude00","block_size":1e3,"token_ids":[]}`,
		`{"model":"m","lora_id":1}`, `{`, `[]`, `{"a":[[[[[[]]]]]]}`, "\"\xff\"",
	} {
		f.Add([]byte(seed), false)
		f.Add([]byte(seed), true)
	}
	f.Fuzz(func(t *testing.T, body []byte, byHash bool) {
		if len(body) > httpdMaxInput {
			return
		}
		path := "/query"
		if byHash {
			path = "/query_by_hash"
		}
		ctx := fx.serve(path, "application/json", body)
		checkQueryResponse(t, ctx, true, int64(len(fx.prompt)))
		if ctx.Response.StatusCode() == 200 && !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
	})
}

// FuzzHTTPRegister: DecodeRegistration never panics, fails only with a
// *RequestError carrying a known reason, and an accepted registration
// round-trips: re-encoded as a canonical msgpack body it decodes to the same
// registration.
func FuzzHTTPRegister(f *testing.F) {
	seeds := []string{
		`{"endpoint":"tcp://a:1","type":"vLLM","modelname":"m","instance_id":"a","block_size":16,"dp_rank":0}`,
		`{"endpoint":"tcp://a:1","type":"SGLang","modelname":"m","instance_id":"a","block_size":16,"dp_rank":3,"cache_group":0,
		  "hash_profile":{"strategy":"sglang","algorithm":"sha256_raw","index_projection":"first64_be"},"lora_name":null,"additionalsalt":"s"}`,
		`{"endpoint":"tcp://a:1","type":"vLLM","modelname":"m","instance_id":"a","block_size":16,"dp_rank":0,
		  "hash_profile":{"strategy":"vllm_v1","algorithm":"sha256","python_hash_seed":"random","index_projection":"low64_be"}}`,
		`{"endpoint":"tcp://a:1","type":"Mooncake","modelname":"m","instance_id":"a","block_size":16,"dp_rank":0,
		  "gap_policy":"expire","max_blocks":-1}`,
		`{"endpoint":"","type":1}`, `{"hash_profile":{"root_digest":"x"}}`, `[]`,
	}
	for _, s := range seeds {
		f.Add([]byte(s), true)
		// the msgpack twin of each JSON seed
		var v any
		if json.Unmarshal([]byte(s), &v) == nil {
			if b, err := msgp.AppendIntf(nil, v); err == nil {
				f.Add(b, false)
			}
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, isJSON bool) {
		if len(body) > httpdMaxInput {
			return
		}
		reg, err := server.DecodeRegistration(body, isJSON, server.DecodeOptions{})
		if err != nil {
			var re *server.RequestError
			if !errors.As(err, &re) || !httpdReasons[server.ReasonOf(err)] {
				t.Fatalf("error %T %v", err, err)
			}
			return
		}
		if reg.Endpoint == "" || reg.ModelName == "" || reg.InstanceID == "" || reg.BlockSize <= 0 || reg.DPRank < 0 || reg.TenantID == "" {
			t.Fatalf("accepted an incomplete registration %+v", reg)
		}
		again, err := server.DecodeRegistration(encodeRegistration(reg), false, server.DecodeOptions{})
		if err != nil {
			t.Fatalf("re-encoded registration rejected: %v (%+v)", err, reg)
		}
		// additionalsalt, gap_policy and max_blocks are JSON-only (the
		// msgpack dialect refuses them): the msgpack round trip carries
		// everything else.
		reg.AdditionalSalt, reg.GapPolicy, reg.MaxBlocks = "", core.GapDefault, 0
		if !sameRegistration(reg, again) {
			t.Fatalf("round trip changed the registration:\n%+v\n%+v", reg, again)
		}
	})
}

func encodeRegistration(r core.Registration) []byte {
	n := 9
	if r.CacheGroup != nil {
		n++
	}
	if r.ProfileExplicit {
		n++
	}
	b := msgp.AppendMapHeader(nil, uint32(n))
	for _, kv := range [][2]string{{"endpoint", r.Endpoint}, {"replay_endpoint", r.ReplayEndpoint}, {"type", r.Type.String()},
		{"modelname", r.ModelName}, {"lora_name", r.LoraName}, {"tenant_id", r.TenantID}, {"instance_id", r.InstanceID}} {
		b = msgp.AppendString(b, kv[0])
		b = msgp.AppendString(b, kv[1])
	}
	b = msgp.AppendString(b, "block_size")
	b = msgp.AppendInt(b, r.BlockSize)
	b = msgp.AppendString(b, "dp_rank")
	b = msgp.AppendInt32(b, r.DPRank)
	if r.CacheGroup != nil {
		b = msgp.AppendString(b, "cache_group")
		b = msgp.AppendInt64(b, *r.CacheGroup)
	}
	if r.ProfileExplicit {
		b = msgp.AppendString(b, "hash_profile")
		b = msgp.AppendMapHeader(b, 4)
		for _, kv := range [][2]string{{"strategy", r.Profile.Spec.Strategy}, {"algorithm", r.Profile.Spec.Algorithm},
			{"python_hash_seed", r.Profile.Spec.PythonHashSeed}, {"index_projection", r.Profile.Spec.IndexProjection}} {
			b = msgp.AppendString(b, kv[0])
			b = msgp.AppendString(b, kv[1])
		}
	}
	return b
}

func sameRegistration(a, b core.Registration) bool {
	if (a.CacheGroup == nil) != (b.CacheGroup == nil) || (a.CacheGroup != nil && *a.CacheGroup != *b.CacheGroup) {
		return false
	}
	a.CacheGroup, b.CacheGroup = nil, nil
	return a == b
}

// raceEnabled reports a -race build (allocation counts are meaningless there).
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" && s.Value == "true" {
			return true
		}
	}
	return false
}

// FuzzHTTPQueryAllocations repeats TestQueryHandlerAllocs on random valid
// input: any prompt (int array or LE bin, msgpack or JSON) is served without
// allocating once the request state is warm.
func FuzzHTTPQueryAllocations(f *testing.F) {
	if raceEnabled() {
		f.Skip("allocation counts are not meaningful under -race")
	}
	fx := newHTTPDFixture(f)
	raw := make([]byte, 4*len(fx.prompt))
	for i, t := range fx.prompt {
		binary.LittleEndian.PutUint32(raw[4*i:], uint32(t))
	}
	f.Add(raw, uint8(0))
	f.Add(raw[:100], uint8(1))
	f.Add([]byte{1, 2, 3, 4, 5}, uint8(2))
	f.Fuzz(func(t *testing.T, raw []byte, form uint8) {
		if len(raw) > 4*4096 {
			raw = raw[:4*4096]
		}
		tokens := make([]int32, len(raw)/4)
		for i := range tokens {
			tokens[i] = int32(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		var body []byte
		ct := "application/msgpack"
		switch form % 3 {
		case 0:
			body = httpdMsgpackQuery("m", 16, "token_ids", tokens)
		case 1:
			body = httpdMsgpackQuery("m", 16, "token_ids", raw[:4*len(tokens)])
		default:
			ct = "application/json"
			js, _ := json.Marshal(tokens)
			body = append(append([]byte(`{"model":"m","block_size":16,"token_ids":`), js...), '}')
		}
		var req fasthttp.Request
		req.Header.SetMethod("POST")
		req.SetRequestURI("/query")
		req.Header.SetContentType(ct)
		req.SetBody(body)
		ctx := &fasthttp.RequestCtx{}
		ctx.Init(&req, nil, nil)
		serve := func() {
			ctx.Response.Reset()
			fx.s.Handler(ctx)
		}
		serve()
		serve()
		if ctx.Response.StatusCode() != 200 {
			t.Fatalf("valid query answered %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
		if a := testing.AllocsPerRun(5, serve); a != 0 {
			t.Fatalf("%d tokens (form %d): %.1f allocs per query", len(tokens), form%3, a)
		}
	})
}
