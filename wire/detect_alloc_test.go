//go:build !race

package wire

import (
	"testing"

	"github.com/seed-c7a81618/conductor/core"
)

// TestDetectDecodesWithoutAllocating: detection adds no allocation to a
// decode into a warm batch.
func TestDetectDecodesWithoutAllocating(t *testing.T) {
	p := batch(1.5, 0, vllmStoredMap(seqHashes(4), seqTokens(64), 16), vllmStoredArray(seqHashes(4), seqTokens(64), 16))
	var d Decoder
	var b core.Batch
	if _, err := d.DecodeAny(p, &b); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = d.DecodeAny(p, &b) }); n != 0 {
		t.Fatalf("%v allocations per DecodeAny", n)
	}
}
