package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/hash"
	"github.com/seed-c7a81618/conductor/internal/syncbuf"
)

// waitBound bounds this package's tests' waits for something that will
// happen (a publisher reaching conductor, an answer); the waits return as
// soon as it does, so the bound only decides when a failure is declared.
const waitBound = 2 * time.Minute

// The user's way: conductor built from cmd/conductor and run as a child
// process, a fake vLLM publisher over real ZMQ, and this process as the HTTP
// client on loopback. The server's own CPU time comes from /proc/<pid>/stat
// (ProcCPU: utime + stime of every thread), so client, publisher and test
// framework costs are excluded.

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// TestMain removes the conductor build (if a test made one) after the run; in
// the tail harness's publisher process it runs the publisher instead.
func TestMain(m *testing.M) {
	if addr := os.Getenv(tailPublisherEnv); addr != "" {
		os.Exit(tailPublisherMain(addr)) // the tail harness's publisher process
	}
	code := m.Run()
	if buildPath != "" {
		_ = os.RemoveAll(filepath.Dir(buildPath))
	}
	os.Exit(code)
}

// conductorBinary builds cmd/conductor once per test binary into a temporary
// directory that TestMain removes; every test and benchmark shares the build.
// BENCH_CONDUCTOR_BIN names a prebuilt binary to run instead.
func conductorBinary(tb testing.TB) string {
	tb.Helper()
	if bin := os.Getenv("BENCH_CONDUCTOR_BIN"); bin != "" {
		// A prebuilt binary (comparing builds); never removed.
		return bin
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "conductor-bench-")
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(dir, "conductor")
		cmd := exec.Command("go", "build", "-o", buildPath, "github.com/seed-c7a81618/conductor/cmd/conductor")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return buildPath
}

// serverProc is a conductor child process.
type serverProc struct {
	cmd  *exec.Cmd
	addr string // HTTP host:port
	logs *syncbuf.Buffer
	cpp  bool // the C++ Mooncake conductor (peer_test.go): no /metrics
}

var listeningRE = regexp.MustCompile(`HTTP server listening.*addr=(\S+)`)

// startServer runs conductor on a free loopback port with args and waits for
// its address. It is killed at cleanup.
func startServer(tb testing.TB, args ...string) *serverProc {
	return startServerOn(tb, nil, args...)
}

// startServerOn is startServer with conductor pinned to cpus (taskset; nil:
// anywhere).
func startServerOn(tb testing.TB, cpus []int, args ...string) *serverProc {
	tb.Helper()
	all := append([]string{"--http-port", "0", "--rpc-port", "0", "--listen", "127.0.0.1",
		"--state-dir", "", "--log-level", "info"}, args...)
	cmd := pinnedCommand(cpus, conductorBinary(tb), all...)
	// No configuration file (a missing one named by the environment is a
	// warning). BENCH_CONDUCTOR_ENV: space-separated NAME=VALUE pairs for
	// conductor only (GOMAXPROCS=3, GODEBUG=…), not for this process or the
	// publisher.
	cmd.Env = append(append(os.Environ(), "CONDUCTOR_CONFIG_PATH=/nonexistent/conductor.json"), strings.Fields(os.Getenv("BENCH_CONDUCTOR_ENV"))...)
	logs := &syncbuf.Buffer{}
	pr, pw := io.Pipe()
	cmd.Stderr = io.MultiWriter(logs, pw)
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); pw.Close(); close(done) }()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := listeningRE.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
				break
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	s := &serverProc{cmd: cmd, logs: logs}
	select {
	case s.addr = <-found:
	case <-done:
		tb.Fatalf("conductor exited before listening:\n%s", logs)
	case <-time.After(2 * time.Minute): // a failure bound only
		tb.Fatalf("conductor did not start:\n%s", logs)
	}
	return s
}

// cpu returns the server's user+system CPU time so far.
func (s *serverProc) cpu(tb testing.TB) time.Duration {
	tb.Helper()
	d, err := ProcCPU(s.cmd.Process.Pid)
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// selfCPU is this process's CPU time so far.
func selfCPU(tb testing.TB) time.Duration {
	tb.Helper()
	d, err := ProcCPU(os.Getpid())
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// threads is the server's thread count now.
func (s *serverProc) threads(tb testing.TB) int {
	tb.Helper()
	n, err := ProcThreads(s.cmd.Process.Pid)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

func (s *serverProc) url(path string) string { return "http://" + s.addr + path }

func (s *serverProc) post(tb testing.TB, path, ct string, body []byte) (int, []byte) {
	tb.Helper()
	resp, err := http.Post(s.url(path), ct, bytes.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return resp.StatusCode, b
}

// memoDelta is what the memo counted between two scrapes, in blocks.
type memoDelta struct {
	Hits, Misses float64
	PromptHits   float64 // the part of Hits served from recent prompts (0 for a binary older than that metric)
	Evictions    float64 // digests the table replaced
}

// memoCounts returns the memo's counters between two scrapes.
func memoCounts(tb testing.TB, a, b metricsPage) memoDelta {
	tb.Helper()
	const h, m, p, e = "conductor_hash_memo_hits_total", "conductor_hash_memo_misses_total",
		"conductor_hash_memo_prompt_hits_total", "conductor_hash_memo_evictions_total"
	for _, name := range []string{h, m, e} {
		if _, ok := b[name]; !ok {
			tb.Fatalf("metric %s missing", name)
		}
	}
	return memoDelta{Hits: b[h] - a[h], Misses: b[m] - a[m], PromptHits: b[p] - a[p], Evictions: b[e] - a[e]}
}

// engine is a registered fake vLLM sha256_cbor engine (seed "0", B=16,
// instance "engine-a", model "m") publishing over ZMQ to s.
type engine struct {
	pub  *Publisher
	p    hash.Profile
	seq  float64
	keys []uint64
}

func registerEngine(tb testing.TB, s *serverProc) *engine {
	return registerInstance(tb, s, "engine-a", PublisherOptions{})
}

// primeHash is the block an engine stores first, to learn when its
// publisher reaches the server: one per instance name, and no prompt's chain
// meets it.
func primeHash(instance string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(instance))
	return h.Sum64() | 1<<63
}

// registerInstance registers a fake vLLM engine named instance and primes
// it past ZMQ's slow-joiner window: it publishes one block of its own
// (primeHash) until the server's block count says a batch landed.
func registerInstance(tb testing.TB, s *serverProc, instance string, opts PublisherOptions) *engine {
	tb.Helper()
	pub, err := NewPublisher(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { pub.Close() })
	p, err := hash.Resolve(hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256_cbor", PythonHashSeed: "0", IndexProjection: "low64_be"})
	if err != nil {
		tb.Fatal(err)
	}
	base := s.prefixCount(tb)
	s.register(tb, instance, pub.Endpoint(), pub.ReplayEndpoint())
	e := &engine{pub: pub, p: p}
	prime := EngineStored{Hashes: []uint64{primeHash(instance)}, Tokens: make([]int32, 16), BlockSize: 16, Medium: "GPU"}
	deadline := time.Now().Add(waitBound)
	for {
		e.publish(tb, prime)
		time.Sleep(20 * time.Millisecond)
		if s.prefixCount(tb) > base {
			return e
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s's publisher never reached the server:\n%s", instance, s.logs)
		}
	}
}

// publish sends one batch with the given events.
func (e *engine) publish(tb testing.TB, events ...any) {
	tb.Helper()
	e.seq++
	if _, err := e.pub.Publish(AppendVLLMBatch(nil, EraMap, e.seq, 0, events...)); err != nil {
		tb.Fatal(err)
	}
}

// store publishes tokens' complete blocks as stored on GPU, from block `from`
// on (earlier blocks were stored before), in events of at most 512 blocks.
func (e *engine) store(tb testing.TB, tokens []int32, from int) {
	tb.Helper()
	keys, err := hash.AppendChain(e.keys[:0], &e.p, tokens, 16, nil, nil)
	if err != nil {
		tb.Fatal(err)
	}
	e.keys = keys
	for lo := from; lo < len(keys); lo += 512 {
		hi := min(lo+512, len(keys))
		ev := EngineStored{Hashes: keys[lo:hi], Tokens: tokens[lo*16 : hi*16], BlockSize: 16, Medium: "GPU"}
		if lo > 0 {
			ev.Parent, ev.HasParent = keys[lo-1], true
		}
		e.publish(tb, ev)
	}
}

// waitMatched polls a msgpack query of tokens until engine-a matches want tokens.
func waitMatched(tb testing.TB, s *serverProc, tokens []int32, want int) {
	tb.Helper()
	body, ct := queryBody("bin", tokens)
	deadline := time.Now().Add(waitBound)
	for {
		_, resp := s.post(tb, "/query", ct, body)
		if (&Expect{Instance: "engine-a", LongestMatched: int64(want)}).Check(ct, resp) == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("engine-a never matched %d tokens: %s", want, resp)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// serverRun is one measured load: the server's CPU per request beside the
// client-side rate and latency.
type serverRun struct {
	Load       LoadResult
	ServerCPU  time.Duration // the server's, over the measured requests
	ClientCPU  time.Duration // this process's (the client), over the same
	CPUPerReq  time.Duration
	GCPerReq   time.Duration // the collector's CPU in cycles that ended during the run
	MemoHits   float64       // blocks, during the run
	MemoMisses float64
	PromptHits float64 // the part of MemoHits served from recent prompts
}

// measure runs a warm-up, then n requests of body over conns connections
// (every answer checked against want), and reads the server's CPU and (on
// conductor) its collector and memo counters around the measured part only.
func measure(tb testing.TB, s *serverProc, ct string, body []byte, want *Expect, conns, n int) serverRun {
	tb.Helper()
	if _, err := RunLoad(context.Background(), LoadOptions{Addr: s.addr, ContentType: ct, Body: body,
		Connections: conns, Requests: min(n/10+conns, 500), Expect: want}); err != nil {
		tb.Fatal(err)
	}
	var m0 metricsPage
	if !s.cpp {
		m0 = s.scrape(tb)
	}
	c0, self0 := s.cpu(tb), selfCPU(tb)
	res, err := RunLoad(context.Background(), LoadOptions{Addr: s.addr, ContentType: ct, Body: body,
		Connections: conns, Requests: n, Expect: want})
	if err != nil {
		tb.Fatal(err)
	}
	c1, self1 := s.cpu(tb), selfCPU(tb)
	r := serverRun{Load: res, ServerCPU: c1 - c0, ClientCPU: self1 - self0, CPUPerReq: (c1 - c0) / time.Duration(n)}
	if s.cpp {
		return r // no /metrics: the collector and memo figures are conductor's
	}
	m1 := s.scrape(tb)
	r.GCPerReq = time.Duration((m1["go_gc_cpu_seconds_total"] - m0["go_gc_cpu_seconds_total"]) * 1e9 / float64(n))
	d := memoCounts(tb, m0, m1)
	r.MemoHits, r.MemoMisses, r.PromptHits = d.Hits, d.Misses, d.PromptHits
	return r
}

// startLoadChild starts conductor with args and loads the DESIGN.md budget
// fixture (loadFixture).
func startLoadChild(tb testing.TB, args ...string) (*serverProc, []int32) {
	s := startServer(tb, args...)
	return s, loadFixture(tb, s)
}

// loadFixture registers engine-a on s, has it store the first 512 blocks of
// the load prompt on GPU, and returns the prompt.
func loadFixture(tb testing.TB, s *serverProc) []int32 {
	e := registerEngine(tb, s)
	prompt := make([]int32, loadMax)
	for i := range prompt {
		prompt[i] = int32(1000 + i%120000)
	}
	e.store(tb, prompt[:loadBlocks*loadBS], 0)
	waitMatched(tb, s, prompt[:loadBlocks*loadBS], loadBlocks*loadBS)
	return prompt
}

// BenchmarkServerCPU measures /query the user's way: conductor as a child
// process, 4 keep-alive connections from this process, b.N requests per case,
// the same prompt repeated (so with the memo on every block after the first
// request is a memo hit). memo=on is a 64 MiB memo (hash.DefaultMemoBytes:
// digest table and recent prompts: the repeated prompt is served from a
// stored copy),
// memo=table the digest table alone (--hash-memo-prompt-bytes 0; a binary
// older than that flag runs memo=on as the table alone). It reports the
// server's CPU per request from /proc next to req/s and p99. Run:
//
//	go test -run '^$' -bench BenchmarkServerCPU -benchtime 4000x -count 3 ./bench/
func BenchmarkServerCPU(b *testing.B) {
	for _, memo := range []string{"off", "table", "on"} {
		args := []string{"--hash-memo-bytes", strconv.Itoa(hash.DefaultMemoBytes)}
		switch memo {
		case "off":
			args = []string{"--hash-memo-bytes", "0"}
		case "table":
			args = append(args, "--hash-memo-prompt-bytes", "0")
		}
		s, prompt := startLoadChild(b, args...)
		for _, form := range []string{"bin", "msgpack", "json"} {
			for _, n := range []int{1024, 8192, loadMax} {
				b.Run(fmt.Sprintf("memo=%s/%s/tokens=%d", memo, form, n), func(b *testing.B) {
					body, ct := queryBody(form, prompt[:n])
					r := measure(b, s, ct, body, expectPrompt(n), 4, b.N)
					b.ReportMetric(float64(r.CPUPerReq.Nanoseconds())/1e3, "server-µs/req")
					b.ReportMetric(r.Load.RPS, "req/s")
					b.ReportMetric(float64(r.Load.P99.Microseconds()), "p99-µs")
					if memo != "off" && r.MemoHits+r.MemoMisses > 0 {
						b.ReportMetric(r.MemoHits/(r.MemoHits+r.MemoMisses), "memo-hit-ratio")
						b.ReportMetric(r.PromptHits/(r.MemoHits+r.MemoMisses), "prompt-hit-ratio")
					}
				})
			}
		}
	}
}

// TestServerCPUHarness runs the child-process harness briefly: the fixture
// matches 512 blocks, the server's CPU clock advances under load, and a
// repeated prompt is served from the memo when it is on and never when off.
func TestServerCPUHarness(t *testing.T) {
	for _, memo := range []string{"0", "1048576"} {
		s, prompt := startLoadChild(t, "--hash-memo-bytes", memo)
		body, ct := queryBody("bin", prompt[:8192])
		r := measure(t, s, ct, body, expectPrompt(8192), 4, 300)
		if r.Load.Requests != 300 || r.CPUPerReq < 0 {
			t.Fatalf("memo=%s: %+v", memo, r)
		}
		if memo == "0" && r.MemoHits+r.MemoMisses != 0 {
			t.Fatalf("memo off but counted: %+v", r)
		}
		if memo != "0" && (r.MemoHits != 300*512 || r.MemoMisses != 0) {
			t.Fatalf("memo on: %v hits %v misses, want every block of 300 queries a hit", r.MemoHits, r.MemoMisses)
		}
		// The warm-up stored the prompt (recent prompts are on by default):
		// every measured block comes from the stored copy.
		if memo != "0" && r.PromptHits != 300*512 {
			t.Fatalf("memo on: %v blocks from recent prompts, want all %d", r.PromptHits, 300*512)
		}
		t.Logf("memo=%s: %v server CPU/req, %v", memo, r.CPUPerReq, r.Load)
	}
}
