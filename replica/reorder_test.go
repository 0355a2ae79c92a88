package replica

import (
	"context"
	"errors"
	"math/rand"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/seed-c7a81618/conductor/core"
)

// scriptedJS answers PublishMsgAsync with already-settled futures, failing
// the publishes whose position (counted from 0) is in fail. Only that method
// is used by publishWindow; the embedded nil interface panics on any other.
type scriptedJS struct {
	jetstream.JetStream
	fail map[int]bool
	n    int
}

type settled struct {
	ok  chan *jetstream.PubAck
	err chan error
	msg *nats.Msg
}

func (f *settled) Ok() <-chan *jetstream.PubAck { return f.ok }
func (f *settled) Err() <-chan error            { return f.err }
func (f *settled) Msg() *nats.Msg               { return f.msg }

func (s *scriptedJS) PublishMsgAsync(m *nats.Msg, _ ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	f := &settled{ok: make(chan *jetstream.PubAck, 1), err: make(chan error, 1), msg: m}
	if s.fail[s.n] {
		f.err <- errors.New("scripted failure")
	} else {
		f.ok <- &jetstream.PubAck{}
	}
	s.n++
	return f, nil
}

// TestRelayReorderedWindowTransfers: in one publish window, a subscription
// whose failed message is followed by a stored message of its own would reach
// replicas out of order (they would apply batch 2 and then skip batch 1 as
// old), so it goes dirty and its state is transferred; a subscription whose
// failure is its last message in the window is just resent; a window where
// everything from the first failure on fails (NATS down) makes nothing dirty.
func TestRelayReorderedWindowTransfers(t *testing.T) {
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
	// Queue: reg a, reg b, a1, b1, a2, b2.
	a.Apply(benchBatch(rng, 1, 4))
	b.Apply(benchBatch(rng, 1, 4))
	a.Apply(benchBatch(rng, 2, 4))
	b.Apply(benchBatch(rng, 2, 4))
	if relay.queued() != 6 {
		t.Fatalf("queued %d, want 6", relay.queued())
	}
	// a1 fails, b1 and a2 are stored, b2 fails.
	js := &scriptedJS{fail: map[int]bool{2: true, 5: true}}
	if n := relay.publishWindow(context.Background(), js); n != -1 {
		t.Fatalf("publishWindow = %d, want -1", n)
	}
	if !ra.dirty.Load() || rb.dirty.Load() || relay.reordered.Get() != 1 {
		t.Fatalf("dirty a=%v b=%v, reordered %d; want a only (its batch 2 was stored before its batch 1)",
			ra.dirty.Load(), rb.dirty.Load(), relay.reordered.Get())
	}
	if relay.queued() != 4 {
		t.Fatalf("queued %d, want 4 (resent from the first failure)", relay.queued())
	}

	// NATS down: everything from the first failure on fails.
	ra.dirty.Store(false)
	js = &scriptedJS{fail: map[int]bool{0: true, 1: true, 2: true, 3: true}}
	if n := relay.publishWindow(context.Background(), js); n != -1 {
		t.Fatalf("publishWindow = %d, want -1", n)
	}
	if ra.dirty.Load() || rb.dirty.Load() || relay.reordered.Get() != 1 || relay.queued() != 4 {
		t.Fatalf("dirty a=%v b=%v, reordered %d, queued %d; want nothing dirty and all 4 kept",
			ra.dirty.Load(), rb.dirty.Load(), relay.reordered.Get(), relay.queued())
	}
}

// TestRelayRegistrationReorderTransfers: registrations and unregistrations
// take part in their subscription's order. A registration that failed while
// its first batch was stored would reach replicas after it (the batch an
// orphan there); an unregistration that failed while the re-registration
// and its batch were stored would be resent after them and wipe that batch.
// Either way the subscription registered now under the key goes dirty, so
// its state is transferred; a failure whose key has nothing stored after
// it in the window, or whose registration is gone, makes nothing dirty.
func TestRelayRegistrationReorderTransfers(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	setup := func() (*Relay, *core.Index) {
		relay, err := NewRelay(natsOpts("nats://127.0.0.1:1"))
		if err != nil {
			t.Fatal(err)
		}
		return relay, core.New(core.Options{Observer: relay, Logger: quietLog()})
	}
	register := func(relay *Relay, ix *core.Index, inst string) (*core.Subscription, *relaySub) {
		s, _, err := ix.Register(benchReg(t, inst))
		if err != nil {
			t.Fatal(err)
		}
		v, _ := relay.subs.Load(s.Key())
		return s, v.(*relaySub)
	}
	window := func(relay *Relay, fail ...int) {
		t.Helper()
		js := &scriptedJS{fail: map[int]bool{}}
		for _, i := range fail {
			js.fail[i] = true
		}
		n := relay.publishWindow(context.Background(), js)
		if want := len(fail) > 0; (n == -1) != want {
			t.Fatalf("publishWindow = %d with failures %v", n, fail)
		}
	}

	// Queue: reg a, a1, reg b, b1; reg a fails, a1 is stored; reg b fails last.
	relay, ix := setup()
	a, ra := register(relay, ix, "a")
	a.Apply(benchBatch(rng, 1, 4))
	_, rb := register(relay, ix, "b")
	window(relay, 0, 2, 3)
	if !ra.dirty.Load() || rb.dirty.Load() || relay.reordered.Get() != 1 {
		t.Fatalf("lost registration: dirty a=%v b=%v, reordered %d; want a only", ra.dirty.Load(), rb.dirty.Load(), relay.reordered.Get())
	}

	// Queue: reg a, a1 (stored), then unreg a, reg a, a1' (the new
	// subscription); the unregistration fails, the rest is stored.
	relay, ix = setup()
	a, _ = register(relay, ix, "a")
	a.Apply(benchBatch(rng, 1, 4))
	window(relay) // everything stored
	if relay.queued() != 0 {
		t.Fatalf("queued %d after a clean window", relay.queued())
	}
	if _, err := ix.Unregister(a.Key()); err != nil {
		t.Fatal(err)
	}
	a2, ra2 := register(relay, ix, "a")
	a2.Apply(benchBatch(rng, 1, 4))
	window(relay, 0)
	if !ra2.dirty.Load() || relay.reordered.Get() != 1 {
		t.Fatalf("lost unregistration: new subscription dirty=%v, reordered %d; want it dirty", ra2.dirty.Load(), relay.reordered.Get())
	}

	// Queue: reg a, a1; a1 fails, then unreg a is stored: nothing to transfer.
	relay, ix = setup()
	a, _ = register(relay, ix, "a")
	window(relay)
	a.Apply(benchBatch(rng, 1, 4))
	if _, err := ix.Unregister(a.Key()); err != nil {
		t.Fatal(err)
	}
	window(relay, 0)
	if relay.reordered.Get() != 0 {
		t.Fatalf("unregistered: reordered %d, want 0 (nothing registered to transfer)", relay.reordered.Get())
	}
}
