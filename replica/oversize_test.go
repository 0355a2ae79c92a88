package replica

import (
	"math/rand"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/replica/natstest"
)

// TestRelayOversizeWhileIdle: a batch too large for one NATS message that
// reaches an idle relay (nothing queued, no other subscription publishing)
// is replaced on the replicas by a state transfer at once; the relay does
// not wait for its next registration resync, which here is an hour away. A
// Mooncake store master's flush of a few MB after the engines went quiet
// is such a batch.
func TestRelayOversizeWhileIdle(t *testing.T) {
	ns := natstest.Start(t, t.TempDir(), -1)
	url := ns.ClientURL()
	o := natsOpts(url)
	o.RegistrationInterval = time.Hour
	relay, src := startRelay(t, o)
	_, dst := startReplica(t, natsOpts(url))
	sub, _, err := src.Register(benchReg(t, "big"))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(1))
	sub.Apply(benchBatch(rng, 0, 16))
	waitUntil(t, "the first batch on the replica", waitBound, func() bool { return state(t, dst) == state(t, src) })
	waitUntil(t, "an idle relay", waitBound, func() bool { return relay.queued() == 0 })
	// The publisher back in its wait, then a batch whose hashes alone
	// exceed the limit.
	time.Sleep(50 * time.Millisecond)
	sub.Apply(benchBatch(rng, 1, maxMessageBytes/8+1))
	waitUntil(t, "the oversize batch's state on the replica", waitBound, func() bool { return state(t, dst) == state(t, src) })
	if relay.oversize.Get() != 1 || relay.transfers.Get() != 1 {
		t.Fatalf("oversize %d, transfers %d; want 1 and 1", relay.oversize.Get(), relay.transfers.Get())
	}
}
