package ingest_test

import (
	"fmt"
	"math/rand"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/bench"
	"github.com/seed-c7a81618/conductor/core"
)

// TestZMQGapPolicies: a publisher without a replay endpoint loses one message
// (it storing block 3 and removing block 1); the next message shows the gap,
// which no replay can heal, and the registration's gap policy decides what
// the index keeps. Hand-worked, with blocks 1 and 2 stored before and 4
// after:
//
//   - keep: 1 (its removal was lost), 2 and 4; 3 stays missing;
//   - clear: 4 only;
//   - expire: 1, 2 and 4 until the expiry; block 2 is stored again after
//     the gap, so at the expiry, which the listener applies by itself with
//     no message arriving, block 1 goes and 2 and 4 stay.
func TestZMQGapPolicies(t *testing.T) {
	for _, tc := range []struct {
		policy        core.GapPolicy
		afterGap, end []uint64
		kept, clears  uint64
		expired       uint64
	}{
		{core.GapKeep, []uint64{1, 2, 4}, []uint64{1, 2, 4}, 1, 0, 0},
		{core.GapClear, []uint64{4}, []uint64{2, 4}, 0, 1, 0},
		{core.GapExpire, []uint64{1, 2, 4}, []uint64{2, 4}, 1, 0, 1},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			opts := fastOpts(t)
			ix := core.New(core.Options{Logger: opts.Logger, GapExpireAfter: 300 * time.Millisecond})
			h := newHarnessIndex(t, opts, ix)
			pub := newPublisher(t, bench.PublisherOptions{NoReplay: true})
			r := registration("vllm-a", core.PublisherVLLM, pub, vllmProfile(t))
			r.ReplayEndpoint, r.GapPolicy = "", tc.policy
			k := h.register(r)
			h.prime(k, pub, emptyVLLM())
			held := func() []uint64 {
				var out []uint64
				for x := uint64(1); x <= 4; x++ {
					if h.holds("vllm-a", x) {
						out = append(out, x)
					}
				}
				return out
			}
			publish(t, pub, bench.AppendVLLMBatch(nil, bench.EraMap, 1.7e9, 0,
				bench.EngineStored{Hashes: []uint64{1, 2}, BlockSize: testBS, Medium: "GPU"}))
			publishHidden(t, pub, bench.AppendVLLMBatch(nil, bench.EraMap, 1.7e9, 0,
				bench.EngineStored{Hashes: []uint64{3}, BlockSize: testBS, Medium: "GPU"},
				bench.EngineRemoved{Hashes: []uint64{1}, Medium: "GPU"}))
			publish(t, pub, storeOne(4))
			waitFor(t, "the message after the gap", func() bool { return h.holds("vllm-a", 4) })
			if got := held(); !slices.Equal(got, tc.afterGap) {
				t.Fatalf("after the gap: %v, want %v", got, tc.afterGap)
			}
			publish(t, pub, storeOne(2)) // announced again
			// The listener counts an expiry once it is done, after the
			// index changed: wait for both.
			waitFor(t, "the expected blocks", func() bool {
				return slices.Equal(held(), tc.end) && h.status(k).ExpiredBlocks == tc.expired
			})
			st := h.status(k)
			if st.Gaps != 1 || st.GapsKept != tc.kept || st.StaleClears != tc.clears || st.ExpiredBlocks != tc.expired {
				t.Fatalf("status: %+v", st)
			}
		})
	}
}

// TestZMQWakeups: a listener that waits is woken for every message: bursts of
// messages at random spacing (0 to 200µs apart), each burst's last message
// applied with nothing published after it
// (a lost wake-up would leave it in libzmq's queue for good). Seeded.
func TestZMQWakeups(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	h := newHarness(t, fastOpts(t))
	pub := newPublisher(t, bench.PublisherOptions{})
	k := h.register(registration("vllm-a", core.PublisherVLLM, pub, vllmProfile(t)))
	h.prime(k, pub, emptyVLLM())
	x := uint64(1000)
	for round := 0; round < 40; round++ {
		for i := rng.Intn(20); i >= 0; i-- {
			x++
			publish(t, pub, storeOne(x))
			time.Sleep(time.Duration(rng.Intn(200)) * time.Microsecond)
		}
		last := x
		waitFor(t, fmt.Sprintf("round %d's last message", round), func() bool { return h.holds("vllm-a", last) })
		time.Sleep(time.Duration(rng.Intn(3)) * time.Millisecond) // the listener parks, or not
	}
	if st := h.status(k); st.Gaps != 0 || st.StaleClears != 0 {
		t.Fatalf("status: %+v", st)
	}
}

// TestZMQSignalsDoNotFailListeners: the Go runtime interrupts threads with
// signals (SIGURG, preemption), which can make a libzmq call on the wait
// path fail with EINTR; that must be retried, not taken for a socket
// failure (which would close the sockets and lose what a stream without a
// replay endpoint sends meanwhile). Signals flood this process while a
// publisher without replay sends 6,000 messages in bursts of 4; every one is applied, and
// the listener never fails.
func TestZMQSignalsDoNotFailListeners(t *testing.T) {
	h := newHarness(t, fastOpts(t))
	pub := newPublisher(t, bench.PublisherOptions{NoReplay: true})
	r := registration("vllm-a", core.PublisherVLLM, pub, vllmProfile(t))
	r.ReplayEndpoint = ""
	k := h.register(r)
	h.prime(k, pub, emptyVLLM())
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = syscall.Kill(os.Getpid(), syscall.SIGURG)
		}
	}()
	const n = 6000
	for i := uint64(1); i <= n; i++ {
		publish(t, pub, storeOne(100000+i))
		if i%4 == 0 {
			time.Sleep(100 * time.Microsecond) // the listener waits between bursts
		}
	}
	waitFor(t, "the last message", func() bool { return h.holds("vllm-a", 100000+n) })
	if st := h.status(k); st.Gaps != 0 || st.Reconnects != 0 || st.LastError != "" || st.Blocks < n {
		t.Fatalf("status after %d messages under signals: %+v", n, st)
	}
}
