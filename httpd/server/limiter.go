package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// Limiter bounds what clients can hold across every HTTP surface of a process:
// open TCP connections and request-body bytes in flight. One Limiter is shared
// by all of a process's servers so that together they stay inside the file
// descriptors and memory budgeted for HTTP (cmd/conductor computes the budget).
// A client is a remote IPv4 address, or an IPv6 /64 prefix.
//
// # Connections
//
// At most MaxConns connections are open; ControlConns of them are kept for
// health checks and scrapes. While fewer than MaxConns-ControlConns ordinary
// connections are open a new one is admitted. At that cap (the only time
// shares matter) the Limiter makes room by closing an idle connection (one
// not inside a request: waiting for its next request, or still sending its
// headers), the longest-idle one of
//
//  1. among the clients holding at least two more connections than the
//     newcomer's client, the one holding the most that has an idle one; else
//  2. the newcomer's own client.
//
// So a client never loses a connection to a client holding as many as it (or
// one fewer), the heaviest holder's idle connections go first, and a single
// client (every client is 127.0.0.1 in a loopback setup) recycles its own
// idle connections instead of being refused. Counted in
// conductor_http_connections_evicted_total. Connections inside a request, or
// writing its response, are never closed for room; they are bounded by the
// body rules below and the servers' timeouts.
//
// When no idle connection qualifies, the new connection takes a free control
// slot: it is served one GET or HEAD of /health or /metrics with
// Connection: close (any other request is answered 503 limit_exceeded), and
// closed when no request has arrived within controlIdle. With no control
// slot free it is answered "503 Service Unavailable" with Connection: close
// and closed, counted in conductor_http_connections_refused_total. So
// /health and /metrics are answered at the cap, whatever one client holds.
// Proved by TestConnCapIdleFlood, TestConnCapShareProtectsOthers,
// TestControlSlotsAnswerHealth and TestConnLimiterRefusesPastMax.
//
// # Request bodies
//
// A body is read into a buffer that grows as its bytes arrive: 16 KiB first,
// then doubling, never past the declared Content-Length. Each growth is
// reserved from MaxInflightBodyBytes before the buffer is allocated, and the
// old buffer stays reserved until it has been copied, so the budget counts
// buffer bytes that exist: per body at most 2¼ times the bytes received plus
// 16 KiB, plus the old buffer during a copy. A declared length reserves
// nothing.
//
// Small bodies (Content-Length at most SmallBodyBytes) may use the whole
// budget; large and chunked ones at most MaxInflightBodyBytes-
// SmallBodyReserve. A small request is therefore never refused because large
// bodies hold the budget; it is refused (503 limit_exceeded, Retry-After: 1)
// only while small bodies themselves hold the reserve.
//
// A large body that finds no budget stops reading and waits up to BodyWait,
// then is answered 503 limit_exceeded with Retry-After: 1. Waiters are served
// strictly in rank order, and a new body does not pass a waiter that ranks
// before it: first those whose client holds less than its share (the large
// budget divided by the number of clients holding or waiting for it), then
// the body that started first. When every byte of the large budget
// is held by waiting bodies, so that none can finish, the lowest-ranked
// waiters are refused one at a time until the first fits: bodies that
// started first finish. A body whose next growth could not fit even alone is
// answered 413 limit_exceeded. Counted in
// conductor_http_body_budget_refused_total.
//
// Every body must arrive at MinBodyRate bytes a second after BodyGrace (time
// spent waiting for budget excluded) and within the server's ReadTimeout; a
// slower one is cut: 408 limit_exceeded, connection closed, counted in
// conductor_http_body_too_slow_total.
//
// Memory: body buffers in flight stay within MaxInflightBodyBytes
// (conductor_http_body_bytes_inflight never exceeds it). Outside the budget,
// per open connection, are fasthttp's read buffer (Options.ReadBufferBytes),
// the first 8 KiB or less of a body, which fasthttp reads with the headers,
// and its write buffer; pooled buffers of finished requests (up to 1 MiB
// each); and the collector's headroom (GOGC) over replaced buffers. Proved by
// TestBodyBudgetCountsReceivedBytes, TestLargeBodyFloodKeepsSmallRequests,
// TestBodyBudgetRanking and TestInflightBodyBudget.
//
// # Accept errors
//
// Accept failures that exhaustion causes (EMFILE, ENFILE, ENOBUFS, ENOMEM,
// ECONNABORTED, a timeout) are retried with a backoff from 5 ms doubling to
// 1 s, counted in conductor_http_accept_errors_total and logged at most once a
// second; they never end Serve. Proved by TestAcceptErrorsAreNotFatal.
//
// A Limiter is safe for concurrent use.
type Limiter struct {
	o     LimiterOptions
	log   *slog.Logger
	epoch time.Time // idleSince origin

	// mu guards clients, gen, ctl, cands and every client's conns and
	// connection list: bookkeeping only, never held across I/O. A mutex, not
	// atomics: admission reads and changes several counts together, and
	// happens once per connection, not per request.
	mu      sync.Mutex
	clients map[netip.Addr]*client
	gen     int // ordinary connections open
	ctl     int // control connections open
	cands   []*client
	open    atomic.Int64 // gen + ctl, for Open and the gauge

	bodyBudget // request bodies; limiter_body.go

	droppedBytes atomic.Int64 // see dropped
	nudging      atomic.Bool

	set          *metrics.Set
	accepted     *metrics.Counter
	refused      *metrics.Counter
	evicted      *metrics.Counter
	acceptErrors *metrics.Counter
	bodyRefused  *metrics.Counter
	bodySlow     *metrics.Counter
	lastLog      atomic.Int64 // unix nanos of the last accept-error log line
}

// LimiterOptions configure a Limiter. The zero value is valid: EnsureDefaults
// fills every zero field with the default its comment gives.
type LimiterOptions struct {
	// MaxConns bounds open connections over every listener of the Limiter.
	// Default DefaultMaxConns (8192).
	MaxConns int
	// ControlConns of MaxConns are kept for /health and /metrics (see
	// Limiter). Default min(8, MaxConns/16); negative: none.
	ControlConns int
	// MaxInflightBodyBytes bounds request-body buffer bytes in flight, in
	// bytes. Default DefaultMaxInflightBodyBytes (256 MiB).
	MaxInflightBodyBytes int64
	// SmallBodyBytes is the largest Content-Length of a small body, in bytes.
	// Default 64 KiB.
	SmallBodyBytes int64
	// SmallBodyReserve of MaxInflightBodyBytes only small bodies use, in
	// bytes. Default MaxInflightBodyBytes/8, raised to SmallBodyBytes and
	// capped at half the budget; negative: none.
	SmallBodyReserve int64
	// BodyWait bounds how long a large body waits for budget. Default 2s;
	// negative: it is refused at once.
	BodyWait time.Duration
	// MinBodyRate is the slowest a body may arrive after BodyGrace, in bytes
	// a second. Default 64 KiB; negative: no minimum.
	MinBodyRate int64
	// BodyGrace is how long a body may take before MinBodyRate applies.
	// Default 2s.
	BodyGrace time.Duration
	// Logger receives accept-error lines. Default slog.Default().
	Logger *slog.Logger
}

// Limiter defaults, applied to zero or negative arguments of NewLimiter.
const (
	DefaultMaxConns             = 8192
	DefaultMaxInflightBodyBytes = 256 << 20
)

// controlIdle is how long a connection in a control slot may wait for its
// request.
const controlIdle = 2 * time.Second

// EnsureDefaults fills zero fields with their defaults.
func (o *LimiterOptions) EnsureDefaults() {
	if o.MaxConns == 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.ControlConns == 0 {
		o.ControlConns = min(8, o.MaxConns/16)
	}
	if o.MaxInflightBodyBytes == 0 {
		o.MaxInflightBodyBytes = DefaultMaxInflightBodyBytes
	}
	if o.SmallBodyBytes == 0 {
		o.SmallBodyBytes = 64 << 10
	}
	if o.SmallBodyReserve == 0 {
		o.SmallBodyReserve = min(max(o.MaxInflightBodyBytes/8, o.SmallBodyBytes), o.MaxInflightBodyBytes/2)
	}
	if o.BodyWait == 0 {
		o.BodyWait = 2 * time.Second
	}
	if o.MinBodyRate == 0 {
		o.MinBodyRate = 64 << 10
	}
	if o.BodyGrace == 0 {
		o.BodyGrace = 2 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate reports every bad field (after EnsureDefaults).
func (o *LimiterOptions) Validate() error {
	var errs []error
	bad := func(field string, v any, want string) {
		errs = append(errs, fmt.Errorf("%s=%v: %s: %w", field, v, want, ErrInvalidOptions))
	}
	if o.MaxConns < 0 {
		bad("MaxConns", o.MaxConns, "must be > 0")
	}
	if o.ControlConns >= o.MaxConns {
		bad("ControlConns", o.ControlConns, "must be < MaxConns")
	}
	if o.MaxInflightBodyBytes < 0 {
		bad("MaxInflightBodyBytes", o.MaxInflightBodyBytes, "must be > 0")
	}
	if o.SmallBodyBytes < 0 {
		bad("SmallBodyBytes", o.SmallBodyBytes, "must be > 0")
	}
	if o.SmallBodyReserve >= o.MaxInflightBodyBytes {
		bad("SmallBodyReserve", o.SmallBodyReserve, "must be < MaxInflightBodyBytes")
	}
	if o.BodyGrace < 0 {
		bad("BodyGrace", o.BodyGrace, "must be > 0")
	}
	return errors.Join(errs...)
}

// NewLimiter returns a Limiter allowing maxConns open connections and
// maxInflightBody request-body bytes in flight (the defaults above when <= 0),
// logging to log (slog.Default() when nil), with every other option at its
// default (LimiterOptions).
func NewLimiter(maxConns int, maxInflightBody int64, log *slog.Logger) *Limiter {
	g, err := NewLimiterWithOptions(LimiterOptions{MaxConns: max(maxConns, 0),
		MaxInflightBodyBytes: max(maxInflightBody, 0), Logger: log})
	if err != nil {
		panic("BUG: default limiter options: " + err.Error())
	}
	return g
}

// NewLimiterWithOptions returns a Limiter configured by o.
func NewLimiterWithOptions(o LimiterOptions) (*Limiter, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	g := &Limiter{o: o, log: o.Logger, epoch: time.Now(), clients: make(map[netip.Addr]*client), set: metrics.NewSet()}
	g.bodyBudget.setup(&o)
	g.accepted = g.set.NewCounter("conductor_http_connections_accepted_total")
	g.refused = g.set.NewCounter("conductor_http_connections_refused_total")
	g.evicted = g.set.NewCounter("conductor_http_connections_evicted_total")
	g.acceptErrors = g.set.NewCounter("conductor_http_accept_errors_total")
	g.set.NewGauge("conductor_http_connections_open", func() float64 { return float64(g.open.Load()) })
	g.set.NewGauge("conductor_http_connections_max", func() float64 { return float64(g.o.MaxConns) })
	g.set.NewGauge("conductor_http_body_bytes_inflight", func() float64 { return float64(g.inflight.Load()) })
	g.bodyRefused = g.set.NewCounter("conductor_http_body_budget_refused_total")
	g.bodySlow = g.set.NewCounter("conductor_http_body_too_slow_total")
	return g, nil
}

// MaxInflightBodyBytes is the body budget.
func (g *Limiter) MaxInflightBodyBytes() int64 { return g.o.MaxInflightBodyBytes }

// Max is the connection cap.
func (g *Limiter) Max() int { return g.o.MaxConns }

// Open is the number of connections open now, over every guarded listener.
func (g *Limiter) Open() int { return int(g.open.Load()) }

// InflightBodyBytes is the request-body budget held now, over every surface.
func (g *Limiter) InflightBodyBytes() int64 { return g.inflight.Load() }

// Metrics returns the guard's counters and gauges.
func (g *Limiter) Metrics() *metrics.Set { return g.set }

// nudgeBytes of dropped request buffers make the Limiter return memory to
// the OS (see dropped).
const nudgeBytes = 32 << 20

// dropped records n bytes of a request buffer that was too large to keep in a
// pool. Once nudgeBytes have been dropped, a collection and a scavenge
// (debug.FreeOSMemory) run a second later, at most one at a time: without it
// a process that stays quiet after a burst of large bodies keeps their pages
// until its next collection, which may be far off.
func (g *Limiter) dropped(n int64) {
	if g.droppedBytes.Add(n) >= nudgeBytes && g.nudging.CompareAndSwap(false, true) {
		time.AfterFunc(time.Second, func() {
			g.droppedBytes.Store(0)
			debug.FreeOSMemory()
			g.nudging.Store(false)
		})
	}
}

// client is one remote IPv4 address or IPv6 /64 prefix.
type client struct {
	key netip.Addr

	// Guarded by Limiter.mu.
	conns int          // ordinary connections open
	head  *trackedConn // their list (trackedConn.prev/next)

	// Guarded by bodyBudget.mu.
	largeHeld int64 // large-class budget held by its bodies
	largeRefs int   // its bodies holding or waiting for large-class budget
}

// clientKey is the client a remote address belongs to; the zero Addr for a
// non-IP peer.
func clientKey(a net.Addr) netip.Addr {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.Addr{}
	}
	ip := ta.AddrPort().Addr().Unmap().WithZone("")
	if ip.Is6() {
		ip = netip.PrefixFrom(ip, 64).Masked().Addr()
	}
	return ip
}

// now is the Limiter's monotonic clock for idleSince.
func (g *Limiter) now() int64 { return int64(time.Since(g.epoch)) }

// admit takes a slot for c, accepted on l: an ordinary one, one freed by
// closing an idle connection (victim, closed by the caller outside the lock),
// or a control one; nil when there is none (the caller refuses c).
func (g *Limiter) admit(c net.Conn, l *guardedListener) (tc, victim *trackedConn) {
	key := clientKey(c.RemoteAddr())
	g.mu.Lock()
	defer g.mu.Unlock()
	cl := g.clients[key]
	if cl == nil {
		cl = &client{key: key}
		g.clients[key] = cl
	}
	tc = &trackedConn{Conn: c, l: l, cl: cl, raw: connRawIO(c)}
	tc.idleSince.Store(g.now())
	if g.gen >= g.o.MaxConns-max(g.o.ControlConns, 0) {
		victim = g.victimLocked(cl)
		switch {
		case victim != nil:
			g.unlinkLocked(victim)
			if victim.cl != cl {
				g.forgetClientLocked(victim.cl)
			}
			g.evicted.Inc()
		case g.ctl < g.o.ControlConns:
			tc.control = true
			tc.controlBy = time.Now().Add(controlIdle)
			g.ctl++
			g.open.Store(int64(g.gen + g.ctl))
			return tc, nil
		default:
			g.forgetClientLocked(cl)
			return nil, nil
		}
	}
	g.gen++
	cl.conns++
	tc.next = cl.head
	if cl.head != nil {
		cl.head.prev = tc
	}
	cl.head = tc
	g.open.Store(int64(g.gen + g.ctl))
	return tc, victim
}

// victimLocked claims (idle or reading → closing) the idle connection admit
// closes for a newcomer of client cl, or returns nil.
func (g *Limiter) victimLocked(cl *client) *trackedConn {
	g.cands = g.cands[:0]
	for _, k := range g.clients {
		if k != cl && k.conns >= cl.conns+2 {
			g.cands = append(g.cands, k)
		}
	}
	slices.SortFunc(g.cands, func(a, b *client) int { return b.conns - a.conns })
	g.cands = append(g.cands, cl)
	defer clear(g.cands) // drop the pointers
	for _, k := range g.cands {
		for {
			var best *trackedConn
			var bestState int32
			for c := k.head; c != nil; c = c.next {
				st := c.state.Load()
				if (st == connIdle || st == connReading) && (best == nil || c.idleSince.Load() < best.idleSince.Load()) {
					best, bestState = c, st
				}
			}
			if best == nil {
				break
			}
			if best.state.CompareAndSwap(bestState, connClosing) {
				return best
			}
			// it entered a request meanwhile: look again
		}
	}
	return nil
}

// unlinkLocked gives back c's slot, once (closed), and removes it from its
// client's list.
func (g *Limiter) unlinkLocked(c *trackedConn) {
	if !c.closed.CompareAndSwap(false, true) {
		return
	}
	if c.control {
		g.ctl--
	} else {
		g.gen--
		c.cl.conns--
		if c.prev != nil {
			c.prev.next = c.next
		} else {
			c.cl.head = c.next
		}
		if c.next != nil {
			c.next.prev = c.prev
		}
		c.prev, c.next = nil, nil
	}
	g.open.Store(int64(g.gen + g.ctl))
}

// forgetClientLocked drops cl from the registry when it holds no connection.
func (g *Limiter) forgetClientLocked(cl *client) {
	if cl.conns == 0 && g.clients[cl.key] == cl {
		delete(g.clients, cl.key)
	}
}

// leave gives back c's slot when it closes.
func (g *Limiter) leave(c *trackedConn) {
	g.mu.Lock()
	g.unlinkLocked(c)
	g.forgetClientLocked(c.cl)
	g.mu.Unlock()
}

// refusal is written to a connection accepted past the cap.
var refusal = func() []byte {
	return []byte("HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Type: application/json\r\n" +
		"Retry-After: 1\r\nContent-Length: " + strconv.Itoa(len(refusalBody)) + "\r\n\r\n" + refusalBody)
}()

const refusalBody = `{"error":"too many open connections","reason":"limit_exceeded"}`
