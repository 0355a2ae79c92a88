package ingest

/*
#cgo !windows pkg-config: libzmq
#include <zmq.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

static int cd_ctx_term(void *c) {
	int rc;
	do { rc = zmq_ctx_term(c); } while (rc != 0 && errno == EINTR);
	return rc;
}

static int cd_setsockopt_int(void *s, int opt, int v) { return zmq_setsockopt(s, opt, &v, sizeof v); }

static int cd_setsockopt_int64(void *s, int opt, int64_t v) { return zmq_setsockopt(s, opt, &v, sizeof v); }

static int cd_getsockopt_int(void *s, int opt) {
	int v = -1;
	size_t sz = sizeof v;
	if (zmq_getsockopt(s, opt, &v, &sz) != 0) return -1;
	return v;
}

static int64_t cd_getsockopt_int64(void *s, int opt) {
	int64_t v = -1;
	size_t sz = sizeof v;
	if (zmq_getsockopt(s, opt, &v, &sz) != 0) return -1;
	return v;
}

static int cd_subscribe_all(void *s) { return zmq_setsockopt(s, ZMQ_SUBSCRIBE, "", 0); }

static int cd_send(void *s, const void *buf, size_t len, int flags) {
	int rc;
	do { rc = zmq_send(s, buf, len, flags); } while (rc < 0 && errno == EINTR);
	return rc;
}
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"strconv"
	"syscall"
	"unsafe"
)

// A small explicit binding of the libzmq calls the listeners need. The
// Ingester opens its context and every socket through it, so the receive loop
// (zmq_recv.go) and the poll (zmq_poll.go) pass libzmq handles that this
// package created itself: no other module's private fields are read. (It
// replaced pebbe/zmq4 here, whose Socket does not export its handle and whose
// receive path costs five cgo calls and an allocation per frame; BENCHMARKS.md,
// "ingest: receive path".) pebbe/zmq4 is still what the tests' and the
// benchmarks' publishers use, so the two implementations meet on the wire.
//
// Every function is a thin wrapper: it returns libzmq's error as a zmqErrno,
// and a socket is used by one goroutine at a time (libzmq sockets are not
// thread-safe; a listener's goroutine owns its sockets).

// zmqErrno is an errno set by libzmq. It matches the syscall.Errno of the
// same number under errors.Is (isEAGAIN, limitErr), and prints libzmq's own
// message (zmq_strerror), which also covers libzmq's private errnos (ETERM,
// EFSM, …).
type zmqErrno syscall.Errno

func (e zmqErrno) Error() string { return C.GoString(C.zmq_strerror(C.int(e))) }

func (e zmqErrno) Is(target error) bool {
	t, ok := target.(syscall.Errno)
	return ok && t == syscall.Errno(e)
}

// zerr converts the error cgo reports alongside a failed call (errno) to a
// zmqErrno.
func zerr(err error) error {
	var e syscall.Errno
	if errors.As(err, &e) {
		return zmqErrno(e)
	}
	if err == nil {
		return zmqErrno(syscall.EINVAL) // a failed call that left errno 0: never seen
	}
	return err
}

// errClosed: a call on a socket or context after close.
var errClosed = errors.New("conductor: libzmq socket or context closed")

// zcontext is a libzmq context (zmq_ctx_new). Its methods are safe for
// concurrent use (libzmq contexts are thread-safe); term must come last.
type zcontext struct{ h unsafe.Pointer }

func newZContext() (*zcontext, error) {
	h, err := C.zmq_ctx_new()
	if h == nil {
		return nil, zerr(err)
	}
	return &zcontext{h: h}, nil
}

// setMaxSockets sets ZMQ_MAX_SOCKETS (before the first socket).
func (c *zcontext) setMaxSockets(n int) error {
	if rc, err := C.zmq_ctx_set(c.h, C.ZMQ_MAX_SOCKETS, C.int(n)); rc != 0 {
		return zerr(err)
	}
	return nil
}

// term terminates the context (zmq_ctx_term); every socket must be closed
// first, or it blocks until they are.
func (c *zcontext) term() error {
	if c.h == nil {
		return errClosed
	}
	rc, err := C.cd_ctx_term(c.h)
	c.h = nil
	if rc != 0 {
		return zerr(err)
	}
	return nil
}

// zsocket is a libzmq socket opened through zcontext.socket.
//
// Safety: h is the pointer zmq_socket returned, C memory that never points
// into Go memory, so it may be passed to C and stored in C structures (the poll
// items) freely. It is valid until close, which sets it to nil; the owning
// goroutine (the listener's) rebuilds its poll sets after closing a socket and
// before it polls again (closeSub, resetDealer: rebuildPollers), so no poll or
// receive sees a closed handle.
type zsocket struct{ h unsafe.Pointer }

// Socket types (zmq.h).
const (
	zSUB    = C.ZMQ_SUB
	zPAIR   = C.ZMQ_PAIR
	zDEALER = C.ZMQ_DEALER
)

func (c *zcontext) socket(typ C.int) (*zsocket, error) {
	if c.h == nil {
		return nil, errClosed
	}
	h, err := C.zmq_socket(c.h, typ)
	if h == nil {
		return nil, zerr(err)
	}
	return &zsocket{h: h}, nil
}

// close closes the socket (zmq_close); with LINGER 0 nothing waits. A second
// close is a no-op.
func (s *zsocket) close() error {
	if s == nil || s.h == nil {
		return nil
	}
	rc, err := C.zmq_close(s.h)
	s.h = nil
	if rc != 0 {
		return zerr(err)
	}
	return nil
}

// setInt sets an int option (ZMQ_LINGER, ZMQ_RCVHWM, …).
func (s *zsocket) setInt(opt C.int, v int) error {
	if rc, err := C.cd_setsockopt_int(s.h, opt, C.int(v)); rc != 0 {
		return zerr(err)
	}
	return nil
}

// setInt64 sets an int64_t option (ZMQ_MAXMSGSIZE).
func (s *zsocket) setInt64(opt C.int, v int64) error {
	if rc, err := C.cd_setsockopt_int64(s.h, opt, C.int64_t(v)); rc != 0 {
		return zerr(err)
	}
	return nil
}

// getInt returns an int option, or -1.
func (s *zsocket) getInt(opt C.int) int { return int(C.cd_getsockopt_int(s.h, opt)) }

// getInt64 returns an int64_t option, or -1 (which ZMQ_MAXMSGSIZE also uses
// for no limit).
func (s *zsocket) getInt64(opt C.int) int64 { return int64(C.cd_getsockopt_int64(s.h, opt)) }

// socketType is the socket's ZMQ_TYPE, or -1.
func (s *zsocket) socketType() int { return s.getInt(C.ZMQ_TYPE) }

// subscribeAll subscribes a SUB socket to every topic (ZMQ_SUBSCRIBE "").
func (s *zsocket) subscribeAll() error {
	if rc, err := C.cd_subscribe_all(s.h); rc != 0 {
		return zerr(err)
	}
	return nil
}

func (s *zsocket) connect(endpoint string) error {
	cs := C.CString(endpoint)
	defer C.free(unsafe.Pointer(cs))
	for {
		// zmq_connect processes the socket's pending commands first, which
		// a signal (the Go runtime's preemption) can interrupt: EINTR is
		// not the endpoint's fault, and the call is repeated.
		rc, err := C.zmq_connect(s.h, cs)
		if rc == 0 {
			return nil
		}
		if err != syscall.EINTR {
			return zerr(err)
		}
	}
}

// bind is used by the tests (a PAIR pair over inproc).
func (s *zsocket) bind(endpoint string) error {
	cs := C.CString(endpoint)
	defer C.free(unsafe.Pointer(cs))
	if rc, err := C.zmq_bind(s.h, cs); rc != 0 {
		return zerr(err)
	}
	return nil
}

// monitor starts publishing the socket's events to a PAIR socket bound at
// addr (inproc); addr "" stops it (zmq_socket_monitor with a NULL address).
// Each event is a two-frame message: 6 bytes (a native-endian uint16 event and
// uint32 value), then the peer's endpoint (parseMonitorEvent).
func (s *zsocket) monitor(addr string, events int) error {
	var cs *C.char
	if addr != "" {
		cs = C.CString(addr)
		defer C.free(unsafe.Pointer(cs))
	}
	for {
		// Like zmq_connect, the bind of the monitor's socket processes
		// pending commands first: EINTR is repeated.
		rc, err := C.zmq_socket_monitor(s.h, cs, C.int(events))
		if rc == 0 {
			return nil
		}
		if err != syscall.EINTR {
			return zerr(err)
		}
	}
}

// Send and receive flags (zmq.h).
const (
	zDONTWAIT = C.ZMQ_DONTWAIT
	zSNDMORE  = C.ZMQ_SNDMORE
)

// send queues one frame.
//
// Safety: b's memory is passed to C for the duration of the call only
// (zmq_send copies it into a message before returning), and it holds no Go
// pointers, as the cgo rules require.
func (s *zsocket) send(b []byte, flags int) error {
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	if rc, err := C.cd_send(s.h, p, C.size_t(len(b)), C.int(flags)); rc < 0 {
		return zerr(err)
	}
	return nil
}

// Monitor events the listeners ask for (zmq.h; stable since libzmq 4.3).
const (
	evDisconnected          = C.ZMQ_EVENT_DISCONNECTED
	evHandshakeSucceeded    = C.ZMQ_EVENT_HANDSHAKE_SUCCEEDED
	evHandshakeFailedDetail = C.ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL
	evHandshakeFailedProto  = C.ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
	evHandshakeFailedAuth   = C.ZMQ_EVENT_HANDSHAKE_FAILED_AUTH
)

// zopt is a socket option number.
type zopt = C.int

// Socket options the listeners set (zmq.h).
const (
	optLinger          = C.ZMQ_LINGER
	optIPv6            = C.ZMQ_IPV6
	optRcvHWM          = C.ZMQ_RCVHWM
	optMaxMsgSize      = C.ZMQ_MAXMSGSIZE // int64_t
	optSndHWM          = C.ZMQ_SNDHWM     // the benchmarks' senders
	optReconnectIvl    = C.ZMQ_RECONNECT_IVL
	optReconnectIvlMax = C.ZMQ_RECONNECT_IVL_MAX
)

// parseMonitorEvent reads a monitor message as frameReader returns it:
// [6 bytes: event (uint16) and value (uint32), native-endian; peer endpoint].
func parseMonitorEvent(frames [][]byte) (ev uint16, peer []byte, ok bool) {
	if len(frames) != 2 || len(frames[0]) != 6 {
		return 0, nil, false
	}
	return binary.NativeEndian.Uint16(frames[0]), frames[1], true
}

// eventName names a monitor event for the logs.
func eventName(ev uint16) string {
	switch ev {
	case evDisconnected:
		return "DISCONNECTED"
	case evHandshakeSucceeded:
		return "HANDSHAKE_SUCCEEDED"
	case evHandshakeFailedDetail:
		return "HANDSHAKE_FAILED_NO_DETAIL"
	case evHandshakeFailedProto:
		return "HANDSHAKE_FAILED_PROTOCOL"
	case evHandshakeFailedAuth:
		return "HANDSHAKE_FAILED_AUTH"
	}
	return "event " + strconv.Itoa(int(ev))
}
