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
		if rng.Intn(4) == 0 { // remove an earlier key
			r := keys[rng.Intn(len(keys))]
			s.remove(r)
			delete(ref, r)
		}
	}
	if s.subs == nil {
		t.Fatal("not split past keySetSplit keys")
	}
	check("after the split")
	share := float64(s.Len()) / keySubs
	for i := range s.subs {
		if n := float64(s.subs[i].Len()); n > 1.3*share {
			t.Errorf("table %d holds %.0f keys, share %.0f", i, n, share)
		}
	}
	for _, k := range keys[:len(keys)/2] {
		s.remove(k)
		delete(ref, k)
	}
	check("after removing half")
	for k := range ref {
		s.remove(k)
	}
	ref = map[uint64]bool{}
	check("emptied")
	for _, k := range keys[:1000] {
		s.add(k)
		ref[k] = true
	}
	check("refilled")
}

// meanDisplacement is the mean distance of t's keys from their home slot
// (the probe length of a lookup that finds them).
func (t *keyTable) meanDisplacement() float64 {
	mask := len(t.slots) - 1
	total := 0
	for i, k := range t.slots {
		if k != 0 {
			total += (i - t.home(k)) & mask
		}
	}
	return float64(total) / float64(max(t.n, 1))
}

// TestKeySetFromBlockMapOrder: an owner's key set rebuilt in the order a
// block map's Range visits keys (what a dump restore does) stays a short-probe
// table: the shard and home mixes are independent, so that order is no
// sorted run of home slots. (With one multiplier for both, the mean probe
// length here was in the thousands and a 1M-block restore took 100 s.)
func TestKeySetFromBlockMapOrder(t *testing.T) {
	m := newBlockMap(0)
	rng := rand.New(rand.NewSource(3))
	for i := 0; i < 200_000; i++ {
		k := rng.Uint64() | 1
		m.Compute(k, func(blockVal, bool) (blockVal, bool) { return singleVal(1), false })
	}
	var small, large keySet
	n := 0
	m.Range(func(k uint64, _ blockVal) bool {
		if n < keySetSplit/2 {
			small.add(k)
		}
		large.add(k)
		n++
		return true
	})
	if d := small.t.meanDisplacement(); d > 4 {
		t.Errorf("unsplit set: mean probe %.1f slots", d)
	}
	for i := range large.subs {
		if d := large.subs[i].meanDisplacement(); d > 4 {
			t.Errorf("table %d: mean probe %.1f slots", i, d)
		}
	}
}
