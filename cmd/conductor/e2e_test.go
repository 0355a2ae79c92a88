package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tinylib/msgp/msgp"

	"github.com/seed-c7a81618/conductor/bench"
	"github.com/seed-c7a81618/conductor/hash"
)

// canonBody renders a JSON or msgpack response as canonical JSON (sorted keys).
func canonBody(t *testing.T, ct string, b []byte) string {
	t.Helper()
	var v any
	if ct == "application/msgpack" {
		x, rest, err := msgp.ReadIntfBytes(b)
		if err != nil || len(rest) != 0 {
			t.Fatalf("bad msgpack response: %v %x", err, b)
		}
		v = x
	} else {
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		if err := d.Decode(&v); err != nil {
			t.Fatalf("bad JSON response %q: %v", b, err)
		}
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func canonText(t *testing.T, s string) string {
	t.Helper()
	return canonBody(t, "application/json", []byte(s))
}

// mpMap encodes an ordered msgpack map from key, value pairs (strings, ints,
// []int32, []uint64, nested [][2]any not needed here).
func mpMap(kv ...any) []byte {
	b := msgp.AppendMapHeader(nil, uint32(len(kv)/2))
	for i := 0; i < len(kv); i += 2 {
		b = msgp.AppendString(b, kv[i].(string))
		switch v := kv[i+1].(type) {
		case []int32:
			b = msgp.AppendArrayHeader(b, uint32(len(v)))
			for _, x := range v {
				b = msgp.AppendInt32(b, x)
			}
		case []uint64:
			b = msgp.AppendArrayHeader(b, uint32(len(v)))
			for _, x := range v {
				b = msgp.AppendUint64(b, x)
			}
		case map[string]string:
			b = msgp.AppendMapHeader(b, uint32(len(v)))
			for _, k := range []string{"strategy", "algorithm", "python_hash_seed", "index_projection"} {
				b = msgp.AppendString(b, k)
				b = msgp.AppendString(b, v[k])
			}
		default:
			var err error
			if b, err = msgp.AppendIntf(b, v); err != nil {
				panic(err)
			}
		}
	}
	return b
}

func jsonList[T int32 | uint64](xs []T) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprint(x)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// rowJSON / rowMsgpack render one single-rank instance row with tier
// boundaries (device, cpu_local, cpu_share, disk).
func rowMsgpack(id string, d, l, s, k int) string {
	return fmt.Sprintf(`{"instances":{%q:{"longest_matched":%d,"dp":{"0":%d},"rank_matches":{"0":{"device":%d,"cpu_local":%d,"cpu_share":%d,"disk":%d}},"device":%d,"cpu_local":%d,"cpu_share":%d,"disk":%d}}}`,
		id, k, d, d, l, s, k, d, l, s, k)
}

// rowJSON also takes the seed's per-medium prefixes GPU, CPU, DISK; DP is
// the rank's longest prefix (= disk boundary).
func rowJSON(id string, d, l, s, k, gpu, cpu, disk int) string {
	return fmt.Sprintf(`{"default":{%q:{"longest_matched":%d,"GPU":%d,"CPU":%d,"DISK":%d,"DP":{"0":%d},"device":%d,"cpu_local":%d,"cpu_share":%d,"disk":%d,"rank_matches":{"0":{"device":%d,"cpu_local":%d,"cpu_share":%d,"disk":%d}}}}}`,
		id, k, gpu, cpu, disk, k, d, l, s, k, d, l, s, k)
}

// TestEndToEnd runs the whole process in-process against two real ZMQ PUB
// publishers on 127.0.0.1 emitting vLLM map-era events:
//
//   - engine-a: vLLM sha256_cbor, PYTHONHASHSEED "0", registered over HTTP
//     (msgpack); its events carry the engine's own block hashes.
//   - engine-b: a vLLM publisher under the default xxh3 standard profile,
//     registered statically from the configuration file; conductor re-hashes
//     its events' token ids.
//
// It queries by tokens and by hashes in both dialects for exact tier numbers,
// applies a removal, and checks that unregistering leaves no hits.
func TestEndToEnd(t *testing.T) {
	pubA, err := bench.NewPublisher(bench.PublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pubA.Close()
	pubB, err := bench.NewPublisher(bench.PublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pubB.Close()

	p := startConductor(t, fmt.Sprintf(`{"kvevent_instance": {"engine-b": {
  "endpoint": %q, "replay_endpoint": %q, "type": "vLLM", "modelname": "m-xxh3", "block_size": 16, "dp_rank": 0}}}`,
		pubB.Endpoint(), pubB.ReplayEndpoint()))

	cbor := map[string]string{"strategy": "vllm_v1", "algorithm": "sha256_cbor", "python_hash_seed": "0", "index_projection": "low64_be"}
	code, ct, body := httpDo(t, "POST", p.url("/register"), "application/msgpack", mpMap(
		"endpoint", pubA.Endpoint(), "replay_endpoint", pubA.ReplayEndpoint(), "type", "vLLM", "modelname", "m",
		"instance_id", "engine-a", "block_size", 16, "dp_rank", 0, "hash_profile", cbor))
	if code != 200 || canonBody(t, ct, body) != canonText(t, `{"status":"registered successfully","instance_id":"engine-a"}`) {
		t.Fatalf("register: %d %s", code, body)
	}
	waitFor(t, "static engine-b", func() bool { return getJSON(t, p.url("/services"))["count"] == json.Number("2") })

	// Prime: publish empty batches until each listener has received one, so no
	// later message is lost to ZMQ's slow-joiner window.
	empty := bench.AppendVLLMBatch(nil, bench.EraMap, 1, 0)
	for _, pp := range []struct {
		pub  *bench.Publisher
		inst string
	}{{pubA, "engine-a"}, {pubB, "engine-b"}} {
		metric := `conductor_ingest_batches_total{instance="` + pp.inst + `",tenant="default",dp_rank="0"} `
		waitFor(t, pp.inst+" receiving", func() bool {
			if _, err := pp.pub.Publish(empty); err != nil {
				t.Fatal(err)
			}
			_, _, m := httpDo(t, "GET", p.url("/metrics"), "", nil)
			i := bytes.Index(m, []byte(metric))
			return i >= 0 && !bytes.HasPrefix(m[i+len(metric):], []byte("0\n"))
		})
	}

	tokens := make([]int32, 8*16+5) // 8 complete blocks and a partial one
	for i := range tokens {
		tokens[i] = int32(1000 + i*7%5000)
	}
	profA, err := hash.Resolve(hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256_cbor", PythonHashSeed: "0", IndexProjection: "low64_be"})
	if err != nil {
		t.Fatal(err)
	}
	hA, err := hash.AppendChain(nil, &profA, tokens, 16, nil, nil)
	if err != nil || len(hA) != 8 {
		t.Fatal(err, len(hA))
	}
	profB := hash.DefaultProfile()
	hB, err := hash.AppendChain(nil, &profB, tokens, 16, nil, nil)
	if err != nil || len(hB) != 8 {
		t.Fatal(err, len(hB))
	}

	// engine-a: blocks 0-3 on GPU, 0-5 offloaded to CPU → (64, 96, 96, 96).
	mustPublish(t, pubA, bench.AppendVLLMBatch(nil, bench.EraMap, 2, 0,
		bench.EngineStored{Hashes: hA[:4], Tokens: tokens[:64], BlockSize: 16, Medium: "GPU"},
		bench.EngineStored{Hashes: hA[:6], Tokens: tokens[:96], BlockSize: 16, Medium: "CPU"}))
	// engine-b: its own (non-standard) block hashes with token ids, all on GPU.
	engineHashes := []uint64{11, 12, 13, 14, 15, 16, 17, 18}
	mustPublish(t, pubB, bench.AppendVLLMBatch(nil, bench.EraMap, 2, 0,
		bench.EngineStored{Hashes: engineHashes, Tokens: tokens[:128], BlockSize: 16, Medium: "GPU"}))

	queryA := mpMap("model", "m", "block_size", 16, "token_ids", tokens)
	expectQuery(t, p, "/query", "application/msgpack", queryA, rowMsgpack("engine-a", 64, 96, 96, 96))
	expectQuery(t, p, "/query", "application/json",
		[]byte(`{"model":"m","block_size":16,"token_ids":`+jsonList(tokens)+`}`), rowJSON("engine-a", 64, 96, 96, 96, 64, 96, 0))
	expectQuery(t, p, "/query_by_hash", "application/msgpack", mpMap("model", "m", "block_size", 16, "seq_hashes", hA),
		rowMsgpack("engine-a", 64, 96, 96, 96))
	expectQuery(t, p, "/query_by_hash", "application/json",
		[]byte(`{"model":"m","block_size":16,"block_hash":`+jsonList(hA)+`}`), rowJSON("engine-a", 64, 96, 96, 96, 64, 96, 0))

	queryB := []byte(`{"model":"m-xxh3","block_size":16,"token_ids":` + jsonList(tokens) + `}`)
	expectQuery(t, p, "/query", "application/json", queryB, rowJSON("engine-b", 128, 128, 128, 128, 128, 0, 0))
	expectQuery(t, p, "/query", "application/msgpack", mpMap("model", "m-xxh3", "block_size", 16, "token_ids", tokens),
		rowMsgpack("engine-b", 128, 128, 128, 128))
	expectQuery(t, p, "/query_by_hash", "application/json",
		[]byte(`{"model":"m-xxh3","block_size":16,"seq_hashes":`+jsonList(hB[:5])+`}`), rowJSON("engine-b", 80, 80, 80, 80, 80, 0, 0))

	// engine-a evicts blocks 2-3 from GPU → (32, 96, 96, 96).
	mustPublish(t, pubA, bench.AppendVLLMBatch(nil, bench.EraMap, 3, 0, bench.EngineRemoved{Hashes: hA[2:4], Medium: "GPU"}))
	expectQuery(t, p, "/query", "application/msgpack", queryA, rowMsgpack("engine-a", 32, 96, 96, 96))

	// /global_view shows both contexts with their profiles.
	gv := getJSON(t, p.url("/global_view"))
	if gv["context_count"] != json.Number("2") {
		t.Fatalf("global view %v", gv)
	}

	// unregister → no hits
	code, ct, body = httpDo(t, "POST", p.url("/unregister"), "application/json", []byte(`{"instance_id":"engine-a","dp_rank":0}`))
	if code != 200 || canonBody(t, ct, body) != canonText(t, `{"status":"unregistered successfully","removed_instances":["engine-a|default|0"]}`) {
		t.Fatalf("unregister: %d %s", code, body)
	}
	expectQuery(t, p, "/query", "application/msgpack", queryA, `{"instances":{}}`)
	expectQuery(t, p, "/query", "application/json", queryB, rowJSON("engine-b", 128, 128, 128, 128, 128, 0, 0))
	// Events after unregistering change nothing. Not a sleep: engine-a's
	// listener is gone (its per-stream series are dropped with it), so nothing
	// can apply what pubA sends; a sentinel on the still-registered engine-b
	// proves conductor kept processing while pubA's batch was out.
	waitFor(t, "engine-a's listener gone", func() bool {
		_, _, m := httpDo(t, "GET", p.url("/metrics"), "", nil)
		return !bytes.Contains(m, []byte(`instance="engine-a"`))
	})
	mustPublish(t, pubA, bench.AppendVLLMBatch(nil, bench.EraMap, 4, 0,
		bench.EngineStored{Hashes: hA, Tokens: tokens[:128], BlockSize: 16, Medium: "GPU"}))
	mustPublish(t, pubB, bench.AppendVLLMBatch(nil, bench.EraMap, 3, 0, bench.EngineRemoved{Hashes: engineHashes[4:], Medium: "GPU"}))
	expectQuery(t, p, "/query", "application/json", queryB, rowJSON("engine-b", 64, 64, 64, 64, 64, 0, 0))
	expectQuery(t, p, "/query", "application/msgpack", queryA, `{"instances":{}}`)
	code, _, body = httpDo(t, "POST", p.url("/unregister"), "application/msgpack", mpMap("instance_id", "engine-b", "dp_rank", 0))
	if code != 200 {
		t.Fatalf("unregister engine-b: %d %s", code, body)
	}
	expectQuery(t, p, "/query", "application/json", queryB, `{}`)
	if n := getJSON(t, p.url("/services"))["count"]; n != json.Number("0") {
		t.Fatalf("services left: %v", n)
	}
}

func mustPublish(t *testing.T, pub *bench.Publisher, payload []byte) {
	t.Helper()
	if _, err := pub.Publish(payload); err != nil {
		t.Fatal(err)
	}
}

// expectQuery polls until the response equals want (events apply
// asynchronously), then checks the status and Content-Type.
func expectQuery(t *testing.T, p *proc, path, ct string, body []byte, want string) {
	t.Helper()
	want = canonText(t, want)
	var got string
	var code int
	deadline := time.Now().Add(waitBound)
	for {
		var rct string
		var b []byte
		code, rct, b = httpDo(t, "POST", p.url(path), ct, body)
		if rct != ct {
			t.Fatalf("%s: response Content-Type %q, want %q", path, rct, ct)
		}
		got = canonBody(t, rct, b)
		if code == 200 && got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s (%s): %d\n got %s\nwant %s", path, ct, code, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
