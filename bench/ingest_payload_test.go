package bench

import (
	"slices"
	"testing"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/wire"
)

// TestAppendStandardBatch: a standard publisher's batch decodes with
// conductor's standardized-event decoder, every event kind with its fields
// (nil model and block size stay absent; a negative rank is nil).
func TestAppendStandardBatch(t *testing.T) {
	payload := AppendStandardBatch(nil, 1700000000123, -1,
		StandardEvent{EventID: 7, Type: "stored", SeqHashes: []uint64{11, 1<<64 - 1}, Parent: 5, HasParent: true,
			Tokens: []int32{1, 2, 3, 4}, ModelName: "m", BlockSize: 2, Medium: "gpu", DPRank: 1},
		StandardEvent{EventID: 8, Type: "removed", SeqHashes: []uint64{11}, Medium: "cpu", DPRank: -1},
		StandardEvent{EventID: 9, Type: "cleared"})
	var dec wire.Decoder
	var b core.Batch
	if err := dec.Decode(wire.DialectStandard, payload, &b); err != nil || b.Skipped != 0 {
		t.Fatalf("decode: %v (skipped %d: %v)", err, b.Skipped, b.Errors)
	}
	if b.HasDPRank || len(b.Events) != 3 {
		t.Fatalf("batch rank %v, %d events", b.HasDPRank, len(b.Events))
	}
	st, rm, cl := &b.Events[0], &b.Events[1], &b.Events[2]
	if st.Kind != core.EventStored || st.EventID != 7 || !slices.Equal(st.Hashes, []uint64{11, 1<<64 - 1}) ||
		!st.HasParent || st.Parent != 5 || !slices.Equal(st.Tokens, []int32{1, 2, 3, 4}) ||
		string(st.ModelName) != "m" || st.BlockSize != 2 || string(st.Medium) != "gpu" || !st.HasDPRank || st.DPRank != 1 {
		t.Fatalf("stored %+v", st)
	}
	if rm.Kind != core.EventRemoved || rm.EventID != 8 || !slices.Equal(rm.Hashes, []uint64{11}) ||
		rm.HasModelName || rm.HasBlockSize || string(rm.Medium) != "cpu" || rm.HasDPRank {
		t.Fatalf("removed %+v", rm)
	}
	if cl.Kind != core.EventCleared || cl.EventID != 9 || cl.Medium != nil {
		t.Fatalf("cleared %+v", cl)
	}
}
