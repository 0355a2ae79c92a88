package ingest_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/bench"
	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/wire/ingest"
)

// TestZMQRegisterUnregisterNoLeak registers and unregisters one subscription 1000
// times against a live publisher (with a replay endpoint, so connects, monitors
// and replay DEALERs come and go too) and checks that goroutines and file
// descriptors return to their baseline.
func TestZMQRegisterUnregisterNoLeak(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 100
	}
	h := newHarness(t, fastOpts(t))
	pub := newPublisher(t, bench.PublisherOptions{})
	// One batch in the ring, so connect-time replays have something to send.
	publish(t, pub, storeOne(1))
	r := registration("vllm-a", core.PublisherVLLM, pub, vllmProfile(t))

	// Warm up once: the first use of a libzmq context starts its I/O and reaper
	// threads (and their fds), which then stay for the context's life.
	k := h.register(r)
	waitFor(t, "warm-up batch", func() bool { return h.holds("vllm-a", 1) })
	if _, err := h.g.Unregister(k); err != nil {
		t.Fatal(err)
	}
	baseG, baseFD := stableCounts(t)
	applied := 0
	for i := 0; i < n; i++ {
		k := h.register(r)
		if i%100 == 0 { // now and then, let it connect and replay before leaving
			waitFor(t, "replayed batch", func() bool { return h.holds("vllm-a", 1) })
			applied++
		}
		if _, err := h.g.Unregister(k); err != nil {
			t.Fatal(err)
		}
	}
	const slack = 4
	g, fd := settle(t, baseG, baseFD, slack)
	t.Logf("%d cycles (%d waited for a replay): goroutines %d -> %d, fds %d -> %d", n, applied, baseG, g, baseFD, fd)
	if g > baseG+slack || fd > baseFD+slack {
		buf := make([]byte, 1<<16)
		t.Fatalf("leak: goroutines %d -> %d, fds %d -> %d\n%s", baseG, g, baseFD, fd, buf[:runtime.Stack(buf, true)])
	}
	if len(h.g.Listeners()) != 0 || len(h.ix.Services()) != 0 {
		t.Fatal("registrations left")
	}
}

// TestZMQCloseReleasesEverything: Close stops every listener and terminates the
// context; goroutines and fds return to what they were before NewIngester.
func TestZMQCloseReleasesEverything(t *testing.T) {
	pub := newPublisher(t, bench.PublisherOptions{})
	baseG, baseFD := stableCounts(t)
	ix := core.New(core.Options{Logger: testLogger(t)})
	g, err := ingest.NewIngester(ix, fastOpts(t))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, ix: ix, g: g}
	for _, inst := range []string{"a", "b", "c", "d"} {
		r := registration(inst, core.PublisherVLLM, pub, vllmProfile(t))
		if inst != "a" { // endpoints are unique per registration
			r.Endpoint = "tcp://127.0.0.1:" + freePort(t)
			r.ReplayEndpoint = ""
		}
		h.register(r)
	}
	waitFor(t, "listener a active", func() bool {
		return h.status(core.ServiceKey{InstanceID: "a", TenantID: "default"}).State == ingest.ListenerActive
	})
	g.Close()
	g.Close() // idempotent
	if _, err := g.Register(registration("e", core.PublisherVLLM, pub, vllmProfile(t))); err == nil {
		t.Fatal("Register after Close succeeded")
	}
	const slack = 2
	gs, fd := settle(t, baseG, baseFD, slack)
	if gs > baseG+slack || fd > baseFD+slack {
		t.Fatalf("after Close: goroutines %d -> %d, fds %d -> %d", baseG, gs, baseFD, fd)
	}
	if len(ix.Services()) != 4 {
		t.Fatalf("Close should keep registrations in the index, have %d", len(ix.Services()))
	}
}

// TestZMQManyListeners: one Ingester holds more listeners than libzmq's default
// socket limit (1023 per context, ~250 listeners) allows, and one of them still
// ingests.
func TestZMQManyListeners(t *testing.T) {
	const n = 300
	h := newHarness(t, fastOpts(t))
	pub := newPublisher(t, bench.PublisherOptions{})
	prof := vllmProfile(t)
	h.register(registration("live", core.PublisherVLLM, pub, prof))
	dir := t.TempDir()
	for i := 0; i < n; i++ {
		r := registration(fmt.Sprintf("idle-%03d", i), core.PublisherVLLM, pub, prof)
		r.Endpoint = "ipc://" + dir + fmt.Sprintf("/pub-%d", i) // nobody binds it: pending
		r.ReplayEndpoint = ""
		h.register(r)
	}
	publish(t, pub, storeOne(77))
	waitFor(t, "block on the live listener", func() bool { return h.holds("live", 77) })
	ls := h.g.Listeners()
	if len(ls) != n+1 || ls[0].Key.InstanceID != "idle-000" || ls[n].Key.InstanceID != "live" {
		t.Fatalf("%d listeners, first %v last %v", len(ls), ls[0].Key, ls[len(ls)-1].Key)
	}
	for _, st := range ls[:n] {
		if st.State != ingest.ListenerPending {
			t.Fatalf("idle listener %v is %v", st.Key, st.State)
		}
	}
	_ = os.RemoveAll(dir)
}

// TestZMQConcurrentControl races Register, Unregister, Pause, Resume and
// Listeners on a few keys from several goroutines while publishers run, then
// checks that the Ingester and the index agree and that Close leaves nothing.
// Bounded: a fixed number of operations per goroutine; the seed is logged.
func TestZMQConcurrentControl(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	baseG, baseFD := stableCounts(t)
	ix := core.New(core.Options{Logger: testLogger(t)})
	g, err := ingest.NewIngester(ix, fastOpts(t))
	if err != nil {
		t.Fatal(err)
	}
	prof := vllmProfile(t)
	const keys, workers, ops = 4, 4, 150
	regs := make([]core.Registration, keys)
	pubs := make([]*bench.Publisher, keys)
	for i := range regs {
		pubs[i], err = bench.NewPublisher(bench.PublisherOptions{})
		if err != nil {
			t.Fatal(err)
		}
		regs[i] = registration(fmt.Sprintf("k%d", i), core.PublisherVLLM, pubs[i], prof)
	}
	stop := make(chan struct{})
	var pubWG sync.WaitGroup
	for i, p := range pubs {
		pubWG.Add(1)
		go func() {
			defer pubWG.Done()
			for x := uint64(0); ; x++ {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = p.Publish(bench.AppendVLLMBatch(nil, bench.EraMap, 1.7e9, 0,
					bench.EngineStored{Hashes: []uint64{uint64(i)<<32 | x}, BlockSize: testBS, Medium: "GPU"}))
				time.Sleep(time.Millisecond)
			}
		}()
	}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for i := 0; i < ops; i++ {
				r := regs[rng.IntN(keys)]
				k := core.ServiceKey{InstanceID: r.InstanceID}
				switch rng.IntN(5) {
				case 0, 1:
					_, _ = g.Register(r)
				case 2:
					_, _ = g.Unregister(k)
				case 3:
					_ = g.Pause(k)
				case 4:
					_ = g.Resume(k)
				}
				_ = g.Listeners()
			}
		}()
	}
	wg.Wait()
	listening := map[string]bool{}
	for _, st := range g.Listeners() {
		listening[st.Key.InstanceID] = true
	}
	for _, r := range ix.Services() {
		if !listening[r.InstanceID] {
			t.Errorf("%s registered in the index without a listener", r.InstanceID)
		}
		delete(listening, r.InstanceID)
	}
	for id := range listening {
		t.Errorf("listener %s without a registration", id)
	}
	g.Close()
	close(stop)
	pubWG.Wait()
	for _, p := range pubs {
		_ = p.Close()
	}
	gs, fd := settle(t, baseG, baseFD, 2)
	if gs > baseG+2 || fd > baseFD+2 {
		t.Fatalf("after Close: goroutines %d -> %d, fds %d -> %d", baseG, gs, baseFD, fd)
	}
}
