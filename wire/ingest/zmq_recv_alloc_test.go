//go:build !race

package ingest

import (
	"testing"
)

// TestFrameReaderZeroAllocs: the receive hot path (and the binding's send)
// allocates nothing per message.
func TestFrameReaderZeroAllocs(t *testing.T) {
	tx, rx := pairSockets(t)
	r := newFrameReader(initialFrameBuf)
	defer r.free()
	seq := []byte{0, 0, 0, 0, 0, 0, 0, 1}
	payload := make([]byte, 1000)
	allocs := testing.AllocsPerRun(1000, func() {
		_ = tx.send(nil, zSNDMORE)
		_ = tx.send(seq, zSNDMORE)
		_ = tx.send(payload, 0)
		if _, err := r.read(rx); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per message, want 0", allocs)
	}
}
