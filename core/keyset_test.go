package core

import (
	"math/rand"
	"testing"
	"time"
)

// TestKeySetAgreesWithMap drives keySet and a Go map with the same random
// adds and removes (small key range: a key added and removed many times,
// compactions among them) and compares contents.
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
			// The apply path's contract: add a key the owner does not
			// hold, remove one it holds.
			switch {
			case !ref[k] && rng.Intn(5) < 3:
				s.add(k)
				ref[k] = true
			case ref[k] && rng.Intn(5) >= 3:
				s.remove(k)
				delete(ref, k)
			}
			if i%500 == 0 {
				checkLogBound(t, &s.l)
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

// TestKeySetSplitAgreesWithMap: an owner set that passes keySetSplit keys is
// split into keySubs tables and keeps agreeing with a Go map through adds,
// removes (down to empty, with the key 0) and more adds; afterwards no table
// holds more than 1.3× its share, so a table's growth copies about a 64th of
// the set.
func TestKeySetSplitAgreesWithMap(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	var s keySet
	ref := map[uint64]bool{}
	check := func(when string) {
		t.Helper()
		if s.Len() != len(ref) {
			t.Fatalf("%s: len %d want %d", when, s.Len(), len(ref))
		}
		n := 0
		s.each(func(k uint64) {
			if !ref[k] {
				t.Fatalf("%s: unexpected key %x", when, k)
			}
			n++
		})
		if n != len(ref) {
			t.Fatalf("%s: each visited %d want %d", when, n, len(ref))
		}
	}
	s.add(0)
	ref[0] = true
	keys := make([]uint64, 0, 3*keySetSplit)
	for len(keys) < 3*keySetSplit {
		k := rng.Uint64()
		keys = append(keys, k)
		s.add(k)
		ref[k] = true
		if rng.Intn(4) == 0 { // remove an earlier key still held
			if r := keys[rng.Intn(len(keys))]; ref[r] {
				s.remove(r)
				delete(ref, r)
			}
		}
	}
	if s.subs == nil {
		t.Fatal("not split past keySetSplit keys")
	}
	check("after the split")
	share := float64(s.Len()) / keySubs
	for i := range s.subs {
		if n := float64(s.subs[i].n); n > 1.3*share {
			t.Errorf("log %d holds %.0f keys, share %.0f", i, n, share)
		}
		checkLogBound(t, &s.subs[i])
	}
	for _, k := range keys[:len(keys)/2] {
		if ref[k] {
			s.remove(k)
			delete(ref, k)
		}
	}
	for i := range s.subs {
		checkLogBound(t, &s.subs[i])
	}
	check("after removing half")
	for k := range ref {
		s.remove(k)
	}
	ref = map[uint64]bool{}
	check("emptied")
	for i := range s.subs {
		if l := &s.subs[i]; l.chunks != nil || l.removes != nil {
			t.Fatalf("emptied: log %d keeps %d adds and %d removes", i, l.added(), len(l.removes))
		}
	}
	for _, k := range keys[:1000] {
		s.add(k)
		ref[k] = true
	}
	check("refilled")
}

// checkLogBound asserts the log's size bound: removes stay under the set's
// keys (or keyLogMinCompact), so the adds hold at most twice the keys.
func checkLogBound(t *testing.T, l *keyLog) {
	t.Helper()
	if l.added()-len(l.removes) != l.n {
		t.Fatalf("log: %d adds, %d removes, %d keys", l.added(), len(l.removes), l.n)
	}
	for i, c := range l.chunks {
		if len(c) == 0 || (i < len(l.chunks)-1 && len(c) != keyChunk) {
			t.Fatalf("log: chunk %d of %d holds %d keys", i, len(l.chunks), len(c))
		}
	}
	if len(l.removes) >= max(l.n, keyLogMinCompact) {
		t.Fatalf("log not compacted: %d removes for %d keys", len(l.removes), l.n)
	}
}
