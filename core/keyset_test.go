package core

import (
	"math/rand"
	"testing"
	"time"
)

// TestKeySetAgreesWithMap drives keySet and a Go map with the same random
// adds and removes (small key range: many collisions, wrap-around probe runs,
// growth and shrink) and compares contents.
func TestKeySetAgreesWithMap(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	for round := 0; round < 50; round++ {
		var s keySet
		ref := map[uint64]bool{}
		span := uint64(1 + rng.Intn(2000))
		for i := 0; i < 5000; i++ {
			k := uint64(rng.Int63n(int64(span)))
			if rng.Intn(3) == 0 {
				k *= 1 << 40 // same low bits, different high bits
			}
			if rng.Intn(5) < 3 {
				s.add(k)
				ref[k] = true
			} else {
				s.remove(k)
				delete(ref, k)
			}
		}
		if s.Len() != len(ref) {
			t.Fatalf("round %d: len %d want %d", round, s.Len(), len(ref))
		}
		seen := map[uint64]bool{}
		s.each(func(k uint64) {
			if !ref[k] || seen[k] {
				t.Fatalf("round %d: unexpected or repeated key %d", round, k)
			}
			seen[k] = true
		})
		for k := range ref {
			s.remove(k)
		}
		if s.Len() != 0 {
			t.Fatalf("round %d: %d keys left after removing all", round, s.Len())
		}
	}
}
