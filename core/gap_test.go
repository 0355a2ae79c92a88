package core

import (
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"
)

// heldKeys returns the keys of blocks 1..n that inst holds in any tier.
func heldKeys(t *testing.T, ix *Index, inst string, n uint64) []uint64 {
	t.Helper()
	var held []uint64
	for k := uint64(1); k <= n; k++ {
		if r := row(queryHashes(t, ix, inst, k), inst); r != nil && r.LongestMatched == testBS {
			held = append(held, k)
		}
	}
	return held
}

// checkHoldings asserts the index-wide holding counts and key sets agree
// with a walk of the index.
func checkHoldings(t *testing.T, ix *Index, subs ...*Subscription) {
	t.Helper()
	if got, want := ix.TierBlocks(), ix.countHoldings(); got != want {
		t.Fatalf("TierBlocks %v, walk %v", got, want)
	}
	checkKeySets(t, subs...)
}

// TestGapPolicies: what each policy leaves after a transport gap. Before
// it, the engine holds blocks 1..4 on GPU and block 3 also on CPU. After it
// the engine stores block 5, stores block 2 again (GPU), offloads block 4
// to CPU and removes block 1 (every event a later message carries; the lost
// ones are unknown). Hand-worked expectations:
//
//   - keep:   2 3 4 5 held (nothing dropped at the gap);
//   - clear:  2 4 5 (everything dropped at the gap, then the new events);
//   - expire: 2 3 4 5 until the expiry, then 2 4 5: block 3 was held at the
//     gap and not announced again; 2 and 4 were, and 5 is new.
func TestGapPolicies(t *testing.T) {
	for _, tc := range []struct {
		policy        GapPolicy
		atGap, after  []uint64
		expired       []uint64 // after the expiry (expire only)
		blocksAtGap   int
		keeps, clears int
	}{
		{GapKeep, []uint64{1, 2, 3, 4}, []uint64{2, 3, 4, 5}, nil, 0, 1, 0},
		{GapClear, nil, []uint64{2, 4, 5}, nil, 4, 0, 1},
		{GapExpire, []uint64{1, 2, 3, 4}, []uint64{2, 3, 4, 5}, []uint64{2, 4, 5}, 4, 0, 0},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			ix := New(Options{GapPolicy: GapClear, GapExpireAfter: time.Minute}) // the registration's policy wins
			r := engineReg(t, "a", 0, cborProfile(t))
			r.GapPolicy = tc.policy
			s := mustRegister(t, ix, r)
			s.Apply(stored("GPU", 1, 2, 3, 4))
			s.Apply(stored("CPU", 3))
			res := s.Gap("seq 7..9 lost")
			if res.Policy != tc.policy || res.Blocks != tc.blocksAtGap {
				t.Fatalf("gap: %+v, want policy %v and %d blocks", res, tc.policy, tc.blocksAtGap)
			}
			if got := heldKeys(t, ix, "a", 6); !slices.Equal(got, tc.atGap) {
				t.Fatalf("after the gap: %v, want %v", got, tc.atGap)
			}
			s.Apply(stored("GPU", 5))
			s.Apply(stored("GPU", 2))
			s.Apply(stored("CPU", 4))
			s.Apply(removed("GPU", 1))
			if got := heldKeys(t, ix, "a", 6); !slices.Equal(got, tc.after) {
				t.Fatalf("after the new events: %v, want %v", got, tc.after)
			}
			checkHoldings(t, ix, s)
			c := ix.Counters()
			if c.GapKeeps.Load() != uint64(tc.keeps) || c.GapClears.Load() != uint64(tc.clears) {
				t.Fatalf("counters: keeps %d clears %d", c.GapKeeps.Load(), c.GapClears.Load())
			}
			at, pending := s.NextExpiry()
			if pending != (tc.policy == GapExpire) {
				t.Fatalf("pending expiry %v (at %v)", pending, at)
			}
			if !pending {
				return
			}
			if n := s.ExpireDue(at.Add(-time.Second)); n != 0 {
				t.Fatalf("expired %d blocks before the deadline", n)
			}
			if n := s.ExpireDue(at); n != 1 || c.ExpiredBlocks.Load() != 1 || c.GapMarks.Load() != 1 {
				t.Fatalf("expired %d blocks (counter %d), want 1", n, c.ExpiredBlocks.Load())
			}
			if got := heldKeys(t, ix, "a", 6); !slices.Equal(got, tc.expired) {
				t.Fatalf("after the expiry: %v, want %v", got, tc.expired)
			}
			if _, pending := s.NextExpiry(); pending {
				t.Fatal("an expiry still pending")
			}
			// Block 4 keeps both its tiers (announced again on one of them).
			if r := row(queryHashes(t, ix, "a", 4), "a"); r.Device != testBS || r.CPULocal != testBS {
				t.Fatalf("block 4: %+v", r)
			}
			checkHoldings(t, ix, s)
		})
	}
}

// TestGapExpireMarksInOrder: two gaps make two marks; each expiry drops
// what preceded its own gap and was not announced again, oldest mark first,
// and a clear forgets pending marks.
func TestGapExpireMarksInOrder(t *testing.T) {
	ix := New(Options{GapPolicy: GapExpire, GapExpireAfter: time.Minute})
	s := mustRegister(t, ix, engineReg(t, "a", 0, cborProfile(t)))
	s.Apply(stored("GPU", 1, 2))
	s.Gap("first")
	s.Apply(stored("GPU", 3, 4))
	s.Apply(stored("GPU", 1)) // announced again after the first gap
	s.Gap("second")
	s.Apply(stored("GPU", 5))
	s.Apply(stored("GPU", 3)) // announced again after the second
	first, _ := s.NextExpiry()
	if n := s.ExpireDue(first); n != 1 {
		t.Fatalf("first expiry dropped %d blocks, want 1 (block 2)", n)
	}
	if got := heldKeys(t, ix, "a", 6); !slices.Equal(got, []uint64{1, 3, 4, 5}) {
		t.Fatalf("after the first expiry: %v", got)
	}
	second, _ := s.NextExpiry()
	if n := s.ExpireDue(second.Add(time.Hour)); n != 2 {
		t.Fatalf("second expiry dropped %d blocks, want 2 (blocks 1 and 4)", n)
	}
	if got := heldKeys(t, ix, "a", 6); !slices.Equal(got, []uint64{3, 5}) {
		t.Fatalf("after the second expiry: %v", got)
	}
	checkHoldings(t, ix, s)
	s.Gap("third")
	s.Clear("publisher restart")
	if _, pending := s.NextExpiry(); pending || s.HeldBlocks() != 0 {
		t.Fatalf("a clear left a pending expiry or %d blocks", s.HeldBlocks())
	}
}

// TestGapPolicyEventIDGap: an RFC #1527 event_id gap that never fills is a
// gap of that stream only. Two streams of one standard publisher (backends
// w0 and w1) hold blocks 1 and 2; events 3 and 4 of w0 are lost, so its
// event 5 waits until MaxHeldEvents is passed. Under keep both streams'
// blocks stay; under clear w0's go; under expire w0's are marked (and
// dropped at the expiry) while w1's are not.
func TestGapPolicyEventIDGap(t *testing.T) {
	for _, tc := range []struct {
		policy           GapPolicy
		atGap, atExpiry  []uint64
		expiries, clears int
	}{
		{GapKeep, []uint64{1, 2, 10, 11}, []uint64{1, 2, 10, 11}, 0, 0},
		{GapClear, []uint64{2, 10, 11}, []uint64{2, 10, 11}, 0, 1},
		{GapExpire, []uint64{1, 2, 10, 11}, []uint64{2, 10, 11}, 1, 0},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			ix := New(Options{MaxHeldEvents: 1, GapPolicy: tc.policy})
			r := engineReg(t, "std", 0, cborProfile(t))
			r.Type = PublisherStandard
			s := mustRegister(t, ix, r)
			s.Apply(rfcEv(EventStored, 1, "w0", "gpu", 0, 1))
			s.Apply(rfcEv(EventStored, 2, "w1", "gpu", 0, 2))
			s.Apply(rfcEv(EventStored, 5, "w0", "gpu", 0, 10)) // held: 3, 4 missing
			s.Apply(rfcEv(EventStored, 6, "w0", "gpu", 0, 11)) // over MaxHeldEvents: the gap is given up
			if got := heldKeys(t, ix, "std", 12); !slices.Equal(got, tc.atGap) {
				t.Fatalf("after the event_id gap: %v, want %v", got, tc.atGap)
			}
			if ix.Counters().EventIDGaps.Load() != 1 || ix.Counters().StreamGapClears.Load() != uint64(tc.clears) {
				t.Fatalf("gaps %d, clears %d", ix.Counters().EventIDGaps.Load(), ix.Counters().StreamGapClears.Load())
			}
			at, pending := s.NextExpiry()
			if pending != (tc.expiries > 0) {
				t.Fatalf("pending expiry: %v", pending)
			}
			if pending {
				s.ExpireDue(at)
			}
			if got := heldKeys(t, ix, "std", 12); !slices.Equal(got, tc.atExpiry) {
				t.Fatalf("after the expiry: %v, want %v", got, tc.atExpiry)
			}
			checkHoldings(t, ix, s)
		})
	}
}

// TestGapReleasesHeldEvents: a transport gap explains a jump of the
// event_ids: events held for ids the lost batches carried are applied at
// once, in order, and later ids follow on from them without a wait.
func TestGapReleasesHeldEvents(t *testing.T) {
	ix := New(Options{GapPolicy: GapKeep})
	r := engineReg(t, "std", 0, cborProfile(t))
	r.Type = PublisherStandard
	s := mustRegister(t, ix, r)
	s.Apply(rfcEv(EventStored, 1, "w0", "gpu", 0, 1))
	s.Apply(rfcEv(EventStored, 4, "w0", "gpu", 0, 4)) // 2, 3 were in a lost batch: held
	if got := heldKeys(t, ix, "std", 6); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("before the gap: %v", got)
	}
	res := s.Gap("seq 2..3 lost")
	if res.Applied.Stored != 1 {
		t.Fatalf("gap applied %+v, want the held store", res.Applied)
	}
	s.Apply(rfcEv(EventStored, 5, "w0", "gpu", 0, 5))
	if got := heldKeys(t, ix, "std", 6); !slices.Equal(got, []uint64{1, 4, 5}) {
		t.Fatalf("after the gap: %v", got)
	}
	if ix.Counters().EventIDGaps.Load() != 0 {
		t.Fatal("the transport gap was counted again as an event_id gap")
	}
}

// gapObserver records the gap-related observer calls.
type gapObserver struct{ calls []string }

func (o *gapObserver) Registered(*Registration)   {}
func (o *gapObserver) Unregistered(*Registration) {}
func (o *gapObserver) Applied(*Subscription, *Batch) {
}
func (o *gapObserver) Cleared(*Subscription) { o.calls = append(o.calls, "cleared") }
func (o *gapObserver) Flushed(*Subscription) {}
func (o *gapObserver) Gapped(_ *Subscription, p GapPolicy) {
	o.calls = append(o.calls, "gap "+p.String())
}
func (o *gapObserver) Expired(*Subscription) { o.calls = append(o.calls, "expired") }

// TestGapObserverAndReplay: the observer sees each gap with the policy
// applied and each expiry, in order, and a second index that repeats them
// (GapWith, ExpireOldest: what a replica does) ends with the same blocks,
// whatever its own default policy.
func TestGapObserverAndReplay(t *testing.T) {
	obs := &gapObserver{}
	src := New(Options{Observer: obs, GapPolicy: GapExpire})
	dst := New(Options{GapPolicy: GapClear})
	r := engineReg(t, "a", 0, cborProfile(t))
	s, d := mustRegister(t, src, r), mustRegister(t, dst, r)
	both := func(b *Batch) { s.Apply(b); d.Apply(b) }
	both(stored("GPU", 1, 2, 3))
	s.Gap("lost")
	d.GapWith(GapExpire, "relay: gap")
	both(stored("GPU", 2))
	at, _ := s.NextExpiry()
	s.ExpireDue(at)
	d.ExpireOldest()
	s.Clear("restart")
	d.Clear("restart")
	both(stored("GPU", 4))
	want := []string{"gap expire", "expired", "cleared"}
	if !slices.Equal(obs.calls, want) {
		t.Fatalf("observer calls %v, want %v", obs.calls, want)
	}
	if got, want := heldKeys(t, dst, "a", 5), heldKeys(t, src, "a", 5); !slices.Equal(got, want) || !slices.Equal(got, []uint64{4}) {
		t.Fatalf("replayed index holds %v, source %v", got, want)
	}
}

// TestBlockBound: a registration that never removes blocks is held to its
// bound: past MaxBlocks (owner, block) pairs the oldest are evicted, first
// announced first, counted in ApplyStats.Evicted and Counters.EvictedBlocks.
// A key held on two tiers is one pair. A negative MaxBlocks lifts the
// default bound, and 0 takes it.
func TestBlockBound(t *testing.T) {
	ix := New(Options{MaxBlocksPerRegistration: 30})
	r := engineReg(t, "a", 0, cborProfile(t))
	r.MaxBlocks = 100
	s := mustRegister(t, ix, r)
	evicted := 0
	for i := uint64(0); i < 15; i++ {
		var hs []uint64
		for j := uint64(1); j <= 10; j++ {
			hs = append(hs, i*10+j)
		}
		evicted += s.Apply(stored("GPU", hs...)).Evicted
		evicted += s.Apply(stored("CPU", hs[0])).Evicted // a second tier of a held key: no new pair
	}
	held := heldKeys(t, ix, "a", 160)
	want := make([]uint64, 0, 100)
	for k := uint64(51); k <= 150; k++ {
		want = append(want, k)
	}
	if !slices.Equal(held, want) || s.HeldBlocks() != 100 || evicted != 50 || ix.Counters().EvictedBlocks.Load() != 50 {
		t.Fatalf("held %d blocks %v..., %d evicted (counter %d); want 51..150 and 50", len(held), held[:min(5, len(held))],
			evicted, ix.Counters().EvictedBlocks.Load())
	}
	checkHoldings(t, ix, s)

	for _, tc := range []struct {
		max, want int
	}{{0, 30}, {-1, 60}} {
		r := engineReg(t, fmt.Sprintf("b%d", tc.max), 0, cborProfile(t))
		r.MaxBlocks = tc.max
		s := mustRegister(t, ix, r)
		for k := uint64(1); k <= 60; k++ {
			s.Apply(stored("GPU", k))
		}
		if s.HeldBlocks() != tc.want {
			t.Fatalf("MaxBlocks %d: %d held, want %d", tc.max, s.HeldBlocks(), tc.want)
		}
	}
}

// TestParseGapPolicy: names in any case; "" is the default; others are a
// field error naming gap_policy and the valid names.
func TestParseGapPolicy(t *testing.T) {
	for in, want := range map[string]GapPolicy{"": GapDefault, "keep": GapKeep, "CLEAR": GapClear, "Expire": GapExpire} {
		if got, err := ParseGapPolicy(in); err != nil || got != want {
			t.Errorf("%q: %v, %v", in, got, err)
		}
	}
	_, err := ParseGapPolicy("keeep")
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "gap_policy" || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "keep, clear, expire") {
		t.Fatalf("bad name: %v", err)
	}
}

// TestBlockBoundPastSplit: a registration held at a bound past the key
// set's split, whose publisher also removes blocks it holds (some of them
// among its oldest, so eviction meets adds whose keys already left) and
// stores again some it no longer holds. Every batch leaves it at most at the
// bound, the blocks it holds are exactly those stored less those removed and
// evicted (each checked against the index when chosen), and the index, the
// holding counts and the owner's key set agree throughout.
func TestBlockBoundPastSplit(t *testing.T) {
	const bound = keySetSplit + 5000
	ix := New(Options{MaxBlocksPerRegistration: bound, Logger: quietLogger()})
	s := mustRegister(t, ix, engineReg(t, "a", 0, cborProfile(t)))
	isHeld := func(h uint64) bool {
		r := row(queryHashes(t, ix, "a", h), "a")
		return r != nil && r.LongestMatched == testBS
	}
	rng := rand.New(rand.NewSource(3))
	var order []uint64 // every hash stored, in order
	type removal struct {
		h     uint64
		batch int
	}
	var gone []removal // removed, oldest first
	next := uint64(1)
	nStored, nRemoved, nEvicted := 0, 0, 0
	for batch := 0; batch < 3000; batch++ {
		var hs []uint64
		// Store again a few removed at least 3 batches ago (the evictions
		// since have passed over their first adds), then fresh blocks.
		for len(gone) > 0 && gone[0].batch <= batch-3 && len(hs) < 8 {
			if h := gone[0].h; !isHeld(h) {
				hs = append(hs, h)
			}
			gone = gone[1:]
		}
		for len(hs) < 64 {
			hs = append(hs, next*0x9E3779B97F4A7C15)
			next++
		}
		nStored += len(hs)
		st := s.Apply(stored("GPU", hs...))
		nEvicted += st.Evicted
		order = append(order, hs...)
		var rm []uint64
		for j := 0; j < 6; j++ {
			i := rng.Intn(len(order))
			if j < 3 && len(order) > nEvicted+nRemoved+128 {
				// Among the next the bound evicts: the oldest held.
				i = nEvicted + nRemoved + rng.Intn(128)
			}
			if h := order[i]; isHeld(h) && !slices.Contains(rm, h) {
				rm = append(rm, h)
			}
		}
		s.Apply(removed("GPU", rm...))
		nRemoved += len(rm)
		for _, h := range rm {
			gone = append(gone, removal{h, batch})
		}
		if held := s.HeldBlocks(); held > bound || held != nStored-nRemoved-nEvicted {
			t.Fatalf("batch %d: holds %d blocks; stored %d, removed %d, evicted %d; bound %d", batch, held, nStored, nRemoved, nEvicted, bound)
		}
		if batch%500 == 499 {
			checkHoldings(t, ix, s)
		}
	}
	if nEvicted == 0 || ix.Counters().EvictedBlocks.Load() != uint64(nEvicted) {
		t.Fatalf("evicted %d, counter %d", nEvicted, ix.Counters().EvictedBlocks.Load())
	}
	checkHoldings(t, ix, s)
}

// BenchmarkApplyOverBound: the cost per stored block of a registration held
// at its block bound (in-process): each batch stores 64 fresh blocks, so
// every batch evicts its oldest. removes=0 is a publisher that never removes
// blocks; removes=4 removes 4 it holds after each batch, so its key set has
// removes pending as it evicts (a publisher that lost some removes and went
// on). Past keySetSplit keys the set is split, as every large owner's is.
//
//	go test -run '^$' -bench BenchmarkApplyOverBound -benchtime 20000x ./core/
func BenchmarkApplyOverBound(b *testing.B) {
	for _, c := range []struct{ bound, removes int }{{1 << 18, 0}, {1 << 18, 4}, {1 << 21, 0}, {1 << 21, 4}} {
		bound := c.bound
		b.Run(fmt.Sprintf("bound=%d/removes=%d", bound, c.removes), func(b *testing.B) {
			ix := New(Options{MaxBlocksPerRegistration: bound, Logger: quietLogger()})
			s := mustRegister(b, ix, engineReg(b, "a", 0, cborProfile(b)))
			next := uint64(1)
			batch := func() []uint64 {
				hs := make([]uint64, 64)
				for j := range hs {
					hs[j] = next * 0x9E3779B97F4A7C15
					next++
				}
				return hs
			}
			for s.HeldBlocks() < bound {
				s.Apply(stored("GPU", batch()...))
			}
			rng := rand.New(rand.NewSource(1))
			b.ReportAllocs()
			b.ResetTimer()
			evicted := 0
			for range b.N {
				evicted += s.Apply(stored("GPU", batch()...)).Evicted
				if c.removes == 0 {
					continue
				}
				var rm []uint64
				for range c.removes { // held: stored within the last bound/2 blocks
					rm = append(rm, (next-1-uint64(rng.Intn(bound/2)))*0x9E3779B97F4A7C15)
				}
				s.Apply(removed("GPU", rm...))
			}
			b.StopTimer()
			if evicted == 0 || s.HeldBlocks() > bound {
				b.Fatalf("premise: %d evicted, %d held (bound %d)", evicted, s.HeldBlocks(), bound)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(64*b.N), "ns/block")
		})
	}
}
