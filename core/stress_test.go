package core

import (
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConcurrentStressInvariants runs appliers, queriers and
// register/unregister churn together (bounded in time and count) and checks
// the query invariants throughout, and that an unregistered instance never
// shows a hit once Unregister has returned.
func TestConcurrentStressInvariants(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	ix := New(Options{})
	p := cborProfile(t)
	const (
		appliers = 4
		queriers = 3
		nBlocks  = 32
		deadline = 400 * time.Millisecond
	)
	keys := seq(nBlocks)
	pool := mustRegister(t, ix, poolReg("pool"))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failed atomic.Bool
	fail := func(format string, args ...any) {
		if failed.CompareAndSwap(false, true) {
			t.Errorf(format, args...)
		}
	}

	for a := 0; a < appliers; a++ {
		s := mustRegister(t, ix, engineReg(t, fmt.Sprintf("e%d", a), 0, p))
		wg.Add(1)
		go func(a int, s *Subscription) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(seed + int64(a)))
			media := []string{"GPU", "CPU", "DISK"}
			for i := 0; i < 20000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				n := 1 + rng.Intn(nBlocks)
				m := media[rng.Intn(len(media))]
				switch rng.Intn(10) {
				case 0:
					s.Apply(cleared())
				case 1, 2, 3:
					s.Apply(removed(m, keys[rng.Intn(nBlocks)]))
				default:
					s.Apply(stored(m, keys[:n]...))
				}
			}
		}(a, s)
	}
	wg.Add(1)
	go func() { // pool writer
		defer wg.Done()
		rng := rand.New(rand.NewSource(seed - 1))
		for i := 0; i < 20000; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := keys[rng.Intn(nBlocks)]
			if rng.Intn(2) == 0 {
				pool.Apply(poolStored("cpu", "s", k))
			} else {
				b := poolStored("cpu", "s", k)
				b.Events[0].Kind = EventRemoved
				pool.Apply(b)
			}
		}
	}()
	for q := 0; q < queriers; q++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := &QueryResult{}
			for i := 0; i < 50000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				req := &QueryRequest{Model: "m", BlockSize: testBS, Hashes: keys, ByHash: true}
				if err := ix.Query(req, res); err != nil {
					fail("query: %v", err)
					return
				}
				for _, r := range res.Instances {
					if !(r.Device <= r.CPULocal && r.CPULocal <= r.CPUShare && r.CPUShare <= r.Disk && r.Disk <= nBlocks*testBS && r.LongestMatched == r.Disk) {
						fail("invariant violated: %+v", r)
						return
					}
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // churn: register, apply, unregister, verify no hit remains
		defer wg.Done()
		res := &QueryResult{}
		for i := 0; i < 200; i++ {
			select {
			case <-stop:
				return
			default:
			}
			inst := fmt.Sprintf("churn%d", i%3)
			s, _, err := ix.Register(engineReg(t, inst, 0, p))
			if err != nil {
				fail("churn register: %v", err)
				return
			}
			done := make(chan struct{})
			go func() { // concurrent ingest racing the unregister
				defer close(done)
				for j := 0; j < 50; j++ {
					if s.Apply(stored("GPU", keys...)).Closed {
						return
					}
				}
			}()
			if _, err := ix.Unregister(s.Key()); err != nil {
				fail("churn unregister: %v", err)
				return
			}
			<-done
			req := &QueryRequest{Model: "m", BlockSize: testBS, Hashes: keys, ByHash: true, Instance: inst}
			if err := ix.Query(req, res); err != nil {
				fail("query: %v", err)
				return
			}
			if len(res.Instances) != 0 {
				fail("hit after unregister of %s: %+v", inst, res.Instances)
				return
			}
		}
	}()
	time.AfterFunc(deadline, func() { close(stop) })
	wg.Wait()
}
