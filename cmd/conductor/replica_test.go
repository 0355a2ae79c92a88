package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/seed-c7a81618/conductor/bench"
	"github.com/seed-c7a81618/conductor/internal/syncbuf"
)

// replicaChild is a conductor process started from the test binary
// (TestMain in fdlimit_test.go runs it when CONDUCTOR_TEST_CHILD=1).
type replicaChild struct {
	cmd        *exec.Cmd
	main, dyn  string // bound addresses
	logs       *syncbuf.Buffer
	recovered  chan string // the "peer recovery" log line
	exited     chan struct{}
	stderrDone chan struct{}
}

func startReplica(t *testing.T, config string, args ...string) *replicaChild {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/conductor.json", []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	all := append([]string{"--http-port", "0", "--rpc-port", "0", "--dynamo-port", "0", "--listen", "127.0.0.1", "--log-format", "json",
		"--shutdown-timeout", "2s", "--state-dir", dir + "/state"}, args...)
	cmd := exec.Command(os.Args[0], all...)
	cmd.Env = append(os.Environ(), "CONDUCTOR_TEST_CHILD=1", "CONDUCTOR_CONFIG_PATH="+dir+"/conductor.json", "HOME="+dir)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &replicaChild{cmd: cmd, logs: &syncbuf.Buffer{}, recovered: make(chan string, 4), exited: make(chan struct{}), stderrDone: make(chan struct{})}
	addrs := make(chan [2]string, 1)
	go func() {
		defer close(c.stderrDone)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var a [2]string
		sent := false
		for sc.Scan() {
			line := sc.Text()
			_, _ = c.logs.Write([]byte(line + "\n"))
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) != nil {
				continue
			}
			switch rec["msg"] {
			case "HTTP server listening":
				a[0], _ = rec["addr"].(string)
			case "Dynamo HTTP server listening":
				a[1], _ = rec["addr"].(string)
			case "peer recovery done", "peer recovery: no peer answered; starting empty":
				c.recovered <- line
			}
			if !sent && a[0] != "" && a[1] != "" {
				addrs <- a
				sent = true
			}
		}
	}()
	go func() { _ = cmd.Wait(); close(c.exited) }()
	select {
	case a := <-addrs:
		c.main, c.dyn = a[0], a[1]
	case <-time.After(waitBound):
		_ = cmd.Process.Kill()
		t.Fatalf("child did not start\n%s", c.logs)
	}
	t.Cleanup(func() { c.kill() })
	return c
}

func (c *replicaChild) kill() {
	_ = c.cmd.Process.Kill()
	<-c.exited
	<-c.stderrDone
}

// seriesValue reads one series from /metrics.
func seriesValue(t *testing.T, addr, series string) (float64, bool) {
	t.Helper()
	_, _, body := httpDo(t, "GET", "http://"+addr+"/metrics", "", nil)
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, series+" ") {
			v, err := strconv.ParseFloat(strings.TrimPrefix(line, series+" "), 64)
			return v, err == nil
		}
	}
	return 0, false
}

// replicaEngine publishes vLLM batches (array era) for one worker: prompts
// with shared prefixes, engine hashes that are not the standard chain (so
// conductor keeps an engine map), repeated stores (copies), per-copy
// removes, continuations with a parent hash, some CPU offloads.
type replicaEngine struct {
	pub     *bench.Publisher
	rng     *rand.Rand
	bs      int
	prompts [][]int32
	cached  map[uint64]int // device copies
	order   []uint64
}

func newReplicaEngine(t *testing.T, seed int64, bs int, shared []int32, po bench.PublisherOptions) *replicaEngine {
	pub, err := bench.NewPublisher(po)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	e := &replicaEngine{pub: pub, rng: rand.New(rand.NewSource(seed)), bs: bs, cached: map[uint64]int{}}
	for p := 0; p < 40; p++ {
		pr := make([]int32, 0, 12*bs)
		pr = append(pr, shared[:e.rng.Intn(4)*bs]...)
		for len(pr) < 12*bs {
			pr = append(pr, int32(e.rng.Intn(1000)))
		}
		e.prompts = append(e.prompts, pr)
	}
	return e
}

func (e *replicaEngine) hashOf(prefix []int32) uint64 {
	b := make([]byte, 0, 4*len(prefix))
	for _, t := range prefix {
		b = binary.LittleEndian.AppendUint32(b, uint32(t))
	}
	return xxh3.HashSeed(b, 4242)
}

func (e *replicaEngine) step(t *testing.T) {
	var evs []any
	for k := 1 + e.rng.Intn(3); k > 0; k-- {
		if len(e.order) > 0 && e.rng.Intn(5) < 2 {
			i := e.rng.Intn(len(e.order))
			h := e.order[i]
			evs = append(evs, bench.EngineRemoved{Hashes: []uint64{h}, Medium: "GPU"})
			if e.cached[h]--; e.cached[h] == 0 {
				delete(e.cached, h)
				e.order = append(e.order[:i], e.order[i+1:]...)
			}
			continue
		}
		pr := e.prompts[e.rng.Intn(len(e.prompts))]
		n := 1 + e.rng.Intn(len(pr)/e.bs)
		from := 0
		if n > 1 && e.rng.Intn(2) == 0 {
			from = n - 1 // a continuation, when its parent is cached
			if e.cached[e.hashOf(pr[:from*e.bs])] == 0 {
				from = 0
			}
		}
		st := bench.EngineStored{Tokens: pr[from*e.bs : n*e.bs], BlockSize: e.bs, Medium: "GPU"}
		if from > 0 {
			st.Parent, st.HasParent = e.hashOf(pr[:from*e.bs]), true
		}
		if e.rng.Intn(6) == 0 {
			st.Medium = "CPU"
		}
		for i := from; i < n; i++ {
			h := e.hashOf(pr[:(i+1)*e.bs])
			st.Hashes = append(st.Hashes, h)
			if st.Medium == "GPU" {
				if e.cached[h] == 0 {
					e.order = append(e.order, h)
				}
				e.cached[h]++
			}
		}
		evs = append(evs, st)
	}
	if _, err := e.pub.Publish(bench.AppendVLLMBatch(nil, bench.EraArray, float64(time.Now().UnixNano())/1e9, 0, evs...)); err != nil {
		t.Error(err)
	}
}

// flow publishes batches from every engine until stopped; pause/resume hold
// it at a batch boundary.
type flow struct {
	mu      sync.Mutex
	stop    chan struct{}
	done    chan struct{}
	engines []*replicaEngine
}

func startFlow(t *testing.T, engines []*replicaEngine) *flow {
	f := &flow{stop: make(chan struct{}), done: make(chan struct{}), engines: engines}
	go func() {
		defer close(f.done)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-f.stop:
				return
			case <-tick.C:
			}
			f.mu.Lock()
			for _, e := range f.engines {
				e.step(t)
			}
			f.mu.Unlock()
		}
	}()
	t.Cleanup(func() { close(f.stop); <-f.done })
	return f
}

// settle waits until every conductor received the last batch of every
// engine (last_seq gauge). That gauge moves just before the batch is
// applied: compareReplicas re-asks a differing query while it lands.
func settle(t *testing.T, engines []*replicaEngine, procs ...*replicaChild) {
	t.Helper()
	for i, e := range engines {
		last := e.pub.NextSeq() - 1
		series := fmt.Sprintf(`conductor_ingest_last_seq{instance="%d",tenant="default",dp_rank="0"}`, i+1)
		for _, p := range procs {
			deadline := time.Now().Add(20 * time.Second)
			for {
				if v, ok := seriesValue(t, p.main, series); ok && uint64(v) >= last {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s did not reach seq %d on %s\n%s", series, last, p.main, p.logs)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
}

// published is how many batches the engines have published.
func published(engines []*replicaEngine) (n uint64) {
	for _, e := range engines {
		n += e.pub.NextSeq()
	}
	return n
}

// flowFor waits until the running flow has published n more batches: the
// events that flow while a conductor is down, recovering or catching up.
func flowFor(t *testing.T, engines []*replicaEngine, n uint64) {
	t.Helper()
	from := published(engines)
	deadline := time.Now().Add(60 * time.Second)
	for published(engines) < from+n {
		if time.Now().After(deadline) {
			t.Fatalf("the flow published %d of %d batches in 60 s", published(engines)-from, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// compareReplicas asks a and b n random queries (Dynamo /query and
// /query_by_hash with Dynamo local hashes, and the Mooncake JSON /query) and
// requires byte-identical answers. Publishing is paused: a difference may
// only be a directly subscribed conductor's last batch still being applied
// (settle), so a differing query is asked again for up to 5 s before it
// fails, logging the replication and ingest series of a, b and diag. It
// returns how many answers had device hits.
func compareReplicas(t *testing.T, rng *rand.Rand, engines []*replicaEngine, n int, a, b *replicaChild, diag ...*replicaChild) int {
	t.Helper()
	hits := 0
	for q := 0; q < n; q++ {
		addrA, addrB, path, body := replicaQuery(rng, engines, q, a, b)
		for deadline := time.Now().Add(5 * time.Second); ; {
			ca, _, ra := httpDo(t, "POST", "http://"+addrA+path, "application/json", []byte(body))
			cb, _, rb := httpDo(t, "POST", "http://"+addrB+path, "application/json", []byte(body))
			if ca == 200 && cb == 200 && bytes.Equal(ra, rb) {
				if bytes.Contains(ra, []byte(`"gpu":`)) && !bytes.Contains(ra, []byte(`"gpu":0`)) {
					hits++
				}
				break
			}
			if time.Now().After(deadline) {
				for _, p := range append([]*replicaChild{a, b}, diag...) {
					_, _, m := httpDo(t, "GET", "http://"+p.main+"/metrics", "", nil)
					for _, line := range strings.Split(string(m), "\n") {
						if strings.HasPrefix(line, "conductor_replica_") || strings.HasPrefix(line, "conductor_relay_") ||
							strings.HasPrefix(line, "conductor_ingest_gaps") || strings.HasPrefix(line, "conductor_ingest_last_seq") {
							t.Logf("%s %s", p.main, line)
						}
					}
				}
				t.Fatalf("query %d %s %s:\n A %d %s\n B %d %s", q, path, body, ca, ra, cb, rb)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return hits
}

// replicaQuery is the q-th random query of a replica comparison: a prefix of
// one of the engines' prompts (sometimes with a token no prompt has), asked
// in turn as Dynamo /query, Dynamo /query_by_hash with Dynamo local hashes, and
// Mooncake JSON /query, with each conductor's address for that surface.
func replicaQuery(rng *rand.Rand, engines []*replicaEngine, q int, a, b *replicaChild) (addrA, addrB, path, body string) {
	e := engines[rng.Intn(len(engines))]
	pr := e.prompts[rng.Intn(len(e.prompts))]
	toks := append([]int32(nil), pr[:rng.Intn(len(pr))+1]...)
	if rng.Intn(8) == 0 {
		toks = append(toks, int32(rng.Intn(1000)))
	}
	switch q % 3 {
	case 0:
		return a.dyn, b.dyn, "/query", `{"model_name":"m","token_ids":` + jsonList(toks) + `}`
	case 1:
		return a.dyn, b.dyn, "/query_by_hash", `{"model_name":"m","block_hashes":` + jsonList(localBlockHashes(toks, e.bs)) + `}`
	default:
		return a.main, b.main, "/query", `{"model":"m","block_size":` + strconv.Itoa(e.bs) + `,"token_ids":` + jsonList(toks) + `}`
	}
}

// twoEngineArgs subscribes a conductor to two engines of block size bs:
// worker 1 from --workers (no replay endpoint), worker 2, with its replay
// endpoint, from the configuration file (the same context: tenant = routing
// group "default", model m).
func twoEngineArgs(engines []*replicaEngine, bs int) (config string, args []string) {
	config = fmt.Sprintf(`{"services":[{"instance_id":"2","endpoint":%q,"replay_endpoint":%q,"type":"vLLM","modelname":"m","block_size":%d,"dp_rank":0}]}`,
		engines[1].pub.Endpoint(), engines[1].pub.ReplayEndpoint(), bs)
	return config, []string{"--block-size", strconv.Itoa(bs), "--model-name", "m", "--workers", "1=" + engines[0].pub.Endpoint()}
}

// waitReceiving steps the engines until p has applied a batch from each.
func waitReceiving(t *testing.T, p *replicaChild, engines []*replicaEngine) {
	t.Helper()
	for i, e := range engines {
		series := fmt.Sprintf(`conductor_ingest_batches_total{instance="%d",tenant="default",dp_rank="0"}`, i+1)
		waitFor(t, p.main+" receiving", func() bool {
			e.step(t)
			v, ok := seriesValue(t, p.main, series)
			return ok && v > 0
		})
	}
}

func localBlockHashes(tokens []int32, bs int) []uint64 {
	var out []uint64
	for i := 0; i+bs <= len(tokens); i += bs {
		b := make([]byte, 0, 4*bs)
		for _, t := range tokens[i : i+bs] {
			b = binary.LittleEndian.AppendUint32(b, uint32(t))
		}
		out = append(out, xxh3.HashSeed(b, 1337))
	}
	return out
}

// TestReplicaRecovery: two conductor processes subscribe to the same two
// vLLM publishers over real ZMQ on loopback. The second starts later, while
// events flow, with --peers pointing at the first (Dynamo port); after its
// recovery both answer thousands of random queries identically at quiescent
// checkpoints (publishing paused until both received the last batch). Then
// the second is SIGKILLed while events keep flowing, restarted with --peers
// pointing at the first's main port, and converges again.
func TestReplicaRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("separate processes and real ZMQ; run without -short")
	}
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	const bs = 4
	shared := make([]int32, 4*bs)
	for i := range shared {
		shared[i] = int32(rng.Intn(1000))
	}
	// Neither publisher can give a late subscriber its history: one has no
	// replay socket, the other a 64-batch ring (which the flow overruns within
	// a second). Only the peer's dump has it.
	engines := []*replicaEngine{
		newReplicaEngine(t, seed+1, bs, shared, bench.PublisherOptions{NoReplay: true}),
		newReplicaEngine(t, seed+2, bs, shared, bench.PublisherOptions{Ring: 64}),
	}
	// Worker 1 comes from --workers; worker 2, with its replay endpoint, from
	// the configuration file (the same context: tenant = routing group
	// "default", model m, block 4).
	config, args := twoEngineArgs(engines, bs)

	a := startReplica(t, config, args...)
	// A's listeners must be connected before the first event (no peer for A).
	waitReceiving(t, a, engines)
	fl := startFlow(t, engines)
	flowFor(t, engines, 300) // past engine 2's 64-batch ring: only A has the history

	b := startReplica(t, config, append(args, "--peers", "http://"+a.dyn)...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("B's log:\n%s", b.logs)
		}
	})
	select {
	case line := <-b.recovered:
		t.Logf("B: %s", line)
		if !strings.Contains(line, `"msg":"peer recovery done"`) {
			t.Fatalf("B did not recover from A: %s", line)
		}
	case <-time.After(waitBound):
		t.Fatalf("B did not finish recovery\n%s", b.logs)
	}
	flowFor(t, engines, 300) // events keep flowing after the recovery

	check := func(name string, x, y *replicaChild) {
		t.Helper()
		fl.mu.Lock()
		defer fl.mu.Unlock()
		settle(t, engines, x, y)
		hits := compareReplicas(t, rng, engines, 1500, x, y)
		t.Logf("%s: 1500 identical answers, %d with device hits", name, hits)
		if hits < 100 {
			t.Fatalf("%s: only %d answers had hits; the comparison is vacuous", name, hits)
		}
	}
	check("after recovery", a, b)
	flowFor(t, engines, 200)
	check("events flowed", a, b)

	// SIGKILL B while events flow; restart it against A's main port.
	b.kill()
	flowFor(t, engines, 200) // events B misses
	b2 := startReplica(t, config, append(args, "--peers", "http://127.0.0.1:1,http://"+a.main)...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("A's log:\n%s\nrestarted B's log:\n%s", a.logs, b2.logs)
		}
	})
	select {
	case line := <-b2.recovered:
		t.Logf("B restarted: %s", line)
		if !strings.Contains(line, `"msg":"peer recovery done"`) {
			t.Fatalf("B did not recover from A: %s", line)
		}
	case <-time.After(waitBound):
		t.Fatalf("B did not finish recovery\n%s", b2.logs)
	}
	flowFor(t, engines, 200) // events flow after B's recovery
	check("after SIGKILL and restart", a, b2)
}
