package core

import (
	"runtime"
	"sync/atomic"
	"time"
)

// ApplySliceBlocks is how much work the applier does between yields: after
// this many block updates (each event counts one more), Apply calls
// runtime.Gosched so that goroutines waiting for a P (query handlers that
// became runnable during a large batch) run first, instead of waiting for the
// runtime to preempt a CPU-bound applier 10 ms later; with
// Options.QueryPriority it also steps aside for queries in flight there
// (stepAside). 256 updates are about 0.1–0.3 ms of work; a yield costs well
// under a microsecond when nothing else is runnable. Measured effect on query
// tail latency: BENCHMARKS.md, "Query tail latency under full ingest".
const ApplySliceBlocks = 256

// monoBase anchors applyRun's monotonic clock.
var monoBase = time.Now()

func monoNow() int64 { return int64(time.Since(monoBase)) }

// applyRun bounds and measures the applier's uninterrupted runs. work and t0
// belong to the subscription's single writer (under Subscription.mu); maxNs
// and yields are read by metrics.
type applyRun struct {
	work int   // block updates since the last yield (carried across batches)
	t0   int64 // monoNow at the start of the current slice of this Apply
	in   bool  // inside Apply (slices outside it, e.g. FlushHeld, are not timed)
	// noYield: no runtime.Gosched at slice boundaries (Options.ApplyNoYield).
	noYield bool
	// queries is the index's count of queries in flight (Index.Query).
	queries *atomic.Int64
	maxNs   atomic.Int64
	yields  atomic.Uint64
	defers  atomic.Uint64 // slices after which the applier stepped aside for queries
}

// start opens a slice at the start of an Apply.
func (r *applyRun) start() { r.t0, r.in = monoNow(), true }

// tick counts one unit of work and yields when the slice is full.
func (r *applyRun) tick() {
	r.work++
	if r.work < ApplySliceBlocks {
		return
	}
	r.work = 0
	if r.in {
		r.note(monoNow())
	}
	if !r.noYield {
		r.yields.Add(1)
		runtime.Gosched()
	}
	r.stepAside()
	if r.in {
		r.t0 = monoNow()
	}
}

// ApplyDeferMax bounds how long the applier steps aside, per slice, while
// queries are in flight: it sleeps (releasing its thread to the OS, which on a
// busy machine is what lets the query threads run) until no query is in flight
// or this much time has passed. Ingest may slow while queries run; it never
// stops (at most this much per slice) and no event is dropped.
const ApplyDeferMax = 200 * time.Microsecond

func (r *applyRun) stepAside() {
	if r.queries == nil || r.queries.Load() == 0 {
		return
	}
	r.defers.Add(1)
	deadline := monoNow() + int64(ApplyDeferMax)
	for r.queries.Load() > 0 && monoNow() < deadline {
		time.Sleep(20 * time.Microsecond)
	}
}

// end closes the Apply's last slice.
func (r *applyRun) end() {
	r.note(monoNow())
	r.in = false
}

func (r *applyRun) note(now int64) {
	if d := now - r.t0; d > r.maxNs.Load() {
		r.maxNs.Store(d) // single writer: no lost update
	}
}

// ApplyRunMax is the longest time Apply ran without yielding since the
// subscription was registered: the longest a runnable query could have waited
// behind this subscription's applier on a busy machine (a map resize or a GC
// assist inside a slice shows here).
func (s *Subscription) ApplyRunMax() time.Duration { return time.Duration(s.run.maxNs.Load()) }

// ApplyYields is the number of times the applier yielded its P (0 with
// Options.ApplyNoYield).
func (s *Subscription) ApplyYields() uint64 { return s.run.yields.Load() }

// ApplyDeferrals is the number of times the applier stepped aside for
// queries in flight (Options.QueryPriority).
func (s *Subscription) ApplyDeferrals() uint64 { return s.run.defers.Load() }
