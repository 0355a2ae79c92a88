package httpd

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
)

// Limiter bounds what clients can hold across every HTTP surface of a process:
// open TCP connections and request-body bytes in flight. One Limiter is shared
// by all of a process's servers so that together they stay inside the file
// descriptors and memory budgeted for HTTP (cmd/conductor computes the budget).
//
// Body bytes: a request reserves its declared Content-Length (a chunked body:
// each chunk as it arrives) before any of it is read; when the reservation
// would pass MaxInflightBodyBytes the request is answered 503 limit_exceeded
// with Retry-After at once. Memory for a body grows with the bytes that
// actually arrive, never from the declared length. Proved by
// TestDeclaredLengthIsNotReserved and TestInflightBodyBudget.
//
// Accept failures that exhaustion causes (EMFILE, ENFILE, ENOBUFS, ENOMEM,
// ECONNABORTED, a timeout) are retried with a backoff from 5 ms doubling to
// 1 s, counted in conductor_http_accept_errors_total and logged at most once a
// second; they never end Serve. A connection accepted while Max are open is
// answered "503 Service Unavailable" with Connection: close and closed at
// once, counted in conductor_http_connections_refused_total. Proved by
// TestLimiterRefusesPastMax and TestAcceptErrorsAreNotFatal.
//
// A Limiter is safe for concurrent use.
type Limiter struct {
	max  int64
	open atomic.Int64
	log  *slog.Logger

	maxBody  int64 // MaxInflightBodyBytes
	inflight atomic.Int64

	droppedBytes atomic.Int64 // see dropped
	nudging      atomic.Bool

	set          *metrics.Set
	accepted     *metrics.Counter
	refused      *metrics.Counter
	acceptErrors *metrics.Counter
	bodyRefused  *metrics.Counter
	lastLog      atomic.Int64 // unix nanos of the last accept-error log line
}

// Limiter defaults, applied to zero or negative arguments of NewLimiter.
const (
	DefaultMaxConns             = 8192
	DefaultMaxInflightBodyBytes = 256 << 20
)

// NewLimiter returns a Limiter allowing maxConns open connections and
// maxInflightBody request-body bytes in flight (the defaults above when <= 0),
// logging to log (slog.Default() when nil).
func NewLimiter(maxConns int, maxInflightBody int64, log *slog.Logger) *Limiter {
	if maxConns <= 0 {
		maxConns = DefaultMaxConns
	}
	if maxInflightBody <= 0 {
		maxInflightBody = DefaultMaxInflightBodyBytes
	}
	if log == nil {
		log = slog.Default()
	}
	g := &Limiter{max: int64(maxConns), maxBody: maxInflightBody, log: log, set: metrics.NewSet()}
	g.accepted = g.set.NewCounter("conductor_http_connections_accepted_total")
	g.refused = g.set.NewCounter("conductor_http_connections_refused_total")
	g.acceptErrors = g.set.NewCounter("conductor_http_accept_errors_total")
	g.set.NewGauge("conductor_http_connections_open", func() float64 { return float64(g.open.Load()) })
	g.set.NewGauge("conductor_http_connections_max", func() float64 { return float64(g.max) })
	g.set.NewGauge("conductor_http_body_bytes_inflight", func() float64 { return float64(g.inflight.Load()) })
	g.bodyRefused = g.set.NewCounter("conductor_http_body_budget_refused_total")
	return g
}

// reserveBody takes n bytes of the in-flight body budget; false (nothing
// taken) when that would pass the budget.
func (g *Limiter) reserveBody(n int64) bool {
	if g.inflight.Add(n) > g.maxBody {
		g.inflight.Add(-n)
		g.bodyRefused.Inc()
		return false
	}
	return true
}

// nudgeBytes of dropped request buffers make the Limiter return memory to
// the OS (see dropped).
const nudgeBytes = 32 << 20

// dropped records n bytes of a request buffer that was too large to keep in a
// pool. Once nudgeBytes have been dropped, a collection and a scavenge
// (debug.FreeOSMemory) run a second later, at most one at a time: without it
// a process that stays quiet after a burst of large bodies keeps their pages
// until its next collection, which may be far off (issue #9 item 4).
func (g *Limiter) dropped(n int64) {
	if g.droppedBytes.Add(n) >= nudgeBytes && g.nudging.CompareAndSwap(false, true) {
		time.AfterFunc(time.Second, func() {
			g.droppedBytes.Store(0)
			debug.FreeOSMemory()
			g.nudging.Store(false)
		})
	}
}

// releaseBody returns n reserved bytes.
func (g *Limiter) releaseBody(n int64) { g.inflight.Add(-n) }

// MaxInflightBodyBytes is the body budget.
func (g *Limiter) MaxInflightBodyBytes() int64 { return g.maxBody }

// Max is the connection cap.
func (g *Limiter) Max() int { return int(g.max) }

// Open is the number of connections open now, over every guarded listener.
func (g *Limiter) Open() int { return int(g.open.Load()) }

// Metrics returns the guard's counters and gauges.
func (g *Limiter) Metrics() *metrics.Set { return g.set }

// refusal is written to a connection accepted past the cap.
var refusal = func() []byte {
	body := `{"error":"too many open connections","reason":"limit_exceeded"}`
	return []byte("HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Type: application/json\r\n" +
		"Retry-After: 1\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}()

// listen wraps ln; the returned listener tracks its connections for
// closeIdle.
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

// Accept returns the next connection under the cap, retrying transient errors.
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
					"open_connections", l.g.open.Load(), "max_connections", l.g.max)
			}
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		if l.g.open.Add(1) > l.g.max {
			l.g.open.Add(-1)
			l.g.refused.Inc()
			_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			_, _ = c.Write(refusal)
			_ = c.Close()
			continue
		}
		l.g.accepted.Inc()
		tc := &trackedConn{Conn: c, l: l}
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

// closeIdle closes every connection of l that is not inside a request: new
// connections, keep-alive connections waiting for their next request, and
// connections that have sent part of a request but not all of its headers.
// Connections whose handler runs, or whose response is being written, are
// left to finish. It returns how many connections remain open.
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
//	idle ──handler entry (begin)──▶ busy ──handler exit (end)──▶ responded
//	responded ──next Read──▶ idle          responded ──pipelined begin──▶ busy
//	idle ──closeIdle (shutdown)──▶ closing (terminal; the conn is closed)
//
// A handler that loses the idle→busy race to closeIdle does no work: the
// request arrived after shutdown began and its connection is already closed.
const (
	connIdle int32 = iota
	connBusy
	connResponded
	connClosing
)

// trackedConn is a guarded connection with its request state.
type trackedConn struct {
	net.Conn
	l      *guardedListener
	state  atomic.Int32
	closed atomic.Bool
}

// Read marks a connection whose response went out as idle again: fasthttp
// reads only after it has flushed the previous response.
func (c *trackedConn) Read(p []byte) (int, error) {
	c.state.CompareAndSwap(connResponded, connIdle)
	return c.Conn.Read(p)
}

// Close releases the connection's slot once.
func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
		c.l.g.open.Add(-1)
	}
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
// connections that are not inside a request while fasthttp drains the rest.
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
// (closeIdle leaves it alone); false means shutdown has already closed it and
// the handler must return at once. The returned func ends the request.
func track(ctx *fasthttp.RequestCtx) (end func(), ok bool) {
	tc, isTracked := ctx.Conn().(*trackedConn)
	if !isTracked {
		return func() {}, true
	}
	if !tc.begin() {
		ctx.SetConnectionClose()
		return nil, false
	}
	return tc.end, true
}
