package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/bench"
	"github.com/seed-c7a81618/conductor/hash"
)

// TestHashCheckOverTheWire: two vLLM engines publish sha256 block hashes with
// PYTHONHASHSEED=0 (for two models); one is registered as sha256_cbor, the
// other as sha256.
// After one root event with token_ids from each, /services reports the first
// as a mismatch naming the engine's profile and the second as verified; the
// gauges and the WARN say the same.
func TestHashCheckOverTheWire(t *testing.T) {
	engine, err := hash.Resolve(hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256", PythonHashSeed: "0", IndexProjection: "low64_be"})
	if err != nil {
		t.Fatal(err)
	}
	p := startConductor(t, "")
	pubs := map[string]*bench.Publisher{}
	for inst, algo := range map[string]string{"wrong": "sha256_cbor", "right": "sha256"} {
		pub, err := bench.NewPublisher(bench.PublisherOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer pub.Close()
		pubs[inst] = pub
		body := `{"endpoint":"` + pub.Endpoint() + `","type":"vLLM","modelname":"m-` + inst + `","instance_id":"` + inst +
			`","block_size":16,"dp_rank":0,"hash_profile":{"strategy":"vllm_v1","algorithm":"` + algo +
			`","python_hash_seed":"0","index_projection":"low64_be"}}`
		if code, _, b := httpDo(t, "POST", p.url("/register"), "application/json", []byte(body)); code != 200 {
			t.Fatalf("register %s: %d %s", inst, code, b)
		}
	}
	tokens := make([]int32, 64)
	for i := range tokens {
		tokens[i] = int32(7 + 13*i)
	}
	hs, err := hash.AppendChain(nil, &engine, tokens, 16, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	checks := func() map[string]map[string]any {
		out := map[string]map[string]any{}
		for _, s := range getJSON(t, p.url("/services"))["services"].([]any) {
			m := s.(map[string]any)
			out[m["InstanceID"].(string)] = m["HashCheck"].(map[string]any)
		}
		return out
	}
	// Publish until each listener has applied one event (ZMQ's slow joiner may
	// drop the first ones); the states are read as soon as they change.
	var first time.Time
	seq := 1.0
	waitFor(t, "both registrations checked", func() bool {
		for _, pub := range pubs {
			mustPublish(t, pub, bench.AppendVLLMBatch(nil, bench.EraMap, seq, 0,
				bench.EngineStored{Hashes: hs, Tokens: tokens, BlockSize: 16, Medium: "GPU"}))
		}
		if first.IsZero() {
			first = time.Now()
		}
		seq++
		c := checks()
		return c["wrong"]["state"] != "unverified" && c["right"]["state"] != "unverified"
	})
	t.Logf("states reported %v after the first publish", time.Since(first))
	c := checks()
	if c["right"]["state"] != "verified" || c["right"]["found"] != nil {
		t.Fatalf("right: %v", c["right"])
	}
	want := "engine wrong publishes vllm_v1 sha256 with PYTHONHASHSEED=0; registration says vllm_v1 sha256_cbor with PYTHONHASHSEED=0"
	found, _ := c["wrong"]["found"].(map[string]any)
	if c["wrong"]["state"] != "mismatch" || c["wrong"]["detail"] != want || found["algorithm"] != "sha256" || found["python_hash_seed"] != "0" {
		t.Fatalf("wrong: %v", c["wrong"])
	}
	_, _, m := httpDo(t, "GET", p.url("/metrics"), "", nil)
	for _, line := range []string{
		`conductor_registrations_hash_check{state="mismatch"} 1`,
		`conductor_registrations_hash_check{state="verified"} 1`,
		`conductor_registrations_hash_check{state="unverified"} 0`,
	} {
		if !bytes.Contains(m, []byte(line+"\n")) {
			t.Fatalf("/metrics lacks %q", line)
		}
	}
	if n := strings.Count(p.logs.String(), "hash profile mismatch"); n != 1 {
		t.Fatalf("%d mismatch WARNs in the log", n)
	}
}
