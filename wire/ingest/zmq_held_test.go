package ingest_test

import (
	"testing"

	"github.com/seed-c7a81618/conductor/bench"
	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
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
