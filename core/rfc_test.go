package core

import (
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"testing"

	"github.com/seed-c7a81618/conductor/internal/syncbuf"
)

// rfcEv builds a one-event standardized batch for the test context.
func rfcEv(kind EventKind, id uint64, backend, medium string, rank uint32, hashes ...uint64) *Batch {
	b := &Batch{}
	e := b.NextEvent()
	e.Kind, e.Standard = kind, true
	e.HasEventID, e.EventID = true, id
	e.ModelName, e.HasModelName = []byte("m"), true
	e.BlockSize, e.HasBlockSize = testBS, true
	e.TenantID, e.BackendID = []byte("default"), []byte(backend)
	if medium != "" {
		e.Medium = []byte(medium)
	}
	e.HasDPRank, e.DPRank = true, rank
	e.Hashes = append(e.Hashes, hashes...)
	return b
}

func deviceOf(t *testing.T, ix *Index, inst string, hashes ...uint64) (dev, host, disk int64) {
	t.Helper()
	r := row(queryHashes(t, ix, inst, hashes...), inst)
	if r == nil {
		return -1, -1, -1
	}
	return r.Media[MediumDevice], r.Media[MediumHost], r.Media[MediumDisk]
}

// TestClearedPurgesOnlyItsStream (seed "cleared": "all blocks for the event
// stream dimensions are purged"; the stream is model, block_size, salt, lora,
// tenant, backend_id, medium, dp_rank): a disk clear leaves GPU and CPU
// blocks, worker-0's clear leaves worker-1's, a rank-1 clear leaves rank 0.
func TestClearedPurgesOnlyItsStream(t *testing.T) {
	ix := New(Options{})
	s := mustRegister(t, ix, stdReg("a", "", ""))
	s.Apply(rfcEv(EventStored, 1, "worker-0", "gpu", 0, 1, 2))
	s.Apply(rfcEv(EventStored, 1, "worker-0", "cpu", 0, 1, 2))
	s.Apply(rfcEv(EventStored, 1, "worker-0", "disk", 0, 1, 2))
	s.Apply(rfcEv(EventStored, 1, "worker-1", "disk", 0, 1))
	if d, h, k := deviceOf(t, ix, "a", 1, 2); d != 32 || h != 32 || k != 32 {
		t.Fatalf("setup: %d %d %d", d, h, k)
	}
	s.Apply(rfcEv(EventCleared, 2, "worker-0", "disk", 0))
	if d, h, k := deviceOf(t, ix, "a", 1, 2); d != 32 || h != 32 || k != 16 {
		t.Fatalf("after worker-0 disk clear: gpu %d cpu %d disk %d (want 32 32 16: worker-1's disk block stays)", d, h, k)
	}
	s.Apply(rfcEv(EventCleared, 2, "worker-1", "DISK", 0)) // medium case-insensitive
	if _, _, k := deviceOf(t, ix, "a", 1); k != 0 {
		t.Fatalf("worker-1 disk clear: disk %d", k)
	}
	// Rank dimension: a rank-1 clear leaves rank 0.
	s.Apply(rfcEv(EventStored, 1, "worker-0", "gpu", 1, 1))
	s.Apply(rfcEv(EventCleared, 2, "worker-0", "gpu", 1))
	r := row(queryHashes(t, ix, "a", 1, 2), "a")
	for _, rk := range r.Ranks {
		want := map[int32]int64{0: 32, 1: 0}[rk.Rank]
		if rk.Media[MediumDevice] != want {
			t.Fatalf("rank %d device %d want %d", rk.Rank, rk.Media[MediumDevice], want)
		}
	}
	// Salt dimension: a clear of salt "x" leaves the unsalted stream.
	cl := rfcEv(EventCleared, 3, "worker-0", "gpu", 0)
	cl.Events[0].AdditionalSalt = []byte("x")
	s.Apply(cl)
	if d, _, _ := deviceOf(t, ix, "a", 1, 2); d != 32 {
		t.Fatalf("salted clear purged the unsalted stream: %d", d)
	}
	checkKeySets(t, s)
}

// TestEngineClearKeepsStandardStreams: a vLLM engine's AllBlocksCleared
// purges the engine stream; standardized streams the same registration
// published (recognised by event_type) keep their blocks.
func TestEngineClearKeepsStandardStreams(t *testing.T) {
	ix := New(Options{})
	r := stdReg("v", "", "")
	r.Type = PublisherVLLM
	s := mustRegister(t, ix, r)
	tokens := nsTokens(testBS)
	std := plainChain(tokens, testBS, 1337)
	e := stored("GPU", 0xE7) // engine event (re-hashed from its tokens)
	e.Events[0].Tokens, e.Events[0].HasTokens = append(e.Events[0].Tokens, tokens...), true
	s.Apply(e)
	s.Apply(rfcEv(EventStored, 1, "worker-0", "disk", 0, std[0])) // standardized
	if d, _, k := deviceOf(t, ix, "v", std[0]); d != 16 || k != 16 {
		t.Fatalf("setup: device %d disk %d", d, k)
	}
	s.Apply(cleared())
	if d, _, k := deviceOf(t, ix, "v", std[0]); d != 0 || k != 16 {
		t.Fatalf("AllBlocksCleared: device %d (want 0: engine stream) disk %d (want 16: standardized stream)", d, k)
	}
}

// TestRFCTokenRecompute (seed "Hashing standard": a publisher that does not
// follow it "must provide token_ids in stored events so the consumer can
// recompute"): non-standard seq_hashes with token_ids are indexed under the
// standard chain; later removes and parents by publisher hash resolve.
func TestRFCTokenRecompute(t *testing.T) {
	ix := New(Options{})
	s := mustRegister(t, ix, stdReg("a", "", ""))
	tokens := nsTokens(3 * testBS)
	std := plainChain(tokens, testBS, 1337)

	b := rfcEv(EventStored, 1, "w", "gpu", 0, 0xAA1, 0xAA2) // publisher's own hashes
	b.Events[0].Tokens, b.Events[0].HasTokens = append(b.Events[0].Tokens, tokens[:2*testBS]...), true
	s.Apply(b)
	if d, _, _ := deviceOf(t, ix, "a", std...); d != 32 {
		t.Fatalf("recomputed standard chain: %d want 32", d)
	}
	if d, _, _ := deviceOf(t, ix, "a", 0xAA1); d != 0 {
		t.Fatalf("publisher hash indexed: %d", d)
	}
	// A child by publisher parent hash.
	c := rfcEv(EventStored, 2, "w", "gpu", 0, 0xAA3)
	c.Events[0].Parent, c.Events[0].HasParent = 0xAA2, true
	c.Events[0].Tokens, c.Events[0].HasTokens = append(c.Events[0].Tokens, tokens[2*testBS:]...), true
	s.Apply(c)
	if d, _, _ := deviceOf(t, ix, "a", std...); d != 48 {
		t.Fatalf("child via publisher parent: %d want 48", d)
	}
	// Remove by publisher hash.
	s.Apply(rfcEv(EventRemoved, 3, "w", "gpu", 0, 0xAA2))
	if d, _, _ := deviceOf(t, ix, "a", std...); d != 16 {
		t.Fatalf("remove by publisher hash: %d want 16", d)
	}
	// A standard publisher with tokens: hashes equal the recompute, no mapping.
	d := rfcEv(EventStored, 4, "w2", "cpu", 0, std[0], std[1])
	d.Events[0].Tokens, d.Events[0].HasTokens = append(d.Events[0].Tokens, tokens[:2*testBS]...), true
	s.Apply(d)
	if _, h, _ := deviceOf(t, ix, "a", std...); h != 32 {
		t.Fatalf("standard publisher with tokens: host %d want 32", h)
	}
	// Non-standard hashes whose parent was never seen: not locatable.
	e := rfcEv(EventStored, 5, "w", "gpu", 0, 0xBB2)
	e.Events[0].Parent, e.Events[0].HasParent = 0xBB1, true
	e.Events[0].Tokens, e.Events[0].HasTokens = append(e.Events[0].Tokens, tokens[:testBS]...), true
	if st := s.Apply(e); st.Dropped != 1 {
		t.Fatalf("unknown parent: %+v", st)
	}
}

// TestRFCUnknownContextCreatesNoState: events naming contexts
// nobody registered are dropped before any stream cursor or owner exists.
func TestRFCUnknownContextCreatesNoState(t *testing.T) {
	ix := New(Options{})
	s := mustRegister(t, ix, stdReg("a", "", ""))
	for i := 0; i < 1000; i++ {
		b := rfcEv(EventStored, 1, "w", "gpu", 0, 1)
		b.Events[0].ModelName = []byte(fmt.Sprintf("invented-%d", i))
		if st := s.Apply(b); st.Dropped != 1 {
			t.Fatalf("event %d: %+v", i, st)
		}
	}
	if len(s.rfc) != 0 || len(s.state) != 1 {
		t.Fatalf("state grew: %d streams, %d contexts", len(s.rfc), len(s.state))
	}
	if got := ix.Counters().DroppedBy[DropUnknownContext].Load(); got != 1000 {
		t.Fatalf("unknown_context drops %d", got)
	}
}

// TestRFCStreamCapBound measures the bound: a publisher naming
// 20,000 distinct streams (backends) with held out-of-order events keeps at
// most MaxStreamsPerSubscription cursors and MaxHeldPerSubscription held
// events, and the heap it leaves is bounded accordingly.
func TestRFCStreamCapBound(t *testing.T) {
	ix := New(Options{MaxStreamsPerSubscription: 64, MaxHeldEvents: 8, Logger: slog.New(slog.DiscardHandler)})
	s := mustRegister(t, ix, stdReg("a", "", ""))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	big := make([]int32, 4096)
	for i := 0; i < 20000; i++ {
		backend := fmt.Sprintf("backend-%d", i)
		s.Apply(rfcEv(EventStored, 1, backend, "gpu", 0, uint64(i)))
		early := rfcEv(EventStored, 5, backend, "gpu", 0, uint64(i)) // held: 2..4 missing
		early.Events[0].Tokens, early.Events[0].HasTokens = append(early.Events[0].Tokens, big...), true
		s.Apply(early)
		if len(s.rfc) > 64 || s.heldTotal > ix.opts.MaxHeldPerSubscription || s.state[s.home].streamOwners > 64 {
			t.Fatalf("after %d streams: %d cursors, %d held, %d owners", i+1, len(s.rfc), s.heldTotal, s.state[s.home].streamOwners)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	// Held events carry 16 KiB of tokens each; at most 32 (4 × 8) are held.
	// Unbounded state would hold 20,000 × 16 KiB = 312 MiB.
	if grow := int64(after.HeapAlloc) - int64(before.HeapAlloc); grow > 32<<20 {
		t.Fatalf("heap grew by %d MiB", grow>>20)
	}
	if ix.Counters().StreamEvictions.Load() == 0 && ix.Counters().DroppedBy[DropStreamLimit].Load() == 0 {
		t.Fatal("no eviction or stream-limit drop counted")
	}
}

// TestUnknownMediaDoNotGrowState: 10,000 distinct unknown media are all
// counted, logged as one WARN line per reason and interval (not one per
// name), and leave no per-name state (stream cursors stay within
// MaxStreamsPerSubscription).
func TestUnknownMediaDoNotGrowState(t *testing.T) {
	var buf syncbuf.Buffer
	ix := New(Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	s := mustRegister(t, ix, stdReg("a", "", ""))
	for i := 0; i < 10000; i++ {
		s.Apply(rfcEv(EventStored, uint64(i+1), "w", fmt.Sprintf("medium-%d", i), 0, 1))
	}
	if got := ix.Counters().UnknownMedia.Load(); got != 10000 {
		t.Fatalf("unknown media counted %d", got)
	}
	lines := strings.Count(buf.String(), "reason=unknown_medium")
	if lines != 1 {
		t.Fatalf("%d WARN lines for one reason within the interval, want 1:\n%s", lines, buf.String())
	}
	if len(s.rfc) > ix.opts.MaxStreamsPerSubscription {
		t.Fatalf("%d stream cursors", len(s.rfc))
	}
}

// TestEveryDropReasonLogged: each drop class is logged at WARN with its
// reason (rate-limited per class, not per event).
func TestEveryDropReasonLogged(t *testing.T) {
	var buf syncbuf.Buffer
	ix := New(Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	r := stdReg("v", "", "")
	r.Type = PublisherVLLM
	v := mustRegister(t, ix, r)
	st := mustRegister(t, ix, stdReg("s", "", ""))
	lora := stored("GPU", 1)
	lora.Events[0].LoraName = []byte("other")
	v.Apply(lora)
	grp := stored("GPU", 1)
	grp.Events[0].HasGroupIdx, grp.Events[0].GroupIdx = true, 1
	v.Apply(grp)
	v.Apply(stored("TAPE", 1))
	unk := rfcEv(EventStored, 1, "w", "gpu", 0, 1)
	unk.Events[0].ModelName = []byte("nobody")
	st.Apply(unk)
	st.Apply(rfcEv(EventStored, 2, "w", "gpu", 0, 1))
	st.Apply(rfcEv(EventStored, 2, "w", "gpu", 0, 1)) // duplicate id
	bad := &Batch{Skipped: 1, Errors: []error{fmt.Errorf("msgpack: truncated")}}
	st.Apply(bad)
	out := buf.String()
	for _, reason := range []string{"wrong_lora", "not_full_attention", "unknown_medium", "unknown_context", "duplicate_event_id", "decode"} {
		if !strings.Contains(out, "level=WARN msg=\"KV events dropped\" reason="+reason) {
			t.Errorf("no WARN line for %s:\n%s", reason, out)
		}
	}
}

// TestRFCPublisherCounter: a publisher numbering all its events with one
// counter (the Mooncake master) is in order although each stream skips the
// ids of the others; an id at or below its own stream's last is still a
// duplicate even when it follows the publisher's last id.
func TestRFCPublisherCounter(t *testing.T) {
	ix := New(Options{})
	s := mustRegister(t, ix, stdReg("a", "", ""))
	s.Apply(rfcEv(EventStored, 1, "w", "gpu", 0, 1))
	s.Apply(rfcEv(EventStored, 2, "w", "cpu", 0, 1))
	if st := s.Apply(rfcEv(EventStored, 3, "w", "gpu", 0, 2)); st.Dropped != 0 || st.Blocks != 1 {
		t.Fatalf("publisher-consecutive id held or dropped: %+v", st)
	}
	if ix.Counters().EventIDGaps.Load() != 0 || s.heldTotal != 0 {
		t.Fatalf("gap counted for a one-counter publisher: gaps %d held %d", ix.Counters().EventIDGaps.Load(), s.heldTotal)
	}
	s.Apply(rfcEv(EventStored, 10, "x", "gpu", 0, 5)) // stream x starts at 10
	s.Apply(rfcEv(EventStored, 3, "y", "gpu", 0, 6))  // stream y starts at 3: publisher last = 3
	if st := s.Apply(rfcEv(EventStored, 4, "x", "gpu", 0, 7)); st.Dropped != 1 {
		t.Fatalf("id 4 ≤ stream x's last 10 applied: %+v", st)
	}
	if d, _, _ := deviceOf(t, ix, "a", 7); d != 0 {
		t.Fatalf("duplicate applied: %d", d)
	}
}

// TestRFCPerStreamCounters (seed: event_id is scoped by the stream, events
// are applied in consecutive order within each stream): with each stream
// numbered on its own, stream A's id 3 arriving before its id 2 is held,
// although it follows the last id stream B used; A's 2 (a remove) then
// applies, and 3 after it. A lost A 2 is an event_id gap.
func TestRFCPerStreamCounters(t *testing.T) {
	ix := New(Options{})
	s := mustRegister(t, ix, stdReg("a", "", ""))
	s.Apply(rfcEv(EventStored, 1, "w", "gpu", 0, 9))  // A1 stores X
	s.Apply(rfcEv(EventStored, 1, "w", "cpu", 0, 20)) // B1
	s.Apply(rfcEv(EventStored, 2, "w", "cpu", 0, 21)) // B2
	s.Apply(rfcEv(EventStored, 3, "w", "gpu", 0, 10)) // A3 stores Y: held
	if s.heldTotal != 1 {
		t.Fatalf("A3 not held: held %d", s.heldTotal)
	}
	s.Apply(rfcEv(EventRemoved, 2, "w", "gpu", 0, 9)) // A2 removes X
	if d, _, _ := deviceOf(t, ix, "a", 9); d != 0 {
		t.Fatalf("X still on device (%d tokens): A2 dropped", d)
	}
	r := row(queryHashes(t, ix, "a", 10), "a")
	if r == nil || r.Media[MediumDevice] != 16 || s.heldTotal != 0 {
		t.Fatalf("A3 not applied after A2: %+v, held %d", r, s.heldTotal)
	}
	if n := ix.Counters().DuplicateIDs.Load(); n != 0 {
		t.Fatalf("%d duplicates counted", n)
	}
	// A 5 with A 4 lost: held, then a gap once the held events resolve.
	s.Apply(rfcEv(EventStored, 5, "w", "gpu", 0, 11))
	s.FlushHeld()
	if n := ix.Counters().EventIDGaps.Load(); n != 1 {
		t.Fatalf("event_id gaps %d, want 1", n)
	}
}

// TestRFCBaseIdxContinuation (seed: base_block_idx or parent_hash locates
// the blocks): a standard publisher's continuation located by
// base_block_idx alone, with its token_ids, is indexed under its
// seq_hashes, not under a chain recomputed from its tokens as if they began
// the sequence (which would also match an unrelated prompt starting with
// them).
func TestRFCBaseIdxContinuation(t *testing.T) {
	ix := New(Options{})
	s := mustRegister(t, ix, stdReg("a", "", ""))
	tokens := nsTokens(3 * testBS)
	std := plainChain(tokens, testBS, 1337)
	b := rfcEv(EventStored, 1, "w", "gpu", 0, std[0], std[1])
	b.Events[0].Tokens, b.Events[0].HasTokens = append(b.Events[0].Tokens, tokens[:2*testBS]...), true
	b.Events[0].HasBaseIdx = true
	s.Apply(b)
	c := rfcEv(EventStored, 2, "w", "gpu", 0, std[2])
	c.Events[0].Tokens, c.Events[0].HasTokens = append(c.Events[0].Tokens, tokens[2*testBS:]...), true
	c.Events[0].BaseBlockIdx, c.Events[0].HasBaseIdx = 2, true
	s.Apply(c)
	if d, _, _ := deviceOf(t, ix, "a", std...); d != 48 {
		t.Fatalf("continuation by base_block_idx: device prefix %d, want 48", d)
	}
	root := plainChain(tokens[2*testBS:], testBS, 1337) // the third block's tokens as a prompt of their own
	if d, _, _ := deviceOf(t, ix, "a", root...); d != 0 {
		t.Fatalf("an unrelated prompt starting with the continuation's tokens hits: %d", d)
	}
}

// TestRFCPublisherCounterSkipsDroppedIDs: for a publisher numbering all its
// events with one counter, an id consumed by an event for a context nobody
// registered, and the ids of held events resolved stream by stream in any
// order, still count as used: the next id applies at once, with no gap.
func TestRFCPublisherCounterSkipsDroppedIDs(t *testing.T) {
	ix := New(Options{})
	s := mustRegister(t, ix, stdReg("a", "", ""))
	s.Apply(rfcEv(EventStored, 1, "w", "gpu", 0, 1))
	other := rfcEv(EventStored, 2, "w", "gpu", 0, 2)
	other.Events[0].ModelName = []byte("nobody-registered")
	if st := s.Apply(other); st.Dropped != 1 {
		t.Fatalf("event for an unregistered context: %+v", st)
	}
	if st := s.Apply(rfcEv(EventStored, 3, "w", "gpu", 0, 3)); st.Blocks != 1 || s.heldTotal != 0 {
		t.Fatalf("id 3 after the dropped id 2 held: %+v, held %d", st, s.heldTotal)
	}
	// Streams A, B, C; id 7 lost; 8 (A) and 9 (B) held, then resolved when
	// idle (in map order): 10 on C follows 9.
	for trial := 0; trial < 50; trial++ {
		ix := New(Options{})
		s := mustRegister(t, ix, stdReg("a", "", ""))
		s.Apply(rfcEv(EventStored, 4, "A", "gpu", 0, 1))
		s.Apply(rfcEv(EventStored, 5, "B", "gpu", 0, 2))
		s.Apply(rfcEv(EventStored, 6, "C", "gpu", 0, 3))
		s.Apply(rfcEv(EventStored, 8, "A", "gpu", 0, 4))
		s.Apply(rfcEv(EventStored, 9, "B", "gpu", 0, 5))
		s.FlushHeld()
		if st := s.Apply(rfcEv(EventStored, 10, "C", "gpu", 0, 6)); st.Blocks != 1 || s.heldTotal != 0 {
			t.Fatalf("trial %d: id 10 after the resolved 9 held: %+v, held %d", trial, st, s.heldTotal)
		}
	}
}
