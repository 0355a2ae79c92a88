package ingest_test

import (
	"bufio"
	"bytes"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/bench"
	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
	"github.com/seed-c7a81618/conductor/wire/dump"
	"github.com/seed-c7a81618/conductor/wire/ingest"
)

// TestZMQIdleFlushesHeldEvents: an RFC #1527 event held for a missing
// event_id is resolved once the stream goes idle (PollInterval), on every
// registration type that may carry such events: an engine registration
// (vLLM) receiving standardized maps as well as a standard publisher's.
func TestZMQIdleFlushesHeldEvents(t *testing.T) {
	for _, typ := range []core.PublisherType{core.PublisherStandard, core.PublisherVLLM} {
		t.Run(typ.String(), func(t *testing.T) {
			h := newHarness(t, fastOpts(t))
			pub := newPublisher(t, bench.PublisherOptions{})
			r := registration("held-a", typ, pub, hash.Profile{})
			r.ProfileExplicit = false // the xxh3 default: seq_hashes are the keys
			r.GapPolicy = core.GapKeep
			h.register(r)
			ev := func(id uint64, hs ...uint64) bench.StandardEvent {
				return bench.StandardEvent{EventID: id, Type: "stored", SeqHashes: hs, ModelName: testModel,
					BlockSize: testBS, Medium: "GPU", DPRank: 0}
			}
			publish(t, pub, bench.AppendStandardBatch(nil, 1700000000000, 0, ev(1, 11)))
			publish(t, pub, bench.AppendStandardBatch(nil, 1700000000001, 0, ev(3, 13))) // id 2 never comes
			waitFor(t, "block 11, then block 13 once the idle stream's held event is resolved", func() bool {
				return h.holds("held-a", 11) && h.holds("held-a", 13)
			})
			if n := h.ix.Counters().EventIDGaps.Load(); n != 1 {
				t.Fatalf("event_id gaps %d, want 1", n)
			}
		})
	}
}

// TestRestoredMarksExpireOnIdleListener: gap marks a snapshot restores into
// a registration whose publisher stays silent expire at their deadline: the
// listener, waiting with nothing due, is woken to take the new deadline
// (core.Subscription.SetExpiryWake).
func TestRestoredMarksExpireOnIdleListener(t *testing.T) {
	h := newHarness(t, fastOpts(t))
	pub := newPublisher(t, bench.PublisherOptions{})
	r := registration("idle-a", core.PublisherStandard, pub, hash.Profile{})
	r.ReplayEndpoint, r.ProfileExplicit, r.GapPolicy = "", false, core.GapExpire
	// The snapshot: blocks 11 and 12 held at a gap whose expiry is due in 300 ms.
	src := core.New(core.Options{GapExpireAfter: 300 * time.Millisecond})
	s, _, err := src.Register(r)
	if err != nil {
		t.Fatal(err)
	}
	b := &core.Batch{Seq: 0, HasSeq: true}
	e := b.NextEvent()
	e.Kind, e.Standard, e.HasEventID, e.EventID = core.EventStored, true, true, 1
	e.ModelName, e.HasModelName, e.BlockSize, e.HasBlockSize = []byte(testModel), true, testBS, true
	e.TenantID, e.BackendID, e.Medium, e.Hashes = []byte("default"), []byte("w"), []byte("gpu"), []uint64{11, 12}
	s.Apply(b)
	s.Gap("test: a gap")
	var snap bytes.Buffer
	w := bufio.NewWriter(&snap)
	if err := dump.Write(src, w); err != nil {
		t.Fatal(err)
	}
	k := h.register(r)
	waitFor(t, "the listener connected (then waiting with nothing due)", func() bool {
		return h.status(k).State == ingest.ListenerActive
	})
	time.Sleep(50 * time.Millisecond)
	release := h.ix.HoldApplies()
	if _, err := dump.RestorePrior(h.ix, bytes.NewReader(snap.Bytes()), nil); err != nil {
		t.Fatal(err)
	}
	release()
	if !h.holds("idle-a", 11) {
		t.Fatal("block 11 not restored")
	}
	waitFor(t, "the restored blocks to expire without a message", func() bool {
		return !h.holds("idle-a", 11) && !h.holds("idle-a", 12)
	})
}
