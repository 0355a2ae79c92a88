package ingest_test

import (
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/bench"
	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
	"github.com/seed-c7a81618/conductor/wire/ingest"
)

// Helpers of the ZMQ integration tests: an index + Ingester harness, publishers
// from package bench (real libzmq sockets on 127.0.0.1, random ports), and
// bounded polling in place of sleeps.

const (
	testModel = "m"
	testBS    = 16
	// waitLimit bounds every wait for an asynchronous effect. Every wait
	// polls and returns as soon as its condition holds, so the bound only
	// decides when a failure is declared: generous, for a loaded machine
	// running the race detector (1,000 listener threads starting under a
	// load average of 11 took more than 20 s).
	waitLimit = 2 * time.Minute
)

// testLogWriter sends log lines to t.Log until the test ends.
type testLogWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *testLogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

func testLogger(t *testing.T) *slog.Logger {
	w := &testLogWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	level := slog.LevelInfo
	if os.Getenv("CONDUCTOR_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// fastOpts are IngestOptions with test-sized timeouts.
func fastOpts(t *testing.T) ingest.IngestOptions {
	return ingest.IngestOptions{
		PollInterval:       20 * time.Millisecond,
		ReconnectMin:       10 * time.Millisecond,
		ReconnectMax:       100 * time.Millisecond,
		ReplayTimeout:      500 * time.Millisecond,
		ReplayTotalTimeout: 2 * time.Second,
		Logger:             testLogger(t),
	}
}

type harness struct {
	t  *testing.T
	ix *core.Index
	g  *ingest.Ingester
}

func newHarness(t *testing.T, opts ingest.IngestOptions) *harness {
	t.Helper()
	log := opts.Logger
	if log == nil {
		log = testLogger(t)
		opts.Logger = log
	}
	// The protocol tests check what a stale stream leaves under the clear
	// policy (its blocks go); TestZMQGapPolicies runs the others.
	return newHarnessIndex(t, opts, core.New(core.Options{Logger: log, GapPolicy: core.GapClear}))
}

// newHarnessIndex is newHarness over ix.
func newHarnessIndex(t *testing.T, opts ingest.IngestOptions, ix *core.Index) *harness {
	t.Helper()
	g, err := ingest.NewIngester(ix, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return &harness{t: t, ix: ix, g: g}
}

func newPublisher(t *testing.T, opts bench.PublisherOptions) *bench.Publisher {
	t.Helper()
	p, err := bench.NewPublisher(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func mustProfile(t testing.TB, s hash.Spec) hash.Profile {
	t.Helper()
	p, err := hash.Resolve(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func vllmProfile(t testing.TB) hash.Profile {
	return mustProfile(t, hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256_cbor", PythonHashSeed: "0", IndexProjection: "low64_be"})
}

func sglangProfile(t *testing.T) hash.Profile {
	return mustProfile(t, hash.Spec{Strategy: "sglang", Algorithm: "sha256_raw", PythonHashSeed: "0", IndexProjection: "first64_be"})
}

// registration builds a registration of instance against pub in the test context.
func registration(inst string, typ core.PublisherType, pub *bench.Publisher, prof hash.Profile) core.Registration {
	return core.Registration{
		Endpoint:        pub.Endpoint(),
		ReplayEndpoint:  pub.ReplayEndpoint(),
		Type:            typ,
		ModelName:       testModel,
		InstanceID:      inst,
		BlockSize:       testBS,
		Profile:         prof,
		ProfileExplicit: true,
	}
}

func (h *harness) register(r core.Registration) core.ServiceKey {
	h.t.Helper()
	created, err := h.g.Register(r)
	if err != nil {
		h.t.Fatalf("register %s: %v", r.InstanceID, err)
	}
	if !created {
		h.t.Fatalf("register %s: created=false", r.InstanceID)
	}
	return core.ServiceKey{InstanceID: r.InstanceID, TenantID: "default", DPRank: r.DPRank}
}

// tokens returns n deterministic token ids starting from base.
func tokens(base, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(base + i*7%1000)
	}
	return out
}

// chain computes the block keys the engine would publish for toks.
func chain(t *testing.T, p hash.Profile, toks []int32) []uint64 {
	t.Helper()
	hs, err := hash.AppendChain(nil, &p, toks, testBS, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return hs
}

// row queries toks and returns the row of inst (zero row when absent).
func (h *harness) row(inst string, toks []int32) core.InstanceResult {
	h.t.Helper()
	var res core.QueryResult
	if err := h.ix.Query(&core.QueryRequest{Model: testModel, BlockSize: testBS, Tokens: toks}, &res); err != nil {
		h.t.Fatal(err)
	}
	for _, r := range res.Instances {
		if r.ID == inst {
			r.Ranks = append([]core.RankResult(nil), r.Ranks...)
			return r
		}
	}
	return core.InstanceResult{ID: inst}
}

// holds reports whether inst holds the block with prefix key hsh in any tier.
func (h *harness) holds(inst string, hsh uint64) bool {
	h.t.Helper()
	return h.tierRow(testModel, inst, hsh).LongestMatched == testBS
}

// tierRow is inst's row for the one block of model with prefix key hsh, with
// the per-medium prefixes and without the ranks (zero row with inst's ID when
// inst does not hold it).
func (h *harness) tierRow(model, inst string, hsh uint64) core.InstanceResult {
	h.t.Helper()
	var res core.QueryResult
	req := core.QueryRequest{Model: model, BlockSize: testBS, Hashes: []uint64{hsh}, ByHash: true, Instance: inst, PerMedium: true}
	if err := h.ix.Query(&req, &res); err != nil {
		h.t.Fatal(err)
	}
	for _, r := range res.Instances {
		if r.ID == inst {
			r.Ranks = nil
			return r
		}
	}
	return core.InstanceResult{ID: inst}
}

// waitBurstHeld waits until inst holds the blocks first..first+n-1 (one per
// burst batch), publishing an empty batch between checks: a message dropped
// at the end of a burst is only seen as a gap, and healed, once another
// message follows it.
func (h *harness) waitBurstHeld(pub *bench.Publisher, inst string, first uint64, n int) {
	h.t.Helper()
	waitFor(h.t, "every burst block", func() bool {
		publish(h.t, pub, emptyVLLM())
		time.Sleep(20 * time.Millisecond)
		for i := 0; i < n; i++ {
			if !h.holds(inst, first+uint64(i)) {
				return false
			}
		}
		return true
	})
}

// status returns the listener status of k.
func (h *harness) status(k core.ServiceKey) ingest.ListenerStatus {
	h.t.Helper()
	for _, s := range h.g.Listeners() {
		if s.Key == k {
			return s
		}
	}
	h.t.Fatalf("no listener %v", k)
	return ingest.ListenerStatus{}
}

// waitFor polls cond every few milliseconds until it holds or waitLimit passes.
// waitStaleHeld waits until inst holds blocks lo..hi and then checks that
// none of blocks 1..lost is held: a stale clear removed them, or they were
// never delivered.
func (h *harness) waitStaleHeld(inst string, lost, lo, hi uint64) {
	h.t.Helper()
	waitFor(h.t, fmt.Sprintf("blocks %d..%d", lo, hi), func() bool {
		for x := lo; x <= hi; x++ {
			if !h.holds(inst, x) {
				return false
			}
		}
		return true
	})
	for x := uint64(1); x <= lost; x++ {
		if h.holds(inst, x) {
			h.t.Errorf("block %d survived the stale clear or was invented", x)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitLimit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// settledCount returns count once it has kept one value for a second (at
// most waitLimit).
func settledCount(t *testing.T, count func() int) int {
	t.Helper()
	n, since := count(), time.Now()
	for deadline := time.Now().Add(waitLimit); time.Since(since) < time.Second; {
		if time.Now().After(deadline) {
			t.Fatalf("count never settled (last %d)", n)
		}
		time.Sleep(20 * time.Millisecond)
		if m := count(); m != n {
			n, since = m, time.Now()
		}
	}
	return n
}

// waitRow waits until inst's row for toks equals want (Ranks ignored), and
// returns it.
func (h *harness) waitRow(inst string, toks []int32, want core.InstanceResult) core.InstanceResult {
	h.t.Helper()
	var got core.InstanceResult
	want.ID = inst
	waitFor(h.t, fmt.Sprintf("row %+v", want), func() bool {
		got = h.row(inst, toks)
		return got.ID == want.ID && got.LongestMatched == want.LongestMatched && got.Device == want.Device &&
			got.CPULocal == want.CPULocal && got.CPUShare == want.CPUShare && got.Disk == want.Disk
	})
	return got
}

// prime publishes empty batches until the listener has applied one and, with a
// replay endpoint, has ended the replay it requests on connecting: after it, no
// live message can be lost to ZMQ's slow-joiner window (needed for publishers
// without replay, whose early messages are otherwise gone for good), and none
// is held in the receive queue by that replay. (The first live batch can be
// applied before the connection's monitor event starts the replay.)
func (h *harness) prime(k core.ServiceKey, pub *bench.Publisher, empty []byte) {
	h.t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !primed(h.status(k)) {
		if time.Now().After(deadline) {
			h.t.Fatalf("listener %v never received a batch: %+v", k, h.status(k))
		}
		if _, err := pub.Publish(empty); err != nil {
			h.t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// primed: the listener has applied a batch and, with a replay endpoint, ended
// the replay it requests on connecting (see prime).
func primed(st ingest.ListenerStatus) bool {
	return st.Batches > 0 && (st.ReplayEndpoint == "" ||
		st.ReplaysRequested > 0 && st.ReplaysRequested == st.ReplaysSucceeded+st.ReplaysFailed)
}

func publish(t *testing.T, pub *bench.Publisher, payload []byte) uint64 {
	t.Helper()
	seq, err := pub.Publish(payload)
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

func publishHidden(t *testing.T, pub *bench.Publisher, payload []byte) uint64 {
	t.Helper()
	seq, err := pub.PublishHidden(payload)
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// full is the row of an instance holding n blocks in the device tier.
func full(n int) core.InstanceResult {
	v := int64(n * testBS)
	return core.InstanceResult{LongestMatched: v, Device: v, CPULocal: v, CPUShare: v, Disk: v}
}

// countFDs returns the number of open file descriptors of this process.
func countFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// stableCounts returns goroutine and fd counts once they stop changing (bounded):
// libzmq closes sockets asynchronously in its reaper thread.
func stableCounts(t *testing.T) (g, fd int) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	g, fd = -1, -1
	for {
		runtime.GC()
		g2, fd2 := runtime.NumGoroutine(), countFDs(t)
		if (g2 == g && fd2 == fd) || time.Now().After(deadline) {
			return g2, fd2
		}
		g, fd = g2, fd2
		time.Sleep(50 * time.Millisecond)
	}
}

// settle waits (bounded) until goroutines and fds are back within slack of the
// baseline, and reports the final counts.
func settle(t *testing.T, baseG, baseFD, slack int) (g, fd int) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		runtime.GC()
		g, fd = runtime.NumGoroutine(), countFDs(t)
		if (g <= baseG+slack && fd <= baseFD+slack) || time.Now().After(deadline) {
			return g, fd
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// storeOne is a vLLM batch (map era) storing the one GPU block x.
func storeOne(x uint64) []byte {
	return bench.AppendVLLMBatch(nil, bench.EraMap, 1.7e9, 0, bench.EngineStored{Hashes: []uint64{x}, BlockSize: testBS, Medium: "GPU"})
}
