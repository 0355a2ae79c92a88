//go:build linux

package server

import (
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// rawIO reads and writes a connection's socket with raw system calls
// (syscall.RawSyscall), which keep the goroutine's P, instead of the
// runtime's syscall.Syscall, which marks the P as in a system call.
//
// A read or write on the non-blocking sockets the poller manages never
// blocks, but a write on loopback delivers the bytes and wakes the reader
// inside the call (10–20 µs). The runtime's monitor thread takes the P away
// from a system call it finds in progress on two of its rounds (20 µs apart
// when busy) while other goroutines wait to run, and hands it to another
// thread: under query load that is most writes, so the monitor keeps polling
// every 20 µs and threads keep waking each other, 13 % of the server's CPU
// per cold 1k-token query (BENCHMARKS.md, "/query, server CPU per request").
// With raw calls the monitor finds nothing to take and backs off to its
// 10 ms rounds.
//
// A call that would block (EAGAIN) waits in the poller through
// syscall.RawConn, which also applies the deadlines and holds the file
// descriptor for the call, so a concurrent Close cannot hand it to another
// file. A raw call holds its P, so a stop-the-world waits for it: calls are
// bounded by rawMax bytes (tens of microseconds), longer ones go through the
// Conn's own methods.
type rawIO struct {
	rc syscall.RawConn
	// r and w are the read and the write in progress: a net.Conn may be
	// read and written at once, so each has its own.
	r, w rawCall
}

// rawMax is the largest buffer read or written with a raw call: 64 KiB, a
// few tens of microseconds of copying at most.
const rawMax = 64 << 10

// rawCall is one read or write: its buffer, the bytes done, the error, and
// the method value passed to the RawConn (made once, so that a call
// allocates nothing).
type rawCall struct {
	buf []byte
	n   int
	err syscall.Errno
	fn  func(fd uintptr) bool
	// waits counts the calls that found the socket not ready (EAGAIN) and
	// waited in the poller.
	waits atomic.Int64
}

// newRawIO returns c's raw I/O, or nil when c is not a socket of its own
// (a TLS connection, a pipe in tests).
func newRawIO(c net.Conn) *rawIO {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	if _, ok := c.(*net.TCPConn); !ok {
		if _, ok := c.(*net.UnixConn); !ok {
			return nil
		}
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	x := &rawIO{rc: rc}
	x.r.fn, x.w.fn = x.r.read, x.w.write
	return x
}

// read is one read(2) into buf; write writes buf whole. Each returns true
// when it is done (data read, buf written, the end of the stream, or an
// error), false when the socket is not ready.
func (x *rawCall) read(fd uintptr) bool  { return x.call(syscall.SYS_READ, fd, false) }
func (x *rawCall) write(fd uintptr) bool { return x.call(syscall.SYS_WRITE, fd, true) }

// call makes the system call trap on buf from x.n on, until one call moved
// bytes (or, with whole, until buf is done), or none can now.
func (x *rawCall) call(trap, fd uintptr, whole bool) bool {
	for {
		n, _, e := syscall.RawSyscall(trap, fd, uintptr(unsafe.Pointer(&x.buf[x.n])), uintptr(len(x.buf)-x.n))
		switch e {
		case 0:
			x.n += int(n)
			if !whole || n == 0 || x.n == len(x.buf) {
				return true
			}
		case syscall.EINTR:
		case syscall.EAGAIN:
			x.waits.Add(1)
			return false
		default:
			x.err = e
			return true
		}
	}
}

// Read reads like net.Conn.Read: at least one byte, io.EOF at the end of the
// stream, an *net.OpError otherwise (a deadline's wraps
// os.ErrDeadlineExceeded, a closed connection's net.ErrClosed).
func (x *rawIO) Read(c net.Conn, p []byte) (int, error) {
	if len(p) == 0 || len(p) > rawMax {
		return c.Read(p)
	}
	r := &x.r
	r.buf, r.n, r.err = p, 0, 0
	err := failed("read", c, x.rc.Read(r.fn), r.err)
	r.buf = nil
	switch {
	case err != nil:
		return 0, err
	case r.n == 0:
		return 0, io.EOF
	}
	return r.n, nil
}

// Write writes all of p like net.Conn.Write, or returns how much it wrote
// and an *net.OpError.
func (x *rawIO) Write(c net.Conn, p []byte) (int, error) {
	if len(p) == 0 || len(p) > rawMax {
		return c.Write(p)
	}
	w := &x.w
	w.buf, w.n, w.err = p, 0, 0
	err := failed("write", c, x.rc.Write(w.fn), w.err)
	n := w.n
	w.buf = nil
	switch {
	case err != nil:
		return n, err
	case n < len(p): // a write that moved nothing, as the net package says
		return n, opError("write", c, io.ErrUnexpectedEOF)
	}
	return n, nil
}

// failed is a raw call's error: the RawConn's (a deadline, a closed
// connection) or the system call's errno; nil when neither.
func failed(op string, c net.Conn, err error, errno syscall.Errno) error {
	if err == nil && errno != 0 {
		err = os.NewSyscallError(op, errno)
	}
	if err == nil {
		return nil
	}
	return opError(op, c, err)
}

// opError names op as the Conn's own methods do (the RawConn's errors say
// raw-read and raw-write).
func opError(op string, c net.Conn, err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		e := *oe
		e.Op = op
		return &e
	}
	return &net.OpError{Op: op, Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
