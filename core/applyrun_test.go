package core

import (
	"testing"
	"time"
)

// batchOf builds a batch of events stored on the device, each holding per
// consecutive hashes from start.
func batchOf(events, per int, start uint64) *Batch {
	b := &Batch{}
	h := start
	for range events {
		e := b.NextEvent()
		e.Kind = EventStored
		e.BlockSize = testBS
		for range per {
			e.Hashes = append(e.Hashes, h)
			h++
		}
	}
	return b
}

// TestApplyYieldsBetweenSlices: the applier yields after every
// ApplySliceBlocks units of work (one per block update, one per event),
// counted across batches, and a batch applied in slices is applied whole.
func TestApplyYieldsBetweenSlices(t *testing.T) {
	if ApplySliceBlocks != 256 {
		t.Fatalf("expectations below are worked for a slice of 256, not %d", ApplySliceBlocks)
	}
	ix := New(Options{})
	s := mustRegister(t, ix, engineReg(t, "a", 0, cborProfile(t)))
	// 10 events of 100 blocks: 10×(1+100) = 1010 units → 3 full slices.
	s.Apply(batchOf(10, 100, 1000))
	if got := s.ApplyYields(); got != 3 {
		t.Fatalf("yields after 1010 units: %d, want 3", got)
	}
	// 101 more units: 1111 in all → 4 full slices (the remainder carries).
	s.Apply(batchOf(1, 100, 2000))
	if got := s.ApplyYields(); got != 4 {
		t.Fatalf("yields after 1111 units: %d, want 4", got)
	}
	if s.ApplyRunMax() <= 0 {
		t.Fatalf("ApplyRunMax = %v, want > 0 after applying", s.ApplyRunMax())
	}
	// Every block of the sliced batch is held: the chain 1000..1999 matches whole.
	if r := row(queryHashes(t, ix, "a", seq(1000)...), "a"); r == nil || r.LongestMatched != 1000*testBS {
		t.Fatalf("after sliced apply: %+v, want %d tokens matched", r, 1000*testBS)
	}
}

// TestApplyNoYield: with Options.ApplyNoYield the applier never yields, still
// times its slices, and applies every block.
func TestApplyNoYield(t *testing.T) {
	ix := New(Options{ApplyNoYield: true})
	s := mustRegister(t, ix, engineReg(t, "a", 0, cborProfile(t)))
	s.Apply(batchOf(10, 100, 1000)) // 1010 units: 3 slice boundaries passed
	if got := s.ApplyYields(); got != 0 {
		t.Fatalf("yields with ApplyNoYield: %d, want 0", got)
	}
	if s.ApplyRunMax() <= 0 {
		t.Fatalf("ApplyRunMax = %v, want > 0 after applying", s.ApplyRunMax())
	}
	if r := row(queryHashes(t, ix, "a", seq(1000)...), "a"); r == nil || r.LongestMatched != 1000*testBS {
		t.Fatalf("after apply: %+v, want %d tokens matched", r, 1000*testBS)
	}
}

// TestQueryDoesNotWaitForApplier: a query completes while the applier is in
// the middle of a batch (its subscription lock held), so queries never queue
// behind ingest.
func TestQueryDoesNotWaitForApplier(t *testing.T) {
	ix := New(Options{})
	s := mustRegister(t, ix, engineReg(t, "a", 0, cborProfile(t)))
	s.Apply(batchOf(1, 8, 1000))
	s.mu.Lock() // as Apply holds it for the whole batch
	done := make(chan *QueryResult, 1)
	go func() {
		res := &QueryResult{}
		req := &QueryRequest{Model: "m", BlockSize: testBS, Hashes: seq(8), ByHash: true, Instance: "a"}
		if err := ix.Query(req, res); err != nil {
			t.Error(err)
		}
		done <- res
	}()
	select {
	case res := <-done:
		if r := row(res, "a"); r == nil || r.LongestMatched != 8*testBS {
			t.Fatalf("query during apply: %+v", res)
		}
	case <-time.After(30 * time.Second): // a deadlock detector, not a latency bound
		t.Fatal("query blocked behind the applier's lock")
	}
	s.mu.Unlock()
}

// TestApplyStepsAsideForQueries: with QueryPriority, the applier steps aside
// after each full slice while a query is in flight, and still applies the
// whole batch (the deferral is bounded); without it, or with no query in
// flight, it never does.
func TestApplyStepsAsideForQueries(t *testing.T) {
	for _, c := range []struct {
		prio     bool
		inFlight int64
		want     uint64
	}{{true, 1, 3}, {true, 0, 0}, {false, 1, 0}} {
		ix := New(Options{QueryPriority: c.prio})
		s := mustRegister(t, ix, engineReg(t, "a", 0, cborProfile(t)))
		ix.queries.Add(c.inFlight) // a query in flight for the whole batch
		s.Apply(batchOf(10, 100, 1000))
		ix.queries.Add(-c.inFlight)
		if got := s.ApplyDeferrals(); got != c.want {
			t.Errorf("priority=%v in flight=%d: %d deferrals, want %d (1010 units = 3 slices)", c.prio, c.inFlight, got, c.want)
		}
		if r := row(queryHashes(t, ix, "a", seq(1000)...), "a"); r == nil || r.LongestMatched != 1000*testBS {
			t.Errorf("priority=%v: batch not applied whole: %+v", c.prio, r)
		}
		if ix.queries.Load() != 0 {
			t.Errorf("queries in flight after the test's queries returned: %d", ix.queries.Load())
		}
	}
}
