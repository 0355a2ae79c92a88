package ingest

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// markWait bounds the wait for a message libzmq delivers.
const markWait = 30 * time.Second

// pipeModel is libzmq's flow control on one connection queue, as queueMark
// describes it: a second implementation that the real library is checked
// against (TestQueueMarkAgreesWithLibzmq) and queueMark is proven on
// (TestQueueMarkNeverStalls).
type pipeModel struct {
	written, read, acked uint64
	writerHWM            int // the mark the writer enforces (updated by a command)
	readerHWM            int // the mark the reader's lwm comes from
	pendingHWM           int // a mark set but not yet seen by the writer (0: none)
}

func newPipeModel(hwm int) *pipeModel { return &pipeModel{writerHWM: hwm, readerHWM: hwm} }

func (p *pipeModel) canWrite() bool { return p.written-p.acked < uint64(p.writerHWM) }
func (p *pipeModel) write()         { p.written++ }
func (p *pipeModel) canRead() bool  { return p.read < p.written }

func (p *pipeModel) readOne() {
	p.read++
	if p.read%uint64((p.readerHWM+1)/2) == 0 {
		p.acked = p.read
	}
}

func (p *pipeModel) setHWM(h int) { p.readerHWM, p.pendingHWM = h, h }

func (p *pipeModel) deliver() {
	if p.pendingHWM != 0 {
		p.writerHWM, p.pendingHWM = p.pendingHWM, 0
	}
}

// stalled: everything written was read and the writer may not write again.
func (p *pipeModel) stalled() bool { return p.pendingHWM == 0 && !p.canRead() && !p.canWrite() }

// modelStalls reports whether the model stalls when before messages were
// written and read at mark from, the mark is set to to, and more follow.
func modelStalls(before, from, to int) bool {
	p := newPipeModel(from)
	for i := 0; i < before; i++ {
		p.write()
		p.readOne()
	}
	p.setHWM(to)
	p.deliver()
	return !p.canWrite()
}

// TestQueueMarkNeverStalls drives the model through random interleavings of
// a writer, a reader that lowers its mark as queueMark allows, and the
// writer's late view of the new mark: every message gets through. Lowering
// at once (what queueMark refuses) stalls in some of the same runs, so the
// model can fail.
func TestQueueMarkNeverStalls(t *testing.T) {
	naiveStalls := 0
	for seed := uint64(0); seed < 2000; seed++ {
		for _, naive := range []bool{false, true} {
			r := rand.New(rand.NewPCG(seed, 7))
			from := []int{64, 32, 16, 200, 5}[r.IntN(5)]
			p := newPipeModel(from)
			var m queueMark
			m.opened(from)
			want := from
			const total = 400
			for p.read < total {
				if p.stalled() && p.written < total {
					if !naive {
						t.Fatalf("seed %d: stalled at read %d written %d acked %d, marks %d/%d", seed, p.read, p.written, p.acked, p.readerHWM, p.writerHWM)
					}
					naiveStalls++
					break
				}
				switch k := r.IntN(10); {
				case k < 4 && p.written < total && p.canWrite():
					p.write()
				case k < 8 && p.canRead():
					p.readOne()
					if r.IntN(20) == 0 {
						want = max(1, want/(1+r.IntN(16)))
					}
					if naive {
						if want < p.readerHWM {
							p.setHWM(want)
						}
						continue
					}
					if m.n+1 != p.read {
						t.Fatalf("queueMark counts %d reads, the pipe %d", m.n+1, p.read)
					}
					if h := m.read(want); h != 0 {
						p.setHWM(h)
						m.lowered(h)
					}
				case k >= 8:
					p.deliver()
				}
			}
			if !naive && (m.hwm != p.readerHWM || m.hwm < want) {
				t.Fatalf("seed %d: queueMark at %d, the pipe at %d, wanted %d", seed, m.hwm, p.readerHWM, want)
			}
		}
	}
	if naiveStalls == 0 {
		t.Fatal("lowering at once never stalled the model: it does not show what queueMark guards against")
	}
	t.Logf("lowering at once stalled %d of 2000 runs; queueMark none", naiveStalls)
}

// TestQueueMarkReachesTarget: from any position in the flow control, a
// lower mark is reached within one ack period of the old mark.
func TestQueueMarkReachesTarget(t *testing.T) {
	for _, from := range []int{64, 33, 16, 5} {
		for d := 0; d < from; d++ {
			for _, want := range []int{1, 2, 4, from - 1} {
				var m queueMark
				m.opened(from)
				for range d {
					m.read(from)
				}
				n := 0
				for ; m.hwm != want && n <= (from+1)/2; n++ {
					if h := m.read(want); h != 0 {
						m.lowered(h)
					}
				}
				if m.hwm != want {
					t.Fatalf("from %d after %d reads: mark %d after %d more, want %d", from, d, m.hwm, n, want)
				}
			}
		}
	}
}

// TestQueueMarkAgreesWithLibzmq checks the model against libzmq: before
// small messages are published and read at one mark, the mark is set
// lower, then more are published. Where the model stalls, libzmq delivers
// none of them; elsewhere it delivers all. Lowering through queueMark
// delivers all in every case.
func TestQueueMarkAgreesWithLibzmq(t *testing.T) {
	const after = 20
	cases := []struct{ before, from, to int }{
		{40, 64, 4}, {32, 64, 4}, {20, 64, 4}, {64, 64, 1}, {12, 16, 4}, {8, 16, 4}, {33, 64, 60}, {3, 64, 1},
	}
	for _, c := range cases {
		for _, guarded := range []bool{false, true} {
			t.Run(fmt.Sprintf("%d-at-%d-to-%d-guarded=%v", c.before, c.from, c.to, guarded), func(t *testing.T) {
				ctx, err := newZContext()
				if err != nil {
					t.Fatal(err)
				}
				defer ctx.term()
				pub, err := zmq.NewSocket(zmq.PUB)
				if err != nil {
					t.Fatal(err)
				}
				defer pub.Close()
				_ = pub.SetLinger(0)
				_ = pub.SetSndhwm(100000)
				if err := pub.Bind("tcp://127.0.0.1:*"); err != nil {
					t.Fatal(err)
				}
				ep, _ := pub.GetLastEndpoint()
				sub, err := ctx.socket(zSUB)
				if err != nil {
					t.Fatal(err)
				}
				defer sub.close()
				if err := firstErr(setInts(sub, optRcvHWM, c.from, optLinger, 0), sub.subscribeAll(), sub.connect(ep)); err != nil {
					t.Fatal(err)
				}
				r := newFrameReader(4096)
				defer r.free()
				var m queueMark
				m.opened(c.from)
				// read reads up to n messages, each within wait of the last.
				read := func(n int, wait time.Duration) int {
					got := 0
					last := time.Now()
					for got < n && time.Since(last) < wait {
						if _, err := r.read(sub); err != nil {
							time.Sleep(100 * time.Microsecond)
							continue
						}
						got, last = got+1, time.Now()
						if h := m.read(c.to); guarded && h != 0 {
							if err := sub.setInt(optRcvHWM, h); err != nil {
								t.Fatal(err)
							}
							m.lowered(h)
						}
					}
					return got
				}
				// The slow joiner: publish until the first message arrives.
				for read(1, 10*time.Millisecond) == 0 {
					if _, err := pub.SendBytes([]byte{0}, 0); err != nil {
						t.Fatal(err)
					}
				}
				// Skip what the joiner loop left, then bring the count to before.
				for read(1, 50*time.Millisecond) == 1 {
				}
				for m.n < uint64(c.before) {
					if _, err := pub.SendBytes([]byte{1}, 0); err != nil {
						t.Fatal(err)
					}
					if read(1, markWait) != 1 {
						t.Fatal("a message before the mark changed was not delivered")
					}
				}
				if !guarded {
					if err := sub.setInt(optRcvHWM, c.to); err != nil {
						t.Fatal(err)
					}
				}
				time.Sleep(20 * time.Millisecond) // the I/O thread takes the new mark
				for i := 0; i < after; i++ {
					if _, err := pub.SendBytes([]byte{2}, 0); err != nil {
						t.Fatal(err)
					}
				}
				stalls := !guarded && modelStalls(c.before, c.from, c.to)
				wait := markWait
				if stalls {
					wait = 500 * time.Millisecond // a stalled connection never delivers
				}
				got := read(after, wait)
				switch {
				case stalls && got != 0:
					t.Fatalf("the model stalls but libzmq delivered %d of %d", got, after)
				case !stalls && got != after:
					t.Fatalf("delivered %d of %d; the model does not stall", got, after)
				}
			})
		}
	}
}
