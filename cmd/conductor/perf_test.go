package main

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"testing"

	"github.com/seed-c7a81618/conductor/bench"
	"github.com/seed-c7a81618/conductor/hash"
)

var pprofRE = regexp.MustCompile(`pprof listening.*addr=(\S+)`)

// metricValue returns the value of an unlabelled metric in a /metrics page.
func metricValue(t *testing.T, page []byte, name string) uint64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\d+)$`).FindSubmatch(page)
	if m == nil {
		t.Fatalf("metric %s missing:\n%s", name, page)
	}
	v, err := strconv.ParseUint(string(m[1]), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestPprofAndMemoMetrics: --pprof-addr serves the profiles on its own
// loopback listener, the memo's sizes follow --hash-memo-bytes and
// --hash-memo-prompt-bytes, a repeated vllm_v1 query shows up as memo hits on
// /metrics, and a repeated 8-block prompt is stored and then served from the
// recent-prompt level.
func TestPprofAndMemoMetrics(t *testing.T) {
	pub, err := bench.NewPublisher(bench.PublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	p := startConductor(t, "", "--pprof-addr", "127.0.0.1:0", "--hash-memo-bytes", "1048576", "--hash-memo-prompt-bytes", "262144")
	m := pprofRE.FindStringSubmatch(p.logs.String())
	if m == nil {
		t.Fatalf("no pprof address logged:\n%s", p.logs)
	}
	if code, _, body := httpDo(t, "GET", "http://"+m[1]+"/debug/pprof/", "", nil); code != 200 || !bytes.Contains(body, []byte("goroutine")) {
		t.Fatalf("pprof index: %d %.200s", code, body)
	}
	if code, _, _ := httpDo(t, "GET", p.url("/debug/pprof/"), "", nil); code == 200 {
		t.Fatal("pprof is served on the API listener")
	}

	registerSHA256CBOR(t, p, pub.Endpoint())
	_, _, page := httpDo(t, "GET", p.url("/metrics"), "", nil)
	if got := metricValue(t, page, "conductor_hash_memo_bytes"); got != 1<<20 {
		t.Fatalf("memo bytes %d", got)
	}
	h0 := metricValue(t, page, "conductor_hash_memo_hits_total")
	// Nothing is stored, so each query hashes block 0 only: a miss, then hits.
	q := []byte(`{"model":"m","block_size":16,"token_ids":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]}`)
	for i := 0; i < 3; i++ {
		if code, _, body := httpDo(t, "POST", p.url("/query"), "application/json", q); code != 200 {
			t.Fatalf("query: %d %s", code, body)
		}
	}
	_, _, page = httpDo(t, "GET", p.url("/metrics"), "", nil)
	hits, misses := metricValue(t, page, "conductor_hash_memo_hits_total")-h0, metricValue(t, page, "conductor_hash_memo_misses_total")
	if hits != 2 || misses != 1 {
		t.Fatalf("memo hits %d misses %d, want 2 and 1", hits, misses)
	}
	if got := metricValue(t, page, "conductor_hash_memo_prompt_limit_bytes"); got != 262144 {
		t.Fatalf("prompt limit %d", got)
	}

	// The engine stores 8 blocks of a prompt: the query that sees them all is
	// its first full sight, the next is stored, the two after are served.
	prof, err := hash.Resolve(hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256_cbor", PythonHashSeed: "0", IndexProjection: "low64_be"})
	if err != nil {
		t.Fatal(err)
	}
	tokens := make([]int32, 128)
	for i := range tokens {
		tokens[i] = int32(1000 + 7*i)
	}
	keys, err := hash.AppendChain(nil, &prof, tokens, 16, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustPublish(t, pub, bench.AppendVLLMBatch(nil, bench.EraMap, 2, 0,
		bench.EngineStored{Hashes: keys, Tokens: tokens, BlockSize: 16, Medium: "GPU"}))
	q = []byte(`{"model":"m","block_size":16,"token_ids":` + jsonList(tokens) + `}`)
	expectQuery(t, p, "/query", "application/json", q, rowJSON("e", 128, 128, 128, 128, 128, 0, 0))
	for i := 0; i < 3; i++ {
		expectQuery(t, p, "/query", "application/json", q, rowJSON("e", 128, 128, 128, 128, 128, 0, 0))
	}
	_, _, page = httpDo(t, "GET", p.url("/metrics"), "", nil)
	if got := metricValue(t, page, "conductor_hash_memo_prompt_admissions_total"); got != 1 {
		t.Fatalf("prompt admissions %d, want 1", got)
	}
	if got := metricValue(t, page, "conductor_hash_memo_prompt_hits_total"); got != 16 {
		t.Fatalf("prompt hits %d, want 16 (two queries of 8 blocks)", got)
	}
	if got := metricValue(t, page, "conductor_hash_memo_prompt_bytes"); got < 8*(4*16+56) || got > 262144 {
		t.Fatalf("prompt bytes %d", got)
	}
}

// TestMemoOffByDefault: with no memo flag a repeated vllm_v1 query hashes
// its blocks every time: the memo holds no table and no prompts, and counts
// no hit or miss.
func TestMemoOffByDefault(t *testing.T) {
	pub, err := bench.NewPublisher(bench.PublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	p := startConductor(t, "")
	registerSHA256CBOR(t, p, pub.Endpoint())
	q := []byte(`{"model":"m","block_size":16,"token_ids":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]}`)
	for i := 0; i < 3; i++ {
		if code, _, body := httpDo(t, "POST", p.url("/query"), "application/json", q); code != 200 {
			t.Fatalf("query: %d %s", code, body)
		}
	}
	_, _, page := httpDo(t, "GET", p.url("/metrics"), "", nil)
	for _, name := range []string{"conductor_hash_memo_bytes", "conductor_hash_memo_prompt_limit_bytes",
		"conductor_hash_memo_hits_total", "conductor_hash_memo_misses_total"} {
		if got := metricValue(t, page, name); got != 0 {
			t.Errorf("%s = %d with the defaults, want 0 (memo off)", name, got)
		}
	}
}

// registerSHA256CBOR registers instance "e" of model "m" at endpoint under
// vllm_v1/sha256_cbor (B = 16), the profile the memo serves.
func registerSHA256CBOR(t *testing.T, p *proc, endpoint string) {
	t.Helper()
	code, _, body := httpDo(t, "POST", p.url("/register"), "application/json", []byte(fmt.Sprintf(
		`{"endpoint":%q,"type":"vLLM","modelname":"m","instance_id":"e","block_size":16,"dp_rank":0,`+
			`"hash_profile":{"strategy":"vllm_v1","algorithm":"sha256_cbor","python_hash_seed":"0","index_projection":"low64_be"}}`,
		endpoint)))
	if code != 200 {
		t.Fatalf("register: %d %s", code, body)
	}
}
