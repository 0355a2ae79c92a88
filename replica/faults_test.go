package replica

import (
	"errors"
	"math/rand"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/replica/natstest"
)

// freePort returns a loopback port nothing listens on (it was free a moment
// ago).
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return p
}

// TestRelayFailoverDedup: two relays index the same engines (the same
// registrations and batches) and publish to one stream; JetStream's message
// ids store each batch once. The first relay then dies; the second carries
// on. The replica equals the surviving relay's index, applied every batch
// exactly once, and saw no sequence gap.
func TestRelayFailoverDedup(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	ns := natstest.Start(t, t.TempDir(), -1)
	url := ns.ClientURL()
	var relays [2]*Relay
	var srcs [2]*core.Index
	for i := range relays {
		relays[i], srcs[i] = startRelay(t, natsOpts(url))
	}
	rep, repIx := startReplica(t, natsOpts(url))

	w := newWorkload(t, seed)
	var subs [2][]*core.Subscription
	for i := range srcs {
		for _, r := range w.regs {
			s, _, err := srcs[i].Register(r)
			if err != nil {
				t.Fatal(err)
			}
			subs[i] = append(subs[i], s)
		}
	}
	batches := 0
	for step := 0; step < 1200; step++ {
		k := w.rng.Intn(len(w.regs))
		b := w.batch(k)
		alive := 2
		if step >= 600 {
			alive = 1 // relay 0 is gone
		}
		for i := 2 - alive; i < 2; i++ {
			subs[i][k].Apply(b)
		}
		batches++
		if step == 600 {
			relays[0].Close(5 * time.Second)
		}
	}
	waitUntil(t, "relay 1 to publish everything", waitBound, func() bool { return relays[1].queued() == 0 })
	last := streamLast(t, url, "CONDUCTOR")
	waitUntil(t, "the replica to apply the stream", waitBound, func() bool { return rep.applied.Load() == last })
	if got, want := state(t, repIx), state(t, srcs[1]); got != want {
		t.Fatalf("replica differs from the surviving relay")
	}
	if got := rep.msgs[0].Get(); got != uint64(batches) {
		t.Fatalf("replica applied %d batch messages for %d batches (stream last seq %d): deduplication failed", got, batches, last)
	}
	if rep.dups.Get() != 0 || rep.gaps.Get() != 0 || rep.restarts.Get() != 0 {
		t.Fatalf("duplicates %d, gaps %d, restarts %d", rep.dups.Get(), rep.gaps.Get(), rep.restarts.Get())
	}
}

// TestNATSDownAtStart: a relay and a replica start while NATS is down. The
// relay buffers what its index applies (within BufferBytes); the replica is
// not ready. When NATS comes up the relay creates the stream and publishes,
// and the replica catches up to the relay's index and reports ready. A
// relay whose buffer is too small counts what it dropped.
func TestNATSDownAtStart(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	port := freePort(t)
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	relay, src := startRelay(t, natsOpts(url))
	o := natsOpts(url)
	o.BufferBytes = 4 << 10
	o.Stream, o.SubjectPrefix = "SMALL", "small.events"
	small, smallSrc := startRelay(t, o)
	o.BufferBytes = 0
	smallRep, smallRepIx := startReplica(t, o)
	rep, repIx := startReplica(t, natsOpts(url))

	w := newWorkload(t, seed)
	var subs, smallSubs []*core.Subscription
	for _, r := range w.regs {
		s, _, err := src.Register(r)
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, s)
		s, _, err = smallSrc.Register(r)
		if err != nil {
			t.Fatal(err)
		}
		smallSubs = append(smallSubs, s)
	}
	for step := 0; step < 400; step++ {
		k := w.rng.Intn(len(subs))
		b := w.batch(k)
		subs[k].Apply(b)
		smallSubs[k].Apply(b)
	}
	if err := rep.Ready(); !errors.Is(err, ErrNotReady) {
		t.Fatalf("replica without NATS is ready (%v)", err)
	}
	if relay.queued() == 0 || relay.dropped.Get() != 0 {
		t.Fatalf("relay without NATS: %d queued, %d dropped; want all queued", relay.queued(), relay.dropped.Get())
	}
	if small.dropped.Get() == 0 {
		t.Fatalf("a 4 KiB buffer held 400 batches: nothing dropped")
	}
	if !strings.Contains(rep.Ready().Error(), "catching up") {
		t.Fatalf("ready error %q", rep.Ready())
	}

	natstest.Start(t, t.TempDir(), port)
	waitUntil(t, "the relay to publish everything", waitBound, func() bool { return relay.queued() == 0 })
	last := streamLast(t, url, "CONDUCTOR")
	waitUntil(t, "the replica to apply the stream", waitBound, func() bool { return rep.applied.Load() == last })
	if got, want := state(t, repIx), state(t, src); got != want {
		t.Fatalf("replica differs from the relay after NATS came up")
	}
	waitUntil(t, "the replica to report ready", waitBound, func() bool { return rep.Ready() == nil })

	// The relay that dropped: its dirty subscriptions are transferred
	// whole once its buffer drained, then its batches flow again.
	waitUntil(t, "the small relay's state transfers", waitBound, func() bool {
		return small.transfers.Get() > 0 && small.queued() == 0
	})
	for step := 0; step < 100; step++ {
		k := w.rng.Intn(len(smallSubs))
		smallSubs[k].Apply(w.batch(k))
		time.Sleep(time.Millisecond) // within the 4 KiB buffer
	}
	waitUntil(t, "the small relay to drain", waitBound, func() bool { return small.queued() == 0 })
	last = streamLast(t, url, "SMALL")
	waitUntil(t, "the small replica to apply its stream", waitBound, func() bool { return smallRep.applied.Load() == last })
	if got, want := state(t, smallRepIx), state(t, smallSrc); got != want {
		t.Fatalf("replica of the relay that dropped differs from its index after the state transfer:\n got %d lines\nwant %d lines",
			strings.Count(got, "\n"), strings.Count(want, "\n"))
	}
	t.Logf("dropped %d, suppressed %d, state transfers %d, replica sections %d",
		small.dropped.Get(), small.suppressed.Get(), small.transfers.Get(), smallRep.msgs[5].Get())
}

// TestSectionChunks: a state transfer of a subscription too large for one
// message is cut into several sections; a replica applying them (after
// holding other state for it, which the transfer replaces) ends with the
// source's exact state.
func TestSectionChunks(t *testing.T) {
	w := newWorkload(t, 1)
	src := core.New(core.Options{Logger: quietLog()})
	reg := benchReg(t, "big")
	sub, _, err := src.Register(reg)
	if err != nil {
		t.Fatal(err)
	}
	rng := w.rng
	for i := 0; i < 200; i++ {
		sub.Apply(benchBatch(rng, uint64(i), 256)) // 51,200 blocks: ~400 KiB of keys
	}
	again := benchBatch(rand.New(rand.NewSource(99)), 200, 300)
	sub.Apply(again)
	again.Seq = 201
	sub.Apply(again) // two copies of these
	sw := &sectionWriter{key: reg.Key()}
	if err := src.DumpStreams(nil, sw); err != nil {
		t.Fatal(err)
	}
	if len(sw.msgs) < 2 {
		t.Fatalf("%d section messages: the chunking is not exercised", len(sw.msgs))
	}
	dst := core.New(core.Options{Logger: quietLog()})
	rep, err := NewReplica(dst, natsOpts("nats://127.0.0.1:1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	rep.apply(AppendRegister(nil, &reg))
	other := benchBatch(rand.New(rand.NewSource(98)), 7777, 100)
	rep.apply(AppendBatch(nil, reg.Key(), other)) // state the transfer must replace
	for _, m := range sw.msgs {
		rep.apply(m)
	}
	if got, want := state(t, dst), state(t, src); got != want {
		t.Fatalf("after %d sections the replica differs from the source", len(sw.msgs))
	}
	if rep.decodeErrs.Get() != 0 || rep.msgs[5].Get() != uint64(len(sw.msgs)) {
		t.Fatalf("decode errors %d, sections applied %d of %d", rep.decodeErrs.Get(), rep.msgs[5].Get(), len(sw.msgs))
	}
}

// TestRelayOversizeBatch: a batch whose message would exceed NATS's payload
// limit is not queued (it could never be published); its subscription goes
// dirty, so a state transfer replaces it, and later batches of it wait for
// that transfer.
func TestRelayOversizeBatch(t *testing.T) {
	relay, err := NewRelay(natsOpts("nats://127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	ix := core.New(core.Options{Observer: relay, Logger: quietLog()})
	sub, _, err := ix.Register(benchReg(t, "big"))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(1))
	sub.Apply(benchBatch(rng, 0, 16))
	sub.Apply(benchBatch(rng, 1, maxMessageBytes/8+1)) // hashes alone exceed the limit
	sub.Apply(benchBatch(rng, 2, 16))
	if relay.oversize.Get() != 1 || relay.suppressed.Get() != 1 || relay.queued() != 2 {
		t.Fatalf("oversize %d, suppressed %d, queued %d; want 1, 1 and 2 (the registration and the first batch)",
			relay.oversize.Get(), relay.suppressed.Get(), relay.queued())
	}
	v, _ := relay.subs.Load(sub.Key())
	if !v.(*relaySub).dirty.Load() {
		t.Fatal("subscription not dirty after an oversize batch")
	}
}
