package core

import (
	"math/rand"
	"slices"
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
	if l.added()-l.head+len(l.skipped)-len(l.removes) != l.n {
		t.Fatalf("log: %d adds (%d taken by evict, %d of them skipped), %d removes, %d keys", l.added(), l.head, len(l.skipped), len(l.removes), l.n)
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

// keyOrderModel is the reference for keySet's add order: each key in the set
// with the time it last entered (added, or refreshed), and marks with the
// time they were taken. A key precedes a mark iff it entered before it.
type keyOrderModel struct {
	clock int
	at    map[uint64]int // key → entry time
	marks map[uint64]int // mark id → time
}

func (m *keyOrderModel) tick() int { m.clock++; return m.clock }

// sorted returns the keys of the set in entry order.
func (m *keyOrderModel) sorted() []uint64 {
	ks := make([]uint64, 0, len(m.at))
	for k := range m.at {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(a, b uint64) int { return m.at[a] - m.at[b] })
	return ks
}

// bySub returns the keys of each of a split set's logs in entry order.
func (m *keyOrderModel) bySub() [keySubs][]uint64 {
	var subs [keySubs][]uint64
	for _, k := range m.sorted() {
		subs[keySub(k)] = append(subs[keySub(k)], k)
	}
	return subs
}

// TestKeySetOrderAgreesWithModel drives keySet and keyOrderModel with random
// adds, removes, refreshes, marks and mark takes (and, in the large rounds,
// past the split), and checks after each take that it returns exactly the
// keys that entered before the mark and are still in the set, and that
// evict drops keys of the set, as many as asked, and after a compaction the
// keys that entered first: exactly before the split, the oldest of each log
// in proportion to its size after it.
func TestKeySetOrderAgreesWithModel(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	for round := 0; round < 40; round++ {
		var s keySet
		m := &keyOrderModel{at: map[uint64]int{}, marks: map[uint64]int{}}
		span := uint64(1 + rng.Intn(3000))
		nextMark := uint64(1)
		if round%8 == 7 {
			// Cross the split with marks in place: fill the set past it,
			// marking three times on the way, then go on at random.
			span = keySetSplit * 4
			for i := 0; i < keySetSplit+5000; i++ {
				if i%25000 == 12345 {
					s.mark(nextMark)
					m.marks[nextMark] = m.tick()
					nextMark++
				}
				k := uint64(i)*2*0x9E3779B97F4A7C15 | 1 // distinct: span's keys use other multiples
				s.add(k)
				m.at[k] = m.tick()
			}
			if s.subs == nil {
				t.Fatalf("round %d: the set did not split", round)
			}
		}
		for i := 0; i < 6000; i++ {
			k := (uint64(rng.Int63n(int64(span)))*2 + 1) * 0x9E3779B97F4A7C15
			_, in := m.at[k]
			switch r := rng.Intn(1000); {
			case !in && r < 600:
				s.add(k)
				m.at[k] = m.tick()
			case in && r < 300:
				s.remove(k)
				delete(m.at, k)
			case in && r < 600:
				s.refresh(k)
				m.at[k] = m.tick()
			case r < 604 && len(m.marks) < 6:
				s.mark(nextMark)
				m.marks[nextMark] = m.tick()
				nextMark++
			case r < 608 && len(m.marks) > 0:
				id := uint64(0)
				for id = range m.marks {
					break
				}
				got := s.takeMark(id, nil)
				var want []uint64
				for k, at := range m.at {
					if at < m.marks[id] {
						want = append(want, k)
					}
				}
				delete(m.marks, id)
				slices.Sort(got)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Fatalf("round %d step %d: mark %d took %d keys, want %d", round, i, id, len(got), len(want))
				}
				// The caller drops them: they leave the set.
				for _, k := range got {
					s.remove(k)
					delete(m.at, k)
				}
			case r < 612:
				// Evict: every key drop is offered that the set holds leaves
				// it; after a compaction (half the time) they are exactly the
				// oldest, in order; with removes pending, a key removed and
				// stored again may go in the place of its first add, so only
				// the count and membership are checked.
				n := rng.Intn(len(m.at)/4 + 2)
				compacted := rng.Intn(2) == 0
				if compacted {
					s.each(func(uint64) {})
				}
				var want []uint64
				if s.subs == nil {
					want = m.sorted()
					want = want[:min(n, len(want))]
				} else {
					for _, ks := range m.bySub() {
						if len(ks) > 0 {
							want = append(want, ks[:min(len(ks), (n*len(ks)+len(m.at)-1)/len(m.at))]...)
						}
					}
				}
				before := len(m.at)
				var got []uint64
				done := s.evict(n, func(k uint64) bool {
					if _, in := m.at[k]; !in {
						return false
					}
					delete(m.at, k)
					got = append(got, k)
					return true
				})
				if done != len(got) || s.Len() != len(m.at) {
					t.Fatalf("round %d step %d: evict(%d) reported %d, dropped %d; len %d want %d", round, i, n, done, len(got), s.Len(), len(m.at))
				}
				if s.subs == nil && len(got) != min(n, before) ||
					s.subs != nil && n <= before && (len(got) < n || len(got) > n+keySubs) {
					t.Fatalf("round %d step %d: evict(%d) of %d keys dropped %d", round, i, n, before, len(got))
				}
				if compacted {
					if s.subs != nil {
						slices.Sort(got)
						slices.Sort(want)
					}
					if !slices.Equal(got, want) {
						t.Fatalf("round %d step %d: evict(%d) after a compaction dropped %d keys, not the %d oldest", round, i, n, len(got), len(want))
					}
				}
				for j := range s.subs {
					checkLogBound(t, &s.subs[j])
				}
				if s.subs == nil {
					checkLogBound(t, &s.l)
				}
			}
		}
		if s.Len() != len(m.at) {
			t.Fatalf("round %d: len %d want %d", round, s.Len(), len(m.at))
		}
	}
}

// TestKeySetEvictTakesOnlyWhatItDrops: a registration over its block bound
// evicts on every batch, and the owner's set has removes pending in every
// log. evict must not compact for them (a compaction per batch would cost
// the whole set each time): after each round every log keeps the removes
// it had, holds no more adds than its keys, its pending removes and one
// chunk, and the set still agrees with a map.
func TestKeySetEvictTakesOnlyWhatItDrops(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	var s keySet
	ref := map[uint64]bool{}
	var order []uint64 // every key added, in order
	add := func() {
		k := rng.Uint64()
		s.add(k)
		ref[k] = true
		order = append(order, k)
	}
	for range 4 * keySetSplit {
		add()
	}
	drop := func(k uint64) bool {
		if !ref[k] {
			return false
		}
		delete(ref, k)
		return true
	}
	skippedSeen := 0
	for round := range 2000 {
		for range 64 {
			add()
		}
		// Remove a few held keys, the oldest among them on some rounds
		// (the adds evict then meets are ones whose key left the set).
		for j := 0; j < 4; j++ {
			k := order[rng.Intn(len(order))]
			if j == 0 && round%3 == 0 {
				k = order[len(order)-s.Len()+rng.Intn(64)]
			}
			if ref[k] {
				s.remove(k)
				delete(ref, k)
			}
		}
		pending := make([]int, keySubs)
		for i := range s.subs {
			pending[i] = len(s.subs[i].removes)
		}
		if got := s.evict(60, drop); got < 60 || got > 60+keySubs {
			t.Fatalf("round %d: evicted %d, want 60 to %d", round, got, 60+keySubs)
		}
		for i := range s.subs {
			l := &s.subs[i]
			if len(l.removes) != pending[i] {
				t.Fatalf("round %d: evict compacted log %d (%d removes pending, now %d)", round, i, pending[i], len(l.removes))
			}
			if held := l.added() - l.head; held > l.n+len(l.removes)+keyChunk {
				t.Fatalf("round %d: log %d holds %d adds for %d keys and %d removes", round, i, held, l.n, len(l.removes))
			}
			checkLogBound(t, l)
			skippedSeen += len(l.skipped)
		}
		if s.Len() != len(ref) {
			t.Fatalf("round %d: len %d want %d", round, s.Len(), len(ref))
		}
	}
	if skippedSeen == 0 {
		t.Fatal("test premise: evict never met an add whose key had left the set")
	}
	n := 0
	s.each(func(k uint64) {
		if !ref[k] {
			t.Fatalf("unexpected key %x", k)
		}
		n++
	})
	if n != len(ref) {
		t.Fatalf("each visited %d, want %d", n, len(ref))
	}
}

// TestKeySetEachMarked: eachMarked names for every key the oldest mark it
// precedes, which is the mark whose takeMark returns it (the caller then
// removes the key), before and after the split, with keys refreshed behind
// a mark and removed.
func TestKeySetEachMarked(t *testing.T) {
	for _, n := range []int{1000, keySetSplit + 5000} {
		rng := rand.New(rand.NewSource(int64(n)))
		var s keySet
		in := map[uint64]bool{}
		add := func(k int) {
			for j := 0; j < k; j++ {
				key := rng.Uint64()
				s.add(key)
				in[key] = true
			}
		}
		some := func(f func(k uint64)) {
			for k := range in {
				if rng.Intn(4) == 0 {
					f(k)
				}
			}
		}
		add(n / 2)
		s.mark(1)
		some(func(k uint64) { s.refresh(k) })
		some(func(k uint64) { s.remove(k); delete(in, k) })
		add(n / 4)
		s.mark(2)
		add(n / 4)
		some(func(k uint64) { s.refresh(k) })
		got := map[uint64]uint64{}
		s.eachMarked(func(k, mark uint64) { got[k] = mark })
		if len(got) != len(in) {
			t.Fatalf("n=%d: eachMarked visited %d keys of %d", n, len(got), len(in))
		}
		for _, id := range []uint64{1, 2} {
			taken := s.takeMark(id, nil)
			for _, k := range taken {
				if got[k] != id {
					t.Fatalf("n=%d: takeMark(%d) returned a key eachMarked put at mark %d", n, id, got[k])
				}
				s.remove(k)
				delete(got, k)
			}
		}
		for _, m := range got {
			if m != 0 {
				t.Fatalf("n=%d: a key eachMarked put at mark %d was not taken", n, m)
			}
		}
	}
}
