package main

// Seed 000 conformance (../shared/seeds/conductor-indexer-api.md, "Mooncake
// Conductor Indexer API"), walked section by section against a real
// conductor process (built from this package, started on a free loopback
// port) fed by real ZMQ PUB publishers (bench.Publisher, pebbe/zmq4). Each
// subtest names the seed section and quotes the statement it checks.
//
// Example requests are used verbatim where they are self-consistent; the
// one change is the registration endpoint (the seed's tcp://1.1.1.1:5557
// would leave loopback): it is a local publisher's.
//
// Hashes are computed here from the seed's prose (plainSeedChain, with
// zeebo/xxh3 directly), not with package hash, so the process is checked
// against an independent implementation of the hashing standard.

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tinylib/msgp/msgp"
	"github.com/zeebo/xxh3"

	"github.com/seed-c7a81618/conductor/bench"
	"github.com/seed-c7a81618/conductor/internal/syncbuf"
)

const seedWait = 5 * time.Second // every wait in this file is bounded by this

// seedProc is a conductor process started from the built binary.
type seedProc struct {
	base string
	cmd  *exec.Cmd
	logs *syncbuf.Buffer
}

// startSeedProcess builds cmd/conductor and starts it on a free loopback port
// with an empty configuration file.
func startSeedProcess(t *testing.T) *seedProc {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "conductor")
	// go test puts the go command of the running toolchain first in PATH.
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(gobin, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cfg := filepath.Join(dir, "conductor_config.json")
	if err := os.WriteFile(cfg, []byte(`{}`), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	p := &seedProc{base: "http://127.0.0.1:" + strconv.Itoa(port), logs: &syncbuf.Buffer{}}
	p.cmd = exec.Command(bin, "--config", cfg, "--listen", "127.0.0.1", "--http-port", strconv.Itoa(port), "--log-level", "INFO",
		"--rpc-port", "0", "--state-dir", filepath.Join(dir, "state"))
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- p.cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(waitBound):
			_ = p.cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("conductor log:\n%s", p.logs.String())
		}
	})
	deadline := time.Now().Add(waitBound)
	for {
		if st, _ := p.do(t, "GET", "/health", "", ""); st == 200 {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("conductor did not become healthy:\n%s", p.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var seedClient = &http.Client{Timeout: seedWait}

func (p *seedProc) do(t *testing.T, method, path, ct, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, p.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	resp, err := seedClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (p *seedProc) postJSON(t *testing.T, path, body string) (int, string) {
	t.Helper()
	return p.do(t, "POST", path, "application/json", body)
}

// mustPost posts JSON and requires 200 and, when want != "", that exact
// (canonical) body.
func (p *seedProc) mustPost(t *testing.T, path, body, want string) string {
	t.Helper()
	st, got := p.postJSON(t, path, body)
	if st != 200 {
		t.Fatalf("%s %s: %d %s", path, body, st, got)
	}
	if want != "" && canonText(t, got) != canonText(t, want) {
		t.Fatalf("%s:\n got  %s\n want %s", path, canonText(t, got), canonText(t, want))
	}
	return got
}

// waitQuery polls a query until pick(response) equals want (canonical JSON).
func (p *seedProc) waitQuery(t *testing.T, path, body, want string, pick func(map[string]any) any) {
	t.Helper()
	deadline := time.Now().Add(seedWait)
	var last string
	for {
		st, got := p.postJSON(t, path, body)
		if st == 200 {
			var v map[string]any
			d := json.NewDecoder(strings.NewReader(got))
			d.UseNumber()
			if d.Decode(&v) == nil {
				var x any = v
				if pick != nil {
					x = pick(v)
				}
				b, _ := json.Marshal(x)
				last = string(b)
				if last == canonText(t, want) {
					return
				}
			}
		} else {
			last = fmt.Sprintf("%d %s", st, got)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s:\n got  %s\n want %s", path, body, last, canonText(t, want))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// seedKeys picks the seed's response keys of one row.
func seedKeys(tenant, inst string) func(map[string]any) any {
	return func(v map[string]any) any {
		row, _ := v[tenant].(map[string]any)[inst].(map[string]any)
		if row == nil {
			return nil
		}
		out := map[string]any{}
		for _, k := range []string{"longest_matched", "GPU", "CPU", "DISK", "DP"} {
			out[k] = row[k]
		}
		return out
	}
}

func field(tenant, inst, key string) func(map[string]any) any {
	return func(v map[string]any) any {
		row, _ := v[tenant].(map[string]any)[inst].(map[string]any)
		if row == nil {
			return nil
		}
		return row[key]
	}
}

// metric returns the sum of the samples of name whose label text contains sel.
func (p *seedProc) metric(t *testing.T, name, sel string) float64 {
	t.Helper()
	_, body := p.do(t, "GET", "/metrics", "", "")
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(\{[^}]*\})? ([0-9.e+-]+)$`)
	sum := 0.0
	for _, m := range re.FindAllStringSubmatch(body, -1) {
		if strings.Contains(m[1], sel) {
			v, _ := strconv.ParseFloat(m[2], 64)
			sum += v
		}
	}
	return sum
}

// seedPub is a publisher registered with the process.
type seedPub struct {
	*bench.Publisher
	inst, tenant string
	rank         int
}

func newSeedPub(t *testing.T, opts bench.PublisherOptions) *bench.Publisher {
	t.Helper()
	pub, err := bench.NewPublisher(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

// register posts reg (a JSON object without endpoint keys) for a new
// publisher and waits until the process receives its batches.
func (p *seedProc) register(t *testing.T, reg string, opts bench.PublisherOptions) *seedPub {
	t.Helper()
	pub := newSeedPub(t, opts)
	var m map[string]any
	if err := json.Unmarshal([]byte(reg), &m); err != nil {
		t.Fatal(err)
	}
	m["endpoint"] = pub.Endpoint()
	if !opts.NoReplay {
		m["replay_endpoint"] = pub.ReplayEndpoint()
	}
	body, _ := json.Marshal(m)
	p.mustPost(t, "/register", string(body), "")
	sp := &seedPub{Publisher: pub, inst: m["instance_id"].(string), tenant: "default"}
	if s, ok := m["tenant_id"].(string); ok {
		sp.tenant = s
	}
	if r, ok := m["dp_rank"].(float64); ok {
		sp.rank = int(r)
	}
	p.prime(t, sp, opts.NoReplay)
	return sp
}

// prime publishes empty batches until the process has received one (ZMQ
// PUB/SUB drops what is sent before the subscription is joined).
func (p *seedProc) prime(t *testing.T, sp *seedPub, ms bool) {
	t.Helper()
	sel := `instance="` + sp.inst + `",tenant="` + sp.tenant + `",dp_rank="` + strconv.Itoa(sp.rank) + `"`
	deadline := time.Now().Add(seedWait)
	for p.metric(t, "conductor_ingest_batches_total", sel) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("publisher %s never delivered a batch", sel)
		}
		var b []byte
		if ms {
			b = seedMooncakeBatch(uint64(time.Now().UnixMilli()), 0)
		} else {
			b = seedBatch(sp.rank)
		}
		if _, err := sp.Publish(b); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (sp *seedPub) send(t *testing.T, events ...[]byte) {
	t.Helper()
	if _, err := sp.Publish(seedBatch(sp.rank, events...)); err != nil {
		t.Fatal(err)
	}
}

// seedBatch is the engines' three-frame payload `[ts (float s), [events], dp_rank]`.
func seedBatch(dp int, events ...[]byte) []byte {
	b := msgp.AppendArrayHeader(nil, 3)
	b = msgp.AppendFloat64(b, float64(time.Now().UnixNano())/1e9)
	b = msgp.AppendArrayHeader(b, uint32(len(events)))
	for _, e := range events {
		b = append(b, e...)
	}
	return msgp.AppendInt(b, dp)
}

// seedMooncakeBatch is the master's `[ts, [events], dp_rank]` with an integer
// millisecond timestamp.
func seedMooncakeBatch(tsMillis uint64, dp int, events ...[]byte) []byte {
	b := msgp.AppendArrayHeader(nil, 3)
	b = msgp.AppendUint64(b, tsMillis)
	b = msgp.AppendArrayHeader(b, uint32(len(events)))
	for _, e := range events {
		b = append(b, e...)
	}
	return msgp.AppendInt(b, dp)
}

// seedEvent encodes an RFC #1527 event map from key, value pairs (nil,
// strings, ints, uint64, []uint64, []int32 as u32).
func seedEvent(kv ...any) []byte {
	b := msgp.AppendMapHeader(nil, uint32(len(kv)/2))
	for i := 0; i < len(kv); i += 2 {
		b = msgp.AppendString(b, kv[i].(string))
		switch v := kv[i+1].(type) {
		case nil:
			b = msgp.AppendNil(b)
		case []uint64:
			b = msgp.AppendArrayHeader(b, uint32(len(v)))
			for _, x := range v {
				b = msgp.AppendUint64(b, x)
			}
		case []uint32:
			b = msgp.AppendArrayHeader(b, uint32(len(v)))
			for _, x := range v {
				b = msgp.AppendUint32(b, x)
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

// envelope returns the seed's envelope pairs for a stream of model m.
func envelope(id uint64, typ, model string, bs int, backend, medium string, rank int, extra ...any) []byte {
	kv := []any{"event_id", id, "timestamp", uint64(1739145600000), "event_type", typ, "model_name", model,
		"block_size", bs, "additional_salt", nil, "lora_name", nil, "tenant_id", "default",
		"backend_id", backend, "medium", medium, "dp_rank", rank}
	for i := 0; i < len(extra); i += 2 {
		replaced := false
		for j := 0; j < len(kv); j += 2 {
			if kv[j] == extra[i] {
				kv[j+1], replaced = extra[i+1], true
			}
		}
		if !replaced {
			kv = append(kv, extra[i], extra[i+1])
		}
	}
	return seedEvent(kv...)
}

// plainSeedChain is the seed's "Hashing standard" written from its prose:
// local = XXH3(u32 LE tokens of the block, S); seq[0] = local[0];
// seq[i] = XXH3(le64(seq[i-1]) || le64(local[i]), S). S = 1337 (the default).
func plainSeedChain(tokens []uint32, bs int) []uint64 {
	const S = 1337
	var out []uint64
	for i := 0; (i+1)*bs <= len(tokens); i++ {
		var blk []byte
		for _, tok := range tokens[i*bs : (i+1)*bs] {
			blk = binary.LittleEndian.AppendUint32(blk, tok)
		}
		local := xxh3.HashSeed(blk, S)
		if i == 0 {
			out = append(out, local)
			continue
		}
		var pair [16]byte
		binary.LittleEndian.PutUint64(pair[:8], out[i-1])
		binary.LittleEndian.PutUint64(pair[8:], local)
		out = append(out, xxh3.HashSeed(pair[:], S))
	}
	return out
}

func seedTokens(n int, base uint32) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = base + uint32(i)*7
	}
	return t
}

func u32List(xs []uint32) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatUint(uint64(x), 10)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func u64List(xs []uint64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatUint(x, 10)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// TestSeedConformance walks seed 000 section by section.
func TestSeedConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the conductor binary")
	}
	p := startSeedProcess(t)

	t.Run("HTTP APIs/POST register and unregister: the seed's examples and responses", func(t *testing.T) {
		// Seed: "Successful response: {status: registered successfully, instance_id}"
		// and "removes the subscription identified by (instance_id, tenant_id, dp_rank)".
		pub := newSeedPub(t, bench.PublisherOptions{})
		reg := `{
  "endpoint": "` + pub.Endpoint() + `",
  "replay_endpoint": "` + pub.ReplayEndpoint() + `",
  "type": "vLLM",
  "modelname": "deepseek-reg",
  "lora_name": "sql-adapter",
  "tenant_id": "default",
  "instance_id": "vllm-prefill-node1",
  "block_size": 128,
  "dp_rank": 0,
  "additionalsalt": "w8a8"
}`
		p.mustPost(t, "/register", reg, `{"status":"registered successfully","instance_id":"vllm-prefill-node1"}`)
		p.mustPost(t, "/unregister", `{
  "type": "vLLM",
  "modelname": "deepseek-reg",
  "lora_name": "sql-adapter",
  "tenant_id": "default",
  "instance_id": "vllm-prefill-node1",
  "block_size": 128,
  "dp_rank": 0
}`, `{"status":"unregistered successfully","removed_instances":["vllm-prefill-node1|default|0"]}`)
		// Seed: "tenant_id defaults to default" (register and unregister).
		reg2 := strings.Replace(reg, `  "tenant_id": "default",`+"\n", "", 1)
		p.mustPost(t, "/register", reg2, `{"status":"registered successfully","instance_id":"vllm-prefill-node1"}`)
		p.mustPost(t, "/unregister", `{"instance_id":"vllm-prefill-node1","dp_rank":0}`,
			`{"status":"unregistered successfully","removed_instances":["vllm-prefill-node1|default|0"]}`)
		// Seed: required fields (endpoint, type, modelname, instance_id, block_size, dp_rank).
		for _, k := range []string{"endpoint", "type", "modelname", "instance_id", "block_size", "dp_rank"} {
			var m map[string]any
			_ = json.Unmarshal([]byte(reg), &m)
			delete(m, k)
			b, _ := json.Marshal(m)
			if st, body := p.postJSON(t, "/register", string(b)); st != 400 || !strings.Contains(body, `"field":"`+k+`"`) {
				t.Errorf("register without %s: %d %s", k, st, body)
			}
		}
	})

	// One instance, two dp ranks, registered as the seed's example (type vLLM;
	// the events are standardized maps, recognised on any registration type).
	regFor := func(model string, rank int, bs int) string {
		return `{"type":"vLLM","modelname":"` + model + `","lora_name":"sql-adapter","tenant_id":"default",
"instance_id":"vllm-prefill-node1","block_size":` + strconv.Itoa(bs) + `,"dp_rank":` + strconv.Itoa(rank) + `,"additionalsalt":"w8a8"}`
	}
	r0 := p.register(t, regFor("deepseek", 0, 128), bench.PublisherOptions{})
	r1 := p.register(t, regFor("deepseek", 1, 128), bench.PublisherOptions{})
	tokens := seedTokens(256, 100)
	std := plainSeedChain(tokens, 128)
	stored := func(sp *seedPub, id uint64, medium string, hashes []uint64, extra ...any) []byte {
		return envelope(id, "stored", "deepseek", 128, "worker-"+strconv.Itoa(sp.rank), medium, sp.rank,
			append([]any{"lora_name", "sql-adapter", "seq_hashes", hashes, "base_block_idx", 0, "parent_hash", nil, "token_ids", nil}, extra...)...)
	}
	query := func(bs int, toks []uint32, salt string) string {
		return `{"model":"deepseek","lora_name":"sql-adapter","token_ids":` + u32List(toks) +
			`,"tenant_id":"default","instance_id":"vllm-prefill-node1","block_size":` + strconv.Itoa(bs) + `,"cache_salt":"` + salt + `"}`
	}

	t.Run("HTTP APIs/POST query: the seed's response example, field by field", func(t *testing.T) {
		// Seed: "GPU, CPU, DISK: matched prefix tokens available on each medium";
		// "DP: matched prefix tokens grouped by data-parallel rank";
		// "longest_matched: longest continuous prefix hit ... across all tracked
		// media and DP ranks". Example: DP {0:128, 1:256}, GPU 128, CPU 256,
		// DISK 0, longest_matched 256: rank 0 holds block 0 on GPU, rank 1
		// holds blocks 0-1 in CPU memory.
		r0.send(t, stored(r0, 1, "gpu", std[:1]))
		r1.send(t, stored(r1, 1, "cpu", std[:2]))
		p.waitQuery(t, "/query", query(128, tokens, "w8a8"),
			`{"longest_matched":256,"GPU":128,"DP":{"0":128,"1":256},"CPU":256,"DISK":0}`,
			seedKeys("default", "vllm-prefill-node1"))
		// The whole response: the seed's tenant → instance shape.
		_, body := p.postJSON(t, "/query", query(128, tokens, "w8a8"))
		var v map[string]map[string]map[string]any
		if err := json.Unmarshal([]byte(body), &v); err != nil || len(v) != 1 || len(v["default"]) != 1 {
			t.Fatalf("response shape: %v %s", err, body)
		}
	})

	t.Run("HTTP APIs/POST query: the seed's request verbatim; only complete blocks are considered", func(t *testing.T) {
		// Seed request (block_size 64): no publisher of block size 64 → {}.
		p.mustPost(t, "/query", `{
  "model": "deepseek",
  "lora_name": "sql-adapter",
  "token_ids": [101, 15, 100, 55, 89],
  "tenant_id": "default",
  "instance_id": "vllm-prefill-node1",
  "block_size": 64,
  "cache_salt": "w8a8"
}`, `{}`)
		// The same at the registered block size: 5 tokens are no complete block.
		p.waitQuery(t, "/query", query(128, []uint32{101, 15, 100, 55, 89}, "w8a8"),
			`{"longest_matched":0,"GPU":0,"DP":{"0":0,"1":0},"CPU":0,"DISK":0}`, seedKeys("default", "vllm-prefill-node1"))
		// 255 tokens: one complete block.
		p.waitQuery(t, "/query", query(128, tokens[:255], "w8a8"), `128`, field("default", "vllm-prefill-node1", "longest_matched"))
	})

	t.Run("HTTP APIs/POST query: instance_id omitted queries all instances of the tenant", func(t *testing.T) {
		// Seed: "If omitted, query all instances registered under the tenant."
		other := p.register(t, `{"type":"vLLM","modelname":"deepseek","lora_name":"sql-adapter","instance_id":"vllm-node2","block_size":128,"dp_rank":0,"additionalsalt":"w8a8"}`, bench.PublisherOptions{})
		other.send(t, envelope(1, "stored", "deepseek", 128, "w", "gpu", 0, "lora_name", "sql-adapter", "seq_hashes", std[:1]))
		q := `{"model":"deepseek","lora_name":"sql-adapter","token_ids":` + u32List(tokens) + `,"block_size":128,"cache_salt":"w8a8"}`
		p.waitQuery(t, "/query", q, `{"vllm-node2":128,"vllm-prefill-node1":256}`, func(v map[string]any) any {
			out := map[string]any{}
			for id, row := range v["default"].(map[string]any) {
				out[id] = row.(map[string]any)["longest_matched"]
			}
			return out
		})
	})

	t.Run("Identity dimensions: additional_salt / cache_salt separate hash namespaces", func(t *testing.T) {
		// Seed: cache_salt is the "query-side hash namespace salt. Corresponds to
		// the event additional_salt concept." The registration's additionalsalt
		// (w8a8) placed the blocks; other salts and no salt miss.
		for _, salt := range []string{"", "fp8"} {
			p.waitQuery(t, "/query", query(128, tokens, salt), `0`, field("default", "vllm-prefill-node1", "longest_matched"))
		}
		// An event's own additional_salt places blocks in its namespace.
		r0.send(t, stored(r0, 2, "disk", std[:2], "additional_salt", "fp8"))
		p.waitQuery(t, "/query", query(128, tokens, "fp8"), `{"longest_matched":256,"GPU":0,"DP":{"0":256,"1":0},"CPU":0,"DISK":256}`,
			seedKeys("default", "vllm-prefill-node1"))
	})

	t.Run("HTTP APIs/POST query_by_hash: seq_hashes, block_hash alias, longest_matched = block_size x matched", func(t *testing.T) {
		// Seed request shape with the plain rolling hashes a client computes.
		byHash := func(key string, hs []uint64, salt string) string {
			return `{"model":"deepseek","lora_name":"sql-adapter","` + key + `":` + u64List(hs) +
				`,"tenant_id":"default","instance_id":"vllm-prefill-node1","block_size":128,"cache_salt":"` + salt + `"}`
		}
		p.waitQuery(t, "/query_by_hash", byHash("seq_hashes", std, "w8a8"),
			`{"longest_matched":256,"GPU":128,"DP":{"0":128,"1":256},"CPU":256,"DISK":0}`, seedKeys("default", "vllm-prefill-node1"))
		p.waitQuery(t, "/query_by_hash", byHash("block_hash", std[:1], "w8a8"), `128`, field("default", "vllm-prefill-node1", "longest_matched"))
		p.waitQuery(t, "/query_by_hash", byHash("seq_hashes", std, ""), `0`, field("default", "vllm-prefill-node1", "longest_matched"))
		// The seed's example hashes match nothing here.
		p.waitQuery(t, "/query_by_hash", `{
  "model": "deepseek",
  "lora_name": "sql-adapter",
  "seq_hashes": [1234567890, 9876543210],
  "tenant_id": "default",
  "instance_id": "vllm-prefill-node1",
  "block_size": 64,
  "cache_salt": "w8a8"
}`, `{}`, nil)
	})

	t.Run("Hashing standard: token ids are u32 little-endian", func(t *testing.T) {
		// Seed: "tokens are little-endian u32 values": ids above 2^31 hash as u32.
		toks := seedTokens(128, 4_000_000_000)
		h := plainSeedChain(toks, 128)
		r0.send(t, stored(r0, 3, "gpu", h))
		p.waitQuery(t, "/query", query(128, toks, "w8a8"), `128`, field("default", "vllm-prefill-node1", "GPU"))
	})

	t.Run("Hashing standard: a non-standard publisher's token_ids are re-hashed", func(t *testing.T) {
		// Seed: "If an engine does not follow the standardized hashing scheme, it
		// must provide token_ids in stored events so the consumer can recompute".
		sp := p.register(t, `{"type":"SGLang","modelname":"nonstd","instance_id":"ns","block_size":4,"dp_rank":0}`, bench.PublisherOptions{})
		toks := seedTokens(8, 9)
		h := plainSeedChain(toks, 4)
		mk := func(id uint64, typ string, extra ...any) []byte {
			return envelope(id, typ, "nonstd", 4, "w", "gpu", 0, extra...)
		}
		sp.send(t, mk(1, "stored", "seq_hashes", []uint64{0xABC1, 0xABC2}, "base_block_idx", 0, "parent_hash", nil, "token_ids", toks))
		q := `{"model":"nonstd","block_size":4,"token_ids":` + u32List(toks) + `}`
		p.waitQuery(t, "/query", q, `8`, field("default", "ns", "GPU"))
		p.waitQuery(t, "/query_by_hash", `{"model":"nonstd","block_size":4,"seq_hashes":`+u64List(h)+`}`, `8`, field("default", "ns", "GPU"))
		// Later removes by the publisher's own hash resolve.
		sp.send(t, mk(2, "removed", "seq_hashes", []uint64{0xABC2}))
		p.waitQuery(t, "/query", q, `4`, field("default", "ns", "GPU"))
	})

	// The KV Events API examples use model llama-3.1-8b, block size 64,
	// backend worker-0, medium gpu, dp_rank 0.
	ev := p.register(t, `{"type":"standard","modelname":"llama-3.1-8b","instance_id":"llama-node","block_size":64,"dp_rank":0}`, bench.PublisherOptions{})
	exByHash := func(hs string) string {
		return `{"model":"llama-3.1-8b","block_size":64,"seq_hashes":` + hs + `}`
	}

	t.Run("KV Events API/stored, removed, cleared: the seed's examples verbatim", func(t *testing.T) {
		ev.send(t, seedEvent("event_id", 42, "timestamp", uint64(1739145600000), "event_type", "stored",
			"model_name", "llama-3.1-8b", "block_size", 64, "additional_salt", nil, "lora_name", nil,
			"tenant_id", "default", "backend_id", "worker-0", "medium", "gpu", "dp_rank", 0,
			"seq_hashes", []uint64{1234567890, 9876543210, 1122334455}, "base_block_idx", 5,
			"parent_hash", uint64(9999999999), "token_ids", nil))
		p.waitQuery(t, "/query_by_hash", exByHash("[1234567890, 9876543210, 1122334455]"), `192`, field("default", "llama-node", "GPU"))
		ev.send(t, seedEvent("event_id", 43, "timestamp", uint64(1739145601000), "event_type", "removed",
			"model_name", "llama-3.1-8b", "block_size", 64, "additional_salt", nil, "lora_name", nil,
			"tenant_id", "default", "backend_id", "worker-0", "medium", "gpu", "dp_rank", 0,
			"seq_hashes", []uint64{1122334455}, "base_block_idx", 7))
		p.waitQuery(t, "/query_by_hash", exByHash("[1234567890, 9876543210, 1122334455]"), `128`, field("default", "llama-node", "GPU"))
		ev.send(t, seedEvent("event_id", 44, "timestamp", uint64(1739145602000), "event_type", "cleared",
			"model_name", "llama-3.1-8b", "block_size", 64, "additional_salt", nil, "lora_name", nil,
			"tenant_id", "default", "backend_id", "worker-0", "medium", "gpu", "dp_rank", 0))
		p.waitQuery(t, "/query_by_hash", exByHash("[1234567890, 9876543210, 1122334455]"), `0`, field("default", "llama-node", "GPU"))
	})

	t.Run("KV Events API/envelope: null timestamp, medium, lora_name and dp_rank", func(t *testing.T) {
		// Seed envelope types: timestamp "u64 or null" ("informational only"),
		// medium "string or null", lora_name "null for the base model",
		// dp_rank "u32 or null"; registration metadata supplies what the event
		// does not carry ("Compatibility notes").
		ev.send(t, seedEvent("event_id", 1, "timestamp", nil, "event_type", "stored", "model_name", "llama-3.1-8b",
			"block_size", 64, "additional_salt", nil, "lora_name", nil, "tenant_id", "default", "backend_id", "nulls",
			"medium", nil, "dp_rank", nil, "seq_hashes", []uint64{401}, "base_block_idx", 0, "parent_hash", nil, "token_ids", nil))
		p.waitQuery(t, "/query_by_hash", exByHash("[401]"), `{"longest_matched":64,"GPU":64,"CPU":0,"DISK":0,"DP":{"0":64}}`,
			seedKeys("default", "llama-node"))
	})

	t.Run("KV Events API/cleared purges exactly its stream's dimensions", func(t *testing.T) {
		// Seed: "all blocks for the event stream dimensions are purged"; the
		// stream is (model_name, block_size, additional_salt, lora_name,
		// tenant_id, backend_id, medium, dp_rank).
		// Event ids continue each stream: worker-0/gpu ended at 44 above; the
		// other streams start here.
		h := []uint64{101, 102}
		ev.send(t, envelope(45, "stored", "llama-3.1-8b", 64, "worker-0", "gpu", 0, "seq_hashes", h))
		ev.send(t, envelope(1, "stored", "llama-3.1-8b", 64, "worker-0", "cpu", 0, "seq_hashes", h))
		ev.send(t, envelope(1, "stored", "llama-3.1-8b", 64, "worker-0", "disk", 0, "seq_hashes", h))
		ev.send(t, envelope(1, "stored", "llama-3.1-8b", 64, "worker-1", "disk", 0, "seq_hashes", h[:1]))
		pick := seedKeys("default", "llama-node")
		p.waitQuery(t, "/query_by_hash", exByHash(u64List(h)), `{"longest_matched":128,"GPU":128,"CPU":128,"DISK":128,"DP":{"0":128}}`, pick)
		// worker-0's disk stream cleared: its GPU and CPU blocks and worker-1's disk block stay.
		ev.send(t, envelope(2, "cleared", "llama-3.1-8b", 64, "worker-0", "disk", 0))
		p.waitQuery(t, "/query_by_hash", exByHash(u64List(h)), `{"longest_matched":128,"GPU":128,"CPU":128,"DISK":64,"DP":{"0":128}}`, pick)
		ev.send(t, envelope(2, "cleared", "llama-3.1-8b", 64, "worker-1", "disk", 0))
		p.waitQuery(t, "/query_by_hash", exByHash(u64List(h)), `{"longest_matched":128,"GPU":128,"CPU":128,"DISK":0,"DP":{"0":128}}`, pick)
		ev.send(t, envelope(46, "cleared", "llama-3.1-8b", 64, "worker-0", "gpu", 0))
		p.waitQuery(t, "/query_by_hash", exByHash(u64List(h)), `{"longest_matched":128,"GPU":0,"CPU":128,"DISK":0,"DP":{"0":128}}`, pick)
		if g := p.metric(t, "conductor_index_event_id_gaps_total", ""); g != 0 {
			t.Fatalf("event_id gaps counted for consecutive streams: %v", g)
		}
	})

	t.Run("KV Events API/events are processed in consecutive event_id order within each stream", func(t *testing.T) {
		// Seed: "Events must be processed in consecutive event_id order within
		// each stream". Published 1, 3, 2 (3 stores h2 after 2 clears): in
		// order, h2 survives; applied as they came, the clear would drop it.
		mk := func(id uint64, typ string, extra ...any) []byte {
			return envelope(id, typ, "llama-3.1-8b", 64, "order-w", "gpu", 0, extra...)
		}
		ev.send(t, mk(1, "stored", "seq_hashes", []uint64{301}), mk(3, "stored", "seq_hashes", []uint64{302}), mk(2, "cleared"))
		p.waitQuery(t, "/query_by_hash", exByHash("[302]"), `64`, field("default", "llama-node", "GPU"))
		p.waitQuery(t, "/query_by_hash", exByHash("[301]"), `0`, field("default", "llama-node", "GPU"))
		// A gap that never heals (5 then 7; 6 is lost): counted, and the
		// default gap policy (keep) keeps 303, which 6 may or may not have
		// removed (docs/operations.md, "Gaps that cannot be replayed"); 7
		// applies once the gap is given up.
		gaps := p.metric(t, "conductor_index_event_id_gaps_total", "")
		ev.send(t, mk(4, "stored", "seq_hashes", []uint64{303}))
		p.waitQuery(t, "/query_by_hash", exByHash("[303]"), `64`, field("default", "llama-node", "GPU"))
		ev.send(t, mk(7, "stored", "seq_hashes", []uint64{304}))
		p.waitQuery(t, "/query_by_hash", exByHash("[304]"), `64`, field("default", "llama-node", "GPU"))
		p.waitQuery(t, "/query_by_hash", exByHash("[303]"), `64`, field("default", "llama-node", "GPU"))
		if got := p.metric(t, "conductor_index_event_id_gaps_total", ""); got != gaps+1 {
			t.Fatalf("event_id gaps counted %v, want %v", got, gaps+1)
		}
	})

	t.Run("Concepts/Storage tiers: every medium the seed names, case-insensitive", func(t *testing.T) {
		// Seed: G1 "GPU, NPU, HBM, or other accelerator memory"; G2 "CPU or host
		// DRAM"; G3 "SSD, 3FS, DFS, NFS, or other disk-backed KV storage";
		// "Common values are gpu, cpu, and disk".
		want := map[string]string{"GPU": "gpu", "NPU": "gpu", "hbm": "gpu", "accelerator": "gpu",
			"CPU": "cpu", "dram": "cpu", "DRAM": "cpu", "ssd": "disk", "3fs": "disk", "DFS": "disk", "nfs": "disk", "Disk": "disk"}
		id := uint64(1000)
		for medium, class := range want {
			id++
			h := 5000 + id
			ev.send(t, envelope(1, "stored", "llama-3.1-8b", 64, "media-"+medium, medium, 0, "seq_hashes", []uint64{h}))
			exp := map[string]int{"gpu": 0, "cpu": 0, "disk": 0}
			exp[class] = 64
			p.waitQuery(t, "/query_by_hash", exByHash(u64List([]uint64{h})),
				fmt.Sprintf(`{"GPU":%d,"CPU":%d,"DISK":%d}`, exp["gpu"], exp["cpu"], exp["disk"]),
				func(v map[string]any) any {
					row, _ := v["default"].(map[string]any)["llama-node"].(map[string]any)
					return map[string]any{"GPU": row["GPU"], "CPU": row["CPU"], "DISK": row["DISK"]}
				})
		}
		// An unknown medium is dropped, counted and logged (never guessed).
		before := p.metric(t, "conductor_index_unknown_media_total", "")
		ev.send(t, envelope(1, "stored", "llama-3.1-8b", 64, "media-tape", "tape", 0, "seq_hashes", []uint64{7777}))
		deadline := time.Now().Add(seedWait)
		for p.metric(t, "conductor_index_unknown_media_total", "") <= before {
			if time.Now().After(deadline) {
				t.Fatal("unknown medium not counted")
			}
			time.Sleep(20 * time.Millisecond)
		}
		p.waitQuery(t, "/query_by_hash", exByHash("[7777]"), `0`, field("default", "llama-node", "longest_matched"))
		if !strings.Contains(p.logs.String(), "reason=unknown_medium") {
			t.Fatalf("unknown medium not logged:\n%s", p.logs.String())
		}
		if p.metric(t, "conductor_index_events_dropped_by_reason_total", `reason="unknown_medium"`) < 1 {
			t.Fatal("unknown_medium drop not on /metrics")
		}
	})

	t.Run("Compatibility notes/Mooncake master publisher: three-frame batches, per-object events", func(t *testing.T) {
		// Seed: the master "emits the same three-frame batch format used by
		// vLLM/SGLang: empty topic, big-endian sequence number, and a msgpack
		// payload [timestamp, [events], dp_rank]"; "one event per Mooncake
		// object key"; medium cpu / disk; it "does not stamp model_name,
		// block_size, lora_name, or dp_rank": registration supplies them.
		mc := p.register(t, `{"type":"Mooncake","modelname":"llama-3.1-8b","instance_id":"mooncake-master","block_size":64,"dp_rank":0}`,
			bench.PublisherOptions{NoReplay: true})
		obj := func(id uint64, typ, medium string, h uint64) []byte {
			return seedEvent("event_id", id, "timestamp", uint64(1739145600000), "event_type", typ, "model_name", nil,
				"block_size", nil, "additional_salt", nil, "lora_name", nil, "tenant_id", "default",
				"backend_id", "daemon-0", "medium", medium, "dp_rank", 0, "seq_hashes", []uint64{h},
				"object_key", strconv.FormatUint(h, 10), "block_hashes", []uint64{h}, "type", "BlockStored")
		}
		// Integer milliseconds (as the master sends) ...
		if _, err := mc.Publish(seedMooncakeBatch(1739145600000, 0, obj(1, "stored", "cpu", 601), obj(2, "stored", "cpu", 602))); err != nil {
			t.Fatal(err)
		}
		// ... and float seconds (the engines' format the seed says it shares).
		fl := msgp.AppendArrayHeader(nil, 3)
		fl = msgp.AppendFloat64(fl, 1739145600.5)
		fl = msgp.AppendArrayHeader(fl, 1)
		fl = append(fl, obj(3, "stored", "disk", 603)...)
		fl = msgp.AppendInt(fl, 0)
		if _, err := mc.Publish(fl); err != nil {
			t.Fatal(err)
		}
		// The engine instance of the context sees the pool's objects (shared host and disk tiers).
		p.waitQuery(t, "/query_by_hash", exByHash("[601, 602, 603]"), `{"GPU":0,"CPU":128,"DISK":0,"longest":192}`,
			func(v map[string]any) any {
				row, _ := v["default"].(map[string]any)["llama-node"].(map[string]any)
				return map[string]any{"GPU": row["GPU"], "CPU": row["CPU"], "DISK": row["DISK"], "longest": row["longest_matched"]}
			})
		p.waitQuery(t, "/query_by_hash", exByHash("[603]"), `64`, field("default", "llama-node", "DISK"))
	})

	t.Run("HTTP APIs/POST query: lora_id is a deprecated compatibility field", func(t *testing.T) {
		// Seed: "lora_id: Deprecated compatibility field. Do not use together
		// with lora_name." No engine here published a lora_id: refused with a reason.
		st, body := p.postJSON(t, "/query", `{"model":"deepseek","lora_id":3,"token_ids":[1],"block_size":128}`)
		if st != 400 || !strings.Contains(body, `"field":"lora_id"`) {
			t.Fatalf("%d %s", st, body)
		}
	})

	t.Run("HTTP APIs: JSON bodies sent with curl's default Content-Type", func(t *testing.T) {
		for _, ct := range []string{"", "application/x-www-form-urlencoded"} {
			st, body := p.do(t, "POST", "/query", ct, query(128, tokens, "w8a8"))
			if st != 200 || !strings.Contains(body, `"longest_matched":256`) {
				t.Fatalf("Content-Type %q: %d %s", ct, st, body)
			}
		}
	})

	t.Run("Overview: queries are scoped by model, block size, LoRA and tenant", func(t *testing.T) {
		// Seed: "Each query is scoped by model identity, block size, LoRA
		// identity, tenant isolation, and the registered instance".
		for _, q := range []string{
			strings.Replace(query(128, tokens, "w8a8"), `"model":"deepseek"`, `"model":"other"`, 1),
			strings.Replace(query(128, tokens, "w8a8"), `"lora_name":"sql-adapter"`, `"lora_name":null`, 1),
			strings.Replace(query(128, tokens, "w8a8"), `"tenant_id":"default"`, `"tenant_id":"t2"`, 1),
			strings.Replace(query(128, tokens, "w8a8"), `"instance_id":"vllm-prefill-node1"`, `"instance_id":"nobody"`, 1),
		} {
			p.mustPost(t, "/query", q, `{}`)
		}
	})
}
