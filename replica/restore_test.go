package replica

import (
	"bufio"
	"bytes"
	"context"
	"math/rand"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/replica/natstest"
	"github.com/seed-c7a81618/conductor/wire/dump"
)

// streamJS connects to url (closed at the test's end) and creates o's
// stream.
func streamJS(t testing.TB, url string, o Options) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	o.EnsureDefaults()
	if _, err := js.CreateOrUpdateStream(context.Background(), o.StreamConfig()); err != nil {
		t.Fatal(err)
	}
	return js
}

// registerE0 registers the subscription "e0" in ix with gap policy p.
func registerE0(t testing.TB, ix *core.Index, p core.GapPolicy) (core.Registration, *core.Subscription) {
	t.Helper()
	reg := benchReg(t, "e0")
	reg.GapPolicy = p
	sub, _, err := ix.Register(reg)
	if err != nil {
		t.Fatal(err)
	}
	return reg, sub
}

// waitCaughtUp waits until rep applied the stream's last message.
func waitCaughtUp(t testing.TB, url string, rep *Replica) {
	t.Helper()
	last := streamLast(t, url, "CONDUCTOR")
	waitUntil(t, "replica caught up", waitBound, func() bool { return rep.applied.Load() == last })
}

// manualRelay returns a relay over the index newIndex makes with it as the
// observer, not started: the test publishes its queue with publishWindow
// (drain publishes all of it through js).
func manualRelay(t testing.TB, url string, newIndex func(*Relay) *core.Index) (*Relay, *core.Index, jetstream.JetStream, func()) {
	t.Helper()
	relay, err := NewRelay(natsOpts(url))
	if err != nil {
		t.Fatal(err)
	}
	ix := newIndex(relay)
	relay.ix = ix
	js := streamJS(t, url, relay.opts)
	drain := func() {
		t.Helper()
		for relay.queued() > 0 {
			if n := relay.publishWindow(context.Background(), js); n < 0 {
				t.Fatal("publish failed")
			}
		}
	}
	return relay, ix, js, drain
}

// TestReplicaClearAfterTransfer: the relay's Clear right after a state
// transfer, with no batch between, clears the replica's copy (core's
// restored-dump skipping would defer it to a next batch that never comes),
// and a batch whose sequence jumps past the transferred one is applied
// without a replica-local gap (gap_policy clear would have dropped the
// subscription's blocks on the replica only).
func TestReplicaClearAfterTransfer(t *testing.T) {
	ns := natstest.Start(t, t.TempDir(), -1)
	url := ns.ClientURL()
	relay, src, _, drain := manualRelay(t, url, func(r *Relay) *core.Index {
		return core.New(core.Options{Observer: r, Logger: quietLog()})
	})
	rep, repIx := startReplica(t, natsOpts(url))
	_, sub := registerE0(t, src, core.GapClear)
	rng := rand.New(rand.NewSource(1))
	transfer := func() {
		t.Helper()
		v, _ := relay.subs.Load(sub.Key())
		v.(*relaySub).dirty.Store(true)
		if !relay.transferDirty() {
			t.Fatal("no state transfer")
		}
		drain()
	}
	sub.Apply(benchBatch(rng, 0, 4))
	drain()
	transfer()
	sub.Apply(benchBatch(rng, 5, 4)) // past the transferred sequence 0
	drain()
	waitCaughtUp(t, url, rep)
	if got, want := state(t, repIx), state(t, src); got != want {
		t.Fatalf("after a batch past the transfer, replica:\n%s\nrelay:\n%s", got, want)
	}
	transfer()
	sub.Clear("stale stream")
	drain()
	waitCaughtUp(t, url, rep)
	if got, want := state(t, repIx), state(t, src); got != want {
		t.Fatalf("after a clear following the transfer, replica:\n%s\nrelay:\n%s", got, want)
	}
}

// TestReplicaClearAfterWarmStart: a Clear that reaches a replica right after
// it loaded a snapshot, with no batch between, clears its copy, and the
// snapshot's sequences still make an older batch a duplicate.
func TestReplicaClearAfterWarmStart(t *testing.T) {
	ns := natstest.Start(t, t.TempDir(), -1)
	url := ns.ClientURL()
	relay, src := startRelay(t, natsOpts(url))
	o := natsOpts(url)
	o.SnapshotInterval = 50 * time.Millisecond
	writer, _ := startReplica(t, o)
	sub, _, err := src.Register(benchReg(t, "e0"))
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := src.Register(benchReg(t, "e1"))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(1))
	for s := uint64(0); s < 5; s++ {
		sub.Apply(benchBatch(rng, s, 4))
		other.Apply(benchBatch(rng, s, 4))
	}
	waitUntil(t, "relay drained", waitBound, func() bool { return relay.published.Get() > 0 && relay.queued() == 0 })
	last := streamLast(t, url, "CONDUCTOR")
	waitUntil(t, "snapshot", waitBound, func() bool { return writer.snapSeq.Load() == last })
	writer.Close()
	sub.Clear("stale stream") // the engine went away
	waitUntil(t, "relay drained", waitBound, func() bool { return relay.queued() == 0 })
	warm, warmIx := startReplica(t, natsOpts(url))
	waitCaughtUp(t, url, warm)
	if warm.snapLoads.Get() != 1 {
		t.Fatalf("snapshots loaded %d, want 1", warm.snapLoads.Get())
	}
	if got, want := state(t, warmIx), state(t, src); got != want {
		t.Fatalf("warm replica:\n%s\nrelay:\n%s", got, want)
	}
	// A batch at or below the snapshot's sequence is a duplicate on the
	// replica, applied by hand once its consumer stopped.
	warm.Close()
	warm.apply(AppendBatch(nil, other.Key(), benchBatch(rng, 4, 4)))
	if warm.dups.Get() != 1 {
		t.Fatalf("duplicates %d, want 1", warm.dups.Get())
	}
}

// TestSnapshotWaitsForTransfer: a replica due for a snapshot between two
// sections of a state transfer writes none until the transfer's end, so a
// replica warm-started from its snapshot holds the whole transfer (one
// written mid-transfer made the remaining sections orphans there).
func TestSnapshotWaitsForTransfer(t *testing.T) {
	ns := natstest.Start(t, t.TempDir(), -1)
	url := ns.ClientURL()
	src := core.New(core.Options{Logger: quietLog()})
	reg := benchReg(t, "e0")
	sub, _, err := src.Register(reg)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(1))
	for s := uint64(0); s < 4; s++ {
		sub.Apply(benchBatch(rng, s, 20000))
	}
	w := sectionWriter{key: sub.Key()}
	if err := src.DumpStreams(nil, &w); err != nil {
		t.Fatal(err)
	}
	if len(w.msgs) < 2 {
		t.Fatalf("%d sections, want several", len(w.msgs))
	}
	ctx := context.Background()
	o := natsOpts(url)
	o.SnapshotInterval = time.Nanosecond
	o.EnsureDefaults()
	js := streamJS(t, url, o)
	subj := Subject(o.SubjectPrefix, reg.TenantID, reg.ModelName)
	bodies := append([][]byte{AppendRegister(nil, &reg)}, w.msgs...)
	seqs := make([]uint64, len(bodies))
	for i, b := range bodies {
		a, err := js.Publish(ctx, subj, b)
		if err != nil {
			t.Fatal(err)
		}
		seqs[i] = a.Sequence
	}
	// The writer's consumer loop, by hand: a snapshot is due after every
	// message.
	writer, err := NewReplica(core.New(core.Options{Logger: quietLog()}), o, nil)
	if err != nil {
		t.Fatal(err)
	}
	var last time.Time
	for i, b := range bodies {
		writer.apply(b)
		writer.applied.Store(seqs[i])
		writer.maybeSnapshot(ctx, js, &last)
		if mid := i > 0 && i < len(bodies)-1; mid && writer.snapWrites.Get() != 1 {
			// one after the registration, none after a middle section
			t.Fatalf("after message %d of %d: %d snapshots written, want 1", i+1, len(bodies), writer.snapWrites.Get())
		}
	}
	if writer.snapSeq.Load() != seqs[len(seqs)-1] {
		t.Fatalf("snapshot at stream seq %d, want %d", writer.snapSeq.Load(), seqs[len(seqs)-1])
	}
	warm, warmIx := startReplica(t, natsOpts(url))
	waitCaughtUp(t, url, warm)
	if warm.snapLoads.Get() != 1 || warm.orphans.Get() != 0 {
		t.Fatalf("snapshots loaded %d, orphans %d; want 1, 0", warm.snapLoads.Get(), warm.orphans.Get())
	}
	if got, want := state(t, warmIx), state(t, src); got != want {
		t.Fatalf("warm replica differs from the source (%d vs %d bytes of state)", len(got), len(want))
	}
}

// TestReplicaTransferKeepsGapMarks: a state transfer taken while gap marks
// of the policy "expire" are pending carries them all, with each holding's
// deadline; the replica re-creates the same marks, so the relay's Expire
// messages that follow drop on the replica exactly the blocks they drop on
// the relay, mark by mark: also when a mark holds no block (a gap while
// nothing was held, or every block held at it stored again since).
func TestReplicaTransferKeepsGapMarks(t *testing.T) {
	for _, tc := range []struct {
		name string
		// before the first gap, between the gaps, after the second
		before, between, after int
		refresh                bool // store the first gap's blocks again before the second
	}{
		{"blocks at both", 20, 10, 10, false},
		{"nothing held at the first", 0, 20, 10, false},
		{"first's blocks stored again", 20, 0, 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := core.New(core.Options{Logger: quietLog(), GapExpireAfter: time.Hour})
			reg, sub := registerE0(t, src, core.GapExpire)
			rng := rand.New(rand.NewSource(1))
			seq := uint64(0)
			var first []*core.Batch
			apply := func(n int) {
				for range n {
					b := benchBatch(rng, seq, 8)
					sub.Apply(b)
					first = append(first, b)
					seq++
				}
			}
			apply(tc.before)
			sub.Gap("test: first gap")
			if tc.refresh {
				for _, b := range first {
					b.Seq, b.HasSeq = seq, true
					sub.Apply(b)
					seq++
				}
			}
			apply(tc.between)
			time.Sleep(time.Millisecond)
			sub.Gap("test: second gap")
			apply(tc.after)
			sw := &sectionWriter{key: reg.Key()}
			if err := src.DumpStreams(nil, sw); err != nil {
				t.Fatal(err)
			}
			dst := core.New(core.Options{Logger: quietLog(), GapExpireAfter: time.Hour})
			rep, err := NewReplica(dst, natsOpts("nats://127.0.0.1:1"), nil)
			if err != nil {
				t.Fatal(err)
			}
			rep.apply(AppendRegister(nil, &reg))
			for _, m := range sw.msgs {
				rep.apply(m)
			}
			dropped := 0
			for step := range 3 {
				if got, want := state(t, dst), state(t, src); got != want {
					t.Fatalf("after %d expiries the replica differs from the relay", step)
				}
				dropped += sub.ExpireOldest()
				rep.apply(AppendKeyMessage(nil, KindExpire, reg.Key()))
			}
			if dropped == 0 || rep.decodeErrs.Get() != 0 {
				t.Fatalf("relay dropped %d blocks; replica decode errors %d", dropped, rep.decodeErrs.Get())
			}
		})
	}
}

// TestReplicaSnapshotKeepsMarkOrder: a replica's pending marks mix the
// relay's deadlines (from a state transfer) with its own (a gap it repeats:
// its own clock and GapExpireAfter), so their deadlines need not be in the
// order they were made; the relay expires them in that order. A replica
// warm-started from the first one's snapshot keeps the order, and both
// expire, message by message, what the relay expires.
func TestReplicaSnapshotKeepsMarkOrder(t *testing.T) {
	src := core.New(core.Options{Logger: quietLog(), GapExpireAfter: 10 * time.Hour})
	reg, sub := registerE0(t, src, core.GapExpire)
	replicaOf := func(ix *core.Index) *Replica {
		rep, err := NewReplica(ix, natsOpts("nats://127.0.0.1:1"), nil)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	ix1 := core.New(core.Options{Logger: quietLog(), GapExpireAfter: time.Minute})
	rep1 := replicaOf(ix1)
	rep1.apply(AppendRegister(nil, &reg))
	rng := rand.New(rand.NewSource(1))
	for seq := uint64(0); seq < 20; seq++ {
		sub.Apply(benchBatch(rng, seq, 8))
	}
	sub.Gap("test: first gap")
	sw := &sectionWriter{key: reg.Key()}
	if err := src.DumpStreams(nil, sw); err != nil {
		t.Fatal(err)
	}
	for _, m := range sw.msgs {
		rep1.apply(m)
	}
	for seq := uint64(20); seq < 30; seq++ {
		b := benchBatch(rng, seq, 8)
		sub.Apply(b)
		rep1.apply(AppendBatch(nil, reg.Key(), b))
	}
	sub.Gap("test: second gap")
	rep1.apply(AppendGap(nil, reg.Key(), core.GapExpire)) // due before the first, on rep1's clock
	var snap bytes.Buffer
	w := bufio.NewWriter(&snap)
	if err := dump.Write(ix1, w); err != nil {
		t.Fatal(err)
	}
	ix2 := core.New(core.Options{Logger: quietLog(), GapExpireAfter: time.Minute})
	rep2 := replicaOf(ix2)
	rep2.apply(AppendRegister(nil, &reg))
	if _, err := dump.Restore(ix2, bytes.NewReader(snap.Bytes()), nil); err != nil {
		t.Fatal(err)
	}
	for step := range 3 {
		want := state(t, src)
		if state(t, ix1) != want || state(t, ix2) != want {
			t.Fatalf("after %d expiries: replica equal %v, warm-started replica equal %v", step, state(t, ix1) == want, state(t, ix2) == want)
		}
		sub.ExpireOldest()
		rep1.apply(AppendKeyMessage(nil, KindExpire, reg.Key()))
		rep2.apply(AppendKeyMessage(nil, KindExpire, reg.Key()))
	}
}
