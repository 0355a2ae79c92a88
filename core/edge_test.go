package core

import (
	"errors"
	"math"
	"sync"
	"testing"
)

// TestOwnerIDReuseDuringQuery: a query walking with an owner-table snapshot
// taken before an owner was released must not credit the blocks of the owner
// that reuses its id to the released one.
func TestOwnerIDReuseDuringQuery(t *testing.T) {
	ix := New(Options{})
	p := cborProfile(t)
	a := mustRegister(t, ix, engineReg(t, "A", 0, p))
	a.Apply(stored("GPU", 1, 2, 3))
	mustRegister(t, ix, engineReg(t, "Z", 0, p)) // keeps the context alive
	c := ix.lookupContext(ContextKey{TenantID: "default", ModelName: "m", BlockSize: testBS})
	old := c.snapshot() // an in-flight query's snapshot

	if _, err := ix.Unregister(a.Key()); err != nil {
		t.Fatal(err)
	}
	b := mustRegister(t, ix, engineReg(t, "B", 0, p))
	b.Apply(stored("GPU", 11, 12, 13)) // B interns A's released id
	if got := c.owners[0]; got.name != "B" {
		t.Fatalf("test premise: id 0 should now be B's, got %+v", got)
	}

	cur := growCursors(nil, len(old.slots))
	req := &QueryRequest{ByHash: true, Hashes: []uint64{11, 12, 13}}
	end := walk(c, old, 0, cur, 3, req, nil, namespace{})
	for i, s := range old.slots {
		n := cur[i].bound[TierDevice]
		if !cur[i].done {
			n = end
		}
		if s.instance == "A" && n != 0 {
			t.Fatalf("released owner A credited with %d of B's blocks", n)
		}
	}
}

func TestRegisterWhileUnregistering(t *testing.T) {
	ix := New(Options{})
	r := engineReg(t, "A", 0, cborProfile(t))
	a := mustRegister(t, ix, r)
	a.mu.Lock() // an Apply in flight holds Unregister at close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := ix.Unregister(a.Key()); err != nil {
			t.Error(err)
		}
	}()
	for {
		ix.mu.Lock()
		u := a.unregistering
		ix.mu.Unlock()
		if u {
			break
		}
	}
	_, _, err := ix.Register(r)
	a.mu.Unlock()
	<-done
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("register during unregister: %v", err)
	}
	mustRegister(t, ix, r) // afterwards the key is free
}

// TestPoolContextBinding: an engine registration binds a pool-only context's
// profile while the pool applies events (run under -race).
func TestPoolContextBinding(t *testing.T) {
	ix := New(Options{})
	pool := mustRegister(t, ix, poolReg("pool"))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		b := poolStored("cpu", "be")
		e := &b.Events[0]
		e.Tokens, e.HasTokens, e.HasBaseIdx = make([]int32, testBS), true, true
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			e.Hashes = append(e.Hashes[:0], uint64(i))
			pool.Apply(b)
		}
	}()
	mustRegister(t, ix, engineReg(t, "E", 0, cborProfile(t)))
	res := &QueryResult{}
	_ = ix.Query(&QueryRequest{Model: "m", BlockSize: testBS, Tokens: make([]int32, 64)}, res)
	close(stop)
	wg.Wait()
	gv := ix.GlobalView()
	if !gv.Contexts[0].ProfileBound || gv.Contexts[0].Profile.Spec.Algorithm != "sha256_cbor" {
		t.Fatalf("%+v", gv.Contexts[0])
	}
}

func TestByHashTokensSaturate(t *testing.T) {
	ix := New(Options{})
	r := engineReg(t, "A", 0, cborProfile(t))
	r.BlockSize = 1 << 62
	s := mustRegister(t, ix, r)
	b := stored("GPU", 1, 2)
	b.Events[0].BlockSize = 1 << 62
	s.Apply(b)
	res := &QueryResult{}
	if err := ix.Query(&QueryRequest{Model: "m", BlockSize: 1 << 62, Hashes: []uint64{1, 2}, ByHash: true}, res); err != nil {
		t.Fatal(err)
	}
	if r := res.Instances[0]; r.Device != math.MaxInt64 || r.Ranks[0].Device != math.MaxInt64 {
		t.Fatalf("want saturation at MaxInt64: %+v", r)
	}
}

// poolOfTwoModels registers engines of models m and m2 (binding their
// contexts) and a pool that files objects in both.
func poolOfTwoModels(t *testing.T) (*Index, *Subscription) {
	t.Helper()
	ix := New(Options{})
	p := cborProfile(t)
	mustRegister(t, ix, engineReg(t, "E", 0, p))
	r2 := engineReg(t, "E2", 0, p)
	r2.ModelName = "m2"
	mustRegister(t, ix, r2)
	return ix, mustRegister(t, ix, poolReg("pool"))
}

// TestPoolClearSpansContexts: a pool's cleared event removes that backend's
// objects in every context of the tenant (a pool event names no model).
func TestPoolClearSpansContexts(t *testing.T) {
	ix, pool := poolOfTwoModels(t)
	pool.Apply(poolStored("cpu", "be", 1))
	b := poolStored("cpu", "be", 2)
	b.Events[0].ModelName = []byte("m2")
	pool.Apply(b)
	other := poolStored("cpu", "be2", 3)
	other.Events[0].ModelName = []byte("m2")
	pool.Apply(other)
	cl := cleared()
	cl.Events[0].BackendID, cl.Events[0].TenantID = []byte("be"), []byte("default")
	pool.Apply(cl)
	res := &QueryResult{}
	for _, c := range []struct {
		model string
		hash  uint64
		want  int64
	}{{"m", 1, 0}, {"m2", 2, 0}, {"m2", 3, 16}} {
		if err := ix.Query(&QueryRequest{Model: c.model, BlockSize: testBS, Hashes: []uint64{c.hash}, ByHash: true}, res); err != nil {
			t.Fatal(err)
		}
		if got := res.Instances[0].CPUShare; got != c.want {
			t.Fatalf("%s/%d after clear of backend be: cpu_share %d want %d", c.model, c.hash, got, c.want)
		}
	}
}

// TestPublisherRanksAreBounded: batch dp ranks beyond int32 or beyond
// MaxRanksPerSubscription are dropped, counted, and never become rows.
func TestPublisherRanksAreBounded(t *testing.T) {
	ix := New(Options{MaxRanksPerSubscription: 2})
	s := mustRegister(t, ix, engineReg(t, "a", 0, cborProfile(t)))
	for _, r := range []uint32{1, 2, 3, math.MaxInt32 + 1, 1} {
		b := stored("GPU", uint64(r))
		b.DPRank, b.HasDPRank = r, true
		s.Apply(b)
	}
	r := row(queryHashes(t, ix, "a", 1), "a")
	if len(r.Ranks) != 3 { // registered 0, admitted 1 and 2
		t.Fatalf("ranks: %+v", r.Ranks)
	}
	if n := ix.Counters().RankRejects.Load(); n != 2 {
		t.Fatalf("rank rejects %d", n)
	}
}

// TestDroppedStoreMakesNoRow: a stored event dropped before it files a block
// (here for a finer block size) makes no owner, so its batch's dp rank does
// not appear as a row of zeros; a kept one does.
func TestDroppedStoreMakesNoRow(t *testing.T) {
	ix := New(Options{})
	s := mustRegister(t, ix, engineReg(t, "a", 0, cborProfile(t)))
	s.Apply(stored("GPU", 1)) // rank 0 holds block 1
	fine := stored("GPU", 2)
	fine.Events[0].BlockSize = testBS / 2
	fine.DPRank, fine.HasDPRank = 1, true
	if st := s.Apply(fine); st.Dropped != 1 {
		t.Fatalf("apply: %+v", st)
	}
	if r := row(queryHashes(t, ix, "a", 1), "a"); len(r.Ranks) != 1 || r.Ranks[0].Rank != 0 || r.Device != testBS {
		t.Fatalf("after a dropped store on rank 1: %+v", r)
	}
	kept := stored("GPU", 4)
	kept.DPRank, kept.HasDPRank = 3, true
	s.Apply(kept)
	if r := row(queryHashes(t, ix, "a", 1), "a"); len(r.Ranks) != 2 || r.Ranks[1].Rank != 3 || r.Ranks[1].Device != 0 {
		t.Fatalf("after a kept store on rank 3: %+v", r)
	}
}

// TestPoolClearNamingModel (reference §5.2: a pool's cleared removes that
// backend's and tenant's objects in both tiers): a clear that names a model
// and no medium removes the backend's cpu and disk objects of that model,
// and leaves another model's and another backend's.
func TestPoolClearNamingModel(t *testing.T) {
	ix, pool := poolOfTwoModels(t)
	pool.Apply(poolStored("cpu", "be", 1))
	pool.Apply(poolStored("disk", "be", 2))
	pool.Apply(poolStored("cpu", "be2", 3))
	b := poolStored("cpu", "be", 4)
	b.Events[0].ModelName = []byte("m2")
	pool.Apply(b)
	cl := cleared()
	e := &cl.Events[0]
	e.BackendID, e.TenantID = []byte("be"), []byte("default")
	e.ModelName, e.HasModelName = []byte("m"), true
	if st := pool.Apply(cl); st.Cleared != 1 {
		t.Fatalf("clear naming model m: %+v", st)
	}
	res := &QueryResult{}
	for _, c := range []struct {
		model     string
		hash      uint64
		cpu, disk int64
	}{{"m", 1, 0, 0}, {"m", 2, 0, 0}, {"m", 3, 16, 16}, {"m2", 4, 16, 16}} { // disk counts what cpu holds too
		if err := ix.Query(&QueryRequest{Model: c.model, BlockSize: testBS, Hashes: []uint64{c.hash}, ByHash: true}, res); err != nil {
			t.Fatal(err)
		}
		if r := res.Instances[0]; r.CPUShare != c.cpu || r.Disk != c.disk {
			t.Fatalf("%s/%d after the clear: cpu %d disk %d, want %d %d", c.model, c.hash, r.CPUShare, r.Disk, c.cpu, c.disk)
		}
	}
}
