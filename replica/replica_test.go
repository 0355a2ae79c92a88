package replica

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
	"github.com/seed-c7a81618/conductor/replica/natstest"
)

// startReplica starts a replica with options o over a new index; it is
// closed at the test's cleanup.
func startReplica(t testing.TB, o Options) (*Replica, *core.Index) {
	t.Helper()
	ix := core.New(core.Options{Logger: quietLog()})
	r, err := NewReplica(ix, o, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Start()
	t.Cleanup(r.Close)
	return r, ix
}

// startRelay starts a relay with options o as the observer of a new index,
// closed when the test ends (Close is idempotent: a test may close it first).
func startRelay(t testing.TB, o Options) (*Relay, *core.Index) {
	t.Helper()
	r, err := NewRelay(o)
	if err != nil {
		t.Fatal(err)
	}
	src := core.New(core.Options{Observer: r, Logger: quietLog()})
	r.Start(src)
	t.Cleanup(func() { r.Close(0) })
	return r, src
}

func quietLog() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(bytes.NewBuffer(nil), nil))
}

// waitBound bounds the waits for an asynchronous effect: every wait polls
// and returns as soon as its condition holds, so the bound only decides when
// a failure is declared (generous, for a loaded machine under -race).
const waitBound = 2 * time.Minute

func waitUntil(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// state renders an index's exact contents canonically: one sorted line per
// (registration, holding) and (registration, engine entry), with the
// registration's watermark. (A /dump's order follows map iteration, so two
// equal indexes need not dump the same bytes.)
func state(t testing.TB, ix *core.Index) string {
	t.Helper()
	v := &stateVisitor{}
	if err := ix.DumpStreams(nil, v); err != nil {
		t.Fatal(err)
	}
	sort.Strings(v.lines)
	return strings.Join(v.lines, "\n")
}

type stateVisitor struct {
	cur   string
	lines []string
}

func (v *stateVisitor) Stream(i *core.StreamInfo) error {
	v.cur = fmt.Sprintf("%s seq=%d/%v", i.Reg.Key(), i.Seq, i.HasSeq)
	v.lines = append(v.lines, v.cur)
	return nil
}
func (v *stateVisitor) Holding(h *core.Holding) error {
	v.lines = append(v.lines, fmt.Sprintf("%s H %+v %v %s %d %v %d %d", v.cur, h.Context, h.Shared, h.Name, h.Rank, h.Tier, h.Key, h.Copies))
	return nil
}
func (v *stateVisitor) Engine(e *core.EngineEntry) error {
	v.lines = append(v.lines, fmt.Sprintf("%s E %+v %d %d %d %d", v.cur, e.Context, e.Hash, e.Key, e.Plain, e.Count))
	return nil
}
func (v *stateVisitor) EndStream(*core.StreamInfo) error { return nil }

// workload drives subscriptions of an index with random engine batches:
// stores (with token ids on xxh3 registrations), per-copy removes, clears.
type workload struct {
	rng    *rand.Rand
	regs   []core.Registration
	held   [][]uint64
	seq    []uint64
	tokens [][]int32
}

func newWorkload(t testing.TB, seed int64) *workload {
	cbor, err := hash.Resolve(hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256_cbor", PythonHashSeed: "0", IndexProjection: "low64_be"})
	if err != nil {
		t.Fatal(err)
	}
	w := &workload{rng: rand.New(rand.NewSource(seed))}
	for i, c := range []struct {
		tenant, model string
		p             hash.Profile
		explicit      bool
	}{{"t1", "m/a", cbor, true}, {"t1", "m/a", cbor, true}, {"t2", "m.b", hash.DefaultProfile(), false}, {"t1", "m2", hash.DefaultProfile(), false}} {
		w.regs = append(w.regs, core.Registration{Endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", 6000+i), Type: core.PublisherVLLM,
			ModelName: c.model, TenantID: c.tenant, InstanceID: fmt.Sprintf("e%d", i), BlockSize: 4,
			Profile: c.p, ProfileExplicit: c.explicit})
	}
	w.held = make([][]uint64, len(w.regs))
	w.seq = make([]uint64, len(w.regs))
	for p := 0; p < 30; p++ {
		toks := make([]int32, 4*(1+w.rng.Intn(6)))
		for i := range toks {
			toks[i] = int32(w.rng.Intn(50))
		}
		w.tokens = append(w.tokens, toks)
	}
	return w
}

// batch returns the next batch of registration i.
func (w *workload) batch(i int) *core.Batch {
	b := &core.Batch{Seq: w.seq[i], HasSeq: true, TimestampF: float64(w.seq[i])}
	w.seq[i]++
	for n := 1 + w.rng.Intn(3); n > 0; n-- {
		e := b.NextEvent()
		if len(w.held[i]) > 0 && w.rng.Intn(3) == 0 {
			j := w.rng.Intn(len(w.held[i]))
			e.Kind, e.Hashes, e.Medium = core.EventRemoved, []uint64{w.held[i][j]}, []byte("GPU")
			w.held[i] = append(w.held[i][:j], w.held[i][j+1:]...)
			continue
		}
		toks := w.tokens[w.rng.Intn(len(w.tokens))]
		e.Kind, e.BlockSize, e.Medium = core.EventStored, 4, []byte("GPU")
		if w.rng.Intn(5) == 0 {
			e.Medium = []byte("cpu")
		}
		e.Tokens, e.HasTokens = toks, true
		for k := 0; k < len(toks)/4; k++ {
			// engine hashes: the prompt's prefix, folded
			h := uint64(1469598103934665603)
			for _, t := range toks[:4*(k+1)] {
				h = (h ^ uint64(t)) * 1099511628211
			}
			e.Hashes = append(e.Hashes, h)
			if string(e.Medium) == "GPU" {
				w.held[i] = append(w.held[i], h)
			}
		}
	}
	return b
}

func natsOpts(url string) Options {
	return Options{URL: url, MemoryStorage: true, Logger: quietLog(), SnapshotKeep: 2}
}

func streamLast(t testing.TB, url, stream string) uint64 {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

// streamLastFor is the stream sequence of the last message on subject (a
// filter, wildcards allowed) in stream.
func streamLastFor(t testing.TB, url, stream, subject string) uint64 {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatalf("last message on %s: %v", subject, err)
	}
	return m.Sequence
}

// TestRelayReplicaInProcess: an index with a relay as its observer takes
// random batches, clears and an unregistration; a full replica's /dump must
// equal the relay's byte for byte, a replica filtered to tenant t1 must equal
// an index fed only t1's batches directly, and a replica started later from
// the writer's newest snapshot must equal the relay too.
func TestRelayReplicaInProcess(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	ns := natstest.Start(t, t.TempDir(), -1)
	url := ns.ClientURL()

	relay, src := startRelay(t, natsOpts(url))

	o := natsOpts(url)
	o.SnapshotInterval = 50 * time.Millisecond
	full, fullIx := startReplica(t, o)
	o = natsOpts(url)
	o.FilterTenant = "t1"
	shard, shardIx := startReplica(t, o)

	ref := core.New(core.Options{Logger: quietLog()}) // t1's batches only, applied directly
	w := newWorkload(t, seed)
	subs := make([]*core.Subscription, len(w.regs))
	refSubs := make([]*core.Subscription, len(w.regs))
	var err error
	for i, r := range w.regs {
		if subs[i], _, err = src.Register(r); err != nil {
			t.Fatal(err)
		}
		if r.TenantID == "t1" {
			if refSubs[i], _, err = ref.Register(r); err != nil {
				t.Fatal(err)
			}
		}
	}
	for step := 0; step < 1500; step++ {
		i := w.rng.Intn(len(subs))
		if subs[i] == nil {
			continue
		}
		// Clears only before the last 300 steps, so the final index is never
		// near-empty: seed 1796105496070429776 cleared two registrations late
		// and left 87 holdings, under the vacuity bound below (with this rule
		// 3,000 seeds from there all end with 375 or more).
		if w.rng.Intn(200) == 0 && step < 1200 {
			subs[i].Clear("test")
			if refSubs[i] != nil {
				refSubs[i].Clear("test")
			}
			w.held[i] = nil
			continue
		}
		b := w.batch(i)
		subs[i].Apply(b)
		if refSubs[i] != nil {
			refSubs[i].Apply(b)
		}
		if step == 1000 {
			if _, err := src.Unregister(w.regs[1].Key()); err != nil {
				t.Fatal(err)
			}
			if _, err := ref.Unregister(w.regs[1].Key()); err != nil {
				t.Fatal(err)
			}
			subs[1], refSubs[1] = nil, nil
		}
	}
	waitUntil(t, "the relay to publish everything", waitBound, func() bool {
		return relay.published.Get() > 0 && relay.queued() == 0
	})
	last := streamLast(t, url, "CONDUCTOR")
	waitUntil(t, fmt.Sprintf("the replica to apply the stream to sequence %d", last), waitBound, func() bool { return full.applied.Load() == last })
	want := state(t, src)
	if got := state(t, fullIx); got != want {
		t.Fatalf("full replica's index differs from the relay's:\n got %d lines\nwant %d lines", strings.Count(got, "\n"), strings.Count(want, "\n"))
	}
	if n := strings.Count(want, " H "); n < 100 {
		t.Fatalf("vacuous: the relay's index holds %d holdings", n)
	}
	t.Logf("relay and replica hold the same %d holdings and %d engine entries", strings.Count(want, " H "), strings.Count(want, " E "))
	// The shard applied t1's last message (its pending count reaches 0 just
	// before that message is applied: wait on the applied sequence).
	lastT1 := streamLastFor(t, url, "CONDUCTOR", shard.filter())
	waitUntil(t, "the shard to apply t1's last message", waitBound, func() bool {
		return shard.Ready() == nil && shard.applied.Load() == lastT1
	})
	if got, want := state(t, shardIx), state(t, ref); got != want || !strings.Contains(got, " H ") || strings.Contains(got, "|t2|") {
		t.Fatalf("t1 shard's index differs from t1's batches applied directly:\n got %s\nwant %s", got, want)
	}
	if full.Ready() != nil {
		t.Fatalf("caught-up replica not ready: %v", full.Ready())
	}
	if n := full.dups.Get() + full.gaps.Get() + full.orphans.Get() + full.decodeErrs.Get(); n != 0 {
		t.Fatalf("replica counted %d duplicates/gaps/orphans/decode errors on a clean stream", n)
	}

	// Warm start: the full replica snapshots; a new replica loads the
	// newest and consumes the rest.
	waitUntil(t, "a snapshot of the last message", waitBound, func() bool { return full.snapSeq.Load() == last })
	for step := 0; step < 200; step++ { // more history after the snapshot
		if i := w.rng.Intn(len(subs)); subs[i] != nil {
			subs[i].Apply(w.batch(i))
		}
	}
	waitUntil(t, "the relay to publish everything", waitBound, func() bool { return relay.queued() == 0 })
	last2 := streamLast(t, url, "CONDUCTOR")
	warm, warmIx := startReplica(t, natsOpts(url))
	waitUntil(t, "the warm replica to apply the stream", waitBound, func() bool { return warm.applied.Load() == last2 })
	if warm.snapLoads.Get() != 1 || warm.msgs[0].Get() >= full.msgs[0].Get() {
		t.Fatalf("warm replica loaded %d snapshots and applied %d batches (the full one %d): not a warm start",
			warm.snapLoads.Get(), warm.msgs[0].Get(), full.msgs[0].Get())
	}
	if got, want := state(t, warmIx), state(t, src); got != want {
		t.Fatalf("warm replica's index differs from the relay's")
	}
	// Pruning keeps SnapshotKeep per shard: a third snapshot of new data.
	waitUntil(t, "a snapshot of the later history", waitBound, func() bool { return full.snapSeq.Load() == last2 })
	for step := 0; step < 50; step++ {
		if i := w.rng.Intn(len(subs)); subs[i] != nil {
			subs[i].Apply(w.batch(i))
		}
	}
	waitUntil(t, "the relay to publish everything", waitBound, func() bool { return relay.queued() == 0 })
	last3 := streamLast(t, url, "CONDUCTOR")
	waitUntil(t, "a snapshot of the last history", waitBound, func() bool { return full.snapSeq.Load() == last3 })
	full.Close() // no snapshot in flight
	nc, _ := nats.Connect(url)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	store, err := js.ObjectStore(context.Background(), "conductor-snapshots")
	if err != nil {
		t.Fatal(err)
	}
	names, _, err := full.snapshots(context.Background(), store)
	if err != nil || len(names) != 2 || full.snapWrites.Get() < 3 {
		t.Fatalf("snapshots kept %v (written %d, keep 2), err %v", names, full.snapWrites.Get(), err)
	}
}

// erringJS answers PublishMsgAsync with settled futures: the publish at
// position i (counted from 0) fails with errs[i], the others are stored.
type erringJS struct {
	jetstream.JetStream
	errs map[int]error
	n    int
}

func (s *erringJS) PublishMsgAsync(m *nats.Msg, _ ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	f := &settled{ok: make(chan *jetstream.PubAck, 1), err: make(chan error, 1), msg: m}
	if err := s.errs[s.n]; err != nil {
		f.err <- err
	} else {
		f.ok <- &jetstream.PubAck{}
	}
	s.n++
	return f, nil
}

// TestRelayDisconnectedWindowTransfers: an acknowledgement failed by a lost
// connection (nats.ErrDisconnected) or a publish timeout leaves the message
// perhaps stored (before the server went, or later from the client's
// reconnect buffer, ahead of the resend), so a subscription whose earlier
// message failed and whose later one failed that way is transferred; a
// failure the stream answered (no responders, an API error) means not
// stored, and is just resent. The queue each time: reg a, reg b, a1, b1, a2,
// b2.
func TestRelayDisconnectedWindowTransfers(t *testing.T) {
	apiErr := &jetstream.APIError{Code: 503, ErrorCode: jetstream.JSErrCodeJetStreamNotEnabled, Description: "jetstream not enabled"}
	for _, c := range []struct {
		name           string
		errs           map[int]error
		dirtyA, dirtyB bool
	}{
		{"connection lost with everything in flight", map[int]error{2: nats.ErrDisconnected, 3: nats.ErrDisconnected,
			4: nats.ErrDisconnected, 5: nats.ErrDisconnected}, true, true},
		{"a1 lost, a2 maybe in the reconnect buffer", map[int]error{2: nats.ErrDisconnected, 4: nats.ErrDisconnected}, true, false},
		{"a1 refused, a2 timed out", map[int]error{2: apiErr, 4: jetstream.ErrAsyncPublishTimeout}, true, false},
		{"no responders from a1 on", map[int]error{2: jetstream.ErrNoStreamResponse, 3: jetstream.ErrNoStreamResponse,
			4: jetstream.ErrNoStreamResponse, 5: jetstream.ErrNoStreamResponse}, false, false},
		{"a1 refused, a2 refused", map[int]error{2: apiErr, 4: apiErr}, false, false},
	} {
		relay, err := NewRelay(natsOpts("nats://127.0.0.1:1"))
		if err != nil {
			t.Fatal(err)
		}
		ix := core.New(core.Options{Observer: relay, Logger: quietLog()})
		subOf := func(inst string) (*core.Subscription, *relaySub) {
			s, _, err := ix.Register(benchReg(t, inst))
			if err != nil {
				t.Fatal(err)
			}
			v, _ := relay.subs.Load(s.Key())
			return s, v.(*relaySub)
		}
		a, ra := subOf("a")
		b, rb := subOf("b")
		rng := rand.New(rand.NewSource(1))
		a.Apply(benchBatch(rng, 1, 4))
		b.Apply(benchBatch(rng, 1, 4))
		a.Apply(benchBatch(rng, 2, 4))
		b.Apply(benchBatch(rng, 2, 4))
		if n := relay.publishWindow(context.Background(), &erringJS{errs: c.errs}); n != -1 {
			t.Fatalf("%s: publishWindow = %d, want -1", c.name, n)
		}
		want := 0
		for _, d := range []bool{c.dirtyA, c.dirtyB} {
			if d {
				want++
			}
		}
		if ra.dirty.Load() != c.dirtyA || rb.dirty.Load() != c.dirtyB || relay.reordered.Get() != uint64(want) || relay.queued() != 4 {
			t.Fatalf("%s: dirty a=%v b=%v, reordered %d, queued %d; want a=%v b=%v, %d, and 4 (resent from a1)",
				c.name, ra.dirty.Load(), rb.dirty.Load(), relay.reordered.Get(), relay.queued(), c.dirtyA, c.dirtyB, want)
		}
	}
}

// lossyJS publishes through a real JetStream except the publish at position
// lose (counted from 0), which fails as if no stream had answered, unsent.
type lossyJS struct {
	jetstream.JetStream
	lose, n int
}

func (s *lossyJS) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	s.n++
	if s.n-1 == s.lose {
		f := &settled{ok: make(chan *jetstream.PubAck, 1), err: make(chan error, 1), msg: m}
		f.err <- jetstream.ErrNoStreamResponse
		return f, nil
	}
	return s.JetStream.PublishMsgAsync(m, opts...)
}

// TestRelayReorderHealsReplica: the contract of a reorder, end to end. A
// window loses one batch while the later ones are stored; the resend stores
// it after them, so the replica applies the later batch (one sequence gap)
// and skips the lost one as old (one duplicate). The relay counted the
// reorder, held the subscription's newer batches back, and its state
// transfer makes the replica equal to the source again.
func TestRelayReorderHealsReplica(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	ns := natstest.Start(t, t.TempDir(), -1)
	url := ns.ClientURL()
	relay, err := NewRelay(natsOpts(url))
	if err != nil {
		t.Fatal(err)
	}
	src := core.New(core.Options{Observer: relay, Logger: quietLog()})
	relay.ix = src // as Start does; the test drives the publishing itself
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateOrUpdateStream(ctx, relay.opts.StreamConfig()); err != nil {
		t.Fatal(err)
	}
	rep, repIx := startReplica(t, natsOpts(url))
	drain := func() {
		t.Helper()
		for relay.queued() > 0 {
			if n := relay.publishWindow(ctx, js); n < 0 {
				t.Fatal("publish failed")
			}
		}
	}

	w := newWorkload(t, seed)
	sub, _, err := src.Register(w.regs[0])
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		b := w.batch(0)
		if i == 5 {
			// The batch the window loses also stores a block no other batch
			// touches (tokens outside the workload's 0..49), so a replica
			// that skips it differs from the source until the transfer.
			e := b.NextEvent()
			e.Kind, e.BlockSize, e.Medium = core.EventStored, 4, []byte("GPU")
			e.Tokens, e.HasTokens = []int32{100, 101, 102, 103}, true
			e.Hashes = []uint64{0x5eed5eed5eed5eed}
		}
		sub.Apply(b)
	}
	// Queue: the registration, batches 0..19; batch 5 (position 6) is lost.
	if n := relay.publishWindow(ctx, &lossyJS{JetStream: js, lose: 6}); n != -1 {
		t.Fatalf("publishWindow = %d, want -1", n)
	}
	if relay.reordered.Get() != 1 {
		t.Fatalf("reordered %d, want 1", relay.reordered.Get())
	}
	drain() // the resend stores batch 5 after 19 (6..19 are duplicates JetStream drops)
	last := streamLast(t, url, "CONDUCTOR")
	waitUntil(t, "the replica to apply the resend", waitBound, func() bool { return rep.applied.Load() == last })
	if state(t, repIx) == state(t, src) {
		t.Fatal("the replica holds batch 5, which it applied after batch 19: the reorder is not exercised")
	}
	for i := 0; i < 5; i++ {
		sub.Apply(w.batch(0)) // held back: the subscription is dirty
	}
	if relay.suppressed.Get() != 5 || !relay.transferDirty() {
		t.Fatalf("suppressed %d, want 5, and a state transfer", relay.suppressed.Get())
	}
	drain()
	sub.Apply(w.batch(0)) // published again after the transfer
	drain()

	last = streamLast(t, url, "CONDUCTOR")
	waitUntil(t, "the replica to apply the stream", waitBound, func() bool { return rep.applied.Load() == last })
	if got, want := state(t, repIx), state(t, src); got != want {
		t.Fatalf("replica differs from the source after the state transfer:\n got %s\nwant %s", got, want)
	}
	if rep.gaps.Get() != 1 || rep.dups.Get() != 1 || rep.msgs[5].Get() == 0 || relay.transfers.Get() != 1 {
		t.Fatalf("replica: %d gaps, %d duplicates, %d sections; relay: %d transfers; want 1, 1, some and 1",
			rep.gaps.Get(), rep.dups.Get(), rep.msgs[5].Get(), relay.transfers.Get())
	}
}
