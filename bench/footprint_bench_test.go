package bench

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/seed-c7a81618/conductor/core"
)

// footprintBlocks is how many fresh blocks one BenchmarkFootprint iteration
// ingests: enough that the per-block figures are past the index's fixed costs
// (empty shard tables, the owner's key set before it splits), small enough for
// a few seconds per iteration.
const footprintBlocks = 1 << 20

// BenchmarkFootprint pins what one stored block costs the index in memory and
// allocations (in-process): each iteration decodes footprintBlocks fresh
// blocks from vLLM BlockStored payloads (the wire decoder the listeners use)
// into a new index with one engine rank, in batches of 16 or 64 blocks.
// "steady" also evicts, as a full GPU cache does: every batch removes the
// blocks stored steadyWindow batches earlier, so the index stays at
// steadyWindow batches.
//
//   - heap-B/block: live heap after a GC, less the live heap before the index
//     was built, per resident block (the entries, the shard tables, the
//     owner's key set);
//   - allocs/block: heap allocations while ingesting, per stored block (each
//     one is work for the collector);
//   - alloc-B/block: bytes allocated while ingesting, per stored block (what
//     paces the collector: at GOGC=100 a cycle runs every time the heap
//     allocates as much as is live).
//
// bench/limits.txt holds a ceiling for each figure; `make bench-report`
// (suite footprint) fails when a median exceeds one. Run with -benchtime=1x:
//
//	go test -run '^$' -bench BenchmarkFootprint -benchtime 1x -count 6 ./bench/
func BenchmarkFootprint(b *testing.B) {
	for _, mode := range []string{"grow", "steady"} {
		for _, blocks := range []int{16, 64} {
			b.Run(fmt.Sprintf("%s/batch=%d", mode, blocks), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					benchFootprint(b, blocks, mode == "steady")
				}
			})
		}
	}
}

func benchFootprint(b *testing.B, blocks int, steady bool) {
	var before, mid, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	in := newInProcessIngest(b, blocks, steady)
	batches := footprintBlocks / blocks
	ingest := func(i int) {
		if st := in.apply(b, i); st.Stored != 1 {
			b.Fatalf("batch %d: %+v", i, st)
		}
	}
	// The first batch sizes the decoder's and the batch's buffers; what
	// follows is the steady cost per block.
	ingest(0)
	runtime.ReadMemStats(&mid)
	for i := 1; i < batches; i++ {
		ingest(i)
	}
	runtime.ReadMemStats(&after)
	stored := float64((batches - 1) * blocks)
	b.ReportMetric(float64(after.Mallocs-mid.Mallocs)/stored, "allocs/block")
	b.ReportMetric(float64(after.TotalAlloc-mid.TotalAlloc)/stored, "alloc-B/block")

	resident := batches * blocks
	if steady {
		resident = min(batches, steadyWindow) * blocks
	}
	if got := in.ix.TierBlocks()[core.TierDevice]; got != resident {
		b.Fatalf("index holds %d blocks, want %d", got, resident)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(resident), "heap-B/block")
	runtime.KeepAlive(in)
}
