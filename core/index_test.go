package core

import (
	"errors"
	"testing"

	"github.com/seed-c7a81618/conductor/hash"
)

func TestTwoInstancesShareThePool(t *testing.T) {
	ix := New(Options{})
	p := cborProfile(t)
	a := mustRegister(t, ix, engineReg(t, "a", 0, p))
	mustRegister(t, ix, engineReg(t, "b", 0, p))
	pool := mustRegister(t, ix, poolReg("pool"))
	h := seq(3)
	a.Apply(stored("GPU", h[0], h[1]))
	pool.Apply(poolStored("cpu", "store-1", h...))
	res := queryHashes(t, ix, "", h...)
	checkInvariants(t, res, 48)
	if len(res.Instances) != 2 {
		t.Fatalf("want rows a and b, got %+v", res.Instances)
	}
	ra, rb := row(res, "a"), row(res, "b")
	if ra.Device != 32 || ra.CPUShare != 48 || ra.LongestMatched != 48 {
		t.Fatalf("a: %+v", ra)
	}
	if rb.Device != 0 || rb.CPULocal != 0 || rb.CPUShare != 48 || rb.LongestMatched != 48 {
		t.Fatalf("b: %+v", rb)
	}
}

func TestRanksNeverFabricateOnePrefix(t *testing.T) {
	ix := New(Options{})
	p := cborProfile(t)
	r0 := mustRegister(t, ix, engineReg(t, "a", 0, p))
	r1 := mustRegister(t, ix, engineReg(t, "a", 1, p))
	h := seq(2)
	r0.Apply(stored("GPU", h[0]))
	r1.Apply(stored("GPU", h[1]))
	res := queryHashes(t, ix, "a", h...)
	r := row(res, "a")
	if r == nil || len(r.Ranks) != 2 {
		t.Fatalf("want two ranks: %+v", res.Instances)
	}
	if r.Ranks[0].Rank != 0 || r.Ranks[0].Device != 16 || r.Ranks[1].Rank != 1 || r.Ranks[1].Device != 0 {
		t.Fatalf("ranks: %+v", r.Ranks)
	}
	if r.Device != 16 || r.LongestMatched != 16 {
		t.Fatalf("row: %+v", r)
	}
}

func TestBatchRankOverridesRegisteredRank(t *testing.T) {
	ix := New(Options{})
	s := mustRegister(t, ix, engineReg(t, "a", 0, cborProfile(t)))
	b := stored("GPU", 7)
	b.DPRank, b.HasDPRank = 3, true
	s.Apply(b)
	r := row(queryHashes(t, ix, "a", 7), "a")
	if r == nil || len(r.Ranks) != 2 || r.Ranks[0].Rank != 0 || r.Ranks[0].Device != 0 || r.Ranks[1].Rank != 3 || r.Ranks[1].Device != 16 {
		t.Fatalf("want registered rank 0 (no hit) and batch rank 3 (hit): %+v", r)
	}
	// Unregister removes the overridden rank's blocks too.
	if _, err := ix.Unregister(s.Key()); err != nil {
		t.Fatal(err)
	}
	if res := queryHashes(t, ix, "a", 7); len(res.Instances) != 0 {
		t.Fatalf("rows after unregister: %+v", res.Instances)
	}
}

func TestDuplicateCopiesNeedOneRemoveEach(t *testing.T) {
	ix := New(Options{})
	s := mustRegister(t, ix, engineReg(t, "a", 0, cborProfile(t)))
	s.Apply(stored("GPU", 1))
	s.Apply(stored("GPU", 1)) // second physical copy of the same hash
	s.Apply(removed("GPU", 1))
	if r := row(queryHashes(t, ix, "a", 1), "a"); r.Device != 16 {
		t.Fatalf("after one of two removes: %+v", r)
	}
	s.Apply(removed("GPU", 1))
	if r := row(queryHashes(t, ix, "a", 1), "a"); r.Device != 0 {
		t.Fatalf("after both removes: %+v", r)
	}
	// An extra remove is a no-op and never goes negative.
	st := s.Apply(removed("GPU", 1))
	s.Apply(stored("GPU", 1))
	if r := row(queryHashes(t, ix, "a", 1), "a"); r.Device != 16 || st.Blocks != 0 {
		t.Fatalf("extra remove changed state: %+v %+v", r, st)
	}
	if gv := ix.GlobalView(); gv.Contexts[0].PrefixCount != 1 {
		t.Fatalf("prefix count %d", gv.Contexts[0].PrefixCount)
	}
}

func TestClearIsOwnerScoped(t *testing.T) {
	ix := New(Options{})
	p := cborProfile(t)
	a := mustRegister(t, ix, engineReg(t, "a", 0, p))
	b := mustRegister(t, ix, engineReg(t, "b", 0, p))
	pool := mustRegister(t, ix, poolReg("pool"))
	h := seq(3)
	a.Apply(stored("GPU", h...))
	b.Apply(stored("GPU", h[0]))
	pool.Apply(poolStored("disk", "store-1", h...))
	a.Apply(cleared())
	res := queryHashes(t, ix, "", h...)
	if r := row(res, "a"); r.Device != 0 || r.Disk != 48 {
		t.Fatalf("a after clear: %+v", r)
	}
	if r := row(res, "b"); r.Device != 16 || r.Disk != 48 {
		t.Fatalf("b after a's clear: %+v", r)
	}
}

func TestRegistrationRules(t *testing.T) {
	ix := New(Options{})
	p := cborProfile(t)
	r := engineReg(t, "a", 0, p)
	s1, created, err := ix.Register(r)
	if err != nil || !created {
		t.Fatal(created, err)
	}
	s2, created, err := ix.Register(r)
	if err != nil || created || s2 != s1 {
		t.Fatalf("identical re-registration must be idempotent: %v %v", created, err)
	}
	diff := r
	diff.ReplayEndpoint = "tcp://127.0.0.1:9"
	var ce *ConflictError
	if _, _, err := ix.Register(diff); !errors.Is(err, ErrConflict) || !errors.As(err, &ce) || ce.Holder != (ServiceKey{InstanceID: "a", TenantID: "default"}) {
		t.Fatalf("conflicting config: %v", err)
	}
	other := engineReg(t, "b", 0, p)
	other.Endpoint = r.Endpoint
	if _, _, err := ix.Register(other); !errors.Is(err, ErrConflict) || !errors.As(err, &ce) || ce.Holder != (ServiceKey{InstanceID: "a", TenantID: "default"}) ||
		err.Error() != "register b|default|0: endpoint "+r.Endpoint+" is used by a|default|0: conductor: conflict" {
		t.Fatalf("endpoint in use: %v (holder %v)", err, ce.Holder)
	}
	bad := engineReg(t, "c", 0, p)
	bad.BlockSize = 0
	if _, _, err := ix.Register(bad); !errors.Is(err, ErrInvalid) {
		t.Fatalf("block size 0: %v", err)
	}
	g := int64(1)
	bad = engineReg(t, "c", 0, p)
	bad.CacheGroup = &g
	if _, _, err := ix.Register(bad); !errors.Is(err, ErrInvalid) {
		t.Fatalf("cache group 1: %v", err)
	}
	if n := len(ix.Services()); n != 1 {
		t.Fatalf("services: %d", n)
	}
}

func TestProfileConflictIsAtomic(t *testing.T) {
	ix := New(Options{})
	mustRegister(t, ix, engineReg(t, "a", 0, cborProfile(t)))
	pickle, err := hash.Resolve(hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256", PythonHashSeed: "0", IndexProjection: "low64_be"})
	if err != nil {
		t.Fatal(err)
	}
	before := ix.GlobalView()
	if _, _, err := ix.Register(engineReg(t, "b", 0, pickle)); !errors.Is(err, ErrConflict) {
		t.Fatalf("mixed algorithms in one context: %v", err)
	}
	after := ix.GlobalView()
	if len(ix.Services()) != 1 || len(after.Contexts) != 1 || len(after.Contexts[0].Instances) != len(before.Contexts[0].Instances) {
		t.Fatalf("conflict changed state: %+v", after)
	}
	// The same profile in another context (different block size) is fine.
	r := engineReg(t, "b", 0, pickle)
	r.BlockSize = 32
	mustRegister(t, ix, r)
}

func TestUnknownContextCreatesNoState(t *testing.T) {
	ix := New(Options{})
	mustRegister(t, ix, engineReg(t, "a", 0, cborProfile(t)))
	for _, req := range []QueryRequest{
		{TenantID: "other", Model: "m", BlockSize: testBS},
		{Model: "m2", BlockSize: testBS},
		{Model: "m", LoraName: "l", BlockSize: testBS},
		{Model: "m", BlockSize: 32},
	} {
		req.Tokens = make([]int32, 64)
		res := &QueryResult{}
		if err := ix.Query(&req, res); err != nil || res.ContextFound || len(res.Instances) != 0 {
			t.Fatalf("%+v: %v %+v", req, err, res)
		}
	}
	if n := len(ix.GlobalView().Contexts); n != 1 {
		t.Fatalf("queries created contexts: %d", n)
	}
	// Unknown instance filter: context found, no rows.
	if res := queryHashes(t, ix, "zzz", 1); !res.ContextFound || len(res.Instances) != 0 {
		t.Fatalf("filter: %+v", res)
	}
}

func TestTenantIsolation(t *testing.T) {
	ix := New(Options{})
	r := engineReg(t, "a", 0, cborProfile(t))
	r.TenantID = "t1"
	s := mustRegister(t, ix, r)
	s.Apply(stored("GPU", 5))
	if res := queryHashes(t, ix, "", 5); res.ContextFound {
		t.Fatalf("default tenant sees t1's context")
	}
	res := &QueryResult{}
	if err := ix.Query(&QueryRequest{TenantID: "t1", Model: "m", BlockSize: testBS, Hashes: []uint64{5}, ByHash: true}, res); err != nil {
		t.Fatal(err)
	}
	if len(res.Instances) != 1 || res.Instances[0].Device != 16 {
		t.Fatalf("t1: %+v", res.Instances)
	}
}

// TestTokenQueryAndSalt stores the vLLM sha256_cbor chain of a prompt and
// queries by tokens: the full prompt hits, a salted query misses, an
// incomplete tail is ignored and zero-hit ranks stay in the result.
func TestTokenQueryAndSalt(t *testing.T) {
	ix := New(Options{})
	p := cborProfile(t)
	s := mustRegister(t, ix, engineReg(t, "a", 0, p))
	mustRegister(t, ix, engineReg(t, "a", 1, p))
	tokens := make([]int32, 4*testBS+5)
	for i := range tokens {
		tokens[i] = int32(100 + i)
	}
	keys, err := hash.AppendChain(nil, &p, tokens, testBS, nil, nil)
	if err != nil || len(keys) != 4 {
		t.Fatal(keys, err)
	}
	s.Apply(stored("GPU", keys[:3]...))
	q := func(salt string, n int) *InstanceResult {
		res := &QueryResult{}
		req := &QueryRequest{Model: "m", BlockSize: testBS, Tokens: tokens[:n]}
		if salt != "" {
			req.CacheSalt = []byte(salt)
		}
		if err := ix.Query(req, res); err != nil {
			t.Fatal(err)
		}
		checkInvariants(t, res, int64(n/testBS*testBS))
		return row(res, "a")
	}
	if r := q("", len(tokens)); r.Device != 48 || len(r.Ranks) != 2 || r.Ranks[1].Device != 0 {
		t.Fatalf("unsalted: %+v", r)
	}
	if r := q("tenant-salt", len(tokens)); r.Device != 0 || r.LongestMatched != 0 {
		t.Fatalf("salted query must miss unsalted stores: %+v", r)
	}
	if r := q("", 31); r.Device != 16 || len(r.Ranks) != 2 {
		t.Fatalf("31 tokens = 1 complete block: %+v", r)
	}
	if r := q("", 15); r.Device != 0 || len(r.Ranks) != 2 {
		t.Fatalf("no complete block, ranks retained: %+v", r)
	}
}

func TestUnknownMediumIsNeverDevice(t *testing.T) {
	ix := New(Options{})
	s := mustRegister(t, ix, engineReg(t, "a", 0, cborProfile(t)))
	st := s.Apply(stored("tape", 1))
	if st.Dropped != 1 || ix.Counters().UnknownMedia.Load() != 1 {
		t.Fatalf("stats %+v unknown=%d", st, ix.Counters().UnknownMedia.Load())
	}
	if r := row(queryHashes(t, ix, "a", 1), "a"); r.LongestMatched != 0 {
		t.Fatalf("unknown medium filed: %+v", r)
	}
	// Media compare case-insensitively.
	s.Apply(stored("gPu", 1))
	if r := row(queryHashes(t, ix, "a", 1), "a"); r.Device != 16 {
		t.Fatalf("gPu: %+v", r)
	}
}

func TestEngineAdmissionRules(t *testing.T) {
	ix := New(Options{})
	s := mustRegister(t, ix, engineReg(t, "a", 0, cborProfile(t)))
	cases := []struct {
		name string
		mut  func(e *Event)
	}{
		{"other group", func(e *Event) { e.HasGroupIdx, e.GroupIdx = true, 1 }},
		{"sliding window", func(e *Event) { e.SpecKind = []byte("sliding_window") }},
		{"window set", func(e *Event) { e.HasSlidingWindow = true }},
		{"other lora", func(e *Event) { e.LoraName = []byte("x") }},
		{"lora id only", func(e *Event) { e.HasLoraID, e.LoraID = true, 3 }},
		{"partial block", func(e *Event) { e.BlockSize = 5 }},
	}
	for i, c := range cases {
		b := stored("GPU", uint64(i+1))
		c.mut(&b.Events[0])
		if st := s.Apply(b); st.Dropped != 1 || st.Blocks != 0 {
			t.Fatalf("%s: %+v", c.name, st)
		}
	}
	ok := stored("GPU", 99)
	ok.Events[0].HasGroupIdx = true
	ok.Events[0].SpecKind = []byte("full_attention")
	if st := s.Apply(ok); st.Blocks != 1 {
		t.Fatalf("group 0 full attention: %+v", st)
	}
}

// TestEngineBaseBlocksOnLoraRegistration (engines.md "LoRA and cache_salt":
// one registration indexes one adapter): on a vLLM registration of adapter x
// under the default profile, a BlockStored with no lora_name and no lora_id
// is a base-model block and is dropped as wrong_lora, so a query for x finds
// nothing; x's own blocks, a legacy bare lora_id and the adapter-less
// BlockRemoved still apply. An SGLang registration of x files its events,
// which never name an adapter, under x.
func TestEngineBaseBlocksOnLoraRegistration(t *testing.T) {
	tokens := seqTokens(1, 2*testBS)
	withTokens := func(b *Batch) *Batch {
		b.Events[0].Tokens, b.Events[0].HasTokens = tokens, true
		return b
	}
	device := func(ix *Index, inst string) int64 {
		t.Helper()
		res := &QueryResult{}
		if err := ix.Query(&QueryRequest{Model: "m", LoraName: "x", BlockSize: testBS, Tokens: tokens}, res); err != nil {
			t.Fatal(err)
		}
		if r := row(res, inst); r != nil {
			return r.Device
		}
		return 0
	}
	ix := New(Options{Logger: quietLogger()})
	r := engineReg(t, "a", 0, hash.Profile{})
	r.ProfileExplicit, r.LoraName = false, "x"
	s := mustRegister(t, ix, r)

	if st := s.Apply(withTokens(stored("GPU", 0xA1, 0xA2))); st.Dropped != 1 || st.Blocks != 0 {
		t.Fatalf("base-model block on adapter x's registration: %+v, want one drop", st)
	}
	if n := ix.Counters().DroppedBy[DropWrongLora].Load(); n != 1 {
		t.Fatalf("wrong_lora drops %d, want 1", n)
	}
	if d := device(ix, "a"); d != 0 {
		t.Fatalf("query for x after a base-model block: device %d, want 0", d)
	}

	legacy := withTokens(stored("GPU", 0xB1))
	legacy.Events[0].Tokens = tokens[:testBS]
	legacy.Events[0].HasLoraID, legacy.Events[0].LoraID = true, 7
	if st := s.Apply(legacy); st.Dropped != 0 || st.Blocks != 1 {
		t.Fatalf("bare lora_id on x's registration: %+v, want one block", st)
	}
	if d := device(ix, "a"); d != testBS {
		t.Fatalf("after the lora_id block: device %d, want %d", d, testBS)
	}

	named := withTokens(stored("GPU", 0xC1, 0xC2))
	named.Events[0].LoraName = []byte("x")
	if st := s.Apply(named); st.Dropped != 0 || st.Blocks != 2 {
		t.Fatalf("x's block: %+v, want two blocks", st)
	}
	if d := device(ix, "a"); d != 2*testBS {
		t.Fatalf("after x's blocks: device %d, want %d", d, 2*testBS)
	}
	// BlockRemoved carries no lora_name: it is x's.
	if st := s.Apply(removed("GPU", 0xC2)); st.Dropped != 0 || st.Blocks != 1 {
		t.Fatalf("remove on x's registration: %+v, want one block", st)
	}
	if d := device(ix, "a"); d != testBS {
		t.Fatalf("after removing x's second block: device %d, want %d", d, testBS)
	}

	sg := engineReg(t, "g", 0, hash.Profile{})
	sg.Type, sg.ProfileExplicit, sg.LoraName = PublisherSGLang, false, "x"
	g := mustRegister(t, ix, sg)
	if st := g.Apply(withTokens(stored("GPU", 0xD1, 0xD2))); st.Dropped != 0 || st.Blocks != 2 {
		t.Fatalf("SGLang block on x's registration: %+v, want two blocks", st)
	}
	if d := device(ix, "g"); d != 2*testBS {
		t.Fatalf("SGLang instance: device %d, want %d", d, 2*testBS)
	}
	if n := ix.Counters().DroppedBy[DropWrongLora].Load(); n != 1 {
		t.Fatalf("wrong_lora drops %d, want 1", n)
	}
}

func TestUnregisterRemovesExactlyItsContributions(t *testing.T) {
	ix := New(Options{})
	p := cborProfile(t)
	a := mustRegister(t, ix, engineReg(t, "a", 0, p))
	b := mustRegister(t, ix, engineReg(t, "b", 0, p))
	pool := mustRegister(t, ix, poolReg("pool"))
	h := seq(2)
	a.Apply(stored("GPU", h...))
	b.Apply(stored("GPU", h...))
	pool.Apply(poolStored("cpu", "s", h...))
	if _, err := ix.Unregister(ServiceKey{InstanceID: "a", DPRank: 0}); err != nil {
		t.Fatal(err)
	}
	if st := a.Apply(stored("GPU", h...)); !st.Closed {
		t.Fatalf("apply after unregister must be a no-op: %+v", st)
	}
	res := queryHashes(t, ix, "", h...)
	if row(res, "a") != nil || row(res, "b").Device != 32 {
		t.Fatalf("after unregister a: %+v", res.Instances)
	}
	if _, err := ix.Unregister(ServiceKey{InstanceID: "a"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second unregister: %v", err)
	}
	if _, err := ix.Unregister(pool.Key()); err != nil {
		t.Fatal(err)
	}
	if r := row(queryHashes(t, ix, "", h...), "b"); r.Device != 32 || r.CPUShare != 32 {
		t.Fatalf("b after pool unregister: %+v", r)
	}
	// Re-registering the same key starts clean.
	a2 := mustRegister(t, ix, engineReg(t, "a", 0, p))
	if r := row(queryHashes(t, ix, "a", h...), "a"); r.Device != 0 {
		t.Fatalf("resurrected: %+v", r)
	}
	_ = a2
}

func TestContextsAreReclaimed(t *testing.T) {
	ix := New(Options{})
	s := mustRegister(t, ix, engineReg(t, "a", 0, cborProfile(t)))
	s.Apply(stored("GPU", 1, 2))
	if _, err := ix.Unregister(s.Key()); err != nil {
		t.Fatal(err)
	}
	if gv := ix.GlobalView(); len(gv.Contexts) != 0 {
		t.Fatalf("context kept: %+v", gv)
	}
	// With the context gone its profile is free again.
	pickle, _ := hash.Resolve(hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256", PythonHashSeed: "0", IndexProjection: "low64_be"})
	mustRegister(t, ix, engineReg(t, "a", 0, pickle))
}

func TestPoolFirstDoesNotReserveProfile(t *testing.T) {
	ix := New(Options{})
	pool := mustRegister(t, ix, poolReg("pool"))
	pool.Apply(poolStored("cpu", "s", 1))
	mustRegister(t, ix, engineReg(t, "a", 0, cborProfile(t)))
	gv := ix.GlobalView()
	if len(gv.Contexts) != 1 || !gv.Contexts[0].ProfileBound || gv.Contexts[0].Profile.Spec.Algorithm != "sha256_cbor" {
		t.Fatalf("%+v", gv)
	}
	if r := row(queryHashes(t, ix, "a", 1), "a"); r.CPUShare != 16 {
		t.Fatalf("pool block before engine registration: %+v", r)
	}
}
