package ingest_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/bench"
	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
	"github.com/seed-c7a81618/conductor/wire/ingest"
)

// Integration tests over real ZMQ on loopback: bench.Publisher plays the engine
// (PUB + ROUTER replay ring), the Ingester subscribes, and the index is queried the
// way a gateway would. Every wait is bounded (waitFor); no sleep is an assertion.

func emptyVLLM() []byte { return bench.AppendVLLMBatch(nil, bench.EraMap, 1.7e9, 0) }

// testEngineEras publishes a 4-block prompt as two chained stores in the given
// era, checks exact tier numbers, then removes the last block.
func testEngineEras(t *testing.T, era bench.Era, replyFrames int) {
	h := newHarness(t, fastOpts(t))
	pub := newPublisher(t, bench.PublisherOptions{ReplyFrames: replyFrames, Topic: []byte("kv@pod-a@m")})
	prof := vllmProfile(t)
	k := h.register(registration("vllm-a", core.PublisherVLLM, pub, prof))
	h.prime(k, pub, bench.AppendVLLMBatch(nil, era, 1.7e9, 0))

	toks := tokens(100, 4*testBS)
	hs := chain(t, prof, toks)
	publish(t, pub, bench.AppendVLLMBatch(nil, era, 1.7e9, 0,
		bench.EngineStored{Hashes: hs[:2], Tokens: toks[:2*testBS], BlockSize: testBS, Medium: "GPU"}))
	publish(t, pub, bench.AppendVLLMBatch(nil, era, 1.7e9, 0,
		bench.EngineStored{Hashes: hs[2:], Parent: hs[1], HasParent: true, Tokens: toks[2*testBS:], BlockSize: testBS, Medium: "GPU"}))
	h.waitRow("vllm-a", toks, full(4))

	publish(t, pub, bench.AppendVLLMBatch(nil, era, 1.7e9, 0, bench.EngineRemoved{Hashes: hs[3:], Medium: "GPU"}))
	got := h.waitRow("vllm-a", toks, full(3))
	if len(got.Ranks) != 1 || got.Ranks[0].Rank != 0 || got.Ranks[0].Device != 3*testBS {
		t.Fatalf("ranks: %+v", got.Ranks)
	}
	st := h.status(k)
	if st.State != ingest.ListenerActive || st.DecodeErrors != 0 || st.StaleClears != 0 || st.Restarts != 0 {
		t.Fatalf("status: %+v", st)
	}
}

func TestZMQVLLMArrayEra(t *testing.T) { testEngineEras(t, bench.EraArray, 3) }
func TestZMQVLLMMapEra(t *testing.T)   { testEngineEras(t, bench.EraMap, 4) }

// TestZMQVLLMBatchDPRank: a batch's dp rank overrides the registered one.
func TestZMQVLLMBatchDPRank(t *testing.T) {
	h := newHarness(t, fastOpts(t))
	pub := newPublisher(t, bench.PublisherOptions{})
	prof := vllmProfile(t)
	h.register(registration("vllm-a", core.PublisherVLLM, pub, prof))
	toks := tokens(7, 2*testBS)
	hs := chain(t, prof, toks)
	publish(t, pub, bench.AppendVLLMBatch(nil, bench.EraMap, 1.7e9, 3,
		bench.EngineStored{Hashes: hs, Tokens: toks, BlockSize: testBS, Medium: "GPU"}))
	var got core.InstanceResult
	waitFor(t, "rank 3 row", func() bool {
		got = h.row("vllm-a", toks)
		for _, r := range got.Ranks {
			if r.Rank == 3 && r.Device == 2*testBS {
				return true
			}
		}
		return false
	})
	if got.Device != 2*testBS {
		t.Fatalf("row %+v", got)
	}
}

func TestZMQSGLang(t *testing.T) {
	for _, era := range []bench.Era{bench.EraArray, bench.EraMap} {
		t.Run(map[bench.Era]string{bench.EraArray: "array", bench.EraMap: "map"}[era], func(t *testing.T) {
			h := newHarness(t, fastOpts(t))
			pub := newPublisher(t, bench.PublisherOptions{ReplyFrames: 3})
			prof := sglangProfile(t)
			k := h.register(registration("sgl-a", core.PublisherSGLang, pub, prof))
			// Subscribed before the first store (a PUB drops what it sends
			// before the subscription reaches it).
			h.prime(k, pub, bench.AppendSGLangBatch(nil, era, 1.7e9, 0))
			toks := tokens(900, 3*testBS)
			hs := chain(t, prof, toks)
			// SGLang emits one store per page, chained by parent; nil medium is GPU.
			for i := range hs {
				ev := bench.EngineStored{Hashes: hs[i : i+1], Tokens: toks[i*testBS : (i+1)*testBS], BlockSize: testBS}
				if i > 0 {
					ev.Parent, ev.HasParent = hs[i-1], true
				}
				publish(t, pub, bench.AppendSGLangBatch(nil, era, 1.7e9, 0, ev))
			}
			// A HiCache write-through copies the first two pages to host memory.
			publish(t, pub, bench.AppendSGLangBatch(nil, era, 1.7e9, 0,
				bench.EngineStored{Hashes: hs[:2], Tokens: toks[:2*testBS], BlockSize: testBS, Medium: "CPU_PINNED"}))
			publish(t, pub, bench.AppendSGLangBatch(nil, era, 1.7e9, 0, bench.EngineRemoved{Hashes: hs[1:]}))
			// Device holds page 0 only; cpu_local holds pages 0 and 1.
			h.waitRow("sgl-a", toks, core.InstanceResult{LongestMatched: 32, Device: 16, CPULocal: 32, CPUShare: 32, Disk: 32})
		})
	}
}

// TestZMQMooncake: a Mooncake master (no replay) publishes pool objects of a
// context a vLLM engine serves; the engine's rows see them in cpu_share and disk.
func TestZMQMooncake(t *testing.T) {
	h := newHarness(t, fastOpts(t))
	prof := vllmProfile(t)
	engine := newPublisher(t, bench.PublisherOptions{})
	h.register(registration("vllm-a", core.PublisherVLLM, engine, prof))
	master := newPublisher(t, bench.PublisherOptions{NoReplay: true, Topic: []byte("mooncake")})
	mk := h.register(registration("mooncake-master", core.PublisherMooncake, master, prof))
	h.prime(mk, master, bench.AppendMooncakeBatch(nil, 1700000000000, 0))

	toks := tokens(5000, 4*testBS)
	hs := chain(t, prof, toks)
	publish(t, engine, bench.AppendVLLMBatch(nil, bench.EraMap, 1.7e9, 0,
		bench.EngineStored{Hashes: hs[:1], Tokens: toks[:testBS], BlockSize: testBS, Medium: "GPU"}))
	id := uint64(1)
	object := func(typ, medium string, h uint64) bench.MooncakeEvent {
		id++
		return bench.MooncakeEvent{EventID: id, Type: typ, SeqHashes: []uint64{h}, ObjectKey: "obj-" + medium,
			Medium: medium, TenantID: "default", BackendID: "backend-a", ModelName: testModel, BlockSize: testBS}
	}
	var evs []bench.MooncakeEvent
	for _, x := range hs[:3] {
		evs = append(evs, object("stored", "cpu", x))
	}
	evs = append(evs, object("stored", "disk", hs[3]))
	publish(t, master, bench.AppendMooncakeBatch(nil, 1700000000123, 0, evs...))
	h.waitRow("vllm-a", toks, core.InstanceResult{LongestMatched: 64, Device: 16, CPULocal: 16, CPUShare: 48, Disk: 64})

	publish(t, master, bench.AppendMooncakeBatch(nil, 1700000000456, 0, object("removed", "cpu", hs[2])))
	h.waitRow("vllm-a", toks, core.InstanceResult{LongestMatched: 32, Device: 16, CPULocal: 16, CPUShare: 32, Disk: 32})
	if st := h.status(mk); st.DecodeErrors != 0 || st.Batches < 3 {
		t.Fatalf("master status: %+v", st)
	}
}

// TestZMQStandard: an RFC #1527 standard publisher under the default xxh3
// profile; its seq_hashes are the index keys, so a by-hash query sees them.
func TestZMQStandard(t *testing.T) {
	h := newHarness(t, fastOpts(t))
	pub := newPublisher(t, bench.PublisherOptions{})
	r := registration("rfc-a", core.PublisherStandard, pub, hash.Profile{})
	r.ProfileExplicit = false // the xxh3 default
	k := h.register(r)
	ev := func(id uint64, typ string, hs ...uint64) bench.MooncakeEvent {
		return bench.MooncakeEvent{EventID: id, Type: typ, SeqHashes: hs, ObjectKey: "o", Medium: "GPU",
			TenantID: "default", BackendID: "engine", ModelName: testModel, BlockSize: testBS}
	}
	publish(t, pub, bench.AppendMooncakeBatch(nil, 1700000000000, 0, ev(1, "stored", 11, 12, 13)))
	publish(t, pub, bench.AppendMooncakeBatch(nil, 1700000000001, 0, ev(2, "removed", 13)))
	waitFor(t, "blocks 11, 12 and not 13", func() bool {
		return h.holds("rfc-a", 11) && h.holds("rfc-a", 12) && !h.holds("rfc-a", 13) && h.status(k).Batches == 2
	})
	if st := h.status(k); st.DecodeErrors != 0 || st.Blocks != 4 {
		t.Fatalf("status: %+v", st)
	}
}

// replayScript publishes a random sequence of stores and removes over a small
// pool of blocks, hiding some batches from the live stream (they stay in the
// ring). It returns the reference multiset of held copies.
func replayScript(t *testing.T, pub *bench.Publisher, rng *rand.Rand, hs []uint64, batches int, hide func(i int) bool) map[uint64]int {
	held := map[uint64]int{}
	for i := 0; i < batches; i++ {
		var ev any
		x := hs[rng.IntN(len(hs))]
		if held[x] > 0 && rng.IntN(3) == 0 {
			held[x]--
			ev = bench.EngineRemoved{Hashes: []uint64{x}, Medium: "GPU"}
		} else {
			held[x]++
			ev = bench.EngineStored{Hashes: []uint64{x}, BlockSize: testBS, Medium: "GPU"}
		}
		p := bench.AppendVLLMBatch(nil, bench.EraMap, 1.7e9, 0, ev)
		if hide(i) {
			publishHidden(t, pub, p)
		} else {
			publish(t, pub, p)
		}
	}
	return held
}

func (h *harness) waitHeld(inst string, held map[uint64]int) {
	h.t.Helper()
	waitFor(h.t, "index to match the reference", func() bool {
		for x, n := range held {
			if h.holds(inst, x) != (n > 0) {
				return false
			}
		}
		return true
	})
}

// TestZMQReplayHealsDroppedBatches: batches the PUB side skips (but keeps in its
// ring) are recovered by replay, in order, with both reply shapes; live copies
// arriving after the replay are dropped as duplicates.
func TestZMQReplayHealsDroppedBatches(t *testing.T) {
	for _, tc := range []struct {
		name        string
		frames      int
		maxBuffered int
	}{
		{"3-frame", 3, 0},
		{"4-frame", 4, 0},
		{"4-frame-buffer-1", 4, 1}, // live messages beyond one are dropped during replays: more gaps, healed too
	} {
		t.Run(tc.name, func(t *testing.T) {
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(seed, 1))
			opts := fastOpts(t)
			opts.ReplayMaxBuffered = tc.maxBuffered
			h := newHarness(t, opts)
			pub := newPublisher(t, bench.PublisherOptions{ReplyFrames: tc.frames})
			k := h.register(registration("vllm-a", core.PublisherVLLM, pub, vllmProfile(t)))
			h.prime(k, pub, emptyVLLM())
			hs := make([]uint64, 12)
			for i := range hs {
				hs[i] = rng.Uint64()
			}
			// Runs of hidden batches (the PUB "dropped" them) between live ones.
			held := replayScript(t, pub, rng, hs, 200, func(i int) bool { return i%10 >= 6 && i%10 <= 8 })
			publish(t, pub, emptyVLLM()) // the last run of hidden batches needs a live successor
			h.waitHeld("vllm-a", held)
			waitFor(t, "all batches consumed", func() bool { return h.status(k).LastSeq == pub.NextSeq()-1 })
			st := h.status(k)
			if st.Gaps == 0 || st.ReplaysSucceeded == 0 || st.StaleClears != 0 || st.Restarts != 0 || st.DecodeErrors != 0 {
				t.Fatalf("status: %+v", st)
			}
		})
	}
}

// ringOfFour registers vllm-a with a publisher whose replay ring keeps four
// batches and waits until vllm-a holds block 1.
func ringOfFour(t *testing.T) (*harness, *bench.Publisher, core.ServiceKey) {
	t.Helper()
	h := newHarness(t, fastOpts(t))
	pub := newPublisher(t, bench.PublisherOptions{Ring: 4})
	k := h.register(registration("vllm-a", core.PublisherVLLM, pub, vllmProfile(t)))
	h.prime(k, pub, emptyVLLM())
	publish(t, pub, storeOne(1))
	waitFor(t, "block 1", func() bool { return h.holds("vllm-a", 1) })
	return h, pub, k
}

// TestZMQReplayRingTooShort: when the ring no longer holds the gap, the stream is
// stale: its blocks are cleared, and what follows the gap is applied.
func TestZMQReplayRingTooShort(t *testing.T) {
	h, pub, k := ringOfFour(t)
	for x := uint64(2); x <= 8; x++ { // hidden; the ring keeps the last four: 6, 7, 8 and 9
		publishHidden(t, pub, storeOne(x))
	}
	publish(t, pub, storeOne(9))
	h.waitStaleHeld("vllm-a", 5, 6, 9)
	if st := h.status(k); st.StaleClears != 1 || st.ReplaysFailed != 1 {
		t.Fatalf("status: %+v", st)
	}
}

// TestZMQReplayRingPastHeldMessage: while the listener is held (the apply
// gate closed, as during a peer restore) a batch is lost and the publisher's
// ring moves past the live message that shows the gap. The ring cannot fill
// the gap, so the stream goes stale once, and every live batch from that
// message on is applied: the ring's newer batches must not be applied first,
// or the live ones between would be dropped as duplicates.
func TestZMQReplayRingPastHeldMessage(t *testing.T) {
	h, pub, k := ringOfFour(t)
	release := h.ix.HoldApplies()
	publish(t, pub, storeOne(2)) // the listener waits at the gate with it
	publishHidden(t, pub, storeOne(3))
	for x := uint64(4); x <= 12; x++ { // live, queued; the ring keeps 9..12
		publish(t, pub, storeOne(x))
	}
	release()
	h.waitStaleHeld("vllm-a", 3, 4, 12)
	if st := h.status(k); st.StaleClears != 1 || st.ReplaysFailed != 1 {
		t.Fatalf("status: %+v", st)
	}
}

// TestZMQReplayHealsTailDropWithEmptyQueue: a live message that arrives while
// a replay runs and does not fit the receive queue, with nothing queued after
// it, is recovered by a replay once the replay ends: nothing later has to come
// to show its gap (an idle engine may send nothing more).
func TestZMQReplayHealsTailDropWithEmptyQueue(t *testing.T) {
	opts := fastOpts(t)
	opts.ReceiveQueueBytes = 4 << 10
	h := newHarness(t, opts)
	pub := newPublisher(t, bench.PublisherOptions{ReplayDelay: 300 * time.Millisecond})
	k := h.register(registration("vllm-a", core.PublisherVLLM, pub, vllmProfile(t)))
	h.prime(k, pub, emptyVLLM())
	asked := len(pub.ReplayRequests())
	publishHidden(t, pub, storeOne(1))
	publish(t, pub, storeOne(2)) // shows the gap: a replay, answered 300 ms later
	waitFor(t, "the gap's replay request", func() bool { return len(pub.ReplayRequests()) > asked })
	publish(t, pub, bigBatch(3, 8<<10)) // above the 4 KiB queue: dropped while the replay runs
	waitFor(t, "blocks 1, 2 and 3", func() bool {
		return h.holds("vllm-a", 1) && h.holds("vllm-a", 2) && h.holds("vllm-a", 3)
	})
	if st := h.status(k); st.QueueDrops != 1 || st.StaleClears != 0 || st.Restarts != 0 {
		t.Fatalf("status: %+v", st)
	}
}

// TestZMQReplayRingPastFirstMessage: the publisher restarted while the
// listener was more than a ring behind, so the replay that follows the
// restart (no baseline: the stream was cleared) finds a ring that starts after
// the live message that showed the restart. That message is placed first and
// the live ones after it follow; applying the ring's newer batches first
// would drop them as duplicates.
func TestZMQReplayRingPastFirstMessage(t *testing.T) {
	h := newHarness(t, fastOpts(t))
	pub := newPublisher(t, bench.PublisherOptions{Ring: 4})
	k := h.register(registration("vllm-a", core.PublisherVLLM, pub, vllmProfile(t)))
	h.prime(k, pub, emptyVLLM())
	for range 5 {
		publish(t, pub, emptyVLLM())
	}
	waitFor(t, "the empty batches", func() bool { return h.status(k).LastSeq == pub.NextSeq()-1 })
	dups := h.status(k).Duplicates       // the connection's replay may repeat a primed batch
	for x := uint64(200); x < 208; x++ { // the old incarnation's; the ring keeps the last four
		publishHidden(t, pub, storeOne(x))
	}
	for s := uint64(1); s <= 3; s++ { // the new incarnation's, live only
		if err := pub.SendRaw(nil, binary.BigEndian.AppendUint64(nil, s), storeOne(100+s)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "blocks 101..103", func() bool {
		return h.holds("vllm-a", 101) && h.holds("vllm-a", 102) && h.holds("vllm-a", 103)
	})
	st := h.status(k)
	if st.Restarts != 1 || st.Duplicates != dups || st.StaleClears != 0 || st.LastSeq != 3 {
		t.Fatalf("status: %+v", st)
	}
	for x := uint64(204); x < 208; x++ {
		if h.holds("vllm-a", x) {
			t.Fatalf("block %d of the ring past the live message was applied", x)
		}
	}
}

// TestZMQReplayOversizeBaseline: the message applied last (the baseline a
// replay starts from) was above MaxMessageBytes, and the publisher has a
// topic. Its replayed copy, a 3-frame reply without the topic, is not the
// same size in all, but it is the same message: the stream is not taken for
// a restart (which would clear block 1, no longer in the ring), and the gap
// after it is healed.
func TestZMQReplayOversizeBaseline(t *testing.T) {
	for _, frames := range []int{3, 4} {
		t.Run(fmt.Sprintf("%d-frame", frames), func(t *testing.T) {
			opts := fastOpts(t)
			opts.MaxMessageBytes = 256 << 10
			h := newHarness(t, opts)
			pub := newPublisher(t, bench.PublisherOptions{Topic: []byte("kv-events"), Ring: 4, ReplyFrames: frames})
			k := h.register(registration("vllm-a", core.PublisherVLLM, pub, vllmProfile(t)))
			h.prime(k, pub, emptyVLLM())
			publish(t, pub, storeOne(1))
			for range 4 { // block 1's batch leaves the ring
				publish(t, pub, emptyVLLM())
			}
			publish(t, pub, bigBatch(7, 512<<10)) // refused: the baseline
			waitFor(t, "the oversize batch", func() bool { return h.status(k).Oversize == 1 })
			publishHidden(t, pub, storeOne(2))
			publish(t, pub, storeOne(3)) // shows the gap: replayed from the oversize batch
			waitFor(t, "blocks 2 and 3", func() bool { return h.holds("vllm-a", 2) && h.holds("vllm-a", 3) })
			st := h.status(k)
			if !h.holds("vllm-a", 1) || st.Restarts != 0 || st.StaleClears != 0 || st.ReplaysSucceeded < 2 {
				t.Fatalf("holds(1)=%v status: %+v", h.holds("vllm-a", 1), st)
			}
		})
	}
}

// TestZMQStaleWithoutReplay: without a replay endpoint a gap clears the stream.
func TestZMQStaleWithoutReplay(t *testing.T) {
	h := newHarness(t, fastOpts(t))
	pub := newPublisher(t, bench.PublisherOptions{NoReplay: true})
	k := h.register(registration("vllm-a", core.PublisherVLLM, pub, vllmProfile(t)))
	h.prime(k, pub, emptyVLLM())
	publish(t, pub, storeOne(1))
	waitFor(t, "block 1", func() bool { return h.holds("vllm-a", 1) })
	publishHidden(t, pub, storeOne(2))
	publish(t, pub, storeOne(3))
	waitFor(t, "block 3", func() bool { return h.holds("vllm-a", 3) })
	if h.holds("vllm-a", 1) {
		t.Fatal("block 1 survived the stale clear")
	}
	if st := h.status(k); st.StaleClears != 1 || st.Gaps != 1 || st.ReplaysRequested != 0 {
		t.Fatalf("status: %+v", st)
	}
}

// TestZMQReplayTimeout: a replay endpoint that never answers costs one bounded
// timeout, then the stream is treated as stale.
func TestZMQReplayTimeout(t *testing.T) {
	opts := fastOpts(t)
	opts.ReplayTimeout = 100 * time.Millisecond
	opts.ReplayTotalTimeout = 200 * time.Millisecond
	h := newHarness(t, opts)
	pub := newPublisher(t, bench.PublisherOptions{NoReplay: true})
	r := registration("vllm-a", core.PublisherVLLM, pub, vllmProfile(t))
	r.ReplayEndpoint = "tcp://127.0.0.1:" + freePort(t) // nothing listens
	k := h.register(r)
	h.prime(k, pub, emptyVLLM())
	publish(t, pub, storeOne(1))
	waitFor(t, "block 1", func() bool { return h.holds("vllm-a", 1) })
	publishHidden(t, pub, storeOne(2))
	publish(t, pub, storeOne(3))
	waitFor(t, "block 3", func() bool { return h.holds("vllm-a", 3) })
	st := h.status(k)
	if h.holds("vllm-a", 1) || st.StaleClears != 1 || st.ReplaysFailed == 0 || st.ReplaysSucceeded != 0 {
		t.Fatalf("holds(1)=%v status: %+v", h.holds("vllm-a", 1), st)
	}
}

// freePort returns a TCP port that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// TestZMQSlowJoiner: batches published before the subscription connected are
// recovered by the proactive replay on connect.
func TestZMQSlowJoiner(t *testing.T) {
	h := newHarness(t, fastOpts(t))
	pub := newPublisher(t, bench.PublisherOptions{})
	prof := vllmProfile(t)
	toks := tokens(300, 8*testBS)
	hs := chain(t, prof, toks)
	for i := range hs {
		ev := bench.EngineStored{Hashes: hs[i : i+1], Tokens: toks[i*testBS : (i+1)*testBS], BlockSize: testBS, Medium: "GPU"}
		if i > 0 {
			ev.Parent, ev.HasParent = hs[i-1], true
		}
		publish(t, pub, bench.AppendVLLMBatch(nil, bench.EraArray, 1.7e9, 0, ev))
	}
	k := h.register(registration("vllm-a", core.PublisherVLLM, pub, prof))
	h.waitRow("vllm-a", toks, full(8))
	if reqs := pub.ReplayRequests(); len(reqs) == 0 || reqs[0] != 0 {
		t.Fatalf("replay requests %v, want the first from 0", reqs)
	}
	if st := h.status(k); st.LastSeq != 7 || st.ReplaysSucceeded == 0 {
		t.Fatalf("status: %+v", st)
	}
}

// TestZMQPublisherRestart: a publisher that comes back on the same endpoints
// with its sequence reset is detected; the old incarnation's blocks are cleared
// and the new one's (including those published before the reconnection, from
// its ring) are ingested.
func TestZMQPublisherRestart(t *testing.T) {
	for _, tc := range []struct {
		name     string
		early    int // batches the new incarnation publishes before the check loop
		noReplay bool
	}{
		{"short-new-run", 2, false}, // new seqs stay below the old: live regression
		{"long-new-run", 30, false}, // new seqs pass the old: the replay checksum tells
		{"without-replay", 0, true}, // live regression only; early batches are lost
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, fastOpts(t))
			a := newPublisher(t, bench.PublisherOptions{NoReplay: tc.noReplay})
			k := h.register(registration("vllm-a", core.PublisherVLLM, a, vllmProfile(t)))
			if tc.noReplay {
				h.prime(k, a, emptyVLLM())
			} else {
				// Publish once the listener is connected: its replay request on
				// connecting (answered with the still empty ring) follows its
				// subscription, so nothing after it is lost to a slow join
				// (which no later message of this incarnation would heal).
				waitFor(t, "the connection's replay request", func() bool { return len(a.ReplayRequests()) >= 1 })
			}
			for x := uint64(100); x < 110; x++ {
				publish(t, a, storeOne(x))
			}
			waitFor(t, "first incarnation", func() bool { return h.holds("vllm-a", 109) })
			ep, rep := a.Endpoint(), a.ReplayEndpoint()
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			b := newPublisher(t, bench.PublisherOptions{Endpoint: ep, ReplayEndpoint: rep, NoReplay: tc.noReplay})
			for x := uint64(200); x < 200+uint64(tc.early); x++ {
				publish(t, b, storeOne(x))
			}
			// Keep the new engine busy (as a real one is) until the index shows it.
			next := uint64(1000)
			waitFor(t, "restart handled", func() bool {
				publish(t, b, storeOne(next))
				next++
				if tc.early > 0 && (!h.holds("vllm-a", 200) || !h.holds("vllm-a", 200+uint64(tc.early)-1)) {
					return false
				}
				// Some recent batch of the new incarnation is in (the newest
				// may still be on its way).
				recent := false
				for x := next - 1; x >= 1000 && x+10 >= next && !recent; x-- {
					recent = h.holds("vllm-a", x)
				}
				if !recent {
					return false
				}
				for x := uint64(100); x < 110; x++ {
					if h.holds("vllm-a", x) {
						return false
					}
				}
				return true
			})
			st := h.status(k)
			if tc.noReplay {
				// Without replay a restart whose first received sequence already
				// passed the old one looks like a gap: cleared as stale instead.
				if st.Restarts+st.StaleClears == 0 {
					t.Fatalf("status: %+v", st)
				}
			} else if st.Restarts == 0 || st.StaleClears != 0 {
				t.Fatalf("status: %+v", st)
			}
		})
	}
}

// TestZMQGarbagePublisher: malformed multiparts and payloads are counted and
// dropped; the subscriber stays up and a second stream is unaffected.
func TestZMQGarbagePublisher(t *testing.T) {
	h := newHarness(t, fastOpts(t))
	prof := vllmProfile(t)
	bad := newPublisher(t, bench.PublisherOptions{NoReplay: true})
	good := newPublisher(t, bench.PublisherOptions{})
	kb := h.register(registration("bad", core.PublisherVLLM, bad, prof))
	kg := h.register(registration("good", core.PublisherVLLM, good, prof))
	h.prime(kb, bad, emptyVLLM())
	seq := func(s uint64) []byte { return binary.BigEndian.AppendUint64(nil, s) }
	next := bad.NextSeq()
	raws := [][][]byte{
		{[]byte("only-one-frame")},
		{nil, seq(next)},                                              // two frames
		{nil, []byte{1, 2, 3}, storeOne(1)},                           // short sequence frame
		{nil, seq(next), storeOne(1), nil, []byte{}},                  // five frames
		{nil, seq(1 << 63), storeOne(1)},                              // sequence above INT64_MAX
		{nil, seq(next), []byte{0xc1}},                                // invalid msgpack: consumes seq next
		{nil, seq(next + 1), bytes.Repeat([]byte{0x91}, 64)},          // truncated nesting
		{nil, seq(next + 2), append(storeOne(1), 0)},                  // trailing byte
		{nil, seq(next + 3), []byte{0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0}}, // truncated float
	}
	for _, r := range raws {
		if err := bad.SendRaw(r...); err != nil {
			t.Fatal(err)
		}
	}
	// The publisher's own counter did not move; realign it past the raw seqs.
	for bad.NextSeq() < next+4 {
		publishHidden(t, bad, emptyVLLM())
	}
	publish(t, bad, storeOne(7))
	publish(t, good, storeOne(8))
	waitFor(t, "valid batches after the garbage", func() bool { return h.holds("bad", 7) && h.holds("good", 8) })
	sb, sg := h.status(kb), h.status(kg)
	if sb.DecodeErrors != uint64(len(raws)) || sb.State != ingest.ListenerActive || sb.StaleClears != 0 || sb.Gaps != 0 || sb.LastError == "" {
		t.Fatalf("bad status: %+v", sb)
	}
	if sg.DecodeErrors != 0 || sg.State != ingest.ListenerActive {
		t.Fatalf("good status: %+v", sg)
	}
}

// TestZMQPendingUntilPublisherAppears: registration does not wait for the
// publisher; the listener stays pending, then connects when it binds.
func TestZMQPendingUntilPublisherAppears(t *testing.T) {
	h := newHarness(t, fastOpts(t))
	ep := "tcp://127.0.0.1:" + freePort(t)
	rep := "tcp://127.0.0.1:" + freePort(t)
	r := core.Registration{Endpoint: ep, ReplayEndpoint: rep, Type: core.PublisherVLLM, ModelName: testModel,
		InstanceID: "late", BlockSize: testBS, Profile: vllmProfile(t), ProfileExplicit: true}
	start := time.Now()
	k := h.register(r)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Register blocked for %v", d)
	}
	waitFor(t, "a pending status saying why", func() bool { return strings.Contains(h.status(k).LastError, "not connected") })
	if st := h.status(k); st.State != ingest.ListenerPending {
		t.Fatalf("status: %+v", st)
	}
	pub := newPublisher(t, bench.PublisherOptions{Endpoint: ep, ReplayEndpoint: rep})
	publish(t, pub, storeOne(42))
	waitFor(t, "block from the late publisher", func() bool { return h.holds("late", 42) })
	if st := h.status(k); st.State != ingest.ListenerActive {
		t.Fatalf("status: %+v", st)
	}
}

// TestZMQPauseResume: a paused listener receives nothing; on resume the replay
// recovers what was published meanwhile.
func TestZMQPauseResume(t *testing.T) {
	h := newHarness(t, fastOpts(t))
	pub := newPublisher(t, bench.PublisherOptions{})
	k := h.register(registration("vllm-a", core.PublisherVLLM, pub, vllmProfile(t)))
	publish(t, pub, storeOne(1))
	waitFor(t, "block 1", func() bool { return h.holds("vllm-a", 1) })
	if err := h.g.Pause(k); err != nil {
		t.Fatal(err)
	}
	if st := h.status(k); st.State != ingest.ListenerPaused {
		t.Fatalf("status after pause: %+v", st)
	}
	publish(t, pub, storeOne(2))
	publish(t, pub, storeOne(3))
	if err := h.g.Pause(k); err != nil { // idempotent
		t.Fatal(err)
	}
	if h.holds("vllm-a", 2) || h.status(k).LastSeq != 0 {
		t.Fatal("a paused listener applied a batch")
	}
	if err := h.g.Resume(k); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "blocks 2 and 3 after resume", func() bool { return h.holds("vllm-a", 2) && h.holds("vllm-a", 3) })
	if st := h.status(k); st.State != ingest.ListenerActive || st.StaleClears != 0 || st.LastSeq != 2 {
		t.Fatalf("status after resume: %+v", st)
	}
	if err := h.g.Pause(core.ServiceKey{InstanceID: "nobody"}); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("pause unknown: %v", err)
	}
}

// TestZMQRegisterErrors: malformed endpoints are refused without touching the
// index; identical registrations are idempotent; unknown keys are not found.
func TestZMQRegisterErrors(t *testing.T) {
	h := newHarness(t, fastOpts(t))
	pub := newPublisher(t, bench.PublisherOptions{})
	r := registration("vllm-a", core.PublisherVLLM, pub, vllmProfile(t))
	for _, ep := range []string{"tcp://*:5557", "localhost:5557", "tcp://127.0.0.1:0"} {
		bad := r
		bad.Endpoint = ep
		var fe *core.FieldError
		if _, err := h.g.Register(bad); !errors.Is(err, ingest.ErrBadEndpoint) || !errors.Is(err, core.ErrInvalid) ||
			!errors.As(err, &fe) || fe.Field != "endpoint" {
			t.Errorf("endpoint %q: got %v", ep, err)
		}
		bad = r
		bad.ReplayEndpoint = ep
		if _, err := h.g.Register(bad); !errors.Is(err, ingest.ErrBadEndpoint) || !errors.As(err, &fe) || fe.Field != "replay_endpoint" {
			t.Errorf("replay endpoint %q: got %v", ep, err)
		}
	}
	// Syntactically fine, refused by libzmq on connect: rolled back.
	longIPC := "ipc:///tmp/" + strings.Repeat("x", 200)
	for _, field := range []string{"endpoint", "replay_endpoint"} {
		bad := r
		if field == "endpoint" {
			bad.Endpoint = longIPC
		} else {
			bad.ReplayEndpoint = longIPC
		}
		var fe *core.FieldError
		if _, err := h.g.Register(bad); !errors.Is(err, ingest.ErrBadEndpoint) || !errors.Is(err, core.ErrInvalid) ||
			!errors.As(err, &fe) || fe.Field != field {
			t.Errorf("%s refused by libzmq: got %v", field, err)
		}
	}
	if n := len(h.ix.Services()); n != 0 || len(h.g.Listeners()) != 0 {
		t.Fatalf("%d registrations after refused ones", n)
	}
	k := h.register(r)
	if created, err := h.g.Register(r); err != nil || created {
		t.Fatalf("identical re-register: created=%v err=%v", created, err)
	}
	conflict := r
	conflict.BlockSize = 32
	if _, err := h.g.Register(conflict); !errors.Is(err, core.ErrConflict) {
		t.Fatalf("conflicting register: %v", err)
	}
	if len(h.g.Listeners()) != 1 {
		t.Fatalf("listeners: %+v", h.g.Listeners())
	}
	if _, err := h.g.Unregister(core.ServiceKey{InstanceID: "nobody"}); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("unregister unknown: %v", err)
	}
	if got, err := h.g.Unregister(k); err != nil || got.InstanceID != "vllm-a" {
		t.Fatalf("unregister: %+v %v", got, err)
	}
	if _, err := h.g.Unregister(k); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("second unregister: %v", err)
	}
}

// TestZMQMetrics: per-stream series exist while registered and are gone
// after; the dialect's total outlives them.
func TestZMQMetrics(t *testing.T) {
	h := newHarness(t, fastOpts(t))
	pub := newPublisher(t, bench.PublisherOptions{})
	k := h.register(registration("vllm-a", core.PublisherVLLM, pub, vllmProfile(t)))
	publish(t, pub, bench.AppendVLLMBatch(nil, bench.EraMap, 1.7e9, 0,
		bench.EngineStored{Hashes: []uint64{5, 6}, BlockSize: testBS, Medium: "GPU"}))
	waitFor(t, "block 6", func() bool { return h.holds("vllm-a", 6) })
	var buf bytes.Buffer
	h.g.Metrics().WritePrometheus(&buf)
	labels := `{instance="vllm-a",tenant="default",dp_rank="0"}`
	for _, want := range []string{
		"conductor_ingest_batches_total" + labels + " 1",
		"conductor_ingest_blocks_total" + labels + " 2",
		`conductor_ingest_events_total{instance="vllm-a",tenant="default",dp_rank="0",type="stored"} 1`,
		"conductor_ingest_last_seq" + labels + " 0",
		"conductor_ingest_replays_requested_total" + labels,
		`conductor_ingest_dialect_blocks_total{dialect="vLLM"} 2`,
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("metrics lack %q:\n%s", want, buf.String())
		}
	}
	if _, err := h.g.Unregister(k); err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	h.g.Metrics().WritePrometheus(&buf)
	if strings.Contains(buf.String(), "vllm-a") {
		t.Fatalf("series left after unregister:\n%s", buf.String())
	}
	if !strings.Contains(buf.String(), `conductor_ingest_dialect_blocks_total{dialect="vLLM"} 2`) {
		t.Fatalf("the dialect's total went with the stream:\n%s", buf.String())
	}
}

// TestZMQUnregisterRemovesContributions: after Unregister returns, the stream's
// blocks are gone and further publishing changes nothing.
func TestZMQUnregisterRemovesContributions(t *testing.T) {
	h := newHarness(t, fastOpts(t))
	pub := newPublisher(t, bench.PublisherOptions{})
	k := h.register(registration("vllm-a", core.PublisherVLLM, pub, vllmProfile(t)))
	other := newPublisher(t, bench.PublisherOptions{})
	h.register(registration("vllm-b", core.PublisherVLLM, other, vllmProfile(t)))
	publish(t, pub, storeOne(1))
	publish(t, other, storeOne(1))
	waitFor(t, "block 1 on both", func() bool { return h.holds("vllm-a", 1) && h.holds("vllm-b", 1) })
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // keep publishing through the unregistration
		defer close(done)
		for x := uint64(2); ; x++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := pub.Publish(storeOne(x)); err != nil {
				return
			}
		}
	}()
	// Unregister while batches flow: wait until the publishing loop's batches
	// are being applied (block 2 is its first), not for a guessed duration.
	waitFor(t, "the publishing loop applied", func() bool { return h.holds("vllm-a", 2) })
	if _, err := h.g.Unregister(k); err != nil {
		t.Fatal(err)
	}
	close(stop)
	<-done
	var res core.QueryResult
	for x := uint64(1); x < 50; x++ {
		req := core.QueryRequest{Model: testModel, BlockSize: testBS, Hashes: []uint64{x}, ByHash: true}
		if err := h.ix.Query(&req, &res); err != nil {
			t.Fatal(err)
		}
		for _, r := range res.Instances {
			if r.ID == "vllm-a" && r.LongestMatched != 0 {
				t.Fatalf("block %d still held by the unregistered stream: %+v", x, r)
			}
		}
	}
	if !h.holds("vllm-b", 1) {
		t.Fatal("the other stream lost its block")
	}
}

// TestZMQRestartAfterReplayOnlyJoin: a subscription whose every message came
// through the replay on connect has no live baseline; when its publisher then
// restarts, the new incarnation's low sequences must not be dropped as
// duplicates of the old ones.
func TestZMQRestartAfterReplayOnlyJoin(t *testing.T) {
	h := newHarness(t, fastOpts(t))
	a := newPublisher(t, bench.PublisherOptions{})
	for x := uint64(100); x < 110; x++ {
		publish(t, a, storeOne(x)) // before the subscription: only the ring has them
	}
	k := h.register(registration("vllm-a", core.PublisherVLLM, a, vllmProfile(t)))
	waitFor(t, "replayed on connect", func() bool { return h.holds("vllm-a", 109) })
	ep, rep := a.Endpoint(), a.ReplayEndpoint()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	b := newPublisher(t, bench.PublisherOptions{Endpoint: ep, ReplayEndpoint: rep})
	waitFor(t, "reconnect", func() bool { st := h.status(k); return st.Reconnects > 0 && st.ReplaysSucceeded >= 2 })
	for x := uint64(200); x < 203; x++ {
		publish(t, b, storeOne(x))
	}
	waitFor(t, "new incarnation applied, old cleared", func() bool {
		return h.holds("vllm-a", 200) && h.holds("vllm-a", 202) && !h.holds("vllm-a", 109)
	})
	if st := h.status(k); st.Restarts == 0 {
		t.Fatalf("restart not counted: %+v", st)
	}
}
