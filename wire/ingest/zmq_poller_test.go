package ingest

import (
	"encoding/binary"
	"syscall"
	"testing"
	"unsafe"
)

// TestWaitAsksOnlySignalled: a wait asks libzmq only about the sockets in
// receiver.check (those that signalled since they were last found empty),
// and a socket found empty leaves check. Here no poller runs, so the test
// plays its part: a message written to a socket whose signal was not taken
// is not seen, and is once the signal is (fired); the socket stays in check
// while it has something to read.
func TestWaitAsksOnlySignalled(t *testing.T) {
	ctx, err := newZContext()
	if err != nil {
		t.Fatal(err)
	}
	r, err := ctx.socket(zPAIR)
	if err != nil {
		t.Fatal(err)
	}
	w, err := ctx.socket(zPAIR)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = r.close()
		_ = w.close()
		_ = ctx.term()
	}()
	if err := firstErr(setInts(r, optLinger, 0), setInts(w, optLinger, 0), r.bind("inproc://wait-asks"), w.connect("inproc://wait-asks")); err != nil {
		t.Fatal(err)
	}
	l := &listener{cmds: make(chan cmdReq, 1), notify: make(chan struct{}, 1)}
	ws := &l.rx.poll
	ws.set(pollSub, r)
	l.rx.check = ws.present // as rebuildPollers leaves it
	const sub = 1 << pollSub
	poll := func(what string, want int) {
		t.Helper()
		n, err := ws.poll(l, 0)
		if err != nil || n != want || ws.ready(pollSub) != (want == 1) {
			t.Fatalf("%s: %d ready (sub %v), %v; want %d", what, n, ws.ready(pollSub), err, want)
		}
	}
	poll("a new socket, asked", 0)
	if l.rx.check&sub != 0 {
		t.Fatal("a socket found empty stays in check")
	}
	if err := w.send([]byte("m"), 0); err != nil {
		t.Fatal(err)
	}
	poll("a message whose signal was not taken", 0)
	l.fired.Or(sub) // the poller's part: its fd signalled
	poll("the signal taken", 1)
	poll("still readable, asked again", 1)
	if l.fired.Load() != 0 || l.rx.check&sub == 0 {
		t.Fatalf("fired %b, check %b: want the signal taken and the socket in check", l.fired.Load(), l.rx.check)
	}
	if frames, err := newFrameReader(64).read(r); err != nil || len(frames) != 1 || string(frames[0]) != "m" {
		t.Fatalf("read %q, %v", frames, err)
	}
	poll("read, found empty", 0)
	if l.rx.check&sub != 0 {
		t.Fatal("a socket found empty stays in check")
	}
}

// TestEpollPollNeverWaits: the poller's non-blocking take returns the
// events already pending (here an eventfd's, tagged as poller.add tags it),
// and 0 at once when there are none; an edge-triggered event is taken once.
func TestEpollPollNeverWaits(t *testing.T) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(epfd)
	efd, err := newEventFD()
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(efd)
	p := &poller{epfd: epfd}
	const tag = 7<<posBits | pollSub
	if err := p.add(efd, tag); err != nil {
		t.Fatal(err)
	}
	var evs [4]syscall.EpollEvent
	if n, err := epollPoll(epfd, evs[:]); n != 0 || err != nil {
		t.Fatalf("nothing pending: %d events, %v", n, err)
	}
	if _, err := syscall.Write(efd, binary.NativeEndian.AppendUint64(nil, 1)); err != nil {
		t.Fatal(err)
	}
	n, err := epollPoll(epfd, evs[:])
	if n != 1 || err != nil {
		t.Fatalf("one pending: %d events, %v", n, err)
	}
	if got := *(*uint64)(unsafe.Pointer(&evs[0].Fd)); got != tag {
		t.Fatalf("tag %#x, want %#x", got, tag)
	}
	if n, err := epollPoll(epfd, evs[:]); n != 0 || err != nil {
		t.Fatalf("edge taken: %d events, %v", n, err)
	}
}
