//go:build !race

package ingest

import (
	"testing"

	zmq "github.com/pebbe/zmq4"
)

// TestFrameReaderZeroAllocs: the receive hot path allocates nothing per message.
func TestFrameReaderZeroAllocs(t *testing.T) {
	tx, rx := pairSockets(t)
	r := newFrameReader()
	defer r.free()
	seq := []byte{0, 0, 0, 0, 0, 0, 0, 1}
	payload := make([]byte, 1000)
	allocs := testing.AllocsPerRun(1000, func() {
		_, _ = tx.SendBytes(nil, zmq.SNDMORE)
		_, _ = tx.SendBytes(seq, zmq.SNDMORE)
		_, _ = tx.SendBytes(payload, 0)
		if _, err := r.read(rx); err != nil {
			t.Fatal(err)
		}
	})
	// pebbe's SendBytes allocates a 1-byte slice for an empty frame; the read
	// itself must add nothing.
	if allocs > 1 {
		t.Fatalf("%.1f allocations per message, want at most 1 (the sender's)", allocs)
	}
}
