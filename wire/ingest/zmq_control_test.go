package ingest_test

import (
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/bench"
	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/wire/ingest"
)

// TestZMQPauseResumeDuringReplay forces this interleaving: a Pause and a
// Resume handled in one pass of the command queue while a replay waits for its
// reply. Pause closes the DEALER, Resume reopens only the SUB, and the replay
// must not carry on with a nil poller. The yield hook holds
// the listener after the Pause until the Resume is queued, so every run takes
// that path. Afterwards the listener must still be healthy: it reconnects and
// applies live batches.
func TestZMQPauseResumeDuringReplay(t *testing.T) {
	opts := fastOpts(t)
	opts.ReplayTimeout = 2 * time.Second // the replay waits here while we pause
	opts.ReplayTotalTimeout = 4 * time.Second
	h := newHarness(t, opts)
	ingest.HoldPauseUntilNextCommand(h.g)
	pub := newPublisher(t, bench.PublisherOptions{NoReplay: true})
	r := registration("vllm-a", core.PublisherVLLM, pub, vllmProfile(t))
	r.ReplayEndpoint = "tcp://127.0.0.1:" + freePort(t) // nothing answers: the replay waits
	k := h.register(r)
	for round := 1; round <= 3; round++ {
		// The connection's proactive replay is in flight once it is counted
		// (the request is counted just before the listener starts waiting).
		want := uint64(round)
		waitFor(t, "a replay in flight", func() bool { return h.status(k).ReplaysRequested >= want })
		if err := h.g.Pause(k); err != nil {
			t.Fatal(err)
		}
		if err := h.g.Resume(k); err != nil {
			t.Fatal(err)
		}
		if st := h.status(k); st.State == ingest.ListenerPaused {
			t.Fatalf("round %d: status %+v", round, st)
		}
	}
	// Healthy afterwards: the last reconnection's replay times out, then live
	// batches are applied.
	x := uint64(100)
	waitFor(t, "a live batch after the pauses", func() bool {
		x++
		publish(t, pub, storeOne(x))
		time.Sleep(20 * time.Millisecond)
		return h.holds("vllm-a", x) || h.holds("vllm-a", x-1)
	})
	if _, err := h.g.Unregister(k); err != nil {
		t.Fatal(err)
	}
}
