package ingest_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/bench"
	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/wire/ingest"
)

// burstPublisherEnv makes the test binary, re-executed by startBurstPublisher,
// run TestZMQBurstPublisherProcess as a publisher process. Its value is the
// PUB socket's SNDHWM.
const burstPublisherEnv = "CONDUCTOR_TEST_BURST_PUBLISHER"

// burstPublisher is a bench.Publisher in a child process, so that the
// subscriber's RSS is this process's alone. It publishes on command (one line
// each on its stdin, answered with one line on its stdout).
type burstPublisher struct {
	t        *testing.T
	cmd      *exec.Cmd
	in       *bufio.Writer
	out      *bufio.Scanner
	endpoint string
	replayEP string
}

func startBurstPublisher(t *testing.T, sndHWM int) *burstPublisher {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestZMQBurstPublisherProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), burstPublisherEnv+"="+strconv.Itoa(sndHWM))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &burstPublisher{t: t, cmd: cmd, in: bufio.NewWriter(stdin), out: bufio.NewScanner(stdout)}
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	f := strings.Fields(p.reply())
	if len(f) != 3 || f[0] != "endpoints" {
		t.Fatalf("publisher process: %q", f)
	}
	p.endpoint, p.replayEP = f[1], f[2]
	return p
}

// reply reads the next line the publisher process wrote.
func (p *burstPublisher) reply() string {
	p.t.Helper()
	for p.out.Scan() {
		if line := p.out.Text(); strings.HasPrefix(line, "endpoints ") || strings.HasPrefix(line, "done ") {
			return line
		}
		// Anything else is the child test binary's own output.
	}
	p.t.Fatalf("publisher process ended: %v", p.out.Err())
	return ""
}

// do sends one command and waits for its answer.
func (p *burstPublisher) do(format string, args ...any) string {
	p.t.Helper()
	fmt.Fprintf(p.in, format+"\n", args...)
	if err := p.in.Flush(); err != nil {
		p.t.Fatal(err)
	}
	return p.reply()
}

// TestZMQBurstPublisherProcess is the publisher process of startBurstPublisher
// (skipped unless run as one). Commands: "empty" publishes an empty batch;
// "burst n size first" publishes n batches of about size bytes, batch i storing
// block first+i (bigBatch), as fast as the PUB socket takes them (what does not
// fit its SNDHWM is dropped by libzmq, and stays in the replay ring).
func TestZMQBurstPublisherProcess(t *testing.T) {
	v := os.Getenv(burstPublisherEnv)
	if v == "" {
		t.Skip("the publisher process of TestZMQBurstMemory")
	}
	hwm, err := strconv.Atoi(v)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := bench.NewPublisher(bench.PublisherOptions{SndHWM: hwm})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	fmt.Printf("endpoints %s %s\n", pub.Endpoint(), pub.ReplayEndpoint())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		var seq uint64
		switch {
		case len(f) == 1 && f[0] == "empty":
			seq, err = pub.Publish(emptyVLLM())
		case len(f) == 4 && f[0] == "burst":
			n, _ := strconv.Atoi(f[1])
			size, _ := strconv.Atoi(f[2])
			first, _ := strconv.ParseUint(f[3], 10, 64)
			payloads := make([][]byte, n)
			for i := range payloads {
				payloads[i] = bigBatch(first+uint64(i), size)
			}
			for _, p := range payloads {
				if seq, err = pub.Publish(p); err != nil {
					break
				}
			}
		default:
			t.Fatalf("publisher process: bad command %q", in.Text())
		}
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("done %d\n", seq)
	}
}

// resetPeakRSS makes VmHWM restart from the current RSS (Linux ≥ 4.0).
func resetPeakRSS(t *testing.T) {
	t.Helper()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak RSS: %v", err)
	}
}

// TestZMQBurstMemory: a burst of large live messages, far above the receive
// queue's budget, from a publisher in another process (so that this
// process's RSS is the subscriber's alone) while the listener is busy with
// the first. libzmq's queues push back instead of taking the burst in, so the
// subscriber's peak RSS stays within the ingest bound (the "Memory" section
// on listener), which follows the stream's largest message L: the queues
// are resized for it as soon as the first one is read. When the publisher
// keeps what the subscriber does not take yet (a send high-water mark above
// the burst), every batch arrives; when it drops (a high-water mark of 4),
// the gaps are healed by replay, through a replay socket bounded the same
// way. Either way the index ends holding every block of the burst, with no
// stale clear. The "defaults" case runs with the default limits (64 MiB
// messages accepted, 64 MiB queues) and 8 MiB messages, the size of a
// store master's largest flushes: 512 MiB of burst against a bound of
// 336 MiB. A libzmq queue bounded in messages only takes most of the burst
// in, far above the bound. Under -race (slower, and whose shadow memory
// counts in RSS) the bursts are smaller and RSS is not checked.
func TestZMQBurstMemory(t *testing.T) {
	for _, tc := range []struct {
		name       string
		sndHWM     int // the publisher's
		gaps       bool
		n, size    int
		queue, max int // IngestOptions' (0: the defaults)
	}{
		{"publisher-keeps", 100000, false, 128, 2 << 20, 8 << 20, 4 << 20},
		{"publisher-drops", 4, true, 128, 2 << 20, 8 << 20, 4 << 20},
		{"defaults", 100000, false, 64, 8 << 20, 0, 0},
	} {
		if raceEnabled {
			tc.n, tc.size = 32, 1<<20
		}
		t.Run(tc.name, func(t *testing.T) {
			n, size := tc.n, tc.size
			opts := fastOpts(t)
			opts.ReceiveQueueBytes = tc.queue
			opts.MaxMessageBytes = int64(tc.max)
			opts.ReplayTimeout = 5 * time.Second
			opts.ReplayTotalTimeout = waitLimit
			h := newHarness(t, opts)
			ingest.StallAfterFirstBigLive(h.g, time.Second)
			pub := startBurstPublisher(t, tc.sndHWM)
			k := h.register(core.Registration{Endpoint: pub.endpoint, ReplayEndpoint: pub.replayEP,
				Type: core.PublisherVLLM, ModelName: testModel, InstanceID: "burst", BlockSize: testBS,
				Profile: vllmProfile(t), ProfileExplicit: true})
			waitFor(t, "a first batch and the connection's replay", func() bool {
				pub.do("empty")
				return primed(h.status(k))
			})
			runtime.GC()
			debug.FreeOSMemory()
			ingest.TrimCHeap()
			base := procStatus(t, "VmRSS")
			resetPeakRSS(t)
			pub.do("burst %d %d %d", n, size, 1000)
			// A gap at the end of the burst shows only once a message follows.
			waitFor(t, "every block of the burst", func() bool {
				pub.do("empty")
				for i := 0; i < n; i++ {
					if !h.holds("burst", 1000+uint64(i)) {
						return false
					}
				}
				return true
			})
			peak := (procStatus(t, "VmHWM") - base) << 10
			st := h.status(k)
			// The listener's bound: libzmq's SUB and replay queues, each
			// max(queue, L) plus the message being received; the Go share,
			// the receive queue and three times a message (its copy, a
			// replay's held copy, its decoded batch), counted twice for
			// GOGC=100; 16 MiB for the runtime and the allocators.
			o := opts
			o.EnsureDefaults()
			q, m := o.ReceiveQueueBytes, int(st.LargestMessage)
			bound := 2*(max(q, m)+m) + 2*(q+3*m) + 16<<20
			t.Logf("burst of %d × %d MiB: peak RSS +%d MiB (bound %d MiB); %d gaps, %d replays, %d queue drops",
				n, size>>20, peak>>20, bound>>20, st.Gaps, st.ReplaysSucceeded, st.QueueDrops)
			if st.StaleClears != 0 || st.DecodeErrors != 0 || (st.Gaps != 0) != tc.gaps ||
				(!tc.gaps && st.QueueDrops != 0) {
				t.Errorf("want every batch applied (gaps %v, healed by replay), no stale clear: %+v", tc.gaps, st)
			}
			if !raceEnabled && peak > bound {
				t.Errorf("peak RSS +%d MiB, above the ingest bound of %d MiB", peak>>20, bound>>20)
			}
		})
	}
}
