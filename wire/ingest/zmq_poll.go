package ingest

/*
#cgo !windows pkg-config: libzmq
#include <zmq.h>
#include <errno.h>
#include <sys/eventfd.h>

static int cd_poll(zmq_pollitem_t *items, int n, long timeout) {
	int rc = zmq_poll(items, n, timeout);
	if (rc < 0 && errno == EINTR) rc = 0; // the caller's loop polls again
	return rc;
}

static int cd_eventfd(void) { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"syscall"
	"time"
)

// waker is a listener's wake-up channel into its zmq_poll: a Linux eventfd (one
// file descriptor, no libzmq socket), polled as a raw fd next to the sockets.
// It replaced a PAIR socket pair per listener (two libzmq sockets, two mailboxes
// and an inproc pipe). The controller writes under Ingester.opMu; the listener's
// goroutine reads; the controller closes it after joining the goroutine.
type waker struct{ fd int }

func newWaker() (waker, error) {
	fd, err := C.cd_eventfd()
	if fd < 0 {
		return waker{fd: -1}, fmt.Errorf("wake eventfd: %w", err)
	}
	return waker{fd: int(fd)}, nil
}

var wakeOne = binary.NativeEndian.AppendUint64(nil, 1)

// wake makes the next (or current) poll return. A full counter (never in
// practice) means wake-ups are pending anyway.
func (w waker) wake() {
	if w.fd >= 0 {
		_, _ = syscall.Write(w.fd, wakeOne)
	}
}

// drain resets the counter (the goroutine then looks at its command channel).
func (w waker) drain() {
	var b [8]byte
	_, _ = syscall.Read(w.fd, b[:])
}

func (w *waker) close() {
	if w.fd >= 0 {
		_ = syscall.Close(w.fd)
		w.fd = -1
	}
}

// pollSet is a zmq_poll item array owned by a listener's goroutine: item 0 is
// the waker's fd, the others sockets. pebbe/zmq4's Poller cannot poll a raw fd
// and allocates per call; this one polls in one cgo call without allocating.
//
// items holds libzmq handles (C pointers, from zmq_sock.go) only, so passing it
// to C is allowed. A socket must stay open while it is in a poll set: the
// listener rebuilds its poll sets whenever it closes one (rebuildPollers).
type pollSet struct {
	items [4]C.zmq_pollitem_t
	n     int
}

// Item positions in a listener's poll sets (see rebuildPollers).
const (
	pollWake = iota
	pollMon
	pollSub
	pollDealer
)

func (p *pollSet) reset(w waker) {
	*p = pollSet{n: 1}
	p.items[0].fd = C.int(w.fd)
	p.items[0].events = C.ZMQ_POLLIN
}

// add appends s, polled for input.
func (p *pollSet) add(s *zsocket) {
	p.items[p.n].socket = s.h
	p.items[p.n].events = C.ZMQ_POLLIN
	p.n++
}

// setIn turns input polling of item i on or off.
func (p *pollSet) setIn(i int, on bool) {
	p.items[i].events = 0
	if on {
		p.items[i].events = C.ZMQ_POLLIN
	}
}

// poll waits up to timeout (negative: until an event) and returns how many items
// are ready (0 on timeout or a signal); ready tells which.
func (p *pollSet) poll(timeout time.Duration) (int, error) {
	ms := C.long(-1)
	if timeout >= 0 {
		ms = C.long(timeout / time.Millisecond)
	}
	rc, err := C.cd_poll(&p.items[0], C.int(p.n), ms)
	if rc < 0 {
		return 0, zerr(err)
	}
	return int(rc), nil
}

func (p *pollSet) ready(i int) bool {
	return i < p.n && p.items[i].revents&C.ZMQ_POLLIN != 0
}
