package ingest_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/seed-c7a81618/conductor/bench"
	"github.com/seed-c7a81618/conductor/core"
)

// fleetModel is one publisher's blocks as its own events leave them: the
// (hash, medium) pairs stored and not removed since, none after a clear.
// A listener that has applied the publisher's stream up to its last batch
// holds exactly these, whether it followed the stream live from the start
// or joined later and replayed the ring from 0.
type fleetModel struct {
	held map[fleetPair]bool
	list []fleetPair // the held pairs, for picking removals
	gone []fleetPair // pairs removed lately, for storing again
}

type fleetPair struct {
	hash uint64
	cpu  bool // medium CPU (the host tier), else GPU (the device tier)
}

func (m *fleetModel) store(p fleetPair) {
	m.held[p] = true
	m.list = append(m.list, p)
}

// remove drops the held pair at position i of list.
func (m *fleetModel) remove(i int) fleetPair {
	p := m.list[i]
	m.list[i] = m.list[len(m.list)-1]
	m.list = m.list[:len(m.list)-1]
	delete(m.held, p)
	if len(m.gone) == 4 {
		m.gone = m.gone[1:]
	}
	m.gone = append(m.gone, p)
	return p
}

func (m *fleetModel) clear() {
	clear(m.held)
	m.list = m.list[:0]
}

// batch draws one vLLM batch of random events over a block pool that every
// publisher shares (so blocks have many holders, and one holder's removal
// must leave the others), applies it to m and returns its payload: stores of
// pairs m does not hold, removals of pairs it holds, now and then a clear.
// Half the removals take a pair stored lately and half the stores a pair
// removed lately, so that batches close to each other in a stream touch the
// same blocks: one applied twice or out of order leaves a wrong block.
func (m *fleetModel) batch(rng *rand.Rand, pool int, sglang bool) []byte {
	var events []any
	for range 1 + rng.IntN(4) {
		switch r := rng.IntN(100); {
		case r < 2:
			m.clear()
			events = append(events, bench.EngineCleared{})
		case r < 35 && len(m.list) > 0:
			gpu, cpu := bench.EngineRemoved{Medium: "GPU"}, bench.EngineRemoved{Medium: hostMedium(sglang)}
			for range 1 + rng.IntN(min(4, len(m.list))) {
				i := rng.IntN(len(m.list))
				if rng.IntN(2) == 0 {
					i = len(m.list) - 1 - rng.IntN(min(2, len(m.list)))
				}
				p := m.remove(i)
				if p.cpu {
					cpu.Hashes = append(cpu.Hashes, p.hash)
				} else {
					gpu.Hashes = append(gpu.Hashes, p.hash)
				}
			}
			for _, ev := range []bench.EngineRemoved{gpu, cpu} {
				if len(ev.Hashes) > 0 {
					events = append(events, ev)
				}
			}
		default:
			cpu := rng.IntN(4) == 0
			ev := bench.EngineStored{BlockSize: testBS, Medium: "GPU"}
			if cpu {
				ev.Medium = hostMedium(sglang)
			}
			for range 1 + rng.IntN(8) {
				p := fleetPair{hash: 1 + uint64(rng.IntN(pool)), cpu: cpu}
				if len(m.gone) > 0 && rng.IntN(2) == 0 {
					p.hash = m.gone[rng.IntN(len(m.gone))].hash
				}
				if !m.held[p] && !containsHash(ev.Hashes, p.hash) {
					m.store(p)
					ev.Hashes = append(ev.Hashes, p.hash)
				}
			}
			if len(ev.Hashes) > 0 {
				events = append(events, ev)
			}
		}
	}
	if sglang {
		return bench.AppendSGLangBatch(nil, bench.EraMap, 1.7e9, 0, events...)
	}
	return bench.AppendVLLMBatch(nil, bench.EraMap, 1.7e9, 0, events...)
}

// hostMedium is the name each engine gives its host-memory tier.
func hostMedium(sglang bool) string {
	if sglang {
		return "CPU_PINNED"
	}
	return "CPU"
}

func containsHash(hs []uint64, h uint64) bool {
	for _, x := range hs {
		if x == h {
			return true
		}
	}
	return false
}

// TestZMQFleetAgreesWithModel: many publishers at once (vLLM and SGLang
// engines), each its own registration on the shared poller, publish random stores, removals and
// clears over one block pool from concurrent goroutines, a few batches lost
// on the way for replays to bring back, while registrations are replaced
// mid-stream, one every few milliseconds, by new ones that replay their
// publisher's ring from 0 while its live batches keep arriving. At the end
// every listener holds, tier by tier, exactly what its publisher's events
// leave (fleetModel), a replaced registration holds nothing, and no stream
// was cleared as stale, restarted or failed to decode: a message handed to
// the wrong listener, lost, applied twice or out of order shows as a wrong
// block (applying duplicates, or live messages ahead of those a replay
// buffered, fails it). The seed is logged.
func TestZMQFleetAgreesWithModel(t *testing.T) {
	streams, rounds, pool := 256, 60, 1024
	if raceEnabled || testing.Short() {
		streams, rounds = 64, 40
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d: %d streams, %d batches each", seed, streams, rounds)

	zctx, err := zmq.NewContext()
	if err != nil {
		t.Fatal(err)
	}
	if err := zctx.SetMaxSockets(2*streams + 64); err != nil {
		t.Fatal(err)
	}
	// Every third stream is an SGLang engine (its dialect, hash profile,
	// host medium and 3-frame replay replies), the others vLLM.
	sglang := func(i int) bool { return i%3 == 2 }
	pubs := make([]*bench.Publisher, streams)
	for i := range pubs {
		opts := bench.PublisherOptions{Context: zctx}
		if sglang(i) {
			opts.ReplyFrames = 3
		}
		pubs[i] = newPublisher(t, opts)
	}
	t.Cleanup(func() {
		for _, p := range pubs {
			_ = p.Close()
		}
		_ = zctx.Term()
	})
	// Replays get time to answer on a loaded machine: 256 publishers serve
	// their rings from one process, and a replay that times out clears its
	// stream (gap policy clear), which this test counts as a failure.
	opts := fastOpts(t)
	opts.ReplayTimeout, opts.ReplayTotalTimeout = 10*time.Second, 30*time.Second
	h := newHarness(t, opts)
	vllm, sgl := vllmProfile(t), sglangProfile(t)
	// A context has one hash profile: the SGLang engines serve a model
	// of their own.
	model := func(i int) string {
		if sglang(i) {
			return testModel + "-sglang"
		}
		return testModel
	}
	reg := func(i int, name string) core.ServiceKey {
		if sglang(i) {
			r := registration(name, core.PublisherSGLang, pubs[i], sgl)
			r.ModelName = model(i)
			return h.register(r)
		}
		return h.register(registration(name, core.PublisherVLLM, pubs[i], vllm))
	}
	inst := make([]string, streams) // the registration currently on each publisher
	keys := make([]core.ServiceKey, streams)
	for i := range pubs {
		inst[i] = fmt.Sprintf("s%03d", i)
		keys[i] = reg(i, inst[i])
	}
	primeAll(t, h, keys, pubs, sglang)

	models := make([]*fleetModel, streams)
	for i := range models {
		models[i] = &fleetModel{held: map[fleetPair]bool{}}
	}
	// Workers own disjoint sets of publishers: each publisher's batches go
	// out in the order they were applied to its model.
	const workers = 8
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for r := range rounds {
				for i := w; i < streams; i += workers {
					// Now and then a batch goes to the ring only (lost on
					// the way): the next live one shows the gap, and a
					// replay brings it while later live ones wait. The
					// last batch is always live.
					publish := pubs[i].Publish
					if r < rounds-1 && rng.IntN(25) == 0 {
						publish = pubs[i].PublishHidden
					}
					if _, err := publish(models[i].batch(rng, pool, sglang(i))); err != nil {
						errs <- fmt.Errorf("publish %d: %w", i, err)
						return
					}
				}
				time.Sleep(time.Millisecond) // let the listeners interleave
			}
		}()
	}
	published := make(chan struct{})
	go func() { wg.Wait(); close(published) }()
	// While batches keep coming, replace registrations one after another:
	// the old one's blocks must go with it; the new one replays the ring
	// from 0 while live batches arrive, and then follows the stream.
	type gone struct {
		inst string
		i    int // its publisher
	}
	var old []gone
	for n := 0; ; n++ {
		select {
		case <-published:
		case <-time.After(2 * time.Millisecond):
			j := n * 7 % streams
			if _, err := h.g.Unregister(keys[j]); err != nil {
				t.Fatal(err)
			}
			old = append(old, gone{inst[j], j})
			inst[j] = fmt.Sprintf("s%03d-%d", j, n)
			keys[j] = reg(j, inst[j])
			continue
		}
		break
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// Every listener has applied its publisher's last batch.
	waitFor(t, "every stream applied", func() bool {
		for i, k := range keys {
			st := h.status(k)
			if !st.HasSeq || st.LastSeq+1 < pubs[i].NextSeq() {
				return false
			}
		}
		return true
	})
	var dups, gaps, replays, batches uint64
	for _, k := range keys {
		st := h.status(k)
		dups, gaps, replays, batches = dups+st.Duplicates, gaps+st.Gaps, replays+st.ReplaysSucceeded, batches+st.Batches
		if st.StaleClears != 0 || st.DecodeErrors != 0 || st.QueueDrops != 0 || st.Restarts != 0 {
			t.Errorf("%v: %d stale clears, %d decode errors, %d queue drops, %d restarts, want none", k,
				st.StaleClears, st.DecodeErrors, st.QueueDrops, st.Restarts)
		}
	}
	t.Logf("%d registrations replaced; %d batches applied, %d replays, %d gaps, %d duplicates",
		len(old), batches, replays, gaps, dups)
	bad := 0
	for i := range streams {
		for x := uint64(1); x <= uint64(pool); x++ {
			gpu, cpu := models[i].held[fleetPair{x, false}], models[i].held[fleetPair{x, true}]
			want := core.InstanceResult{ID: inst[i]}
			if gpu || cpu {
				want.LongestMatched, want.CPULocal, want.CPUShare, want.Disk = testBS, testBS, testBS, testBS
			}
			if gpu {
				want.Device = testBS
				want.Media[core.MediumDevice] = testBS
			}
			if cpu {
				want.Media[core.MediumHost] = testBS
			}
			got := h.tierRow(model(i), inst[i], x)
			if !reflect.DeepEqual(got, want) {
				if bad++; bad <= 10 {
					t.Errorf("%s block %d: %+v, want %+v (model: GPU %v, CPU %v)", inst[i], x, got, want, gpu, cpu)
				}
			}
		}
	}
	for _, o := range old {
		for x := uint64(1); x <= uint64(pool); x++ {
			if got := h.tierRow(model(o.i), o.inst, x); got.LongestMatched != 0 {
				if bad++; bad <= 10 {
					t.Errorf("replaced registration %s still holds block %d: %+v", o.inst, x, got)
				}
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d wrong blocks (seed %d)", bad, seed)
	}
}

// primeAll primes every listener at once (see harness.prime): empty batches
// to each publisher whose listener has not yet applied one and ended its
// first replay.
func primeAll(t *testing.T, h *harness, keys []core.ServiceKey, pubs []*bench.Publisher, sglang func(int) bool) {
	t.Helper()
	empty, emptySGLang := emptyVLLM(), bench.AppendSGLangBatch(nil, bench.EraMap, 1.7e9, 0)
	waitFor(t, "every listener primed", func() bool {
		all := true
		for i, k := range keys {
			if !primed(h.status(k)) {
				all = false
				if sglang(i) {
					publish(t, pubs[i], emptySGLang)
				} else {
					publish(t, pubs[i], empty)
				}
			}
		}
		return all
	})
}
