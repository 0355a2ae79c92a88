package core

import (
	"math/rand"
	"testing"
	"time"
)

// countHoldings walks every block: the reference for TierBlocks.
func (ix *Index) countHoldings() [NumTiers]int {
	var n [NumTiers]int
	ix.contexts.Range(func(_ ContextKey, head *context) bool {
		for c := head; c != nil; c = c.next.Load() {
			c.blocks.Range(func(_ uint64, v blockVal) bool {
				v.forEach(func(w uint64) { n[wordTier(w)]++ })
				return true
			})
		}
		return true
	})
	return n
}

// checkKeySets asserts that every owner key set of the subscriptions equals
// the blocks in which a walk of the index finds a word of that owner.
func checkKeySets(t testing.TB, subs ...*Subscription) {
	t.Helper()
	for _, s := range subs {
		s.mu.Lock()
		held := 0
		for _, sc := range s.state {
			for _, set := range sc.keys {
				held += set.Len()
			}
		}
		if held != s.heldKeys {
			s.mu.Unlock()
			t.Fatalf("%s: key sets hold %d keys, heldKeys says %d", s.Key(), held, s.heldKeys)
		}
		for c, sc := range s.state {
			want := map[uint32]map[uint64]bool{}
			ids := c.ownersOf(s.id, nil)
			c.blocks.Range(func(k uint64, v blockVal) bool {
				v.forEach(func(w uint64) {
					if id := wordOwner(w); ids[id] {
						if want[id] == nil {
							want[id] = map[uint64]bool{}
						}
						want[id][k] = true
					}
				})
				return true
			})
			for id := range ids {
				got := sc.keys[id]
				if got.Len() != len(want[id]) {
					s.mu.Unlock()
					t.Fatalf("%s owner %d: key set has %d keys, index %d", s.Key(), id, got.Len(), len(want[id]))
				}
				seen := make(map[uint64]bool, len(want[id]))
				got.each(func(k uint64) {
					if !want[id][k] || seen[k] {
						t.Errorf("%s owner %d: key %d in set but not in index, or visited twice", s.Key(), id, k)
					}
					seen[k] = true
				})
				if len(seen) != len(want[id]) {
					s.mu.Unlock()
					t.Fatalf("%s owner %d: key set visits %d keys, index %d", s.Key(), id, len(seen), len(want[id]))
				}
			}
		}
		s.mu.Unlock()
	}
}

// TestTierBlocksMatchesIndex: the incrementally kept per-tier holding counts
// and every owner's key set (used to clear an owner in time proportional to
// its own blocks) equal a walk of the index after random stores, removes, duplicate copies,
// clears, pool events, restore and unregisters.
func TestTierBlocksMatchesIndex(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	ix := New(Options{})
	p := cborProfile(t)
	// a expires what it held at its gaps, b is bounded below what it
	// stores (evicting its oldest blocks).
	ra, rb := engineReg(t, "a", 0, p), engineReg(t, "b", 0, p)
	ra.GapPolicy, rb.MaxBlocks = GapExpire, 25
	a := mustRegister(t, ix, ra)
	b := mustRegister(t, ix, rb)
	pool := mustRegister(t, ix, poolReg("pool"))
	sr := engineReg(t, "std", 0, p)
	sr.Type = PublisherStandard
	std := mustRegister(t, ix, sr)
	media := []string{"GPU", "CPU", "DISK"}
	check := func(step string) {
		t.Helper()
		if got, want := ix.TierBlocks(), ix.countHoldings(); got != want {
			t.Fatalf("%s: TierBlocks %v, walk %v", step, got, want)
		}
		checkKeySets(t, a, b, pool, std)
	}
	for i := 0; i < 2000; i++ {
		if rng.Intn(4) == 0 {
			// A standardized publisher: streams by backend, medium and rank;
			// no event ids, so each event applies as it comes.
			k := uint64(rng.Intn(40))
			e := rfcEv([]EventKind{EventStored, EventStored, EventRemoved, EventCleared}[rng.Intn(4)], 0,
				[]string{"w0", "w1"}[rng.Intn(2)], []string{"gpu", "cpu", "disk", "external"}[rng.Intn(4)], uint32(rng.Intn(2)), k, k+1)
			e.Events[0].HasEventID = false
			std.Apply(e)
			continue
		}
		s := []*Subscription{a, b}[rng.Intn(2)]
		k := uint64(rng.Intn(40))
		m := media[rng.Intn(3)]
		switch rng.Intn(16) {
		case 12:
			a.Gap("random gap")
			continue
		case 13:
			a.ExpireOldest()
			continue
		}
		switch rng.Intn(12) {
		case 0:
			s.Apply(cleared())
		case 1, 2:
			pool.Apply(poolStored([]string{"cpu", "disk"}[rng.Intn(2)], "s", k))
		case 3:
			b := poolStored("cpu", "s", k)
			b.Events[0].Kind = EventRemoved
			pool.Apply(b)
		case 4, 5, 6:
			s.Apply(removed(m, k))
		default:
			s.Apply(stored(m, k, k+1, k+2))
		}
		if i%100 == 0 {
			check("step")
		}
	}
	check("random events")
	// Sure to expire and evict: a gap, its expiry (after those of any
	// random gaps still pending), 30 fresh keys for b.
	a.Apply(stored("GPU", 50, 51))
	a.Gap("gap")
	for _, pending := a.NextExpiry(); pending; _, pending = a.NextExpiry() {
		a.ExpireOldest()
	}
	for k := uint64(100); k < 130; k++ {
		b.Apply(stored("CPU", k))
	}
	check("expiry and eviction")
	if c := ix.Counters(); c.EvictedBlocks.Load() == 0 || c.ExpiredBlocks.Load() == 0 {
		t.Fatalf("test premise: evictions (%d) and expiries (%d)", c.EvictedBlocks.Load(), c.ExpiredBlocks.Load())
	}
	var dump collector
	if err := ix.DumpStreams(nil, &dump); err != nil {
		t.Fatal(err)
	}
	ix2 := New(Options{})
	a2 := mustRegister(t, ix2, ra)
	b2 := mustRegister(t, ix2, rb)
	pool2 := mustRegister(t, ix2, poolReg("pool"))
	std2 := mustRegister(t, ix2, sr)
	dump.restore(t, ix2)
	if got, want := ix2.TierBlocks(), ix.TierBlocks(); got != want {
		t.Fatalf("restored %v want %v", got, want)
	}
	checkKeySets(t, a2, b2, pool2, std2)
	// The restored stream owners are the live ones: clearing one stream on
	// both indexes leaves equal holdings.
	for _, s := range []*Subscription{std, std2} {
		e := rfcEv(EventCleared, 0, "w0", "gpu", 0)
		e.Events[0].HasEventID = false
		s.Apply(e)
	}
	if got, want := ix2.TierBlocks(), ix.TierBlocks(); got != want {
		t.Fatalf("after a stream clear: restored %v want %v", got, want)
	}
	checkKeySets(t, std, std2)
	if _, err := ix.Unregister(a.Key()); err != nil {
		t.Fatal(err)
	}
	if ix.TierBlocks() == [NumTiers]int{} {
		t.Fatal("test premise: b and the pool hold blocks")
	}
	checkKeySets(t, b, pool, std)
	if got, want := ix.TierBlocks(), ix.countHoldings(); got != want {
		t.Fatalf("unregister a: TierBlocks %v, walk %v", got, want)
	}
	for _, s := range []*Subscription{b, pool, std} {
		if _, err := ix.Unregister(s.Key()); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := ix.TierBlocks(), ix.countHoldings(); got != want {
		t.Fatalf("unregister all: TierBlocks %v, walk %v", got, want)
	}
	if ix.TierBlocks() != [NumTiers]int{} {
		t.Fatalf("holdings left: %v", ix.TierBlocks())
	}
}
