package mooncake

import (
	"encoding/binary"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/internal/apitest"
)

func baseQuery() obj {
	return obj{"model", "m", "block_size", 16, "token_ids", []int32{1, 2, 3}}
}

// leBin encodes tokens as a little-endian int32 bin payload.
// TestQueryMsgpackValidation covers every /query rule of reference §1.1 (keys in
// map order, then missing model, block_size, token_ids) with the element index
// for token arrays.
func TestQueryMsgpackValidation(t *testing.T) {
	env := startEnv(t, Options{MaxQueryTokens: 8}, core.Options{})
	ec := func(name string, o obj, reason, field string, index int) errorCase {
		return errorCase{name: name, body: mp(o), status: 400, reason: reason, field: field, index: index}
	}
	q := baseQuery()
	cases := []errorCase{
		ec("python_hash_seed override", with(q, "python_hash_seed", "0"), "unknown_field", "python_hash_seed", -1),
		ec("root_digest override", with(q, "root_digest", "00"), "unknown_field", "root_digest", -1),
		ec("lora_id is JSON-only", with(q, "lora_id", 1), "unknown_field", "lora_id", -1),
		ec("seq_hashes on /query", with(q, "seq_hashes", []uint64{1}), "unknown_field", "seq_hashes", -1),
		ec("modelname alias is JSON-only", with(q, "model", drop, "modelname", "m"), "unknown_field", "modelname", -1),
		ec("duplicate key", append(q, "model", "m"), "invalid_value", "model", -1),
		ec("model missing", with(q, "model", drop), "missing", "model", -1),
		ec("model int", with(q, "model", 5), "invalid_type", "model", -1),
		ec("model nil", with(q, "model", nil), "invalid_type", "model", -1),
		ec("model empty", with(q, "model", ""), "invalid_value", "model", -1),
		ec("block_size missing", with(q, "block_size", drop), "missing", "block_size", -1),
		ec("block_size zero", with(q, "block_size", 0), "out_of_range", "block_size", -1),
		ec("block_size negative", with(q, "block_size", -1), "out_of_range", "block_size", -1),
		ec("block_size > MaxInt64", with(q, "block_size", uint64(1)<<63), "out_of_range", "block_size", -1),
		ec("block_size float", with(q, "block_size", 16.5), "invalid_type", "block_size", -1),
		ec("block_size string", with(q, "block_size", "16"), "invalid_type", "block_size", -1),
		ec("block_size bool", with(q, "block_size", true), "invalid_type", "block_size", -1),
		ec("token_ids missing", with(q, "token_ids", drop), "missing", "token_ids", -1),
		ec("token_ids string", with(q, "token_ids", "abc"), "invalid_type", "token_ids", -1),
		ec("token_ids nil", with(q, "token_ids", nil), "invalid_type", "token_ids", -1),
		ec("token_ids map", with(q, "token_ids", obj{"a", 1}), "invalid_type", "token_ids", -1),
		ec("token_ids bin not multiple of 4", with(q, "token_ids", []byte{1, 2, 3, 4, 5}), "invalid_value", "token_ids", -1),
		ec("token above int32", with(q, "token_ids", []any{1, int64(math.MaxInt32) + 1}), "out_of_range", "token_ids", 1),
		ec("token below int32", with(q, "token_ids", []any{int64(math.MinInt32) - 1}), "out_of_range", "token_ids", 0),
		ec("token u64", with(q, "token_ids", []any{0, 0, uint64(math.MaxUint64)}), "out_of_range", "token_ids", 2),
		ec("token string", with(q, "token_ids", []any{1, "x"}), "invalid_type", "token_ids", 1),
		ec("token float", with(q, "token_ids", []any{0, 1, 2.5}), "invalid_type", "token_ids", 2),
		ec("token nil", with(q, "token_ids", []any{0, nil}), "invalid_type", "token_ids", 1),
		ec("token array", with(q, "token_ids", []any{0, []any{1}}), "invalid_type", "token_ids", 1),
		ec("token bool", with(q, "token_ids", []any{true}), "invalid_type", "token_ids", 0),
		ec("too many tokens", with(q, "token_ids", seqTokens(9, 0)), "out_of_range", "token_ids", -1),
		ec("too many bin tokens", with(q, "token_ids", leBin(seqTokens(9, 0)...)), "out_of_range", "token_ids", -1),
		ec("tenant nil", with(q, "tenant_id", nil), "invalid_type", "tenant_id", -1),
		ec("tenant int", with(q, "tenant_id", 5), "invalid_type", "tenant_id", -1),
		ec("lora bool", with(q, "lora_name", true), "invalid_type", "lora_name", -1),
		ec("lora invalid UTF-8", with(q, "lora_name", "\xff"), "invalid_value", "lora_name", -1),
		ec("salt int", with(q, "cache_salt", 42), "invalid_type", "cache_salt", -1),
		ec("salt array", with(q, "cache_salt", []any{}), "invalid_type", "cache_salt", -1),
		ec("instance int", with(q, "instance_id", 5), "invalid_type", "instance_id", -1),
		// order: first bad key in map order, then missing model, block_size, token_ids
		ec("map order: block_size first", obj{"block_size", 0, "model", 5, "token_ids", []int32{}}, "out_of_range", "block_size", -1),
		ec("map order: model first", obj{"model", 5, "block_size", 0, "token_ids", []int32{}}, "invalid_type", "model", -1),
		ec("map order: token first", obj{"token_ids", []any{"x"}, "model", 5}, "invalid_type", "token_ids", 0),
		ec("missing model before block_size", obj{"token_ids", []int32{}}, "missing", "model", -1),
		ec("missing block_size before tokens", obj{"model", "m"}, "missing", "block_size", -1),
		ec("bad value before missing key", obj{"tenant_id", 1}, "invalid_type", "tenant_id", -1),
	}
	cases = append(cases,
		errorCase{"empty body", nil, 400, "invalid_msgpack", "", -1},
		errorCase{"not a map", mp("query"), 400, "invalid_msgpack", "", -1},
		errorCase{"nil body", mp(nil), 400, "invalid_msgpack", "", -1},
		errorCase{"int key", mp(obj{5, 1}), 400, "invalid_msgpack", "", -1},
		errorCase{"truncated tokens", trunc(mp(q), 1), 400, "invalid_msgpack", "", -1},
		errorCase{"array count beyond body", append(mp(obj{"model", "m", "block_size", 16}), mpRawTokensHeader(1000)...), 400, "invalid_msgpack", "", -1},
		errorCase{"syntax after element error", trunc(mp(with(q, "token_ids", []any{"x", 1}, "lora_name", "abc")), 1), 400, "invalid_msgpack", "", -1},
		errorCase{"trailing bytes", append(mp(q), 1), 400, "invalid_msgpack", "", -1},
		errorCase{"deep nesting", mp(with(q, "lora_name", nested(100))), 400, "invalid_msgpack", "", -1},
	)
	for _, path := range []string{"/query"} {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				r := env.postMP(t, path, c.body)
				if r.ct != "application/msgpack" {
					t.Fatalf("content type %q", r.ct)
				}
				checkError(t, r, c.status, c.reason, c.field, c.index)
			})
		}
	}
	// Content-Type rules: must contain application/msgpack (or JSON).
	for _, ct := range []string{"application/x-msgpack", "text/plain", "application/octet-stream"} {
		r := env.do(t, "POST", "/query", ct, mp(q))
		if r.ct != "application/json" {
			t.Fatalf("%s: answered in %q", ct, r.ct)
		}
		checkError(t, r, 400, "unsupported_content_type", "", -1)
	}
	if r := env.do(t, "POST", "/query", "application/msgpack; charset=x", mp(q)); r.status != 200 {
		t.Fatalf("msgpack with parameters: %d %s", r.status, canon(t, r))
	}
	// A JSON body without a JSON Content-Type (curl -d's default
	// application/x-www-form-urlencoded, text/plain, none) is read as JSON
	// too; a non-JSON body under such a type is still refused.
	for _, ct := range []string{"application/x-www-form-urlencoded", "text/plain", ""} {
		r := env.do(t, "POST", "/query", ct, []byte(" \n{\"model\":\"m\",\"block_size\":16,\"token_ids\":[1]}"))
		if r.status != 200 || r.ct != "application/json" {
			t.Fatalf("JSON body as %q: %d %q %s", ct, r.status, r.ct, r.body)
		}
	}
	checkError(t, env.do(t, "POST", "/query", "application/x-www-form-urlencoded", []byte("model=m&block_size=16")), 400, "unsupported_content_type", "", -1)
	checkError(t, env.do(t, "POST", "/query", "text/plain", []byte(`{"model":`)), 400, "invalid_json", "", -1)
}

// mpRawTokensHeader is a "token_ids" key followed by an array32 header of n.
func mpRawTokensHeader(n uint32) []byte {
	b := mp("token_ids")
	b = append(b, 0xdd, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(b[len(b)-4:], n)
	return b
}

// nested returns n nested single-element arrays.
func nested(n int) mpRaw {
	b := make([]byte, 0, n+1)
	for i := 0; i < n; i++ {
		b = append(b, 0x91)
	}
	return mpRaw(append(b, 0))
}

func TestQueryJSONValidation(t *testing.T) {
	env := startEnv(t, Options{MaxQueryTokens: 8}, core.Options{})
	ec := func(name, body, reason, field string, index int) errorCase {
		return errorCase{name: name, body: []byte(body), status: 400, reason: reason, field: field, index: index}
	}
	cases := []errorCase{
		ec("unknown", `{"model":"m","block_size":16,"token_ids":[],"x":1}`, "unknown_field", "x", -1),
		ec("seq_hashes on /query", `{"model":"m","block_size":16,"seq_hashes":[1]}`, "unknown_field", "seq_hashes", -1),
		ec("model and alias", `{"model":"m","model_name":"m","block_size":16,"token_ids":[]}`, "invalid_value", "model_name", -1),
		ec("model missing", `{"block_size":16,"token_ids":[]}`, "missing", "model", -1),
		ec("model null", `{"model":null,"block_size":16,"token_ids":[]}`, "invalid_type", "model", -1),
		ec("model empty", `{"model":"","block_size":16,"token_ids":[]}`, "invalid_value", "model", -1),
		ec("block_size string", `{"model":"m","block_size":"16","token_ids":[]}`, "invalid_type", "block_size", -1),
		ec("block_size fraction", `{"model":"m","block_size":16.5,"token_ids":[]}`, "invalid_type", "block_size", -1),
		ec("block_size exponent", `{"model":"m","block_size":1e1,"token_ids":[]}`, "invalid_type", "block_size", -1),
		ec("block_size zero", `{"model":"m","block_size":0,"token_ids":[]}`, "out_of_range", "block_size", -1),
		ec("block_size 2^63", `{"model":"m","block_size":9223372036854775808,"token_ids":[]}`, "out_of_range", "block_size", -1),
		ec("block_size huge", `{"model":"m","block_size":99999999999999999999999,"token_ids":[]}`, "out_of_range", "block_size", -1),
		ec("token_ids string", `{"model":"m","block_size":16,"token_ids":"1,2"}`, "invalid_type", "token_ids", -1),
		ec("token_ids object", `{"model":"m","block_size":16,"token_ids":{}}`, "invalid_type", "token_ids", -1),
		ec("token_ids null", `{"model":"m","block_size":16,"token_ids":null}`, "invalid_type", "token_ids", -1),
		ec("token above u32", `{"model":"m","block_size":16,"token_ids":[1, 4294967296]}`, "out_of_range", "token_ids", 1),
		ec("token below int32", `{"model":"m","block_size":16,"token_ids":[-2147483649]}`, "out_of_range", "token_ids", 0),
		ec("token huge", `{"model":"m","block_size":16,"token_ids":[0,1,99999999999999999999999]}`, "out_of_range", "token_ids", 2),
		ec("token fraction", `{"model":"m","block_size":16,"token_ids":[1, 1.5]}`, "invalid_type", "token_ids", 1),
		ec("token exponent", `{"model":"m","block_size":16,"token_ids":[1, 1e3]}`, "invalid_type", "token_ids", 1),
		ec("token string", `{"model":"m","block_size":16,"token_ids":[1, "2"]}`, "invalid_type", "token_ids", 1),
		ec("token null", `{"model":"m","block_size":16,"token_ids":[null]}`, "invalid_type", "token_ids", 0),
		ec("too many tokens", `{"model":"m","block_size":16,"token_ids":[1,2,3,4,5,6,7,8,9]}`, "out_of_range", "token_ids", -1),
		ec("lora_id never published", `{"model":"m","block_size":16,"token_ids":[],"lora_id":3}`, "invalid_value", "lora_id", -1),
		ec("lora_id never published, with lora_name", `{"model":"m","lora_id":3,"block_size":16,"token_ids":[],"lora_name":"a"}`, "invalid_value", "lora_id", -1),
		ec("lora_id string", `{"model":"m","block_size":16,"token_ids":[],"lora_id":"3"}`, "invalid_type", "lora_id", -1),
		ec("tenant int", `{"model":"m","block_size":16,"token_ids":[],"tenant_id":5}`, "invalid_type", "tenant_id", -1),
		ec("salt int", `{"model":"m","block_size":16,"token_ids":[],"cache_salt":5}`, "invalid_type", "cache_salt", -1),
		ec("instance bool", `{"model":"m","block_size":16,"token_ids":[],"instance_id":true}`, "invalid_type", "instance_id", -1),
		ec("map order", `{"block_size":0,"model":5,"token_ids":[]}`, "out_of_range", "block_size", -1),
		ec("trailing comma in array", `{"model":"m","block_size":16,"token_ids":[1,2,]}`, "invalid_json", "", -1),
		ec("missing comma", `{"model":"m","block_size":16,"token_ids":[1 2]}`, "invalid_json", "", -1),
		ec("leading zero", `{"model":"m","block_size":16,"token_ids":[01]}`, "invalid_json", "", -1),
		ec("bare minus", `{"model":"m","block_size":16,"token_ids":[-]}`, "invalid_json", "", -1),
		ec("trailing comma in object", `{"model":"m","block_size":16,"token_ids":[],}`, "invalid_json", "", -1),
		ec("unterminated", `{"model":"m","block_size":16,"token_ids":[1,2`, "invalid_json", "", -1),
		ec("syntax after element error", `{"model":"m","block_size":16,"token_ids":[1.5, 2], "x": }`, "invalid_json", "", -1),
		ec("single quotes", `{'model':'m'}`, "invalid_json", "", -1),
		ec("deep nesting", `{"model":`+strings.Repeat("[", 100)+strings.Repeat("]", 100)+`}`, "invalid_json", "", -1),
		ec("empty", ``, "invalid_json", "", -1),
		ec("whitespace only", "  \n", "invalid_json", "", -1),
		ec("array root", `[]`, "invalid_json", "", -1),
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := env.postJSON(t, "/query", string(c.body))
			if r.ct != "application/json" {
				t.Fatalf("content type %q", r.ct)
			}
			checkError(t, r, c.status, c.reason, c.field, c.index)
		})
	}
	// absent Content-Type means JSON
	r := env.do(t, "POST", "/query", "", []byte(`{"model":"m","block_size":16,"token_ids":[]}`))
	if r.status != 200 || canon(t, r) != "{}" {
		t.Fatalf("%d %s", r.status, r.body)
	}
	// accepted oddities: nulls, -0, int32 bounds, whitespace, escapes, lora_id null
	r = env.postJSON(t, "/query", "{ \"model\" : \"m\\u0000\\\"\" ,\n\"block_size\":16,\"token_ids\":[ -0 , -2147483648,2147483647 ],"+
		`"tenant_id":null,"lora_name":null,"cache_salt":null,"instance_id":null,"lora_id":null}`)
	if r.status != 200 || canon(t, r) != "{}" {
		t.Fatalf("%d %s", r.status, r.body)
	}
}

func TestQueryByHashValidation(t *testing.T) {
	env := startEnv(t, Options{MaxQueryTokens: 8}, core.Options{})
	jc := func(name, body, reason, field string, index int) errorCase {
		return errorCase{name: name, body: []byte(body), status: 400, reason: reason, field: field, index: index}
	}
	jsonCases := []errorCase{
		jc("missing", `{"model":"m","block_size":16}`, "missing", "seq_hashes", -1),
		jc("token_ids instead", `{"model":"m","block_size":16,"token_ids":[1]}`, "unknown_field", "token_ids", -1),
		jc("both names", `{"model":"m","block_size":16,"seq_hashes":[1],"block_hash":[1]}`, "invalid_value", "block_hash", -1),
		jc("negative", `{"model":"m","block_size":16,"seq_hashes":[-1]}`, "out_of_range", "seq_hashes", 0),
		jc("2^64", `{"model":"m","block_size":16,"seq_hashes":[1,18446744073709551616]}`, "out_of_range", "seq_hashes", 1),
		jc("float", `{"model":"m","block_size":16,"seq_hashes":[1.0]}`, "invalid_type", "seq_hashes", 0),
		jc("exponent", `{"model":"m","block_size":16,"block_hash":[1,2,1E5]}`, "invalid_type", "block_hash", 2),
		jc("string", `{"model":"m","block_size":16,"seq_hashes":["1"]}`, "invalid_type", "seq_hashes", 0),
		jc("not array", `{"model":"m","block_size":16,"seq_hashes":1}`, "invalid_type", "seq_hashes", -1),
		jc("too many", `{"model":"m","block_size":16,"seq_hashes":[1,2,3,4,5,6,7,8,9]}`, "out_of_range", "seq_hashes", -1),
	}
	for _, c := range jsonCases {
		t.Run("json/"+c.name, func(t *testing.T) {
			checkError(t, env.postJSON(t, "/query_by_hash", string(c.body)), c.status, c.reason, c.field, c.index)
		})
	}
	mc := func(name string, o obj, reason, field string, index int) errorCase {
		return errorCase{name: name, body: mp(o), status: 400, reason: reason, field: field, index: index}
	}
	base := obj{"model", "m", "block_size", 16}
	mpCases := []errorCase{
		mc("missing", base, "missing", "seq_hashes", -1),
		mc("negative", with(base, "seq_hashes", []any{1, -1}), "out_of_range", "seq_hashes", 1),
		mc("float", with(base, "seq_hashes", []any{1.5}), "invalid_type", "seq_hashes", 0),
		mc("bin", with(base, "seq_hashes", []byte{1, 2, 3, 4, 5, 6, 7, 8}), "invalid_type", "seq_hashes", -1),
		mc("alias negative", with(base, "block_hash", []any{int64(-5)}), "out_of_range", "block_hash", 0),
		mc("token_ids instead", with(base, "token_ids", []int32{1}), "unknown_field", "token_ids", -1),
		mc("too many", with(base, "seq_hashes", make([]uint64, 9)), "out_of_range", "seq_hashes", -1),
	}
	for _, c := range mpCases {
		t.Run("msgpack/"+c.name, func(t *testing.T) {
			checkError(t, env.postMP(t, "/query_by_hash", c.body), c.status, c.reason, c.field, c.index)
		})
	}
}

// tieredEnv registers engine-a (ranks 0 and 1) and engine-b (rank 0) under the
// vLLM sha256_cbor profile (seed "0", B=16) and stores, for the 64-token prompt
// seqTokens(64, 1):
//
//	engine-a rank 0: block 0 CPU (cpu_local), 1 GPU (device), 2 EXTERNAL
//	                 (cpu_share, shared), 3 DISK          → (0, 32, 48, 64)
//	engine-a rank 1: nothing                              → (0, 0, 0, 0)
//	engine-b rank 0: blocks 0-1 GPU; block 2 is visible through the shared
//	                 tier; block 3 is engine-a's own disk → (32, 32, 48, 48)
//
// (reference §6.3 four-tier example "LNSD" and the shared-owner rule).
func tieredEnv(t *testing.T) (*testEnv, []int32, []uint64) {
	env := startEnv(t, Options{}, core.Options{})
	for _, body := range apitest.TieredRegs() {
		if resp := env.postMP(t, "/register", body); resp.status != 200 {
			t.Fatalf("register: %d %s", resp.status, canon(t, resp))
		}
	}
	tokens, h := apitest.TieredApply(t, env.reg.Registrar)
	return env, tokens, h
}

const tieredMsgpack = apitest.TieredMsgpack

// tieredJSON: the seed's keys per medium (independent prefixes) and DP as
// each rank's longest prefix: engine-a rank 0 holds block 0 only in host
// memory (CPU 16), no block 0 on device or disk (GPU 0, DISK 0), and a
// 64-token prefix across media (DP 0 = 64); engine-b rank 0 holds blocks
// 0-1 on device (GPU 32) and reaches 48 through the shared tier (DP 0 = 48)
// but holds block 0 in neither host memory nor disk (CPU 0, DISK 0).
const tieredJSON = `{"default":{
 "engine-a":{"longest_matched":64,"GPU":0,"CPU":16,"DISK":0,"DP":{"0":64,"1":0},
   "device":0,"cpu_local":32,"cpu_share":48,"disk":64,
   "rank_matches":{"0":{"device":0,"cpu_local":32,"cpu_share":48,"disk":64},"1":{"device":0,"cpu_local":0,"cpu_share":0,"disk":0}}},
 "engine-b":{"longest_matched":48,"GPU":32,"CPU":0,"DISK":0,"DP":{"0":48},
   "device":32,"cpu_local":32,"cpu_share":48,"disk":48,
   "rank_matches":{"0":{"device":32,"cpu_local":32,"cpu_share":48,"disk":48}}}}}`

func TestQueryTieredResults(t *testing.T) {
	env, tokens, h := tieredEnv(t)
	prompt := append(append([]int32(nil), tokens...), 7, 7, 7) // a trailing partial block is ignored
	zeros := func(ids ...string) string {
		var b strings.Builder
		b.WriteString(`{"instances":{`)
		for i, id := range ids {
			if i > 0 {
				b.WriteByte(',')
			}
			ranks := `"0":0`
			rm := `"0":{"device":0,"cpu_local":0,"cpu_share":0,"disk":0}`
			if id == "engine-a" {
				ranks += `,"1":0`
				rm += `,"1":{"device":0,"cpu_local":0,"cpu_share":0,"disk":0}`
			}
			b.WriteString(`"` + id + `":{"longest_matched":0,"dp":{` + ranks + `},"rank_matches":{` + rm + `},"device":0,"cpu_local":0,"cpu_share":0,"disk":0}`)
		}
		b.WriteString(`}}`)
		return b.String()
	}
	cases := []struct {
		name string
		path string
		body []byte
		json bool
		want string
	}{
		{"msgpack array", "/query", mp(obj{"model", "m", "block_size", 16, "token_ids", prompt}), false, tieredMsgpack},
		{"msgpack bin", "/query", mp(obj{"model", "m", "block_size", 16, "token_ids", leBin(prompt...)}), false, tieredMsgpack},
		{"msgpack bin shifted by 1", "/query", mp(obj{"model", "m", "tenant_id", "default", "block_size", 16, "token_ids", leBin(prompt...)}), false, tieredMsgpack},
		{"msgpack bin shifted by 2", "/query", mp(obj{"model", "m", "tenant_id", "", "block_size", 16, "token_ids", leBin(prompt...), "lora_name", ""}), false, tieredMsgpack},
		{"msgpack wide ints", "/query", mp(obj{"model", "m", "block_size", 16, "token_ids", wideInts(prompt)}), false, tieredMsgpack},
		{"msgpack by hash", "/query_by_hash", mp(obj{"model", "m", "block_size", 16, "seq_hashes", h}), false, tieredMsgpack},
		{"msgpack by block_hash", "/query_by_hash", mp(obj{"block_hash", h, "model", "m", "block_size", 16}), false, tieredMsgpack},
		{"json", "/query", []byte(jsonEnc(obj{"model", "m", "block_size", 16, "token_ids", prompt})), true, tieredJSON},
		{"json model_name alias", "/query", []byte(jsonEnc(obj{"model_name", "m", "block_size", 16, "token_ids", prompt, "tenant_id", "default"})), true, tieredJSON},
		{"json by hash", "/query_by_hash", []byte(jsonEnc(obj{"model", "m", "block_size", 16, "seq_hashes", h})), true, tieredJSON},
		{"filter engine-b", "/query", mp(obj{"model", "m", "block_size", 16, "token_ids", prompt, "instance_id", "engine-b"}), false,
			`{"instances":{"engine-b":{"longest_matched":48,"dp":{"0":32},"rank_matches":{"0":{"device":32,"cpu_local":32,"cpu_share":48,"disk":48}},"device":32,"cpu_local":32,"cpu_share":48,"disk":48}}}`},
		{"filter unknown instance", "/query", mp(obj{"model", "m", "block_size", 16, "token_ids", prompt, "instance_id", "nope"}), false, `{"instances":{}}`},
		{"json filter unknown instance", "/query", []byte(jsonEnc(obj{"model", "m", "block_size", 16, "token_ids", prompt, "instance_id", "nope"})), true, `{}`},
		{"salted query misses unsalted stores", "/query", mp(obj{"model", "m", "block_size", 16, "token_ids", prompt, "cache_salt", "s"}), false, zeros("engine-a", "engine-b")},
		{"nil salt is no salt", "/query", mp(obj{"model", "m", "block_size", 16, "token_ids", prompt, "cache_salt", nil}), false, tieredMsgpack},
		{"empty salt is no salt", "/query", mp(obj{"model", "m", "block_size", 16, "token_ids", prompt, "cache_salt", ""}), false, tieredMsgpack},
		{"short prompt: rows with zeros", "/query", mp(obj{"model", "m", "block_size", 16, "token_ids", prompt[:15]}), false, zeros("engine-a", "engine-b")},
		{"empty token array", "/query", mp(obj{"model", "m", "block_size", 16, "token_ids", []int32{}}), false, zeros("engine-a", "engine-b")},
		{"empty bin", "/query", mp(obj{"model", "m", "block_size", 16, "token_ids", []byte{}}), false, zeros("engine-a", "engine-b")},
		{"int32 bounds", "/query", mp(obj{"model", "m", "block_size", 16, "token_ids", []int32{math.MinInt32, math.MaxInt32}}), false, zeros("engine-a", "engine-b")},
		{"other block size: unknown context", "/query", mp(obj{"model", "m", "block_size", 32, "token_ids", prompt}), false, `{"instances":{}}`},
		{"other model: unknown context", "/query", mp(obj{"model", "x", "block_size", 16, "token_ids", prompt}), false, `{"instances":{}}`},
		{"other tenant: unknown context", "/query", mp(obj{"model", "m", "block_size", 16, "token_ids", prompt, "tenant_id", "t"}), false, `{"instances":{}}`},
		{"other lora: unknown context", "/query", mp(obj{"model", "m", "block_size", 16, "token_ids", prompt, "lora_name", "l"}), false, `{"instances":{}}`},
		{"json unknown context", "/query", []byte(`{"model":"x","block_size":16,"token_ids":[1]}`), true, `{}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ct := "application/msgpack"
			if c.json {
				ct = "application/json"
			}
			r := env.do(t, "POST", c.path, ct, c.body)
			if r.status != 200 || r.ct != ct {
				t.Fatalf("%d %q %s", r.status, r.ct, r.body)
			}
			if got, want := canon(t, r), canonJSON(t, c.want); got != want {
				t.Fatalf("got  %s\nwant %s", got, want)
			}
		})
	}
	if n := len(env.ix.GlobalView().Contexts); n != 1 {
		t.Fatalf("queries created contexts: %d", n)
	}
	// unregistering engine-a removes exactly its contributions: engine-b loses
	// the shared block 2 (stored by engine-a) and keeps its own GPU blocks.
	if r := env.postMP(t, "/unregister", mp(obj{"instance_id", "engine-a", "dp_rank", 0})); r.status != 200 {
		t.Fatalf("%d", r.status)
	}
	r := env.postMP(t, "/query", mp(obj{"model", "m", "block_size", 16, "token_ids", prompt}))
	want := `{"instances":{
 "engine-a":{"longest_matched":0,"dp":{"1":0},"rank_matches":{"1":{"device":0,"cpu_local":0,"cpu_share":0,"disk":0}},"device":0,"cpu_local":0,"cpu_share":0,"disk":0},
 "engine-b":{"longest_matched":32,"dp":{"0":32},"rank_matches":{"0":{"device":32,"cpu_local":32,"cpu_share":32,"disk":32}},"device":32,"cpu_local":32,"cpu_share":32,"disk":32}}}`
	if got := canon(t, r); got != canonJSON(t, want) {
		t.Fatalf("after unregister: %s", got)
	}
}

// wideInts encodes tokens with non-minimal msgpack integer widths (int64, uint32...).
func wideInts(tokens []int32) mpRaw {
	var b []byte
	b = append(b, 0xdd, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(b[1:], uint32(len(tokens)))
	for i, t := range tokens {
		switch i % 4 {
		case 0:
			b = append(b, 0xd3, 0, 0, 0, 0, 0, 0, 0, 0)
			binary.BigEndian.PutUint64(b[len(b)-8:], uint64(int64(t)))
		case 1:
			b = append(b, 0xce, 0, 0, 0, 0)
			binary.BigEndian.PutUint32(b[len(b)-4:], uint32(t))
		case 2:
			b = append(b, 0xcf, 0, 0, 0, 0, 0, 0, 0, 0)
			binary.BigEndian.PutUint64(b[len(b)-8:], uint64(t))
		default:
			b = append(b, 0xd2, 0, 0, 0, 0)
			binary.BigEndian.PutUint32(b[len(b)-4:], uint32(t))
		}
	}
	return b
}

// TestQueryByHashU64Exact stores blocks keyed 2^64-1 and 2^64-2 and queries them
// through JSON: a float64 detour would map both to 2^64.
func TestQueryByHashU64Exact(t *testing.T) {
	env := startEnv(t, Options{}, core.Options{})
	if r := env.postMP(t, "/register", mp(baseReg())); r.status != 200 {
		t.Fatal(r.status)
	}
	sub := env.reg.sub(t, "engine-a", "default", 0)
	apply(t, sub, storeBatch("GPU", 16, []uint64{math.MaxUint64}, nil))
	apply(t, sub, storeBatch("GPU", 16, []uint64{1 << 53, 1<<53 + 1}, nil))
	cases := []struct {
		hashes string
		want   int
	}{
		{"[18446744073709551615]", 16},
		{"[18446744073709551614]", 0},
		{"[9007199254740992, 9007199254740993]", 32},
		{"[9007199254740992, 9007199254740994]", 16},
	}
	for _, c := range cases {
		r := env.postJSON(t, "/query_by_hash", `{"model":"m","block_size":16,"seq_hashes":`+c.hashes+`}`)
		// GPU-only blocks: CPU and DISK are 0 (per medium), DP is the longest prefix.
		want := `{"default":{"engine-a":{"longest_matched":` + strconv.Itoa(c.want) + `,"GPU":` + strconv.Itoa(c.want) +
			`,"CPU":0,"DISK":0,"DP":{"0":` + strconv.Itoa(c.want) +
			`},"device":` + strconv.Itoa(c.want) + `,"cpu_local":` + strconv.Itoa(c.want) + `,"cpu_share":` + strconv.Itoa(c.want) +
			`,"disk":` + strconv.Itoa(c.want) + `,"rank_matches":{"0":{"device":` + strconv.Itoa(c.want) + `,"cpu_local":` +
			strconv.Itoa(c.want) + `,"cpu_share":` + strconv.Itoa(c.want) + `,"disk":` + strconv.Itoa(c.want) + `}}}}}`
		if got := canon(t, r); got != canonJSON(t, want) {
			t.Fatalf("%s: %s", c.hashes, got)
		}
	}
}

// TestSeedExamples replays the seed document's JSON requests: register,
// query (whose block_size 64 names no registered context → {}), a query of the
// registered context in the seed's response shape, query_by_hash, unregister.
func TestSeedExamples(t *testing.T) {
	env := startEnv(t, Options{}, core.Options{})
	reg := `{
  "endpoint": "tcp://1.1.1.1:5557",
  "replay_endpoint": "tcp://1.1.1.1:5558",
  "type": "vLLM",
  "modelname": "deepseek",
  "lora_name": "sql-adapter",
  "tenant_id": "default",
  "instance_id": "vllm-prefill-node1",
  "block_size": 128,
  "dp_rank": 0,
  "additionalsalt": "w8a8"
}`
	r := env.postJSON(t, "/register", reg)
	if r.status != 200 || canon(t, r) != canonJSON(t, `{"status":"registered successfully","instance_id":"vllm-prefill-node1"}`) {
		t.Fatalf("%d %s", r.status, r.body)
	}
	rank1 := strings.Replace(strings.Replace(reg, `"dp_rank": 0`, `"dp_rank": 1`, 1), "5557", "5559", 1)
	if r := env.postJSON(t, "/register", rank1); r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	query := `{
  "model": "deepseek",
  "lora_name": "sql-adapter",
  "token_ids": [101, 15, 100, 55, 89],
  "tenant_id": "default",
  "instance_id": "vllm-prefill-node1",
  "block_size": 64,
  "cache_salt": "w8a8"
}`
	if r := env.postJSON(t, "/query", query); r.status != 200 || canon(t, r) != "{}" {
		t.Fatalf("%d %s", r.status, r.body)
	}

	// Populate under the default xxh3 profile (events carry token ids; the
	// registration's additionalsalt w8a8 salts them like the query's cache_salt)
	// so that the seed's response example comes out exactly: rank 0 holds
	// block 0 on GPU; rank 1 holds blocks 0-1 in CPU memory.
	// The events name the adapter, as vLLM's do for a LoRA request.
	tokens := seqTokens(256, 100)
	engine := []uint64{0xe0, 0xe1}
	lora := func(b *core.Batch) *core.Batch {
		b.Events[0].LoraName = []byte("sql-adapter")
		return b
	}
	apply(t, env.reg.sub(t, "vllm-prefill-node1", "default", 0), lora(storeBatch("GPU", 128, engine[:1], tokens[:128])))
	apply(t, env.reg.sub(t, "vllm-prefill-node1", "default", 1), lora(storeBatch("CPU", 128, engine, tokens)))

	q := strings.Replace(strings.Replace(query, `"block_size": 64`, `"block_size": 128`, 1),
		"[101, 15, 100, 55, 89]", jsonEnc(tokens), 1)
	// The seed's example response, verbatim, plus the cumulative extras.
	want := `{"default":{"vllm-prefill-node1":{"longest_matched":256,"GPU":128,"DP":{"0":128,"1":256},"CPU":256,"DISK":0,
  "device":128,"cpu_local":256,"cpu_share":256,"disk":256,
  "rank_matches":{"0":{"device":128,"cpu_local":128,"cpu_share":128,"disk":128},"1":{"device":0,"cpu_local":256,"cpu_share":256,"disk":256}}}}}`
	r = env.postJSON(t, "/query", q)
	if r.status != 200 || canon(t, r) != canonJSON(t, want) {
		t.Fatalf("%d %s", r.status, r.body)
	}
	// without the salt the xxh3 namespace differs: rows, no hits
	r = env.postJSON(t, "/query", strings.Replace(q, `"cache_salt": "w8a8"`, `"cache_salt": ""`, 1))
	if m := decodeMap(t, r); len(m) != 1 || strings.Contains(canon(t, r), `"longest_matched":256`) {
		t.Fatalf("unsalted query: %s", canon(t, r))
	}

	// the seed's query_by_hash shape (these hashes match nothing)
	byHash := `{
  "model": "deepseek",
  "lora_name": "sql-adapter",
  "seq_hashes": [1234567890, 9876543210],
  "tenant_id": "default",
  "instance_id": "vllm-prefill-node1",
  "block_size": 128,
  "cache_salt": "w8a8"
}`
	r = env.postJSON(t, "/query_by_hash", byHash)
	if r.status != 200 || !strings.Contains(canon(t, r), `"longest_matched":0`) {
		t.Fatalf("%d %s", r.status, r.body)
	}

	unreg := `{
  "type": "vLLM",
  "modelname": "deepseek",
  "lora_name": "sql-adapter",
  "tenant_id": "default",
  "instance_id": "vllm-prefill-node1",
  "block_size": 128,
  "dp_rank": 0
}`
	r = env.postJSON(t, "/unregister", unreg)
	if r.status != 200 || canon(t, r) != canonJSON(t, `{"status":"unregistered successfully","removed_instances":["vllm-prefill-node1|default|0"]}`) {
		t.Fatalf("%d %s", r.status, r.body)
	}
	want = `{"default":{"vllm-prefill-node1":{"longest_matched":256,"GPU":0,"CPU":256,"DISK":0,
  "DP":{"1":256},"device":0,"cpu_local":256,"cpu_share":256,"disk":256,
  "rank_matches":{"1":{"device":0,"cpu_local":256,"cpu_share":256,"disk":256}}}}}`
	if r = env.postJSON(t, "/query", q); canon(t, r) != canonJSON(t, want) {
		t.Fatalf("after unregister: %s", r.body)
	}
}

// TestQueryNegativeTokenIndex: under an SGLang profile token ids must be
// non-negative (the partial last block is hashed too); the error names the
// first offending element.
func TestQueryNegativeTokenIndex(t *testing.T) {
	env := startEnv(t, Options{}, core.Options{})
	reg := with(baseReg(), "type", "SGLang", "modelname", "sg", "block_size", 2,
		"hash_profile", obj{"strategy", "sglang", "algorithm", "sha256_raw", "index_projection", "first64_be"})
	if r := env.postMP(t, "/register", mp(reg)); r.status != 200 {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	q := obj{"model", "sg", "block_size", 2, "token_ids", []any{1, 2, 3, 4, -5}}
	checkError(t, env.postMP(t, "/query", mp(q)), 400, "out_of_range", "token_ids", 4)
	checkError(t, env.postJSON(t, "/query", `{"model":"sg","block_size":2,"token_ids":[1,-2,3]}`), 400, "out_of_range", "token_ids", 1)
}

// TestQueryLoraID (seed: lora_id is a deprecated compatibility field): a
// query's lora_id resolves through the (lora_id, lora_name) pairs engines
// publish; it is refused only when unknown or conflicting.
func TestQueryLoraID(t *testing.T) {
	env := startEnv(t, Options{}, core.Options{})
	for _, lora := range []string{"sql", "chat"} {
		reg := with(baseReg(), "lora_name", lora, "instance_id", "e-"+lora, "endpoint", "tcp://127.0.0.1:1/"+lora)
		if r := env.postMP(t, "/register", mp(reg)); r.status != 200 {
			t.Fatalf("register: %d %s", r.status, r.body)
		}
	}
	tokens := seqTokens(16, 1)
	h := chain(t, cborProfile(t), tokens, 16, "sql", "")
	b := storeBatch("GPU", 16, h, nil)
	b.Events[0].LoraName, b.Events[0].HasLoraID, b.Events[0].LoraID = []byte("sql"), true, 7
	apply(t, env.reg.sub(t, "e-sql", "default", 0), b)

	q := `{"model":"m","block_size":16,"token_ids":` + jsonEnc(tokens)
	r := env.postJSON(t, "/query", q+`,"lora_id":7}`)
	if r.status != 200 || !strings.Contains(canon(t, r), `"e-sql":{`) || !strings.Contains(canon(t, r), `"longest_matched":16`) {
		t.Fatalf("lora_id 7 → sql: %d %s", r.status, r.body)
	}
	if r := env.postJSON(t, "/query", q+`,"lora_id":7,"lora_name":"sql"}`); r.status != 200 {
		t.Fatalf("consistent lora_id and lora_name: %d %s", r.status, r.body)
	}
	checkError(t, env.postJSON(t, "/query", q+`,"lora_id":7,"lora_name":"chat"}`), 400, "invalid_value", "lora_id", -1)
	checkError(t, env.postJSON(t, "/query", q+`,"lora_id":8}`), 400, "invalid_value", "lora_id", -1)
	// Another engine publishes id 7 as "chat": the id is now ambiguous.
	c := storeBatch("GPU", 16, chain(t, cborProfile(t), tokens, 16, "chat", ""), nil)
	c.Events[0].LoraName, c.Events[0].HasLoraID, c.Events[0].LoraID = []byte("chat"), true, 7
	apply(t, env.reg.sub(t, "e-chat", "default", 0), c)
	checkError(t, env.postJSON(t, "/query", q+`,"lora_id":7}`), 400, "invalid_value", "lora_id", -1)
}
