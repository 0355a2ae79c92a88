package ingest

/*
#cgo !windows pkg-config: libzmq
#include <zmq.h>
#include <errno.h>

static int cd_poll(zmq_pollitem_t *items, int n, long timeout) {
	int rc = zmq_poll(items, n, timeout);
	if (rc < 0 && errno == EINTR) rc = 0; // the caller's loop polls again
	return rc;
}
*/
import "C"

import "time"

// pollSet is a zmq_poll item array: the Tap's wait on its sockets (a
// listener waits through the Ingester's poller instead, zmq_poller.go).
// pebbe/zmq4's Poller allocates per call; this one polls in one cgo call
// without allocating.
//
// items holds libzmq handles (C pointers, from zmq_sock.go) only, so passing it
// to C is allowed. A socket must stay open while it is in a poll set.
type pollSet struct {
	items [4]C.zmq_pollitem_t
	n     int
}

// add appends s, polled for input.
func (p *pollSet) add(s *zsocket) {
	p.items[p.n].socket = s.h
	p.items[p.n].events = C.ZMQ_POLLIN
	p.n++
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
