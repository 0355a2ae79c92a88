package core

import (
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/hash"
)

// adapterReg is a Dynamo worker's registration: vLLM, the xxh3 default
// profile, adapters filed from its events.
func adapterReg(inst string) Registration {
	return Registration{Endpoint: "tcp://127.0.0.1:3/" + inst, Type: PublisherVLLM, ModelName: "m",
		InstanceID: inst, BlockSize: testBS, AdaptersFromEvents: true}
}

// loraStored is a vLLM BlockStored of hashes over tokens (complete blocks),
// naming adapter lora ("" names none).
func loraStored(lora string, tokens []int32, hashes ...uint64) *Batch {
	b := stored("", hashes...)
	e := &b.Events[0]
	if tokens != nil {
		e.Tokens, e.HasTokens = tokens, true
	}
	if lora != "" {
		e.LoraName = []byte(lora)
	}
	return b
}

// loraDevice queries context (m, lora, testBS) by tokens and returns
// instance inst's device boundary (0 without a row) and whether the context
// exists.
func loraDevice(t testing.TB, ix *Index, lora, inst string, tokens []int32) (int64, bool) {
	t.Helper()
	res := &QueryResult{}
	if err := ix.Query(&QueryRequest{Model: "m", LoraName: lora, BlockSize: testBS, Tokens: tokens}, res); err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, res, int64(len(tokens)))
	if r := row(res, inst); r != nil {
		return r.Device, res.ContextFound
	}
	return 0, res.ContextFound
}

func wantDevice(t testing.TB, ix *Index, lora, inst string, tokens []int32, want int64) {
	t.Helper()
	got, found := loraDevice(t, ix, lora, inst, tokens)
	if !found || got != want {
		t.Fatalf("query lora %q instance %s: device %d (context found %v), want %d", lora, inst, got, found, want)
	}
}

// prefixCounts maps each context partition of model m to its prefix count,
// keyed by LoRA name.
func prefixCounts(ix *Index) map[string]int {
	out := map[string]int{}
	for _, cv := range ix.GlobalView().Contexts {
		out[cv.LoraName] += cv.PrefixCount
	}
	return out
}

func wantCounts(t testing.TB, ix *Index, want map[string]int) {
	t.Helper()
	if got := prefixCounts(ix); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("prefix counts by LoRA %v, want %v", got, want)
	}
}

// TestAdapterBlocksFoundByLoraQuery: a stored event naming adapter A is
// filed under (m, A) and found by a query naming A only; the base model's
// query and adapter B's do not see it, and an adapter nobody published
// has no context.
func TestAdapterBlocksFoundByLoraQuery(t *testing.T) {
	ix := New(Options{Logger: quietLogger()})
	s := mustRegister(t, ix, adapterReg("1"))
	tokA, tokB, base := seqTokens(0, 4*testBS), seqTokens(1000, 2*testBS), seqTokens(5000, testBS)
	for _, c := range []struct {
		b    *Batch
		want int
	}{
		{loraStored("A", tokA, 0xA1, 0xA2, 0xA3, 0xA4), 4},
		{loraStored("B", tokB, 0xB1, 0xB2), 2},
		{loraStored("", base, 0xC1), 1},
	} {
		if st := s.Apply(c.b); st.Dropped != 0 || st.Blocks != c.want {
			t.Fatalf("store %q: %+v, want %d blocks", c.b.Events[0].LoraName, st, c.want)
		}
	}
	wantDevice(t, ix, "A", "1", tokA, 4*testBS)
	wantDevice(t, ix, "", "1", tokA, 0) // the home context's row of zeros
	wantDevice(t, ix, "B", "1", tokA, 0)
	wantDevice(t, ix, "B", "1", tokB, 2*testBS)
	wantDevice(t, ix, "", "1", base, testBS)
	wantDevice(t, ix, "A", "1", base, 0)
	if _, found := loraDevice(t, ix, "Z", "1", tokA); found {
		t.Fatal("an adapter no event named has a context")
	}
	// By prefix key too: the plain standard chain of the tokens.
	res := &QueryResult{}
	if err := ix.Query(&QueryRequest{Model: "m", LoraName: "A", BlockSize: testBS, Hashes: plainChain(tokA, testBS, 1337), ByHash: true}, res); err != nil {
		t.Fatal(err)
	}
	if r := row(res, "1"); r == nil || r.Device != 4*testBS {
		t.Fatalf("by hash in A: %+v", res.Instances)
	}
	wantCounts(t, ix, map[string]int{"": 1, "A": 4, "B": 2})
	checkKeySets(t, s)
	if got, want := ix.TierBlocks(), ix.countHoldings(); got != want || got[TierDevice] != 7 {
		t.Fatalf("TierBlocks %v, walk %v, want 7 device holdings", got, want)
	}
}

// TestAdapterRemovesReachTheirContext: BlockRemoved names no adapter; each
// hash is removed from the context that holds it (home first), under the
// xxh3 profile through the per-context engine maps and under vllm_v1 by the
// owner's holdings; store-then-remove leaves every count at zero.
func TestAdapterRemovesReachTheirContext(t *testing.T) {
	bothApplies(t, func(t *testing.T) {
		t.Run("xxh3", func(t *testing.T) {
			ix := New(Options{Logger: quietLogger()})
			s := mustRegister(t, ix, adapterReg("1"))
			tokA, base := seqTokens(0, 4*testBS), seqTokens(5000, 2*testBS)
			s.Apply(loraStored("A", tokA, 0xA1, 0xA2, 0xA3, 0xA4))
			s.Apply(loraStored("", base, 0xC1, 0xC2))
			wantCounts(t, ix, map[string]int{"": 2, "A": 4})

			if st := s.Apply(removed("", 0xA3, 0xA4, 0xC2)); st.Dropped != 0 || st.Blocks != 3 {
				t.Fatalf("mixed remove: %+v, want 3 blocks", st)
			}
			wantDevice(t, ix, "A", "1", tokA, 2*testBS)
			wantDevice(t, ix, "", "1", base, testBS)
			wantCounts(t, ix, map[string]int{"": 1, "A": 2})
			if st := s.Apply(removed("", 0xFF)); st.Blocks != 0 || st.Dropped != 0 {
				t.Fatalf("remove of a hash never stored: %+v", st)
			}
			if st := s.Apply(removed("", 0xA1, 0xA2, 0xC1)); st.Blocks != 3 {
				t.Fatalf("remove of the rest: %+v, want 3 blocks", st)
			}
			wantDevice(t, ix, "A", "1", tokA, 0)
			wantDevice(t, ix, "", "1", base, 0)
			wantCounts(t, ix, map[string]int{"": 0, "A": 0})
			if n := s.HeldBlocks(); n != 0 || ix.TierBlocks() != [NumTiers]int{} {
				t.Fatalf("held %d, holdings %v after store-then-remove", n, ix.TierBlocks())
			}
			checkKeySets(t, s)
		})
		t.Run("vllm_v1", func(t *testing.T) {
			ix := New(Options{Logger: quietLogger()})
			r := adapterReg("1")
			r.Profile, r.ProfileExplicit = cborProfile(t), true
			s := mustRegister(t, ix, r)
			byHash := func(lora string, keys ...uint64) int64 {
				t.Helper()
				res := &QueryResult{}
				if err := ix.Query(&QueryRequest{Model: "m", LoraName: lora, BlockSize: testBS, Hashes: keys, ByHash: true}, res); err != nil {
					t.Fatal(err)
				}
				if rw := row(res, "1"); rw != nil {
					return rw.Device
				}
				return 0
			}
			s.Apply(loraStored("A", nil, 11, 12, 13))
			s.Apply(loraStored("", nil, 11, 22)) // 11 in both: home first
			if d := byHash("A", 11, 12, 13); d != 3*testBS {
				t.Fatalf("A: device %d", d)
			}
			if st := s.Apply(removed("", 13, 22, 11)); st.Blocks != 3 {
				t.Fatalf("remove: %+v, want 3 blocks", st)
			}
			if d := byHash("A", 11, 12); d != 2*testBS {
				t.Fatalf("A after the remove: device %d, want %d (11 left home, not A)", d, 2*testBS)
			}
			if d := byHash("", 11); d != 0 {
				t.Fatalf("home kept 11: device %d", d)
			}
			s.Apply(removed("", 11, 12))
			wantCounts(t, ix, map[string]int{"": 0, "A": 0})
			if ix.TierBlocks() != [NumTiers]int{} {
				t.Fatalf("holdings left: %v", ix.TierBlocks())
			}
			checkKeySets(t, s)
		})
	})
}

// TestAdapterClearAndUnregister: AllBlocksCleared clears the registration's
// blocks in its adapter contexts too, and no other registration's; an
// unregister removes exactly its contributions and releases its adapter
// contexts, reclaiming those nobody else holds.
func TestAdapterClearAndUnregister(t *testing.T) {
	ix := New(Options{Logger: quietLogger()})
	s1 := mustRegister(t, ix, adapterReg("1"))
	s2 := mustRegister(t, ix, adapterReg("2"))
	tokA, tokB, base := seqTokens(0, 4*testBS), seqTokens(1000, 2*testBS), seqTokens(5000, testBS)
	fill := func() {
		s1.Apply(loraStored("A", tokA, 0xA1, 0xA2, 0xA3, 0xA4))
		s1.Apply(loraStored("B", tokB, 0xB1, 0xB2))
		s1.Apply(loraStored("", base, 0xC1))
	}
	fill()
	s2.Apply(loraStored("A", tokA, 0xA1, 0xA2, 0xA3, 0xA4))

	if st := s1.Apply(cleared()); st.Cleared != 1 {
		t.Fatalf("clear: %+v", st)
	}
	wantDevice(t, ix, "A", "1", tokA, 0)
	wantDevice(t, ix, "A", "2", tokA, 4*testBS)
	wantDevice(t, ix, "B", "1", tokB, 0)
	wantCounts(t, ix, map[string]int{"": 0, "A": 4, "B": 0})
	if got := ix.TierBlocks(); got[TierDevice] != 4 {
		t.Fatalf("holdings after the clear %v, want instance 2's 4", got)
	}
	checkKeySets(t, s1, s2)

	fill()
	if _, err := ix.Unregister(s1.Key()); err != nil {
		t.Fatal(err)
	}
	if st := s1.Apply(loraStored("C", tokA, 0xA1)); !st.Closed {
		t.Fatalf("apply after unregister: %+v", st)
	}
	gv := ix.GlobalView()
	if len(gv.Contexts) != 2 {
		t.Fatalf("contexts after unregister: %+v, want home and A (held by 2)", gv.Contexts)
	}
	for _, cv := range gv.Contexts {
		if _, ok := cv.Instances["1"]; ok {
			t.Fatalf("instance 1 left in %+v", cv)
		}
	}
	wantCounts(t, ix, map[string]int{"": 0, "A": 4})
	if _, err := ix.Unregister(s2.Key()); err != nil {
		t.Fatal(err)
	}
	if n := ix.contexts.Size(); n != 0 || ix.TierBlocks() != [NumTiers]int{} {
		t.Fatalf("%d contexts, holdings %v left: %+v", n, ix.TierBlocks(), ix.GlobalView())
	}
}

// TestAdapterBound: at most MaxAdaptersPerRegistration adapter contexts; a
// new adapter beyond them is dropped (adapter_limit, logged) until one holds
// nothing, which is then given up (and reclaimed) for it. Adapter names
// pass a registration's identity checks.
func TestAdapterBound(t *testing.T) {
	lg, logBuf := checkLog()
	ix := New(Options{Logger: lg, MaxAdaptersPerRegistration: 2})
	s := mustRegister(t, ix, adapterReg("1"))
	tok := seqTokens(0, testBS)
	s.Apply(loraStored("A", tok, 0xA1))
	s.Apply(loraStored("B", tok, 0xB1))
	if st := s.Apply(loraStored("C", tok, 0xD1)); st.Dropped != 1 || st.Blocks != 0 {
		t.Fatalf("third adapter: %+v, want a drop", st)
	}
	if n := ix.Counters().DroppedBy[DropAdapterLimit].Load(); n != 1 {
		t.Fatalf("adapter_limit drops %d, want 1", n)
	}
	if !strings.Contains(logBuf.String(), "reason=adapter_limit") || !strings.Contains(logBuf.String(), "lora_name=C") {
		t.Fatalf("drop not logged: %s", logBuf)
	}
	if _, found := loraDevice(t, ix, "C", "1", tok); found {
		t.Fatal("a dropped adapter has a context")
	}
	// A holds nothing once its block is removed: C takes its place.
	s.Apply(removed("", 0xA1))
	if st := s.Apply(loraStored("C", tok, 0xD1)); st.Dropped != 0 || st.Blocks != 1 {
		t.Fatalf("C after A emptied: %+v", st)
	}
	wantDevice(t, ix, "C", "1", tok, testBS)
	wantCounts(t, ix, map[string]int{"": 0, "B": 1, "C": 1})

	for _, bad := range []string{strings.Repeat("x", MaxIdentityBytes+1), "a\x00b", "\xff"} {
		before := ix.Counters().DroppedBy[DropWrongLora].Load()
		if st := s.Apply(loraStored(bad, tok, 0xE1)); st.Dropped != 1 || st.Blocks != 0 {
			t.Fatalf("adapter %q: %+v, want a drop", bad, st)
		}
		if n := ix.Counters().DroppedBy[DropWrongLora].Load(); n != before+1 {
			t.Fatalf("adapter %q: wrong_lora drops %d, want %d", bad, n, before+1)
		}
	}
	if n := ix.contexts.Size(); n != 3 {
		t.Fatalf("%d context keys, want home, B and C: %+v", n, ix.GlobalView())
	}
}

// TestAdaptersFromEventsOnlyWhereRegistered: the flag is the registration's
// (part of its identity, validated); a registration without it still drops
// another adapter's events as wrong_lora.
func TestAdaptersFromEventsOnlyWhereRegistered(t *testing.T) {
	ix := New(Options{Logger: quietLogger()})
	bad := adapterReg("x")
	bad.LoraName = "A"
	var fe *FieldError
	if _, _, err := ix.Register(bad); !errors.Is(err, ErrInvalid) || !errors.As(err, &fe) || fe.Field != "lora_name" {
		t.Fatalf("adapters from events with a lora_name: %v", err)
	}
	pool := adapterReg("p")
	pool.Type = PublisherMooncake
	if _, _, err := ix.Register(pool); !errors.Is(err, ErrInvalid) {
		t.Fatalf("adapters from events on a pool: %v", err)
	}
	mustRegister(t, ix, adapterReg("1"))
	if _, created, err := ix.Register(adapterReg("1")); err != nil || created {
		t.Fatalf("identical registration: created %v, %v", created, err)
	}
	plain := adapterReg("1")
	plain.AdaptersFromEvents = false
	if _, _, err := ix.Register(plain); !errors.Is(err, ErrConflict) {
		t.Fatalf("same key without the flag: %v, want a conflict", err)
	}

	other := adapterReg("2")
	other.Endpoint, other.AdaptersFromEvents = "tcp://127.0.0.1:4/2", false
	o := mustRegister(t, ix, other)
	if st := o.Apply(loraStored("A", seqTokens(0, testBS), 0xA1)); st.Dropped != 1 {
		t.Fatalf("adapter event on a plain registration: %+v, want a drop", st)
	}
	if n := ix.Counters().DroppedBy[DropWrongLora].Load(); n != 1 {
		t.Fatalf("wrong_lora drops %d, want 1", n)
	}
	if _, found := loraDevice(t, ix, "A", "2", seqTokens(0, testBS)); found {
		t.Fatal("a plain registration made an adapter context")
	}
}

// TestAdapterBindsPoolOnlyPartition: an adapter context that exists only as
// a pool-only partition (a pool registered it without a profile) is bound
// by the first stored event of a registration filing adapters, as a
// registration of it would bind it; its early subscriptions are brought up
// to the binding after the applier's lock is released, and the pool's
// blocks stay (the xxh3 default was bound).
func TestAdapterBindsPoolOnlyPartition(t *testing.T) {
	ix := New(Options{Logger: quietLogger()})
	pr := poolReg("pool")
	pr.LoraName = "A"
	pool := mustRegister(t, ix, pr)
	if st := pool.Apply(poolStored("cpu", "be", 0x51, 0x52)); st.Blocks != 2 {
		t.Fatalf("pool store: %+v", st)
	}
	s := mustRegister(t, ix, adapterReg("1"))
	tokA := seqTokens(0, 2*testBS)
	if st := s.Apply(loraStored("A", tokA, 0xA1, 0xA2)); st.Blocks != 2 || st.Dropped != 0 {
		t.Fatalf("adapter store: %+v", st)
	}
	if s.hasRebinds.Load() {
		t.Fatal("pending rebinds left after Apply")
	}
	var bound int
	for _, cv := range ix.GlobalView().Contexts {
		if cv.LoraName == "A" {
			if !cv.ProfileBound {
				t.Fatalf("adapter context not bound: %+v", cv)
			}
			bound++
		}
	}
	if bound != 1 {
		t.Fatalf("%d partitions of (m, A), want 1", bound)
	}
	wantDevice(t, ix, "A", "1", tokA, 2*testBS)
	wantCounts(t, ix, map[string]int{"": 0, "A": 4})
	checkKeySets(t, s, pool)
}

// TestAdapterDumpRestore: a stream dump carries the adapter contexts'
// holdings and engine hashes; restoring it into a fresh index with the same
// registration re-creates them, so queries answer as before and a later
// remove (no lora_name) still finds its block there.
func TestAdapterDumpRestore(t *testing.T) {
	src := New(Options{Logger: quietLogger()})
	s := mustRegister(t, src, adapterReg("1"))
	tokA, base := seqTokens(0, 4*testBS), seqTokens(5000, testBS)
	s.Apply(loraStored("A", tokA[:2*testBS], 0xA1, 0xA2))
	second := loraStored("A", tokA[2*testBS:], 0xA3, 0xA4)
	second.Events[0].Parent, second.Events[0].HasParent = 0xA2, true
	if st := s.Apply(second); st.Blocks != 2 {
		t.Fatalf("child store: %+v", st)
	}
	s.Apply(loraStored("", base, 0xC1))
	var c collector
	if err := src.DumpStreams(nil, &c); err != nil {
		t.Fatal(err)
	}

	dst := New(Options{Logger: quietLogger()})
	d := mustRegister(t, dst, adapterReg("1"))
	c.restore(t, dst)
	wantDevice(t, dst, "A", "1", tokA, 4*testBS)
	wantDevice(t, dst, "", "1", base, testBS)
	wantDevice(t, dst, "", "1", tokA, 0)
	if st := d.Apply(removed("", 0xA4)); st.Blocks != 1 {
		t.Fatalf("remove after restore: %+v", st)
	}
	wantDevice(t, dst, "A", "1", tokA, 3*testBS)
	checkKeySets(t, d)
	if got, want := dst.TierBlocks(), dst.countHoldings(); got != want {
		t.Fatalf("TierBlocks %v, walk %v", got, want)
	}
}

// TestAdapterConcurrent: an applier storing and removing blocks of more
// adapters than its bound while queriers read every adapter's context and
// the registration is unregistered, round after round (bounded in time and
// count; run under -race). Rows keep their invariants, the unregistered
// instance never shows a row afterwards, and the index ends empty.
func TestAdapterConcurrent(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	ix := New(Options{Logger: quietLogger(), MaxAdaptersPerRegistration: 3})
	const nBlocks = 8
	tokens := seqTokens(0, nBlocks*testBS)
	names := []string{"", "A", "B", "C", "D", "E"}
	keeper := mustRegister(t, ix, adapterReg("2"))
	keeper.Apply(loraStored("A", tokens, seq(nBlocks)...))

	var failed atomic.Bool
	fail := func(format string, args ...any) {
		if failed.CompareAndSwap(false, true) {
			t.Errorf(format, args...)
		}
	}
	stop := make(chan struct{})
	var qwg sync.WaitGroup
	for q := 0; q < 2; q++ {
		qwg.Add(1)
		go func(q int) {
			defer qwg.Done()
			rng := rand.New(rand.NewSource(seed + 100 + int64(q)))
			res := &QueryResult{}
			for j := 0; j < 200000; j++ {
				select {
				case <-stop:
					return
				default:
				}
				req := &QueryRequest{Model: "m", LoraName: names[rng.Intn(len(names))], BlockSize: testBS,
					Tokens: tokens[:rng.Intn(len(tokens)+1)]}
				if err := ix.Query(req, res); err != nil {
					fail("query: %v", err)
					return
				}
				if err := rowsOK(res, int64(len(tokens))); err != nil {
					fail("%v", err)
					return
				}
			}
		}(q)
	}
	deadline := time.Now().Add(300 * time.Millisecond)
	rng := rand.New(rand.NewSource(seed))
	rounds := 0
	for ; rounds < 50 && time.Now().Before(deadline) && !failed.Load(); rounds++ {
		round := rounds
		s := mustRegister(t, ix, adapterReg("1"))
		done := make(chan struct{})
		go func(seed int64) {
			defer close(done)
			rng := rand.New(rand.NewSource(seed))
			hs := seq(nBlocks)
			for k := 0; k < 2000; k++ {
				var st ApplyStats
				switch n := 1 + rng.Intn(nBlocks); rng.Intn(8) {
				case 0:
					st = s.Apply(cleared())
				case 1, 2, 3:
					st = s.Apply(removed("", hs[rng.Intn(nBlocks)]))
				default:
					st = s.Apply(loraStored(names[rng.Intn(len(names))], tokens[:n*testBS], hs[:n]...))
				}
				if st.Closed {
					return
				}
			}
		}(rng.Int63())
		time.Sleep(time.Duration(rng.Intn(3000)) * time.Microsecond)
		if _, err := ix.Unregister(s.Key()); err != nil {
			t.Fatal(err)
		}
		res := &QueryResult{}
		for _, lora := range names {
			if err := ix.Query(&QueryRequest{Model: "m", LoraName: lora, BlockSize: testBS, Tokens: tokens, Instance: "1"}, res); err != nil {
				t.Fatal(err)
			}
			if len(res.Instances) != 0 {
				t.Fatalf("round %d: row of instance 1 in %q after its unregister: %+v", round, lora, res.Instances)
			}
		}
		<-done
	}
	close(stop)
	qwg.Wait()
	t.Logf("%d rounds, %d events over the adapter bound", rounds, ix.Counters().DroppedBy[DropAdapterLimit].Load())
	if t.Failed() {
		return
	}
	checkKeySets(t, keeper)
	wantDevice(t, ix, "A", "2", tokens, nBlocks*testBS)
	if got, want := ix.TierBlocks(), ix.countHoldings(); got != want || got[TierDevice] != nBlocks {
		t.Fatalf("TierBlocks %v, walk %v, want the keeper's %d", got, want, nBlocks)
	}
	if _, err := ix.Unregister(keeper.Key()); err != nil {
		t.Fatal(err)
	}
	if n := ix.contexts.Size(); n != 0 || ix.TierBlocks() != [NumTiers]int{} {
		t.Fatalf("%d contexts, holdings %v left: %+v", n, ix.TierBlocks(), ix.GlobalView())
	}
}

// TestAdapterBindingKeepsItsFirstBlocks: an adapter registration that holds
// state in adapter A's context through a standardized event, in a pool-only
// partition, binds that partition with its first vLLM store for A (an
// explicit xxh3 profile with another seed). What the binding invalidates is
// cleared before the store files its blocks, not after: the store's blocks
// stay and are found.
func TestAdapterBindingKeepsItsFirstBlocks(t *testing.T) {
	ix := New(Options{Logger: quietLogger()})
	pr := poolReg("pool")
	pr.LoraName = "A"
	pool := mustRegister(t, ix, pr)
	pool.Apply(poolStored("cpu", "be", 0x51))
	p7, err := hash.Resolve(hash.Spec{Strategy: "xxh3", Algorithm: "xxh3_64", PythonHashSeed: "7", IndexProjection: "seq64"})
	if err != nil {
		t.Fatal(err)
	}
	r := adapterReg("1")
	r.Profile, r.ProfileExplicit = p7, true
	s := mustRegister(t, ix, r)
	ev := rfcEv(EventStored, 1, "w", "gpu", 0, 0x61)
	ev.Events[0].LoraName = []byte("A")
	s.Apply(ev)
	tok := seqTokens(0, 2*testBS)
	if st := s.Apply(loraStored("A", tok, 0xA1, 0xA2)); st.Dropped != 0 || st.Blocks != 2 {
		t.Fatalf("adapter store: %+v", st)
	}
	wantDevice(t, ix, "A", "1", tok, 2*testBS)
}
