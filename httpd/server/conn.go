package server

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// listen wraps ln; the returned listener admits connections under the
// Limiter and tracks them for closeIdle.
func (g *Limiter) listen(ln net.Listener) *guardedListener {
	return &guardedListener{Listener: ln, g: g, conns: make(map[*trackedConn]struct{})}
}

// guardedListener is one server's listener under a Limiter.
type guardedListener struct {
	net.Listener
	g *Limiter

	// mu guards conns; held only to add, remove or walk, never across I/O.
	mu    sync.Mutex
	conns map[*trackedConn]struct{}
}

// Accept returns the next connection the Limiter admits (see Limiter),
// retrying transient errors.
func (l *guardedListener) Accept() (net.Conn, error) {
	backoff := time.Duration(0)
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !retryableAccept(err) {
				return nil, err
			}
			l.g.acceptErrors.Inc()
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			if now := time.Now().UnixNano(); now-l.g.lastLog.Load() > int64(time.Second) {
				l.g.lastLog.Store(now)
				l.g.log.Warn("accept failed; retrying", "err", err, "backoff", backoff,
					"open_connections", l.g.open.Load(), "max_connections", l.g.o.MaxConns)
			}
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		tc, victim := l.g.admit(c, l)
		if victim != nil {
			_ = victim.Conn.Close() // fasthttp's Close of it follows, and forgets it
		}
		if tc == nil {
			l.g.refused.Inc()
			_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			_, _ = c.Write(refusal)
			_ = c.Close()
			continue
		}
		if tc.control {
			_ = tc.SetReadDeadline(tc.controlBy)
		}
		l.g.accepted.Inc()
		l.mu.Lock()
		l.conns[tc] = struct{}{}
		l.mu.Unlock()
		return tc, nil
	}
}

// retryableAccept reports whether an accept error is one that resource
// exhaustion or a peer's early reset causes (retry), rather than a closed
// listener (stop).
func retryableAccept(err error) bool {
	if errors.Is(err, net.ErrClosed) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range [...]syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.ECONNABORTED, syscall.ECONNRESET, syscall.EINTR, syscall.EAGAIN, syscall.EPROTO, syscall.EPERM} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// closeIdle closes every connection of l that has no request in progress:
// new connections that have sent nothing, and keep-alive connections waiting
// for their next request. Connections that have sent part of a request (its
// headers or its body still arriving), whose handler runs, or whose response
// is being written, are left to finish. It returns how many connections
// remain open.
func (l *guardedListener) closeIdle() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.conns {
		if c.state.CompareAndSwap(connIdle, connClosing) {
			_ = c.Conn.Close()
		}
	}
	return len(l.conns)
}

// Connection states. The protocol (every transition is a CAS or a store by the
// connection's own goroutine):
//
//	idle ──a Read returns bytes──▶ reading ──handler entry (begin)──▶ busy
//	busy ──handler exit (end)──▶ responded
//	responded ──next Read──▶ idle          responded ──pipelined begin──▶ busy
//	idle ──closeIdle (shutdown) or eviction (Limiter.admit)──▶ closing
//	reading ──eviction (Limiter.admit)──▶ closing
//
// closing is terminal: the connection is closed. A handler that loses the
// race to it does no work: its connection is already closed. reading is a
// request in progress whose handler has not run yet (its headers, or the
// first bytes of its body fasthttp reads before the handler, still
// arriving): shutdown lets it finish, eviction does not (Limiter).
const (
	connIdle int32 = iota
	connReading
	connBusy
	connResponded
	connClosing
)

// trackedConn is an admitted connection with its request state.
type trackedConn struct {
	net.Conn
	l     *guardedListener
	cl    *client
	state atomic.Int32
	// closed is set once the Limiter has its slot back (unlinkLocked).
	closed atomic.Bool
	// idleSince is when the connection last went idle (Limiter.now).
	idleSince atomic.Int64
	// readDeadline is the read deadline fasthttp last set, in Unix
	// nanoseconds (0: none); readBody's body deadlines never pass it.
	readDeadline atomic.Int64

	// control marks a connection in a control slot (one /health or /metrics
	// request), whose reads never wait past controlBy.
	control   bool
	controlBy time.Time

	prev, next *trackedConn // its client's list; guarded by Limiter.mu

	// raw does the socket I/O (nil: the Conn's own methods); used by the
	// connection's goroutine only.
	raw *rawIO
}

// connRawIO returns the raw I/O an admitted connection uses (nil: its own
// methods). Race-detector builds use the Conn's own: the detector learns of
// the ordering a socket gives (a write before the read that returns its
// bytes) only from the net package's reads and writes.
func connRawIO(c net.Conn) *rawIO {
	if raceBuild {
		return nil
	}
	return newRawIO(c)
}

// Write writes p (see rawIO).
func (c *trackedConn) Write(p []byte) (int, error) {
	if c.raw == nil {
		return c.Conn.Write(p)
	}
	return c.raw.Write(c.Conn, p)
}

// Read marks a connection whose response went out as idle again (fasthttp
// reads only after it has flushed the previous response), and an idle one
// whose read returns bytes as reading: a request has begun.
func (c *trackedConn) Read(p []byte) (n int, err error) {
	if c.state.CompareAndSwap(connResponded, connIdle) {
		c.idleSince.Store(c.l.g.now())
	}
	if c.raw == nil {
		n, err = c.Conn.Read(p)
	} else {
		n, err = c.raw.Read(c.Conn, p)
	}
	if n > 0 {
		c.state.CompareAndSwap(connIdle, connReading)
	}
	return n, err
}

// SetReadDeadline records t for readBody (a control connection's is never
// later than controlBy).
func (c *trackedConn) SetReadDeadline(t time.Time) error {
	if c.control && (t.IsZero() || t.After(c.controlBy)) {
		t = c.controlBy
	}
	if t.IsZero() {
		c.readDeadline.Store(0)
	} else {
		c.readDeadline.Store(t.UnixNano())
	}
	return c.Conn.SetReadDeadline(t)
}

// SetDeadline is SetReadDeadline and SetWriteDeadline.
func (c *trackedConn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.SetReadDeadline(t)
}

// setBodyDeadline sets the read deadline for the rest of a body: d, or the
// deadline fasthttp set when that is earlier.
func (c *trackedConn) setBodyDeadline(d time.Time) {
	if r := c.readDeadline.Load(); r != 0 && r < d.UnixNano() {
		d = time.Unix(0, r)
	}
	_ = c.Conn.SetReadDeadline(d)
}

// Close releases the connection's slot once.
func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	if !c.closed.Load() {
		c.l.g.leave(c)
	}
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
	return err
}

// begin marks the connection busy at handler entry; false means shutdown has
// claimed it and the handler must return without work.
func (c *trackedConn) begin() bool {
	for {
		switch s := c.state.Load(); s {
		case connClosing:
			return false
		case connBusy:
			return true
		default:
			if c.state.CompareAndSwap(s, connBusy) {
				return true
			}
		}
	}
}

// end marks the handler done; the response is written next.
func (c *trackedConn) end() { c.state.CompareAndSwap(connBusy, connResponded) }

// listeners is the serving plumbing every surface shares: Serve runs a
// fasthttp server on a listener guarded by the Limiter, Shutdown closes the
// connections with no request in progress while fasthttp drains the rest.
type listeners struct {
	lim *Limiter
	// mu guards lns, the guarded listeners Serve runs on.
	mu  sync.Mutex
	lns []*guardedListener
}

func (l *listeners) serve(srv *fasthttp.Server, ln net.Listener) error {
	gl := l.lim.listen(ln)
	l.mu.Lock()
	l.lns = append(l.lns, gl)
	l.mu.Unlock()
	return srv.Serve(gl)
}

func (l *listeners) shutdown(srv *fasthttp.Server, ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- srv.ShutdownWithContext(ctx) }()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		l.mu.Lock()
		for _, gl := range l.lns {
			gl.closeIdle()
		}
		l.mu.Unlock()
		select {
		case err := <-done:
			return err
		case <-tick.C:
		}
	}
}

// track marks the request's connection busy for the handler's duration
// (closeIdle and eviction leave it alone); false means the request was
// answered or dropped here and the handler must return at once: shutdown or
// eviction has closed the connection, or it holds a control slot and the
// request is not a GET or HEAD of /health or /metrics (answered 503
// limit_exceeded). A control connection is closed after its request. The
// returned func ends the request.
func track(ctx *fasthttp.RequestCtx) (end func(), ok bool) {
	tc, isTracked := ctx.Conn().(*trackedConn)
	if !isTracked {
		return func() {}, true
	}
	if !tc.begin() {
		ctx.SetConnectionClose()
		return nil, false
	}
	if tc.control {
		ctx.SetConnectionClose()
		if p := string(ctx.Path()); !(ctx.IsGet() || ctx.IsHead()) || (p != "/health" && p != "/livez" && p != "/metrics") {
			ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
			ctx.Response.Header.Set("Retry-After", "1")
			ctx.SetContentType(ContentTypeJSON)
			ctx.SetBodyString(refusalBody)
			tc.l.g.refused.Inc()
			tc.end()
			return nil, false
		}
	}
	return tc.end, true
}
