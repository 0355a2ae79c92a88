package ingest_test

import (
	"encoding/binary"
	"sync"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/seed-c7a81618/conductor/bench"
	"github.com/seed-c7a81618/conductor/core"
)

// lossyReplay is a replay endpoint (a ROUTER speaking vLLM's protocol) whose
// answer to one request loses replies, as a publisher's ROUTER does with what
// does not fit its send high-water mark while the subscriber pushes back.
// Every batch s of the stream is payload(s), so it can answer any request.
type lossyReplay struct {
	endpoint string
	payload  func(seq uint64) []byte
	// next is the sequence the next batch published gets.
	next func() uint64

	mu sync.Mutex
	// lossy is the start of the request to answer with losses; lose says
	// which replies (and whether the end marker, at bench.ReplayEnd) it loses.
	lossy    uint64
	lose     func(seq uint64) bool
	requests []uint64
}

func newLossyReplay(t *testing.T, payload func(uint64) []byte, next func() uint64) *lossyReplay {
	t.Helper()
	ctx, err := zmq.NewContext()
	if err != nil {
		t.Fatal(err)
	}
	router, err := ctx.NewSocket(zmq.ROUTER)
	if err != nil {
		t.Fatal(err)
	}
	_ = router.SetLinger(0)
	_ = router.SetSndhwm(0)
	if err := router.Bind("tcp://127.0.0.1:*"); err != nil {
		t.Fatal(err)
	}
	r := &lossyReplay{payload: payload, next: next, lossy: ^uint64(0)}
	if r.endpoint, err = router.GetLastEndpoint(); err != nil {
		t.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go r.serve(router, stop, done)
	t.Cleanup(func() {
		close(stop)
		<-done
		_ = ctx.Term()
	})
	return r
}

// loseOnce makes the answer to the first request starting at start lose the
// replies lose selects.
func (r *lossyReplay) loseOnce(start uint64, lose func(seq uint64) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lossy, r.lose = start, lose
}

func (r *lossyReplay) requested() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]uint64(nil), r.requests...)
}

func (r *lossyReplay) serve(router *zmq.Socket, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	defer router.Close()
	poller := zmq.NewPoller()
	poller.Add(router, zmq.POLLIN)
	for {
		select {
		case <-stop:
			return
		default:
		}
		if polled, err := poller.Poll(20 * time.Millisecond); err != nil {
			return
		} else if len(polled) == 0 {
			continue
		}
		msg, err := router.RecvMessageBytes(0)
		if err != nil {
			return
		}
		if len(msg) != 3 || len(msg[2]) != 8 {
			continue
		}
		id, start := msg[0], binary.BigEndian.Uint64(msg[2])
		r.mu.Lock()
		r.requests = append(r.requests, start)
		lose := func(uint64) bool { return false }
		if start == r.lossy {
			lose, r.lossy = r.lose, ^uint64(0)
		}
		r.mu.Unlock()
		var seqb [8]byte
		for s, end := start, r.next(); s < end; s++ {
			if !lose(s) {
				binary.BigEndian.PutUint64(seqb[:], s)
				_, _ = router.SendMessage(id, "", seqb[:], r.payload(s))
			}
		}
		if !lose(bench.ReplayEnd) {
			binary.BigEndian.PutUint64(seqb[:], bench.ReplayEnd)
			_, _ = router.SendMessage(id, "", seqb[:], "")
		}
	}
}

// TestZMQReplayRequestsDroppedReplies: replies the publisher dropped on the
// way, seen as a gap after the replay started or as a reply timeout after
// replies were applied, are requested again from the last applied sequence;
// the stream heals without a stale clear or a failed replay.
func TestZMQReplayRequestsDroppedReplies(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose func(off uint64) bool // by offset from the replay's start
	}{
		// Replies 9..12 after the start lost, later ones not: a gap.
		{"gap", func(off uint64) bool { return off >= 9 && off <= 12 }},
		// Everything after reply 8 lost, the end marker too: a timeout.
		{"tail", func(off uint64) bool { return off > 8 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := fastOpts(t)
			opts.ReplayTimeout = 300 * time.Millisecond
			h := newHarness(t, opts)
			pub := newPublisher(t, bench.PublisherOptions{NoReplay: true})
			payload := func(s uint64) []byte { return storeOne(100 + s) }
			replay := newLossyReplay(t, payload, pub.NextSeq)
			reg := registration("vllm-a", core.PublisherVLLM, pub, vllmProfile(t))
			reg.ReplayEndpoint = replay.endpoint
			k := h.register(reg)
			waitFor(t, "a first batch and the connection's replay", func() bool {
				publish(t, pub, payload(pub.NextSeq()))
				time.Sleep(10 * time.Millisecond)
				return primed(h.status(k))
			})
			// Let the priming settle: the baseline is the last batch published.
			last := pub.NextSeq() - 1
			waitFor(t, "the baseline", func() bool { return h.status(k).LastSeq == last })
			replay.loseOnce(last, func(s uint64) bool { return tc.lose(s - last) }) // the end marker: by its offset
			const hidden = 20
			for i := 0; i < hidden; i++ {
				publishHidden(t, pub, payload(pub.NextSeq()))
			}
			publish(t, pub, payload(pub.NextSeq())) // reveals the gap
			waitFor(t, "every batch", func() bool {
				for s := last + 1; s < pub.NextSeq(); s++ {
					if !h.holds("vllm-a", 100+s) {
						return false
					}
				}
				return true
			})
			st, reqs := h.status(k), replay.requested()
			t.Logf("replay requests %v (baseline %d); %+v", reqs, last, st)
			if st.StaleClears != 0 || st.ReplaysFailed != 0 {
				t.Fatalf("want the drops healed by another request, no stale clear or failure: %+v", st)
			}
			// The lossy answer, then a request from the last reply before
			// the first loss (offset 8).
			again := false
			for i, r := range reqs {
				again = again || (r == last+8 && i > 0 && reqs[i-1] == last)
			}
			if !again {
				t.Fatalf("want a request from %d after the one from %d: %v", last+8, last, reqs)
			}
		})
	}
}
