package httpd

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/core"
)

// hostileBodies is a corpus of bodies no endpoint may accept: broken syntax
// in both dialects, wrong types, huge or negative numbers, deep nesting,
// invalid UTF-8, and shapes of the wrong endpoint. Seeded random junk is
// added by hostileCorpus.
func hostileBodies() []string {
	deep := strings.Repeat("[", 5000) + strings.Repeat("]", 5000)
	return []string{
		"", "{", "}", "[]", "null", "0", `"x"`, "{}}", `{"a":}`, `{"a" 1}`, `{,}`,
		`{"model":1}`, `{"model":"m","block_size":"16"}`, `{"model":"m","block_size":-1,"token_ids":[1]}`,
		`{"model":"m","block_size":16,"token_ids":[1e400]}`, `{"model":"m","block_size":16,"token_ids":[NaN]}`,
		`{"model":"m","block_size":16,"token_ids":[99999999999999999999999]}`,
		`{"model":"m","block_size":16,"token_ids":"` + strings.Repeat("A", 7) + `"}`,
		`{"model":"m","block_size":16,"token_ids":[1,2,` + deep + `]}`, deep,
		`{"model":"\xff\xfe","block_size":16,"token_ids":[1]}`, "\xff\xfe\xfd",
		`{"endpoint":"tcp://a:1","type":"vLLM","modelname":"m","instance_id":"x","block_size":16,"dp_rank":-5}`,
		`{"endpoint":"tcp://a:1","type":"nope","modelname":"m","instance_id":"x","block_size":16,"dp_rank":0}`,
		`{"endpoint":"tcp://169.254.169.254:80","type":"vLLM","modelname":"m","instance_id":"x","block_size":0,"dp_rank":0}`,
		`{"instance_id":123,"dp_rank":0}`, `{"instance_id":"x","dp_rank":"0"}`,
		`{"model":"m","block_size":16,"token_ids":[1],"model":"m"}`,
		`{"model_name":"m","block_size":16,"token_ids":"!!!notbase64"}`,
		"\x81\xa5model", "\xdd\xff\xff\xff\xff", "\xc1", "\x82\xa5model\xa1m\xaablock_size\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00",
		strings.Repeat(`{"a":`, 300) + "1" + strings.Repeat("}", 300),
	}
}

func hostileCorpus(seed uint64) []string {
	out := hostileBodies()
	rng := rand.New(rand.NewPCG(seed, 77))
	for range 200 {
		b := make([]byte, rng.IntN(96))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		out = append(out, string(b))
	}
	return out
}

// indexState is what a refused request must leave unchanged.
type indexState struct {
	services []core.Registration
	view     core.GlobalView
	tiers    [core.NumTiers]int
}

func snapshotIndex(ix *core.Index) indexState {
	return indexState{services: ix.Services(), view: ix.GlobalView(), tiers: ix.TierBlocks()}
}

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
	before := snapshotIndex(env.ix)
	corpus := hostileCorpus(seed)
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
	if after := snapshotIndex(env.ix); !reflect.DeepEqual(before, after) {
		t.Fatalf("index changed by refused requests:\nbefore %+v\nafter  %+v", before, after)
	}
}

// TestHostileBodiesDynamo: the same corpus on every POST route of the Dynamo
// surface: never a 5xx, every refusal carries an error, and the index and
// the Dynamo registry are unchanged (404 is Dynamo's answer for an unknown
// model or worker).
func TestHostileBodiesDynamo(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	ix := core.New(core.Options{Logger: quietLogger()})
	d, err := newDynamo(ix, newCoreRegistrar(ix), DynamoOptions{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Register(DynamoWorker{InstanceID: 1, Endpoint: "tcp://127.0.0.1:1", ModelName: "m", BlockSize: 16}); err != nil {
		t.Fatal(err)
	}
	before := snapshotIndex(ix)
	for _, path := range []string{"/register", "/unregister", "/query", "/query_by_hash", "/register_peer", "/deregister_peer"} {
		for i, body := range hostileCorpus(seed) {
			var req fasthttp.Request
			req.Header.SetMethod("POST")
			req.SetRequestURI(path)
			req.Header.SetContentType("application/json")
			req.SetBody([]byte(body))
			ctx := &fasthttp.RequestCtx{}
			ctx.Init(&req, nil, nil)
			d.Handler(ctx)
			code, rb := ctx.Response.StatusCode(), ctx.Response.Body()
			if code >= 500 {
				t.Fatalf("%s body %d %q: %d %s", path, i, body, code, rb)
			}
			if code >= 400 && !strings.Contains(string(rb), "error") {
				t.Fatalf("%s body %d %q: %d without an error: %s", path, i, body, code, rb)
			}
			if code < 400 && (path == "/register" || path == "/unregister" || path == "/register_peer") {
				t.Fatalf("%s accepted hostile body %d %q: %d %s", path, i, body, code, rb)
			}
		}
	}
	if after := snapshotIndex(ix); !reflect.DeepEqual(before, after) {
		t.Fatalf("index changed by refused requests:\nbefore %+v\nafter  %+v", before, after)
	}
}
