package sim

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"
)

func TestRestartSchedule(t *testing.T) {
	f := func(n, requests int, seed uint64, want []int) {
		t.Helper()
		got := restartSchedule(n, requests, rand.New(rand.NewPCG(seed, 1)))
		if want != nil {
			if !slices.Equal(got, want) {
				t.Fatalf("restartSchedule(%d, %d) = %v, want %v", n, requests, got, want)
			}
			return
		}
		if len(got) != n {
			t.Fatalf("restartSchedule(%d, %d) = %v: %d points", n, requests, got, len(got))
		}
		for i, p := range got {
			if p < 1 || p >= requests || (i > 0 && p <= got[i-1]) {
				t.Fatalf("restartSchedule(%d, %d) = %v: not ascending in [1, %d)", n, requests, got, requests)
			}
		}
	}
	f(0, 100, 1, []int{})
	f(3, 1, 1, []int{})
	f(5, 4, 1, []int{1, 2, 3}) // more restarts than points: every point
	f(3, 4, 9, []int{1, 2, 3})
	f(3, 1000, 1, nil)
	f(40, 50, 2, nil)
	a := restartSchedule(5, 1000, rand.New(rand.NewPCG(7, 1)))
	b := restartSchedule(5, 1000, rand.New(rand.NewPCG(7, 1)))
	c := restartSchedule(5, 1000, rand.New(rand.NewPCG(8, 1)))
	if !slices.Equal(a, b) || slices.Equal(a, c) {
		t.Fatalf("seed 7: %v and %v; seed 8: %v", a, b, c)
	}
}

// subscriber reads sequence numbers off a publisher's PUB socket.
type subscriber struct {
	ctx  *zmq.Context
	sock *zmq.Socket
}

func subscribe(t *testing.T, endpoint string) *subscriber {
	t.Helper()
	ctx, err := zmq.NewContext()
	if err != nil {
		t.Fatal(err)
	}
	s, err := ctx.NewSocket(zmq.SUB)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.SetLinger(0)
	_ = s.SetRcvtimeo(100 * time.Millisecond)
	if err := s.SetSubscribe(""); err != nil {
		t.Fatal(err)
	}
	if err := s.Connect(endpoint); err != nil {
		t.Fatal(err)
	}
	sub := &subscriber{ctx, s}
	t.Cleanup(func() { _ = s.Close(); _ = ctx.Term() })
	return sub
}

// next returns the next message's sequence, ok false after the receive timeout.
func (s *subscriber) next(t *testing.T) (uint64, bool) {
	t.Helper()
	msg, err := s.sock.RecvMessageBytes(0)
	if err != nil {
		return 0, false
	}
	if len(msg) != 3 || len(msg[1]) != 8 {
		t.Fatalf("message of %d frames", len(msg))
	}
	return binary.BigEndian.Uint64(msg[1]), true
}

// TestLossConsumesSequence: a lost message of a publisher without replay
// (an engine rank and the store) takes its sequence number and is never
// sent, so the subscriber sees exactly Lost numbers missing; sentinels are
// never lost; the same FaultSeed loses the same messages.
func TestLossConsumesSequence(t *testing.T) {
	missing := func(seed uint64) (engine, store []uint64) {
		g, err := NewGroup(GroupConfig{Model: "loss", StoreBlocks: 300, StoreLoss: 0.3, FaultSeed: seed, StepTokens: 256,
			Engines: []EngineConfig{{ID: "e", Dialect: VLLMMap, Device: 200, Host: 200, NoReplay: true, Loss: 0.3}}})
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		rs, st := g.engines[0].ranks[0], g.store
		if rs.pub.ReplayEndpoint() != "" || g.Registrations()[0].ReplayEndpoint != "" {
			t.Fatal("a NoReplay engine has a replay endpoint")
		}
		rng := rand.New(rand.NewPCG(1, 2))
		subE, subS := subscribe(t, rs.pub.Endpoint()), subscribe(t, st.pub.Endpoint())
		// Sentinels until both subscribers are connected (a PUB socket
		// drops what it sends before).
		handshake := func(sub *subscriber, send func() error) uint64 {
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				if err := send(); err != nil {
					t.Fatal(err)
				}
				if s, ok := sub.next(t); ok {
					return s
				}
			}
			t.Fatal("subscriber did not connect")
			return 0
		}
		sendE := func() error { return g.engines[0].publishSentinel(rs, rng) }
		sendS := func() error { _, err := st.publishSentinel(rng); return err }
		firstE, firstS := handshake(subE, sendE), handshake(subS, sendS)
		src := smokeSource()
		for i := 0; i < 80; i++ {
			p, _ := src.Next()
			if _, err := g.Serve(p, nil); err != nil {
				t.Fatal(err)
			}
		}
		// A last sentinel on each: everything before it has been sent.
		if err := sendE(); err != nil {
			t.Fatal(err)
		}
		if err := sendS(); err != nil {
			t.Fatal(err)
		}
		gaps := func(sub *subscriber, first, last uint64) []uint64 {
			var out []uint64
			want := first + 1
			for want <= last {
				s, ok := sub.next(t)
				if !ok {
					t.Fatalf("no message after seq %d (last %d)", want-1, last)
				}
				for ; want < s; want++ {
					out = append(out, want-first) // the handshake took a varying number of sequences
				}
				if s != want {
					t.Fatalf("seq %d after %d", s, want-1)
				}
				want++
			}
			return out
		}
		engine = gaps(subE, firstE, rs.pub.NextSeq()-1)
		store = gaps(subS, firstS, st.pub.NextSeq()-1)
		s := &g.Stats
		if int64(len(engine)) != s.Lost || int64(len(store)) != s.StoreLost {
			t.Fatalf("missing engine seqs %v (Lost %d), store %v (StoreLost %d)", engine, s.Lost, store, s.StoreLost)
		}
		// p = 0.3 over this many messages: a fixed draw, well inside [0.1, 0.5].
		for _, c := range []struct {
			name       string
			lost, msgs int64
		}{{"engine", s.Lost, s.Messages}, {"store", s.StoreLost, s.StoreMessages}} {
			if c.msgs < 40 || c.lost*10 < c.msgs || c.lost*2 > c.msgs {
				t.Fatalf("%s: %d of %d messages lost, want about 30%%", c.name, c.lost, c.msgs)
			}
		}
		return engine, store
	}
	e1, s1 := missing(5)
	e2, s2 := missing(5)
	e3, _ := missing(6)
	if !slices.Equal(e1, e2) || !slices.Equal(s1, s2) || slices.Equal(e1, e3) {
		t.Fatalf("seed 5: %v / %v and %v / %v; seed 6: %v", e1, s1, e2, s2, e3)
	}
}

// runFaults runs a short verified workload of cfg into an in-process
// conductor with o's fault and threshold fields.
func runFaults(t *testing.T, cfg GroupConfig, o RunOptions) (*Group, *Report, error) {
	t.Helper()
	addr := startConductor(t)
	g, err := NewGroup(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o.Addr, o.Groups = addr, []*Group{g}
	if o.Source == nil {
		o.Source = smokeSource()
	}
	if o.Requests == 0 {
		o.Requests = 120
	}
	o.Concurrency, o.QueryOnly, o.Verify, o.VerifyEvery, o.VerifySample, o.QuiesceTimeout = 1, 300*time.Millisecond, true, 40, 24, 20*time.Second
	rep, err := Run(ctx, o)
	return g, rep, err
}

// faultEngines: vLLM engines of both dialects with every tier, small enough
// that the workload evicts.
func faultEngines(noReplay bool, loss float64) []EngineConfig {
	return []EngineConfig{
		{ID: "f-a", Dialect: VLLMMap, Ranks: 2, Device: 160, Host: 160, Disk: 320, NoReplay: noReplay, Loss: loss},
		{ID: "f-b", Dialect: VLLMArray, Device: 200, Host: 100, Disk: 200, NoReplay: noReplay, Loss: loss},
	}
}

// TestLossHealedByReplay: engines with replay lose messages live, the
// indexer sees the gaps and replays them from the rings: every answer exact.
func TestLossHealedByReplay(t *testing.T) {
	g, rep, err := runFaults(t, GroupConfig{Model: "heal", Policy: RoundRobin, StepTokens: 256, FaultSeed: 3,
		Engines: faultEngines(false, 0.2)}, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if g.Stats.Lost < 20 || rep.Groups[0].Lost != g.Stats.Lost {
		t.Fatalf("lost %d (report %d): the loss was not injected", g.Stats.Lost, rep.Groups[0].Lost)
	}
	if a := &rep.AccuracyTotal; a.Exact != a.Answers || a.Answers < 4*24 {
		t.Fatalf("accuracy %+v", a)
	}
}

// TestLossWithoutReplay: engines without replay and the store lose
// messages: the gaps cannot be healed, answers under-report, and the run
// fails; with thresholds it fails below them and passes above.
func TestLossWithoutReplay(t *testing.T) {
	cfg := GroupConfig{Model: "lossy", Policy: RoundRobin, StepTokens: 256, StoreBlocks: 600, StoreLoss: 0.1, FaultSeed: 3,
		Engines: faultEngines(true, 0.1)}
	g, rep, err := runFaults(t, cfg, RunOptions{})
	if !errors.Is(err, ErrMismatch) {
		t.Fatalf("err %v, want ErrMismatch", err)
	}
	if g.Stats.Lost == 0 || g.Stats.StoreLost == 0 {
		t.Fatalf("lost %d engine, %d store messages", g.Stats.Lost, g.Stats.StoreLost)
	}
	a := &rep.AccuracyQuiescent
	if a.Exact == a.Answers || a.Tiers[tierDevice].Under == 0 || a.Tiers[tierShare].Under == 0 {
		t.Fatalf("accuracy %+v: no under-reporting after unhealable losses", a)
	}
	var sum, quiescent Accuracy
	for i := range rep.Accuracy {
		sum.Merge(&rep.Accuracy[i].Accuracy)
		if i < len(rep.Accuracy)-1 {
			quiescent.Merge(&rep.Accuracy[i].Accuracy)
		}
	}
	if sum != rep.AccuracyTotal || quiescent != *a || rep.Accuracy[len(rep.Accuracy)-1].Label != "query-only" || len(rep.Accuracy) != 5 {
		t.Fatalf("total %+v and quiescent %+v are not the sums of the points %+v", rep.AccuracyTotal, a, rep.Accuracy)
	}

	// The same run (same seeds, same losses, same verify prompts) against
	// thresholds on either side of what it measured.
	dev := a.Tiers[tierDevice].ExactFraction()
	var loose, strict Thresholds
	loose.MinExact[tierDevice] = Limit{true, dev / 2}
	strict.MinExact[tierDevice] = Limit{true, min(1, dev+(1-dev)/2+0.01)}
	cfg.Model = "lossy-loose"
	if _, _, err := runFaults(t, cfg, RunOptions{Thresholds: loose}); err != nil {
		t.Fatalf("device exact ≥ %v: %v", loose.MinExact[tierDevice].Value, err)
	}
	cfg.Model = "lossy-strict"
	if _, _, err := runFaults(t, cfg, RunOptions{Thresholds: strict}); !errors.Is(err, ErrBelowThreshold) {
		t.Fatalf("device exact ≥ %v: err %v, want ErrBelowThreshold", strict.MinExact[tierDevice].Value, err)
	}
}

// TestRestartsExact: ranks restarted mid-replay, with and without replay:
// the truth forgets what they held, the indexer sees each sequence start
// over and clears the stream, and every answer is exact.
func TestRestartsExact(t *testing.T) {
	for _, noReplay := range []bool{false, true} {
		cfg := GroupConfig{Model: "restart", Policy: RoundRobin, StepTokens: 256, StoreBlocks: 600, Engines: faultEngines(noReplay, 0)}
		g, rep, err := runFaults(t, cfg, RunOptions{Restarts: 4, FaultSeed: 11})
		if err != nil {
			t.Fatalf("no replay %v: %v", noReplay, err)
		}
		if g.Stats.Restarts != 4 || len(rep.Faults.Restarts) != 4 || rep.Faults.Seed != 11 {
			t.Fatalf("no replay %v: %d restarts, report %+v", noReplay, g.Stats.Restarts, rep.Faults)
		}
		for _, ev := range rep.Faults.Restarts {
			if ev.Messages < minRestartSeq || ev.Request < 1 || ev.Request >= 120 {
				t.Fatalf("restart %+v", ev)
			}
		}
	}
}

// TestCrashHook: Run calls Snapshot once, after SnapshotAt requests, and
// Crash once, after CrashAt, then measures the "after crash" point there
// (here the indexer stays up, so it is exact).
func TestCrashHook(t *testing.T) {
	var calls []string
	src := &countingSource{inner: smokeSource()}
	hook := func(name string) func(context.Context) error {
		return func(context.Context) error {
			calls = append(calls, fmt.Sprintf("%s@%d", name, src.n))
			return nil
		}
	}
	g, rep, err := runFaults(t, GroupConfig{Model: "crash", Engines: faultEngines(false, 0)},
		RunOptions{Source: src, SnapshotAt: 30, Snapshot: hook("snapshot"), CrashAt: 50, Crash: hook("crash")})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(calls, []string{"snapshot@30", "crash@50"}) || rep.Faults.CrashAt != 50 || rep.Faults.SnapshotAt != 30 {
		t.Fatalf("calls %v; report %+v", calls, rep.Faults)
	}
	var pt *AccuracyPoint
	for i := range rep.Accuracy {
		if rep.Accuracy[i].Label == "after crash" {
			pt = &rep.Accuracy[i]
		}
	}
	if pt == nil || pt.Requests != 50 || pt.Accuracy.Answers != 24 || pt.Accuracy.Exact != 24 {
		t.Fatalf("after-crash point %+v", pt)
	}
	if pt.IndexedBlocks == nil || *pt.IndexedBlocks != *pt.TruthBlocks {
		t.Fatalf("blocks indexed %v, true %v", pt.IndexedBlocks, pt.TruthBlocks)
	}
	nop := func(context.Context) error { return nil }
	for _, o := range []RunOptions{{CrashAt: 5}, {SnapshotAt: 5}, {SnapshotAt: 5, Snapshot: nop, CrashAt: 5, Crash: nop},
		{Requests: 10, CrashAt: 10, Crash: nop}} {
		o.Addr, o.Groups, o.Source = "x", []*Group{g}, smokeSource()
		if _, err := Run(context.Background(), o); err == nil {
			t.Fatalf("SnapshotAt %d CrashAt %d Requests %d accepted", o.SnapshotAt, o.CrashAt, o.Requests)
		}
	}
}

// countingSource counts the prompts taken from it.
type countingSource struct {
	inner Source
	n     int
}

func (s *countingSource) Next() ([]int32, bool) {
	s.n++
	return s.inner.Next()
}
