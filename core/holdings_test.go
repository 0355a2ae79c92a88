package core

import (
	"math/rand"
	"testing"
	"time"
)

// countHoldings walks every block: the reference for TierBlocks.
func (ix *Index) countHoldings() [NumTiers]int {
	var n [NumTiers]int
	ix.contexts.Range(func(_ ContextKey, c *context) bool {
		c.blocks.Range(func(_ uint64, v blockVal) bool {
			v.forEach(func(w uint64) { n[wordTier(w)]++ })
			return true
		})
		return true
	})
	return n
}

// TestTierBlocksMatchesIndex: the incrementally kept per-tier holding counts
// equal a walk of the index after random stores, removes, duplicate copies,
// clears, pool events, restore and unregisters.
func TestTierBlocksMatchesIndex(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	ix := New(Options{})
	p := cborProfile(t)
	a := mustRegister(t, ix, engineReg(t, "a", 0, p))
	b := mustRegister(t, ix, engineReg(t, "b", 0, p))
	pool := mustRegister(t, ix, poolReg("pool"))
	media := []string{"GPU", "CPU", "DISK"}
	check := func(step string) {
		t.Helper()
		if got, want := ix.TierBlocks(), ix.countHoldings(); got != want {
			t.Fatalf("%s: TierBlocks %v, walk %v", step, got, want)
		}
	}
	for i := 0; i < 2000; i++ {
		s := []*Subscription{a, b}[rng.Intn(2)]
		k := uint64(rng.Intn(40))
		m := media[rng.Intn(3)]
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
	}
	check("random events")
	var dump collector
	if err := ix.DumpStreams(nil, &dump); err != nil {
		t.Fatal(err)
	}
	ix2 := New(Options{})
	mustRegister(t, ix2, engineReg(t, "a", 0, p))
	mustRegister(t, ix2, engineReg(t, "b", 0, p))
	mustRegister(t, ix2, poolReg("pool"))
	dump.restore(t, ix2)
	if got, want := ix2.TierBlocks(), ix.TierBlocks(); got != want {
		t.Fatalf("restored %v want %v", got, want)
	}
	if _, err := ix.Unregister(a.Key()); err != nil {
		t.Fatal(err)
	}
	check("unregister a")
	for _, s := range []*Subscription{b, pool} {
		if _, err := ix.Unregister(s.Key()); err != nil {
			t.Fatal(err)
		}
	}
	check("unregister all")
	if ix.TierBlocks() != [NumTiers]int{} {
		t.Fatalf("holdings left: %v", ix.TierBlocks())
	}
}
