package ingest

import (
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/wire"
)

// TestBatchLagUnits: integer timestamps are milliseconds for Mooncake and
// standard streams, float timestamps are seconds everywhere (the lag gauge
// read -1.79e12 s before: milliseconds taken as seconds).
func TestBatchLagUnits(t *testing.T) {
	now := time.Now()
	f := func(b core.Batch, d wire.Dialect, want float64) {
		t.Helper()
		lag, ok := batchLag(&b, d)
		if !ok || lag < want-5 || lag > want+5 { // seconds; generous for a slow machine
			t.Fatalf("dialect %v batch %+v: lag %v ok %v, want about %v", d, b, lag, ok, want)
		}
	}
	ms := uint64(now.Add(-30 * time.Second).UnixMilli())
	f(core.Batch{TimestampU: ms, TimestampF: float64(ms)}, wire.DialectMooncake, 30)
	f(core.Batch{TimestampU: ms, TimestampF: float64(ms)}, wire.DialectStandard, 30)
	sec := float64(now.Add(-20*time.Second).UnixNano()) / 1e9
	f(core.Batch{TimestampF: sec}, wire.DialectMooncake, 20)
	f(core.Batch{TimestampF: sec}, wire.DialectVLLM, 20)
	if _, ok := batchLag(&core.Batch{}, wire.DialectVLLM); ok {
		t.Fatal("a batch without a timestamp has a lag")
	}
}
