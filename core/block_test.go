package core

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestBlockValAgreesWithModel drives blockVal's updates with random adds,
// removes and owner drops and checks every result against a map of (owner,
// tier) → copies: the words, the created/changed/dropped flags, holds, and
// that an update never alters the value it started from.
func TestBlockValAgreesWithModel(t *testing.T) {
	type slotKey struct {
		ref ownerRef
		t   Tier
	}
	rng := rand.New(rand.NewPCG(1, 2))
	refs := []ownerRef{makeRef(0, 0), makeRef(1, 0), makeRef(1, 1), makeRef(7, 200), makeRef(1<<20, 3)}
	words := func(v blockVal) []uint64 {
		var out []uint64
		v.forEach(func(w uint64) { out = append(out, w) })
		slices.Sort(out)
		return out
	}
	want := func(m map[slotKey]uint32) []uint64 {
		var out []uint64
		for k, c := range m {
			out = append(out, ownerWord(k.ref, k.t, c))
		}
		slices.Sort(out)
		return out
	}
	for run := 0; run < 200; run++ {
		var v blockVal
		m := map[slotKey]uint32{}
		for step := 0; step < 60; step++ {
			before := words(v)
			old := v
			r, tier := refs[rng.IntN(len(refs))], Tier(rng.IntN(int(NumTiers)))
			k := slotKey{r, tier}
			n := uint32(1 + rng.IntN(2))
			switch op := rng.IntN(10); {
			case op < 5:
				nv, created := v.withAdded(r, tier, n)
				if created != (m[k] == 0) {
					t.Fatalf("run %d step %d: add %v: created %v, model held %d", run, step, k, created, m[k])
				}
				m[k] += n
				v = nv
			case op < 9:
				nv, changed, dropped := v.withRemoved(r, tier, n)
				c := m[k]
				if changed != (c > 0) || dropped != (c > 0 && c <= n) {
					t.Fatalf("run %d step %d: remove %d of %v: changed %v dropped %v, model held %d", run, step, n, k, changed, dropped, c)
				}
				if c <= n {
					delete(m, k)
				} else {
					m[k] = c - n
				}
				v = nv
			default:
				id := r.id()
				nv, changed := v.withoutOwners(func(o uint32) bool { return o == id })
				had := false
				for mk := range m {
					if mk.ref.id() == id {
						had = true
						delete(m, mk)
					}
				}
				if changed != had {
					t.Fatalf("run %d step %d: drop owner %d: changed %v, model had %v", run, step, id, changed, had)
				}
				v = nv
			}
			if !slices.Equal(words(old), before) {
				t.Fatalf("run %d step %d: the update changed the old value: %x, was %x", run, step, words(old), before)
			}
			if got, exp := words(v), want(m); !slices.Equal(got, exp) {
				t.Fatalf("run %d step %d: words %x, model %x", run, step, got, exp)
			}
			if v.empty() != (len(m) == 0) || (!v.empty() && v.first() == 0) {
				t.Fatalf("run %d step %d: empty %v first %x with %d holdings", run, step, v.empty(), v.first(), len(m))
			}
			for _, r := range refs {
				held := false
				for mk := range m {
					held = held || mk.ref.id() == r.id()
				}
				if v.holds(r.id()) != held {
					t.Fatalf("run %d step %d: holds(%d) = %v, model %v", run, step, r.id(), v.holds(r.id()), held)
				}
			}
		}
	}
}

// TestSingleValShared checks that a block whose only word holds one copy
// shares that word's holdings (no allocation of its own), while other values
// get their own.
func TestSingleValShared(t *testing.T) {
	r := makeRef(3, 9)
	a, _ := blockVal{}.withAdded(r, TierDevice, 1)
	b, _ := blockVal{}.withAdded(r, TierDevice, 1)
	if a.h != b.h {
		t.Fatal("two single-copy values of one word do not share their holdings")
	}
	two, _ := a.withAdded(r, TierDevice, 1)
	if two.h == a.h || wordCopies(two.first()) != 2 {
		t.Fatalf("two copies: %x shares %v", two.first(), two.h == a.h)
	}
	back, _, _ := two.withRemoved(r, TierDevice, 1)
	if back.h != a.h {
		t.Fatal("back to one copy: not the shared holdings")
	}
	if n := testing.AllocsPerRun(100, func() { a, _ = blockVal{}.withAdded(r, TierCPULocal, 1) }); n != 0 {
		t.Fatalf("a new single-copy block allocates %v times", n)
	}
}

// TestSingleValManyOwners fills the shared-holdings cache with the words of
// 1,000 owners on two tiers (a large fleet's hot set; ids and generations
// drawn at random, as after much owner churn) and checks that every one is
// still cached afterwards: no set overflowed into evicting another.
func TestSingleValManyOwners(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var words []uint64
	for range 1000 {
		r := makeRef(uint32(rng.IntN(1<<20)), uint8(rng.IntN(256)))
		for _, tier := range []Tier{TierDevice, TierCPULocal} {
			words = append(words, ownerWord(r, tier, 1))
		}
	}
	first := make([]*holdings, len(words))
	for i, w := range words {
		first[i] = singleVal(w).h
	}
	for i, w := range words {
		if v := singleVal(w); v.h != first[i] || v.first() != w {
			t.Fatalf("word %x: evicted by later words (%d in all)", w, len(words))
		}
	}
}
