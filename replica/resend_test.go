package replica

import (
	"context"
	"math/rand"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/replica/natstest"
)

// ackLostJS publishes everything through a real JetStream but reports the
// publishes at the positions in lose (counted from 0) as failed by a lost
// connection once they settled: stored, their acknowledgement lost.
type ackLostJS struct {
	jetstream.JetStream
	lose map[int]bool
	n    int
}

func (s *ackLostJS) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	f, err := s.JetStream.PublishMsgAsync(m, opts...)
	if err != nil {
		return nil, err
	}
	i := s.n
	s.n++
	if !s.lose[i] {
		return f, nil
	}
	select {
	case <-f.Ok():
	case <-f.Err():
	}
	g := &settled{ok: make(chan *jetstream.PubAck, 1), err: make(chan error, 1), msg: m}
	g.err <- nats.ErrDisconnected
	return g, nil
}

// TestRelayExpireResentOnce: an Expire stored with its acknowledgement lost
// is resent; its message id makes the resend a no-op, so the replica expires
// one gap mark, as the relay did, not one per copy.
func TestRelayExpireResentOnce(t *testing.T) {
	ns := natstest.Start(t, t.TempDir(), -1)
	url := ns.ClientURL()
	relay, src, js, drain := manualRelay(t, url, func(r *Relay) *core.Index {
		return core.New(core.Options{Observer: r, Logger: quietLog(), GapExpireAfter: time.Hour})
	})
	rep, repIx := startReplica(t, natsOpts(url))
	_, sub := registerE0(t, src, core.GapExpire)
	rng := rand.New(rand.NewSource(1))
	sub.Apply(benchBatch(rng, 0, 4))
	sub.Gap("gap 1")
	first := time.Now()
	time.Sleep(10 * time.Millisecond) // the second mark is due later
	sub.Apply(benchBatch(rng, 5, 4))
	sub.Gap("gap 2")
	drain()
	if n := sub.ExpireDue(first.Add(time.Hour)); n == 0 {
		t.Fatal("nothing expired")
	}
	if relay.queued() != 1 {
		t.Fatalf("queued %d messages, want the one Expire", relay.queued())
	}
	if n := relay.publishWindow(context.Background(), &ackLostJS{JetStream: js, lose: map[int]bool{0: true}}); n != -1 {
		t.Fatalf("publishWindow = %d, want -1 (failed)", n)
	}
	drain() // the resend
	waitCaughtUp(t, url, rep)
	if got, want := state(t, repIx), state(t, src); got != want {
		t.Fatalf("replica (%d expiries applied):\n%s\nrelay:\n%s", rep.msgs[7].Get(), got, want)
	}
}
