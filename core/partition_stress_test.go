package core

import (
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/hash"
)

// rowsOK reports the first query row violating the ordering invariants.
func rowsOK(res *QueryResult, limit int64) error {
	for _, r := range res.Instances {
		if !(0 <= r.Device && r.Device <= r.CPULocal && r.CPULocal <= r.CPUShare && r.CPUShare <= r.Disk &&
			r.Disk <= limit && r.LongestMatched == r.Disk) {
			return fmt.Errorf("row %+v violates device ≤ cpu_local ≤ cpu_share ≤ disk ≤ %d", r, limit)
		}
		for i, rk := range r.Ranks {
			if i > 0 && r.Ranks[i-1].Rank >= rk.Rank {
				return fmt.Errorf("row %s: ranks not ascending: %+v", r.ID, r.Ranks)
			}
			if !(0 <= rk.Device && rk.Device <= rk.CPULocal && rk.CPULocal <= rk.CPUShare && rk.CPUShare <= rk.Disk && rk.Disk <= r.Disk) {
				return fmt.Errorf("row %s rank %d violates ordering: %+v", r.ID, rk.Rank, rk)
			}
		}
	}
	for i := 1; i < len(res.Instances); i++ {
		if res.Instances[i-1].ID >= res.Instances[i].ID {
			return fmt.Errorf("rows not sorted by unique id: %q then %q", res.Instances[i-1].ID, res.Instances[i].ID)
		}
	}
	return nil
}

// TestPartitionSplitConcurrent: registrations of other identities split
// the context into partitions (created and reclaimed over and over) while
// appliers of the first partition, an RFC publisher whose envelope names the
// context, and queriers (by tokens and by hash of every profile, with and
// without instance filters) run; bounded in time and count, run under
// -race. Rows keep their invariants throughout, an instance whose
// Unregister returned never shows a row, and at the end every partition is
// reclaimed and no holding is left.
func TestPartitionSplitConcurrent(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	profs := testProfiles(t)
	ix := New(Options{})
	const (
		nBlocks  = 16
		deadline = 400 * time.Millisecond
	)
	tokens := nsTokens(nBlocks * testBS)
	keys := map[string][]uint64{"xxh3": plainChain(tokens, testBS, hash.DefaultXXH3Seed)}
	for _, name := range []string{"pickle", "cbor"} {
		p := profs[name]
		k, err := hash.AppendChain(nil, &p, tokens, testBS, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		keys[name] = k
	}
	a0 := mustRegister(t, ix, partReg(profs, "a", "a0", "pickle", false))
	a1 := mustRegister(t, ix, partReg(profs, "a", "a1", "pickle", false))
	rr := partReg(profs, "b", "rfc", "cbor", false)
	rr.Type, rr.ModelName = PublisherStandard, "home"
	rfc := mustRegister(t, ix, rr)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failed atomic.Bool
	var split atomic.Int64 // queries that found the context split
	fail := func(format string, args ...any) {
		if failed.CompareAndSwap(false, true) {
			t.Errorf(format, args...)
		}
	}
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	media := []string{"GPU", "CPU", "DISK"}
	for i, s := range []*Subscription{a0, a1} {
		wg.Add(1)
		go func(i int, s *Subscription) { // appliers of the first partition
			defer wg.Done()
			rng := rand.New(rand.NewSource(seed + int64(i)))
			for j := 0; j < 20000 && !stopped(); j++ {
				m, n := media[rng.Intn(len(media))], 1+rng.Intn(nBlocks)
				switch rng.Intn(10) {
				case 0:
					s.Apply(cleared())
				case 1, 2, 3:
					s.Apply(removed(m, keys["pickle"][rng.Intn(nBlocks)]))
				default:
					s.Apply(stored(m, keys["pickle"][:n]...))
				}
			}
		}(i, s)
	}
	wg.Add(1)
	go func() { // an RFC publisher naming the context in its envelope
		defer wg.Done()
		rng := rand.New(rand.NewSource(seed - 1))
		for id := uint64(1); id < 20000 && !stopped(); id++ {
			kind := EventStored
			if rng.Intn(3) == 0 {
				kind = EventRemoved
			}
			rfc.Apply(rfcEv(kind, id, "", "gpu", 0, keys["cbor"][:1+rng.Intn(nBlocks)]...))
		}
	}()
	for q := 0; q < 2; q++ {
		wg.Add(1)
		go func(q int) { // queriers
			defer wg.Done()
			rng := rand.New(rand.NewSource(seed + 100 + int64(q)))
			res := &QueryResult{}
			names := []string{"pickle", "cbor", "xxh3"}
			insts := []string{"", "a0", "b0", "c0", "rfc"}
			for j := 0; j < 50000 && !stopped(); j++ {
				req := &QueryRequest{Model: "m", BlockSize: testBS, Instance: insts[rng.Intn(len(insts))], PerMedium: rng.Intn(2) == 0}
				if rng.Intn(2) == 0 {
					req.Tokens = tokens[:rng.Intn(len(tokens)+1)]
				} else {
					req.Hashes, req.ByHash = keys[names[rng.Intn(len(names))]], true
				}
				if c := ix.lookupContext(keyM); c != nil && c.next.Load() != nil {
					split.Add(1)
				}
				if err := ix.Query(req, res); err != nil {
					fail("query: %v", err)
					return
				}
				if err := rowsOK(res, nBlocks*testBS); err != nil {
					fail("%v", err)
					return
				}
			}
		}(q)
	}
	wg.Add(1)
	go func() { // churn: other identities split the context and leave it
		defer wg.Done()
		rng := rand.New(rand.NewSource(seed + 200))
		res := &QueryResult{}
		who := []struct{ owner, inst, prof string }{{"b", "b0", "cbor"}, {"c", "c0", "xxh3"}, {"a", "a9", "cbor"}}
		for j := 0; j < 300 && !stopped(); j++ {
			w := who[rng.Intn(len(who))]
			s, _, err := ix.Register(partReg(profs, w.owner, w.inst, w.prof, false))
			if w.owner == "a" && errors.Is(err, ErrConflict) {
				continue // a joins a cbor partition only while one exists
			}
			if err != nil {
				fail("churn register %+v: %v", w, err)
				return
			}
			done := make(chan struct{})
			go func() { // ingest racing the unregister
				defer close(done)
				for k := 0; k < 20; k++ {
					if s.Apply(stored(media[k%3], keys[w.prof]...)).Closed {
						return
					}
				}
			}()
			if _, err := ix.Unregister(s.Key()); err != nil {
				fail("churn unregister: %v", err)
				return
			}
			<-done
			req := &QueryRequest{Model: "m", BlockSize: testBS, Hashes: keys[w.prof], ByHash: true, Instance: w.inst}
			if err := ix.Query(req, res); err != nil {
				fail("query: %v", err)
				return
			}
			if len(res.Instances) != 0 {
				fail("row after unregister of %s: %+v", w.inst, res.Instances)
				return
			}
		}
	}()
	time.AfterFunc(deadline, func() { close(stop) })
	wg.Wait()
	t.Logf("%d queries found the context split into partitions", split.Load())
	if t.Failed() {
		return
	}
	checkKeySets(t, a0, a1, rfc)
	if got, want := ix.TierBlocks(), ix.countHoldings(); got != want {
		t.Fatalf("TierBlocks %v, walk %v", got, want)
	}
	for _, s := range []*Subscription{a0, a1, rfc} {
		if _, err := ix.Unregister(s.Key()); err != nil {
			t.Fatal(err)
		}
	}
	if n := ix.contexts.Size(); n != 0 {
		t.Fatalf("%d context keys left: %+v", n, ix.GlobalView())
	}
	if got := ix.TierBlocks(); got != [NumTiers]int{} {
		t.Fatalf("holdings left: %v", got)
	}
}
