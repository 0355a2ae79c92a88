package mooncake

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
)

// TestRegisterMsgpackValidation covers every rule of reference §1.1 /register
// (steps 1-14), in order, plus our additions (additionalsalt, optional
// hash_profile, SGLang/standard types, duplicate keys).
func TestRegisterMsgpackValidation(t *testing.T) {
	env := startEnv(t, Options{}, core.Options{})
	ec := func(name string, o obj, status int, reason, field string) errorCase {
		return errorCase{name: name, body: mp(o), status: status, reason: reason, field: field, index: -1}
	}
	cases := []errorCase{
		// unknown keys are checked first, in map order
		ec("unknown field", with(baseReg(), "foo", 1), 400, "unknown_field", "foo"),
		ec("unknown before missing", obj{"foo", 1}, 400, "unknown_field", "foo"),
		ec("first unknown wins", obj{"endpoint", 5, "zzz", 1, "aaa", 2}, 400, "unknown_field", "zzz"),
		ec("Go-era additional_salt", with(baseReg(), "additional_salt", "x"), 400, "unknown_field", "additional_salt"),
		ec("duplicate key", append(baseReg(), "endpoint", "tcp://x:1"), 400, "invalid_value", "endpoint"),
		// 1-4 required strings
		ec("endpoint missing", with(baseReg(), "endpoint", drop), 400, "missing", "endpoint"),
		ec("endpoint not string", with(baseReg(), "endpoint", 5), 400, "invalid_type", "endpoint"),
		ec("endpoint empty", with(baseReg(), "endpoint", ""), 400, "invalid_value", "endpoint"),
		ec("type missing", with(baseReg(), "type", drop), 400, "missing", "type"),
		ec("type not string", with(baseReg(), "type", true), 400, "invalid_type", "type"),
		ec("type empty", with(baseReg(), "type", ""), 400, "invalid_value", "type"),
		ec("modelname missing", with(baseReg(), "modelname", drop), 400, "missing", "modelname"),
		ec("modelname nil", with(baseReg(), "modelname", nil), 400, "invalid_type", "modelname"),
		ec("modelname empty", with(baseReg(), "modelname", ""), 400, "invalid_value", "modelname"),
		ec("model_name is JSON-only", with(baseReg(), "modelname", drop, "model_name", "m"), 400, "unknown_field", "model_name"),
		ec("instance_id missing", with(baseReg(), "instance_id", drop), 400, "missing", "instance_id"),
		ec("instance_id not string", with(baseReg(), "instance_id", 3), 400, "invalid_type", "instance_id"),
		ec("instance_id empty", with(baseReg(), "instance_id", ""), 400, "invalid_value", "instance_id"),
		ec("endpoint before block_size", with(baseReg(), "endpoint", drop, "block_size", 0), 400, "missing", "endpoint"),
		// 5 block_size
		ec("block_size missing", with(baseReg(), "block_size", drop), 400, "missing", "block_size"),
		ec("block_size float", with(baseReg(), "block_size", 16.5), 400, "invalid_type", "block_size"),
		ec("block_size whole float", with(baseReg(), "block_size", 16.0), 400, "invalid_type", "block_size"),
		ec("block_size bool", with(baseReg(), "block_size", true), 400, "invalid_type", "block_size"),
		ec("block_size string", with(baseReg(), "block_size", "16"), 400, "invalid_type", "block_size"),
		ec("block_size > MaxInt64", with(baseReg(), "block_size", uint64(math.MaxInt64)+1), 400, "invalid_type", "block_size"),
		ec("block_size zero", with(baseReg(), "block_size", 0), 400, "out_of_range", "block_size"),
		ec("block_size negative", with(baseReg(), "block_size", -16), 400, "out_of_range", "block_size"),
		// 6-8 optional strings
		ec("replay_endpoint not string", with(baseReg(), "replay_endpoint", 1), 400, "invalid_type", "replay_endpoint"),
		ec("lora_name bool", with(baseReg(), "lora_name", true), 400, "invalid_type", "lora_name"),
		ec("tenant_id int", with(baseReg(), "tenant_id", 7), 400, "invalid_type", "tenant_id"),
		ec("tenant_id nil", with(baseReg(), "tenant_id", nil), 400, "invalid_type", "tenant_id"),
		// additionalsalt is ours and JSON-only: the C++ dialect refuses it
		ec("additionalsalt in msgpack", with(baseReg(), "additionalsalt", "w8a8"), 400, "unknown_field", "additionalsalt"),
		// 9 cache_group
		ec("cache_group string", with(baseReg(), "cache_group", "0"), 400, "invalid_type", "cache_group"),
		ec("cache_group array", with(baseReg(), "cache_group", []any{0, 1}), 400, "invalid_type", "cache_group"),
		ec("cache_group float", with(baseReg(), "cache_group", 0.0), 400, "invalid_type", "cache_group"),
		ec("cache_group one", with(baseReg(), "cache_group", 1), 400, "unsupported", "cache_group"),
		ec("cache_group negative", with(baseReg(), "cache_group", -1), 400, "unsupported", "cache_group"),
		// 10 hash_profile
		ec("hash_profile not map", with(baseReg(), "hash_profile", "vllm_v1"), 400, "invalid_type", "hash_profile"),
		ec("hash_profile nil", with(baseReg(), "hash_profile", nil), 400, "invalid_type", "hash_profile"),
		ec("legacy root_digest", withProfile("root_digest", "4e1195df020de59e0d65a33a4279f1183e7ae4e5d980e309f8b55adff2e61c3e"), 400, "unknown_field", "root_digest"),
		ec("profile typo", withProfile("python_hash_sed", "0"), 400, "unknown_field", "python_hash_sed"),
		ec("profile empty", with(baseReg(), "hash_profile", obj{}), 400, "missing", "strategy"),
		ec("strategy missing", withProfile("strategy", drop), 400, "missing", "strategy"),
		ec("strategy not string", withProfile("strategy", 1), 400, "invalid_type", "strategy"),
		ec("strategy empty", withProfile("strategy", ""), 400, "invalid_value", "strategy"),
		ec("algorithm missing", withProfile("algorithm", drop), 400, "missing", "algorithm"),
		ec("seed missing", withProfile("python_hash_seed", drop), 400, "missing", "python_hash_seed"),
		ec("seed missing before bad projection", withProfile("python_hash_seed", drop, "index_projection", "first64_be"), 400, "missing", "python_hash_seed"),
		ec("projection missing", withProfile("index_projection", drop), 400, "missing", "index_projection"),
		ec("numeric seed", withProfile("python_hash_seed", 0), 400, "invalid_type", "python_hash_seed"),
		ec("nil seed", withProfile("python_hash_seed", nil), 400, "invalid_type", "python_hash_seed"),
		ec("bool seed", withProfile("python_hash_seed", false), 400, "invalid_type", "python_hash_seed"),
		ec("array seed", withProfile("python_hash_seed", []any{"0"}), 400, "invalid_type", "python_hash_seed"),
		ec("map seed", withProfile("python_hash_seed", obj{"a", "0"}), 400, "invalid_type", "python_hash_seed"),
		ec("empty seed", withProfile("python_hash_seed", ""), 400, "invalid_value", "python_hash_seed"),
		ec("algorithm md5", withProfile("algorithm", "md5"), 400, "invalid_value", "algorithm"),
		ec("algorithm sha512", withProfile("algorithm", "sha512"), 400, "invalid_value", "algorithm"),
		// The C++ conductor refuses xxhash; conductor accepts vLLM's xxhash and
		// xxhash_cbor for vllm_v1 (TestRegisterMsgpackAccepts) and nowhere else.
		ec("algorithm xxhash for sglang", withProfile("strategy", "sglang", "algorithm", "xxhash", "index_projection", "first64_be"), 400, "invalid_value", "algorithm"),
		ec("algorithm xxhash_msgpack", withProfile("algorithm", "xxhash_msgpack"), 400, "invalid_value", "algorithm"),
		ec("algorithm SHA256", withProfile("algorithm", "SHA256"), 400, "invalid_value", "algorithm"),
		ec("strategy unknown", withProfile("strategy", "vllm_v2"), 400, "invalid_value", "strategy"),
		ec("strategy before algorithm", withProfile("strategy", "x", "algorithm", "md5"), 400, "invalid_value", "strategy"),
		ec("algorithm before projection", withProfile("algorithm", "md5", "index_projection", "x"), 400, "invalid_value", "algorithm"),
		ec("projection before seed", withProfile("index_projection", "first64_be", "python_hash_seed", "-1"), 400, "invalid_value", "index_projection"),
		ec("seed -1", withProfile("python_hash_seed", "-1"), 400, "invalid_value", "python_hash_seed"),
		ec("seed +1", withProfile("python_hash_seed", "+1"), 400, "invalid_value", "python_hash_seed"),
		ec("seed leading space", withProfile("python_hash_seed", " 0"), 400, "invalid_value", "python_hash_seed"),
		ec("seed trailing space", withProfile("python_hash_seed", "0 "), 400, "invalid_value", "python_hash_seed"),
		ec("seed 2^32", withProfile("python_hash_seed", "4294967296"), 400, "invalid_value", "python_hash_seed"),
		ec("seed text", withProfile("python_hash_seed", "not-a-seed"), 400, "invalid_value", "python_hash_seed"),
		ec("seed invalid UTF-8", withProfile("python_hash_seed", "\xff"), 400, "invalid_value", "python_hash_seed"),
		ec("sglang wrong algorithm", withProfile("strategy", "sglang"), 400, "invalid_value", "algorithm"),
		// 12 type value (after the profile)
		ec("type lower case", with(baseReg(), "type", "vllm"), 400, "invalid_value", "type"),
		ec("type unknown", with(baseReg(), "type", "TensorRT"), 400, "invalid_value", "type"),
		ec("profile before type", with(withProfile("algorithm", "md5"), "type", "x"), 400, "invalid_value", "algorithm"),
		ec("type before dp_rank", with(baseReg(), "type", "x", "dp_rank", drop), 400, "invalid_value", "type"),
		// 13 dp_rank
		ec("dp_rank missing", with(baseReg(), "dp_rank", drop), 400, "missing", "dp_rank"),
		ec("dp_rank string", with(baseReg(), "dp_rank", "0"), 400, "invalid_type", "dp_rank"),
		ec("dp_rank float", with(baseReg(), "dp_rank", 1.0), 400, "invalid_type", "dp_rank"),
		ec("dp_rank negative", with(baseReg(), "dp_rank", -1), 400, "out_of_range", "dp_rank"),
		ec("dp_rank 2^31", with(baseReg(), "dp_rank", int64(math.MaxInt32)+1), 400, "out_of_range", "dp_rank"),
		ec("dp_rank u64", with(baseReg(), "dp_rank", uint64(math.MaxUint64)), 400, "out_of_range", "dp_rank"),
	}
	// body-level failures
	cases = append(cases,
		errorCase{"empty body", []byte{}, 400, "invalid_msgpack", "", -1},
		errorCase{"not a map", mp([]any{1, 2}), 400, "invalid_msgpack", "", -1},
		errorCase{"garbage", []byte{0xc1}, 400, "invalid_msgpack", "", -1},
		errorCase{"truncated", mp(baseReg())[:20], 400, "invalid_msgpack", "", -1},
		errorCase{"int key", mp(obj{1, "x"}), 400, "invalid_msgpack", "", -1},
		errorCase{"trailing bytes", append(mp(baseReg()), 0xc0), 400, "invalid_msgpack", "", -1},
		errorCase{"syntax beats field error", trunc(mp(obj{"foo", 1, "endpoint", "e"}), 1), 400, "invalid_msgpack", "", -1},
	)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := env.postMP(t, "/register", c.body)
			if r.ct != "application/msgpack" {
				t.Fatalf("content type %q", r.ct)
			}
			checkError(t, r, c.status, c.reason, c.field, c.index)
		})
	}
	if n := len(env.ix.Services()); n != 0 {
		t.Fatalf("rejected registrations created %d services", n)
	}
	if n := len(env.ix.GlobalView().Contexts); n != 0 {
		t.Fatalf("rejected registrations created %d contexts", n)
	}
}

// TestRegisterMsgpackAccepts covers accepted variants and the resulting
// registration.
func TestRegisterMsgpackAccepts(t *testing.T) {
	env := startEnv(t, Options{}, core.Options{})
	cases := []struct {
		name  string
		body  obj
		check func(t *testing.T, r core.Registration)
	}{
		{"cbor profile", baseReg(), func(t *testing.T, r core.Registration) {
			if !r.ProfileExplicit || r.Profile.RootHex() != "4e1195df020de59e0d65a33a4279f1183e7ae4e5d980e309f8b55adff2e61c3e" {
				t.Fatalf("profile %+v", r.Profile)
			}
			if r.TenantID != "default" || r.CacheGroup != nil || r.Type != core.PublisherVLLM {
				t.Fatalf("%+v", r)
			}
		}},
		{"no profile → xxh3 default", with(baseReg(), "hash_profile", drop, "instance_id", "b", "endpoint", "tcp://b:1", "modelname", "m-default"), func(t *testing.T, r core.Registration) {
			if r.ProfileExplicit || r.Profile != hash.DefaultProfile() {
				t.Fatalf("profile %+v explicit=%v", r.Profile, r.ProfileExplicit)
			}
		}},
		{"all optional fields", with(baseReg(), "instance_id", "c", "endpoint", "tcp://c:1", "replay_endpoint", "tcp://c:2",
			"lora_name", "sql", "tenant_id", "", "cache_group", 0, "modelname", "m2"), func(t *testing.T, r core.Registration) {
			if r.ReplayEndpoint != "tcp://c:2" || r.LoraName != "sql" || r.TenantID != "default" ||
				r.CacheGroup == nil || *r.CacheGroup != 0 {
				t.Fatalf("%+v", r)
			}
		}},
		{"cache_group nil", with(baseReg(), "instance_id", "d", "endpoint", "tcp://d:1", "cache_group", nil, "modelname", "m3"), func(t *testing.T, r core.Registration) {
			if r.CacheGroup != nil {
				t.Fatalf("cache group %v", *r.CacheGroup)
			}
		}},
		{"SGLang", with(baseReg(), "instance_id", "e", "endpoint", "tcp://e:1", "type", "SGLang", "modelname", "sg",
			"hash_profile", obj{"strategy", "sglang", "algorithm", "sha256_raw", "index_projection", "first64_be"}), func(t *testing.T, r core.Registration) {
			if r.Type != core.PublisherSGLang || r.Profile.Spec.PythonHashSeed != "0" {
				t.Fatalf("%+v", r)
			}
		}},
		{"standard xxh3 explicit", with(baseReg(), "instance_id", "f", "endpoint", "tcp://f:1", "type", "standard", "modelname", "std",
			"hash_profile", obj{"strategy", "xxh3"}), func(t *testing.T, r core.Registration) {
			if r.Type != core.PublisherStandard || !r.ProfileExplicit || r.Profile.XXH3Seed != hash.DefaultXXH3Seed {
				t.Fatalf("%+v", r)
			}
		}},
		{"Mooncake pool", with(baseReg(), "instance_id", "pool", "endpoint", "tcp://pool:1", "type", "Mooncake"), func(t *testing.T, r core.Registration) {
			if r.Type != core.PublisherMooncake {
				t.Fatalf("%+v", r)
			}
		}},
		{"pickle seed random", with(withProfile("algorithm", "sha256", "python_hash_seed", "random"), "instance_id", "g", "endpoint", "tcp://g:1", "modelname", "pk"),
			func(t *testing.T, r core.Registration) {
				if r.Profile.Spec.Algorithm != "sha256" || r.Profile.Spec.PythonHashSeed != "random" {
					t.Fatalf("%+v", r.Profile)
				}
			}},
		{"xxhash_cbor", with(withProfile("algorithm", "xxhash_cbor"), "instance_id", "h", "endpoint", "tcp://h:1", "modelname", "xc"),
			func(t *testing.T, r core.Registration) {
				// NONE_HASH for seed "0": loxilb's vLLM 0.17.0 vectors.
				if r.Profile.Algorithm != hash.AlgoXXHashCBOR || r.Profile.RootHex() != "1ebe36576dcb573f26b99533a20aaeca" {
					t.Fatalf("%+v", r.Profile)
				}
			}},
		{"xxhash", with(withProfile("algorithm", "xxhash"), "instance_id", "i", "endpoint", "tcp://i:1", "modelname", "xp"),
			func(t *testing.T, r core.Registration) {
				if r.Profile.Algorithm != hash.AlgoXXHashPickle || r.Profile.Spec.Algorithm != "xxhash" || len(r.Profile.RootHex()) != 32 {
					t.Fatalf("%+v", r.Profile)
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := env.postMP(t, "/register", mp(c.body))
			if r.status != 200 {
				t.Fatalf("status %d: %s", r.status, canon(t, r))
			}
			inst := ""
			for i := 0; i < len(c.body); i += 2 {
				if c.body[i] == "instance_id" {
					inst = c.body[i+1].(string)
				}
			}
			if got, want := canon(t, r), canonJSON(t, `{"status":"registered successfully","instance_id":"`+inst+`"}`); got != want {
				t.Fatalf("body %s, want %s", got, want)
			}
			var reg core.Registration
			for _, s := range env.ix.Services() {
				if s.InstanceID == inst {
					reg = s
				}
			}
			c.check(t, reg)
		})
	}
}

// TestRegisterSemantics: idempotent duplicates, conflicts (step 14 and the
// subscription rules) → invalid_registration, without state change.
func TestRegisterSemantics(t *testing.T) {
	env := startEnv(t, Options{}, core.Options{})
	ok := func(o obj) {
		t.Helper()
		if r := env.postMP(t, "/register", mp(o)); r.status != 200 {
			t.Fatalf("status %d: %s", r.status, canon(t, r))
		}
	}
	ok(baseReg())
	ok(baseReg()) // identical: idempotent
	if n := len(env.ix.Services()); n != 1 {
		t.Fatalf("%d services after duplicate", n)
	}
	cases := []errorCase{
		{name: "same key, other endpoint", body: mp(with(baseReg(), "endpoint", "tcp://other:1"))},
		{name: "same key, other replay", body: mp(with(baseReg(), "replay_endpoint", "tcp://r:1"))},
		{name: "same key, cache_group given", body: mp(with(baseReg(), "cache_group", 0))},
		{name: "endpoint used by another key", body: mp(with(baseReg(), "instance_id", "engine-b"))},
		{name: "mixed algorithm in one context", body: mp(with(withProfile("algorithm", "sha256"), "instance_id", "engine-c", "endpoint", "tcp://c:1"))},
		{name: "other seed in one context", body: mp(with(withProfile("python_hash_seed", "00"), "instance_id", "engine-d", "endpoint", "tcp://d:1"))},
		{name: "default profile in a cbor context", body: mp(with(baseReg(), "hash_profile", drop, "instance_id", "engine-e", "endpoint", "tcp://e:1"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			field := ""
			if c.name == "endpoint used by another key" {
				field = "endpoint"
			}
			checkError(t, env.postMP(t, "/register", c.body), 400, "invalid_registration", field, -1)
		})
	}
	if n := len(env.ix.Services()); n != 1 {
		t.Fatalf("conflicts changed the registry: %d services", n)
	}
	// another rank of the same instance and context is fine
	ok(with(baseReg(), "dp_rank", 1, "endpoint", "tcp://127.0.0.1:5558"))
	gv := env.ix.GlobalView()
	if len(gv.Contexts) != 1 || !deepEqual(gv.Contexts[0].Instances["engine-a"], []int32{0, 1}) {
		t.Fatalf("global view %+v", gv)
	}
}

func TestRegisterLimit(t *testing.T) {
	env := startEnv(t, Options{}, core.Options{MaxRegistrations: 2})
	for i, inst := range []string{"a", "b"} {
		r := env.postMP(t, "/register", mp(with(baseReg(), "instance_id", inst, "endpoint", "tcp://h:"+string(rune('1'+i)))))
		if r.status != 200 {
			t.Fatalf("register %s: %d %s", inst, r.status, canon(t, r))
		}
	}
	// re-registering an existing key stays idempotent at the limit
	if r := env.postMP(t, "/register", mp(with(baseReg(), "instance_id", "a", "endpoint", "tcp://h:1"))); r.status != 200 {
		t.Fatalf("idempotent at limit: %d %s", r.status, canon(t, r))
	}
	r := env.postMP(t, "/register", mp(with(baseReg(), "instance_id", "c", "endpoint", "tcp://h:3")))
	checkError(t, r, 400, "limit_exceeded", "", -1)
	r = env.postJSON(t, "/register", jsonEnc(with(baseReg(), "instance_id", "c", "endpoint", "tcp://h:3")))
	checkError(t, r, 400, "limit_exceeded", "", -1)
}

// failingRegistrar fails like a ZMQ start failure.
type failingRegistrar struct{ *coreRegistrar }

func (f failingRegistrar) Register(core.Registration) (bool, error) {
	return false, errors.New("failed to start ZMQ client: invalid endpoint")
}

func TestRegisterSubscribeFailureIs500(t *testing.T) {
	env := startEnv(t, Options{}, core.Options{})
	env.gateReg.Registrar = failingRegistrar{env.reg}
	r := env.postMP(t, "/register", mp(baseReg()))
	if r.status != 500 {
		t.Fatalf("status %d", r.status)
	}
	if got, want := canon(t, r), canonJSON(t, `{"error":"Failed to subscribe: failed to start ZMQ client: invalid endpoint","reason":"internal"}`); got != want {
		t.Fatalf("body %s, want %s", got, want)
	}
}

// TestRegisterJSON: the seed's example and the JSON dialect's rules.
func TestRegisterJSON(t *testing.T) {
	env := startEnv(t, Options{}, core.Options{})
	seed := `{
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
	r := env.postJSON(t, "/register", seed)
	if r.status != 200 || r.ct != "application/json" {
		t.Fatalf("%d %q %s", r.status, r.ct, r.body)
	}
	if got, want := canon(t, r), canonJSON(t, `{"status":"registered successfully","instance_id":"vllm-prefill-node1"}`); got != want {
		t.Fatalf("body %s, want %s", got, want)
	}
	svcs := env.ix.Services()
	if len(svcs) != 1 {
		t.Fatalf("%d services", len(svcs))
	}
	want := core.Registration{Endpoint: "tcp://1.1.1.1:5557", ReplayEndpoint: "tcp://1.1.1.1:5558", Type: core.PublisherVLLM,
		ModelName: "deepseek", LoraName: "sql-adapter", TenantID: "default", InstanceID: "vllm-prefill-node1",
		BlockSize: 128, AdditionalSalt: "w8a8", Profile: hash.DefaultProfile(), Owner: "admin"}
	if svcs[0] != want {
		t.Fatalf("registration %+v\nwant %+v", svcs[0], want)
	}

	base := obj{"endpoint", "tcp://j:1", "type", "vLLM", "modelname", "m", "instance_id", "j", "block_size", 16, "dp_rank", 0}
	ec := func(name, body, reason, field string) errorCase {
		return errorCase{name: name, body: []byte(body), status: 400, reason: reason, field: field, index: -1}
	}
	cases := []errorCase{
		ec("unknown field", jsonEnc(with(base, "foo", 1)), "unknown_field", "foo"),
		ec("root_digest in profile", jsonEnc(with(base, "hash_profile", with(cborSpec(), "root_digest", "00"))), "unknown_field", "root_digest"),
		ec("alias duplicates", jsonEnc(with(base, "model_name", "m")), "invalid_value", "model_name"),
		ec("modelname missing", jsonEnc(with(base, "modelname", drop)), "missing", "modelname"),
		ec("model alias empty", jsonEnc(with(base, "modelname", drop, "model", "")), "invalid_value", "model"),
		ec("block_size float", jsonEnc(with(base, "block_size", rawJSON("16.0"))), "invalid_type", "block_size"),
		ec("block_size exponent", jsonEnc(with(base, "block_size", rawJSON("1e2"))), "invalid_type", "block_size"),
		ec("block_size huge", jsonEnc(with(base, "block_size", rawJSON("99999999999999999999999"))), "invalid_type", "block_size"),
		ec("block_size huge negative", jsonEnc(with(base, "block_size", rawJSON("-99999999999999999999999"))), "out_of_range", "block_size"),
		ec("block_size 2^63", jsonEnc(with(base, "block_size", rawJSON("9223372036854775808"))), "invalid_type", "block_size"),
		ec("block_size zero", jsonEnc(with(base, "block_size", 0)), "out_of_range", "block_size"),
		ec("block_size null", jsonEnc(with(base, "block_size", nil)), "invalid_type", "block_size"),
		ec("dp_rank bool", jsonEnc(with(base, "dp_rank", false)), "invalid_type", "dp_rank"),
		ec("dp_rank negative", jsonEnc(with(base, "dp_rank", -1)), "out_of_range", "dp_rank"),
		ec("hash_profile array", jsonEnc(with(base, "hash_profile", []any{})), "invalid_type", "hash_profile"),
		ec("seed number", jsonEnc(with(base, "hash_profile", with(cborSpec(), "python_hash_seed", 0))), "invalid_type", "python_hash_seed"),
		ec("algorithm bad", jsonEnc(with(base, "hash_profile", with(cborSpec(), "algorithm", "md5"))), "invalid_value", "algorithm"),
		ec("cache_group 1", jsonEnc(with(base, "cache_group", 1)), "unsupported", "cache_group"),
		ec("type lower", jsonEnc(with(base, "type", "sglang")), "invalid_value", "type"),
		ec("tenant number", jsonEnc(with(base, "tenant_id", 5)), "invalid_type", "tenant_id"),
		ec("not an object", `[1]`, "invalid_json", ""),
		ec("empty", ``, "invalid_json", ""),
		ec("trailing", jsonEnc(base)+` {}`, "invalid_json", ""),
		ec("syntax after field error", `{"foo": 1, "endpoint": }`, "invalid_json", ""),
		ec("bad escape", `{"endpoint": "\q"}`, "invalid_json", ""),
		ec("invalid UTF-8", "{\"endpoint\": \"\xff\"}", "invalid_json", ""),
		ec("gap_policy unknown", jsonEnc(with(base, "gap_policy", "discard")), "invalid_value", "gap_policy"),
		ec("gap_policy empty", jsonEnc(with(base, "gap_policy", "")), "invalid_value", "gap_policy"),
		ec("gap_policy number", jsonEnc(with(base, "gap_policy", 1)), "invalid_type", "gap_policy"),
		ec("max_blocks string", jsonEnc(with(base, "max_blocks", "1M")), "invalid_type", "max_blocks"),
		ec("max_blocks float", jsonEnc(with(base, "max_blocks", rawJSON("1.5"))), "invalid_type", "max_blocks"),
		ec("max_blocks huge", jsonEnc(with(base, "max_blocks", rawJSON("4294967296"))), "out_of_range", "max_blocks"),
		// A salt names a namespace of the xxh3 profile; an engine profile has none.
		ec("additionalsalt with an engine profile", jsonEnc(with(base, "additionalsalt", "s", "hash_profile", cborSpec())), "invalid_value", "additionalsalt"),
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			checkError(t, env.postJSON(t, "/register", string(c.body)), c.status, c.reason, c.field, c.index)
		})
	}

	// nulls mean absent; aliases and profiles work
	r = env.postJSON(t, "/register", jsonEnc(with(base, "modelname", drop, "model_name", "m", "lora_name", nil, "tenant_id", nil,
		"hash_profile", cborSpec(), "cache_group", nil)))
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	r = env.postJSON(t, "/register", jsonEnc(with(base, "instance_id", "j2", "endpoint", "tcp://j:2", "modelname", "salted",
		"additionalsalt", drop, "additional_salt", "s")))
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var got, salted core.Registration
	for _, s := range env.ix.Services() {
		switch s.InstanceID {
		case "j":
			got = s
		case "j2":
			salted = s
		}
	}
	if got.ModelName != "m" || got.TenantID != "default" || !got.ProfileExplicit || got.Profile != cborProfile(t) ||
		got.GapPolicy != core.GapDefault || got.MaxBlocks != 0 || salted.AdditionalSalt != "s" {
		t.Fatalf("%+v %+v", got, salted)
	}

	// gap_policy and max_blocks: the registration's own, JSON only
	r = env.postJSON(t, "/register", jsonEnc(with(base, "instance_id", "k", "endpoint", "tcp://k:1", "hash_profile", cborSpec(), "gap_policy", "Expire", "max_blocks", -1)))
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	for _, s := range env.ix.Services() {
		if s.InstanceID == "k" && (s.GapPolicy != core.GapExpire || s.MaxBlocks != -1) {
			t.Fatalf("%+v", s)
		}
	}
	checkError(t, env.postMP(t, "/register", mp(with(baseReg(), "gap_policy", "keep"))), 400, "unknown_field", "gap_policy", -1)
}

// TestUnregister covers /unregister's rules in both dialects.
func TestUnregister(t *testing.T) {
	env := startEnv(t, Options{}, core.Options{})
	mk := func(inst string, rank int) {
		t.Helper()
		r := env.postMP(t, "/register", mp(with(baseReg(), "instance_id", inst, "dp_rank", rank, "endpoint", "tcp://u/"+inst+string(rune('0'+rank)))))
		if r.status != 200 {
			t.Fatalf("%d %s", r.status, canon(t, r))
		}
	}
	mk("a", 0)
	mk("a", 1)
	mk("b", 0)

	ec := func(name string, body []byte, reason, field string) errorCase {
		return errorCase{name: name, body: body, status: 400, reason: reason, field: field, index: -1}
	}
	base := obj{"instance_id", "a", "dp_rank", 0}
	mpCases := []errorCase{
		ec("Go-era type is unknown in msgpack", mp(with(base, "type", "vLLM")), "unknown_field", "type"),
		ec("unknown", mp(with(base, "x", 1)), "unknown_field", "x"),
		ec("instance missing", mp(with(base, "instance_id", drop)), "missing", "instance_id"),
		ec("instance int", mp(with(base, "instance_id", 1)), "invalid_type", "instance_id"),
		ec("instance empty", mp(with(base, "instance_id", "")), "invalid_value", "instance_id"),
		ec("tenant int", mp(with(base, "tenant_id", 1)), "invalid_type", "tenant_id"),
		ec("dp_rank missing", mp(with(base, "dp_rank", drop)), "missing", "dp_rank"),
		ec("dp_rank negative", mp(with(base, "dp_rank", -1)), "invalid_value", "dp_rank"),
		ec("dp_rank string", mp(with(base, "dp_rank", "0")), "invalid_value", "dp_rank"),
		ec("dp_rank float", mp(with(base, "dp_rank", 0.0)), "invalid_value", "dp_rank"),
		ec("dp_rank 2^31", mp(with(base, "dp_rank", int64(1)<<31)), "invalid_value", "dp_rank"),
		ec("not a map", mp("a"), "invalid_msgpack", ""),
	}
	for _, c := range mpCases {
		t.Run("msgpack/"+c.name, func(t *testing.T) {
			checkError(t, env.postMP(t, "/unregister", c.body), c.status, c.reason, c.field, c.index)
		})
	}
	jsonCases := []errorCase{
		ec("unknown", []byte(`{"instance_id":"a","dp_rank":0,"endpoint":"x"}`), "unknown_field", "endpoint"),
		ec("dp_rank negative", []byte(`{"instance_id":"a","dp_rank":-1}`), "invalid_value", "dp_rank"),
		ec("dp_rank float", []byte(`{"instance_id":"a","dp_rank":0.5}`), "invalid_value", "dp_rank"),
		ec("instance null", []byte(`{"instance_id":null,"dp_rank":0}`), "invalid_type", "instance_id"),
	}
	for _, c := range jsonCases {
		t.Run("json/"+c.name, func(t *testing.T) {
			checkError(t, env.postJSON(t, "/unregister", string(c.body)), c.status, c.reason, c.field, c.index)
		})
	}

	// unknown key → 404 with the service key
	r := env.postMP(t, "/unregister", mp(obj{"instance_id", "a", "dp_rank", 7}))
	if r.status != 404 || canon(t, r) != canonJSON(t, `{"error":"service not found: a|default|7","reason":"not_found"}`) {
		t.Fatalf("%d %s", r.status, canon(t, r))
	}
	r = env.postJSON(t, "/unregister", `{"instance_id":"a","tenant_id":"t","dp_rank":0}`)
	if r.status != 404 || canon(t, r) != canonJSON(t, `{"error":"service not found: a|t|0","reason":"not_found"}`) {
		t.Fatalf("%d %s", r.status, canon(t, r))
	}

	// msgpack success; "" tenant is default
	r = env.postMP(t, "/unregister", mp(obj{"instance_id", "a", "tenant_id", "", "dp_rank", 1}))
	if r.status != 200 || canon(t, r) != canonJSON(t, `{"status":"unregistered successfully","removed_instances":["a|default|1"]}`) {
		t.Fatalf("%d %s", r.status, canon(t, r))
	}
	// partial unregister keeps the instance's other rank
	gv := env.ix.GlobalView()
	if !deepEqual(gv.Contexts[0].Instances["a"], []int32{0}) {
		t.Fatalf("instances %v", gv.Contexts[0].Instances)
	}
	// the seed's JSON example body (Go-era fields are ignored)
	r = env.postJSON(t, "/unregister", `{
  "type": "vLLM",
  "modelname": "deepseek",
  "lora_name": "sql-adapter",
  "tenant_id": "default",
  "instance_id": "a",
  "block_size": 128,
  "dp_rank": 0
}`)
	if r.status != 200 || canon(t, r) != canonJSON(t, `{"status":"unregistered successfully","removed_instances":["a|default|0"]}`) {
		t.Fatalf("%d %s", r.status, canon(t, r))
	}
	if n := len(env.ix.Services()); n != 1 {
		t.Fatalf("%d services left", n)
	}
}

// fieldRegistrar refuses a registration naming the offending field, as the
// ingester does for a malformed ZMQ endpoint.
type fieldRegistrar struct{ *coreRegistrar }

func (f fieldRegistrar) Register(core.Registration) (bool, error) {
	return false, fmt.Errorf("register x: %w", &core.FieldError{Field: "replay_endpoint",
		Err: fmt.Errorf("replay_endpoint=\"tcp://h\": tcp address lacks a port: %w", core.ErrInvalid)})
}

// TestRegisterFieldErrors: a registrar error attributed to a field is a 400
// invalid_value naming that field, in both dialects.
func TestRegisterFieldErrors(t *testing.T) {
	env := startEnv(t, Options{}, core.Options{})
	env.gateReg.Registrar = fieldRegistrar{env.reg}
	checkError(t, env.postMP(t, "/register", mp(baseReg())), 400, "invalid_value", "replay_endpoint", -1)
	checkError(t, env.postJSON(t, "/register", jsonEnc(baseReg())), 400, "invalid_value", "replay_endpoint", -1)
}

// TestRegisterRejectsInvalidUTF8: identities must be valid UTF-8 in the
// msgpack dialect too (JSON rejects them while scanning), else the context or
// the service key could never be named again.
func TestRegisterRejectsInvalidUTF8(t *testing.T) {
	env := startEnv(t, Options{}, core.Options{})
	for i, field := range []string{"instance_id", "modelname", "lora_name", "tenant_id", "endpoint"} {
		body := with(baseReg(), "endpoint", fmt.Sprintf("tcp://h:%d", 100+i))
		body = with(body, field, string([]byte{0xa1, 0xff}))
		checkError(t, env.postMP(t, "/register", mp(body)), 400, "invalid_value", field, -1)
	}
	if n := len(env.ix.Services()); n != 0 {
		t.Fatalf("%d registrations created", n)
	}
}

// TestRegisterIdentityLimits: every identity field is bounded (256 bytes;
// endpoints 512), in both dialects, answered 400 invalid_value naming the
// field, and nothing is registered (a 1 MB instance id would be held in
// every /metrics label that names it).
func TestRegisterIdentityLimits(t *testing.T) {
	env := startEnv(t, Options{}, core.Options{})
	long := func(n int) string { return strings.Repeat("a", n) }
	n := 0
	for _, c := range []struct {
		key  string
		max  int
		wrap func(string) string
	}{
		{"instance_id", core.MaxIdentityBytes, nil},
		{"modelname", core.MaxIdentityBytes, nil},
		{"lora_name", core.MaxIdentityBytes, nil},
		{"tenant_id", core.MaxIdentityBytes, nil},
		{"additionalsalt", core.MaxIdentityBytes, nil},
		{"endpoint", core.MaxEndpointBytes, func(s string) string { return "tcp://" + s[6:] }},
		{"replay_endpoint", core.MaxEndpointBytes, func(s string) string { return "tcp://" + s[6:] }},
	} {
		for _, size := range []int{c.max, c.max + 1} {
			v := long(size)
			if c.wrap != nil {
				v = c.wrap(v)
			}
			n++
			o := with(baseReg(), c.key, v, "instance_id", fmt.Sprintf("i%d", n), "endpoint", fmt.Sprintf("tcp://h:%d", n))
			if c.key == "instance_id" || c.key == "endpoint" {
				o = with(o, c.key, v)
			}
			if c.key == "additionalsalt" {
				o = with(o, "hash_profile", drop, "modelname", "salted") // a salt needs the xxh3 profile
			}
			r := env.postJSON(t, "/register", jsonEnc(o))
			if size > c.max {
				checkError(t, r, 400, "invalid_value", c.key, -1)
				continue
			}
			if r.status != 200 {
				t.Fatalf("%s of %d bytes: %d %s", c.key, size, r.status, r.body)
			}
		}
	}
	if got := len(env.ix.Services()); got != 7 {
		t.Fatalf("%d registrations, want the 7 at the limit", got)
	}
}

// TestRegisterIdentityText: an identity that is not printable text (a NUL,
// an ESC, another control character, invalid UTF-8) is refused in both
// dialects, 400 invalid_value naming the field, and nothing is registered.
func TestRegisterIdentityText(t *testing.T) {
	env := startEnv(t, Options{}, core.Options{})
	for i, c := range []struct{ key, v string }{
		{"instance_id", "a\x00b"}, {"instance_id", "\x1b[2J"}, {"modelname", "m\x07"},
		{"lora_name", "l\u009b"}, {"tenant_id", "t\xff"}, {"instance_id", "\xc3"},
	} {
		o := with(baseReg(), "endpoint", fmt.Sprintf("tcp://h:%d", i+1), c.key, c.v)
		checkError(t, env.postMP(t, "/register", mp(o)), 400, "invalid_value", c.key, -1)
		if utf8.ValidString(c.v) {
			checkError(t, env.postJSON(t, "/register", jsonEnc(o)), 400, "invalid_value", c.key, -1)
		}
	}
	if n := len(env.ix.Services()); n != 0 {
		t.Fatalf("%d registrations created", n)
	}
}
