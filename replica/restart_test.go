package replica

import (
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/replica/natstest"
)

// TestReplicaEngineRestartedUnderColdRelay: a relay stops and a new one
// starts without state while the engine restarts: the new relay's index
// holds only the new incarnation, whose sequences start from 0 again, far
// below the last one the replica applied, and no relay saw the sequence go
// back. The replica must not drop the new batches as duplicates nor keep
// the old incarnation's blocks: it ends equal to the new relay's index.
// Batches within RestartThreshold of the last stay duplicates
// (TestRelayFailoverDedup: none counted as a restart).
func TestReplicaEngineRestartedUnderColdRelay(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	ns := natstest.Start(t, t.TempDir(), -1)
	url := ns.ClientURL()
	o := natsOpts(url)
	o.RestartThreshold = 50
	relay1, src1 := startRelay(t, o)
	rep, repIx := startReplica(t, o)
	const k = 2 // an xxh3 registration
	old := newWorkload(t, seed)
	if _, _, err := src1.Register(old.regs[k]); err != nil {
		t.Fatal(err)
	}
	sub, _ := src1.Lookup(old.regs[k].Key())
	for i := 0; i < 120; i++ {
		sub.Apply(old.batch(k))
	}
	waitUntil(t, "relay 1 to publish everything", waitBound, func() bool { return relay1.queued() == 0 })
	waitCaughtUp(t, url, rep)
	if got, want := state(t, repIx), state(t, src1); got != want {
		t.Fatal("replica differs from relay 1 before the restart")
	}
	relay1.Close(5 * time.Second)

	relay2, src2 := startRelay(t, o)
	inc := newWorkload(t, seed+1) // the restarted engine: sequences from 0
	if _, _, err := src2.Register(inc.regs[k]); err != nil {
		t.Fatal(err)
	}
	sub2, _ := src2.Lookup(inc.regs[k].Key())
	for i := 0; i < 10; i++ {
		sub2.Apply(inc.batch(k))
	}
	waitUntil(t, "relay 2 to publish everything", waitBound, func() bool { return relay2.queued() == 0 })
	waitCaughtUp(t, url, rep)
	if got, want := state(t, repIx), state(t, src2); got != want {
		t.Fatalf("replica differs from relay 2 (restarts %d, duplicates %d):\n got %s\nwant %s", rep.restarts.Get(), rep.dups.Get(), got, want)
	}
	if rep.restarts.Get() != 1 || rep.dups.Get() != 0 {
		t.Fatalf("restarts %d, duplicates %d; want 1 and 0", rep.restarts.Get(), rep.dups.Get())
	}
}
