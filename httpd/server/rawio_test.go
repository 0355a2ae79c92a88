//go:build linux

package server

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/httpd/internal/apitest"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (a, b *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dialed := make(chan net.Conn, 1)
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Error(err)
		}
		dialed <- c
	}()
	acc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	d := <-dialed
	if d == nil {
		t.FailNow()
	}
	t.Cleanup(func() { acc.Close(); d.Close() })
	return acc.(*net.TCPConn), d.(*net.TCPConn)
}

// ioOf returns c's read and write: net.Conn's own methods (the reference)
// or rawIO's.
func ioOf(t *testing.T, impl string, c net.Conn) (x *rawIO, read, write func(net.Conn, []byte) (int, error)) {
	t.Helper()
	if impl == "net.Conn" {
		return nil, func(c net.Conn, p []byte) (int, error) { return c.Read(p) },
			func(c net.Conn, p []byte) (int, error) { return c.Write(p) }
	}
	if x = newRawIO(c); x == nil {
		t.Fatalf("no raw I/O for a %T", c)
	}
	return x, x.Read, x.Write
}

// TestRawIOOnlyForSockets: TCP and Unix sockets get raw I/O (a Unix read
// returns the peer's bytes); a connection without a socket of its own (a
// pipe, as TLS would wrap) does not.
func TestRawIOOnlyForSockets(t *testing.T) {
	a, _ := tcpPair(t)
	if newRawIO(a) == nil {
		t.Fatal("a TCP connection has no raw I/O")
	}
	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	if newRawIO(p1) != nil {
		t.Fatal("a pipe has raw I/O")
	}
	dir := t.TempDir()
	ul, err := net.Listen("unix", dir+"/s")
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	go func() {
		if c, err := net.Dial("unix", dir+"/s"); err == nil {
			defer c.Close()
			_, _ = c.Write([]byte("ping"))
			_, _ = io.Copy(io.Discard, c)
		}
	}()
	uc, err := ul.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	x := newRawIO(uc)
	if x == nil {
		t.Fatal("a Unix socket has no raw I/O")
	}
	buf := make([]byte, 8)
	if n, err := io.ReadFull(readFunc(func(p []byte) (int, error) { return x.Read(uc, p) }), buf[:4]); n != 4 || err != nil || string(buf[:4]) != "ping" {
		t.Fatalf("unix read: %d %v %q", n, err, buf[:n])
	}
}

// TestRawIOAgreesWithConn: the same exchanges through net.Conn's methods and
// through rawIO give the same bytes and the same outcomes: a round trip, a
// zero-length read and write, a write many times the socket buffers (waits in the
// poller), the end of the stream, a read deadline, a write deadline, a read
// parked when the connection is closed, and a write to a reset peer.
func TestRawIOAgreesWithConn(t *testing.T) {
	for _, impl := range []string{"net.Conn", "rawIO"} {
		t.Run(impl, func(t *testing.T) {
			a, b := tcpPair(t)
			x, rd, wr := ioOf(t, impl, a)

			// round trip
			if n, err := wr(a, []byte("hello")); n != 5 || err != nil {
				t.Fatalf("write: %d %v", n, err)
			}
			got := make([]byte, 5)
			if _, err := io.ReadFull(b, got); err != nil || string(got) != "hello" {
				t.Fatalf("peer read %q %v", got, err)
			}
			if _, err := b.Write([]byte("world")); err != nil {
				t.Fatal(err)
			}
			if n, err := io.ReadFull(readFunc(func(p []byte) (int, error) { return rd(a, p) }), got); n != 5 || err != nil || string(got) != "world" {
				t.Fatalf("read: %d %v %q", n, err, got)
			}
			if n, err := rd(a, nil); n != 0 || err != nil {
				t.Fatalf("zero-length read: %d %v", n, err)
			}
			if n, err := wr(a, nil); n != 0 || err != nil {
				t.Fatalf("zero-length write: %d %v", n, err)
			}

			// 32 MiB in rawMax-sized writes, more than loopback's buffers
			// hold, with the peer not reading until the writer has waited for
			// it (rawIO) or for a while (net.Conn); then read back whole
			want := make([]byte, 32<<20)
			for i := range want {
				want[i] = byte(i*7 + i>>13)
			}
			var wg sync.WaitGroup
			var werr error
			wg.Add(1)
			go func() {
				defer wg.Done()
				for off := 0; off < len(want); off += rawMax {
					if n, err := wr(a, want[off:off+rawMax]); n != rawMax || err != nil {
						werr = errors.Join(werr, err, errors.New("short write"))
						return
					}
				}
			}()
			if x != nil {
				waitFor(t, "the writer to wait for the peer", func() bool { return x.w.waits.Load() > 0 })
			} else {
				time.Sleep(20 * time.Millisecond)
			}
			back := make([]byte, len(want))
			_, rerr := io.ReadFull(b, back)
			wg.Wait()
			if werr != nil || rerr != nil || !bytes.Equal(back, want) {
				t.Fatalf("32 MiB: write %v, read %v, equal %v", werr, rerr, bytes.Equal(back, want))
			}

			// read deadline: a timeout, Op "read"
			_ = a.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
			_, err := rd(a, got)
			checkOpError(t, err, "read", os.ErrDeadlineExceeded)
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("read deadline: %v is not a timeout", err)
			}
			_ = a.SetReadDeadline(time.Time{})

			// write deadline: the peer stops reading, writes fill the buffers
			_ = a.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
			for i := 0; ; i++ {
				if _, err = wr(a, want[:rawMax]); err != nil {
					break
				}
				if i > 10_000 {
					t.Fatal("writes never hit the write deadline")
				}
			}
			checkOpError(t, err, "write", os.ErrDeadlineExceeded)
			_ = a.SetWriteDeadline(time.Time{})

			// the end of the stream, then a reset peer
			c, d := tcpPair(t)
			_, rdc, wrc := ioOf(t, impl, c)
			_ = d.CloseWrite()
			if n, err := rdc(c, got); n != 0 || err != io.EOF {
				t.Fatalf("end of stream: %d %v, want io.EOF", n, err)
			}
			_ = d.SetLinger(0)
			_ = d.Close()
			for i := 0; ; i++ {
				if _, err = wrc(c, []byte("x")); err != nil {
					break
				}
				if i > 1000 {
					t.Fatal("writes to a reset peer never failed")
				}
				time.Sleep(time.Millisecond)
			}
			var se *os.SyscallError
			if !errors.As(err, &se) || !(errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) {
				t.Fatalf("write to a reset peer: %v", err)
			}
			checkOpError(t, err, "write", nil)

			// a read parked in the poller when the connection closes
			e, _ := tcpPair(t)
			_, rde, _ := ioOf(t, impl, e)
			done := make(chan error, 1)
			go func() { _, err := rde(e, got); done <- err }()
			time.Sleep(10 * time.Millisecond) // let it park (either way it must fail)
			_ = e.Close()
			select {
			case err := <-done:
				checkOpError(t, err, "read", net.ErrClosed)
			case <-time.After(apitest.WaitBound):
				t.Fatal("a read outlived its connection's Close")
			}
		})
	}
}

// readFunc is a read function as an io.Reader.
type readFunc func(p []byte) (int, error)

func (f readFunc) Read(p []byte) (int, error) { return f(p) }

// checkOpError: err is an *net.OpError named op that wraps want (nil: any).
func checkOpError(t *testing.T, err error, op string, want error) {
	t.Helper()
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != op {
		t.Fatalf("%v: want an *net.OpError with Op %q", err, op)
	}
	if want != nil && !errors.Is(err, want) {
		t.Fatalf("%v: want %v", err, want)
	}
}

// TestRawIOAllocatesNothing: a raw write and read of a small message
// allocate nothing.
func TestRawIOAllocatesNothing(t *testing.T) {
	a, b := tcpPair(t)
	x := newRawIO(a)
	msg := []byte("0123456789abcdef")
	buf := make([]byte, len(msg))
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := x.Write(a, msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(b, buf); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Write(msg); err != nil {
			t.Fatal(err)
		}
		for n := 0; n < len(buf); {
			m, err := x.Read(a, buf[n:])
			if err != nil {
				t.Fatal(err)
			}
			n += m
		}
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per raw write and read", allocs)
	}
}

// TestAdmittedTCPConnsUseRawIO: the Limiter's listener gives a TCP
// connection raw I/O (outside race-detector builds, see connRawIO).
func TestAdmittedTCPConnsUseRawIO(t *testing.T) {
	lim := newTestLimiter(t, LimiterOptions{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gl := lim.listen(ln)
	defer gl.Close()
	go func() {
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			_, _ = c.Write([]byte("x"))
			_, _ = io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	c, err := gl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc := c.(*trackedConn)
	if (tc.raw != nil) == raceBuild {
		t.Fatalf("an admitted TCP connection has raw I/O %v; race build %v", tc.raw != nil, raceBuild)
	}
	one := make([]byte, 1)
	if n, err := tc.Read(one); n != 1 || err != nil || one[0] != 'x' {
		t.Fatalf("read %d %v %q", n, err, one)
	}
}
