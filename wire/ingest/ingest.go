package ingest

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"
	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/wire"
)

// Sentinel errors of the ZMQ ingest layer; wrapped with context, test with errors.Is.
var (
	// ErrInvalidIngestOptions: IngestOptions.Validate rejected a field.
	ErrInvalidIngestOptions = errors.New("conductor: invalid ingest options")
	// ErrBadEndpoint: a registration's endpoint or replay endpoint cannot be
	// connected to (malformed, bind-only, or refused by libzmq).
	ErrBadEndpoint = errors.New("conductor: malformed ZMQ endpoint")
	// ErrIngesterClosed: the Ingester was closed.
	ErrIngesterClosed = errors.New("conductor: ingester closed")
	// ErrSeqRange: a sequence number above INT64_MAX (refused, as vLLM's and the
	// C++ conductor's signed sequence arithmetic cannot represent it).
	ErrSeqRange = errors.New("conductor: sequence number above INT64_MAX")
	// ErrReplay: a replay failed (timeout, malformed reply, socket error).
	ErrReplay = errors.New("conductor: replay failed")
	// ErrListenerLimit: a registration was refused because the Ingester holds
	// IngestOptions.MaxListeners listeners, or a resource a listener needs ran
	// out (libzmq's socket cap, file descriptors, memory). Register wraps it
	// with core.ErrLimit, which the HTTP layer answers 400 limit_exceeded.
	ErrListenerLimit = errors.New("conductor: listener limit reached")
	// ErrMessageTooBig: a ZMQ message whose frames together exceed
	// IngestOptions.MaxMessageBytes (dropped whole, its sequence consumed,
	// counted in ListenerStatus.Oversize). A single frame above four times
	// the limit never reaches the listener: libzmq refuses it and ends the
	// connection (ZMQ_MAXMSGSIZE).
	ErrMessageTooBig = errors.New("conductor: ZMQ message above MaxMessageBytes")
)

// ListenerState is the life-cycle state of one subscription's receiver.
type ListenerState uint8

const (
	// ListenerPending: registered, not (or no longer) connected to its publisher:
	// the first connection, or a reconnection, has not completed its handshake.
	// libzmq keeps retrying with the configured backoff; a publisher that is not
	// up yet stays pending and the listener becomes active when it appears.
	ListenerPending ListenerState = iota
	// ListenerActive: connected; messages are received and applied.
	ListenerActive
	// ListenerFailed: the receiver's sockets failed (LastError says why) and are
	// rebuilt after a backoff of ReconnectMin … ReconnectMax.
	ListenerFailed
	// ListenerPaused: Pause closed the receiver's sockets; nothing is received
	// until Resume.
	ListenerPaused
)

func (s ListenerState) String() string {
	switch s {
	case ListenerPending:
		return "pending"
	case ListenerActive:
		return "active"
	case ListenerFailed:
		return "failed"
	case ListenerPaused:
		return "paused"
	}
	return "unknown"
}

// ListenerStatus is a snapshot of one subscription's receiver. The counters are
// the same values as the stream's conductor_ingest_* metrics.
type ListenerStatus struct {
	Key                    core.ServiceKey
	Endpoint               string
	ReplayEndpoint         string
	State                  ListenerState
	LastError              string
	LastSeq                uint64
	HasSeq                 bool
	Batches                uint64
	Events                 uint64
	Blocks                 uint64
	DecodeErrors           uint64
	Gaps                   uint64
	ReplaysRequested       uint64
	ReplaysSucceeded       uint64
	ReplaysFailed          uint64
	StaleClears            uint64
	Restarts               uint64
	Duplicates, Reconnects uint64
	// QueueDrops counts live messages dropped because the receive queue was
	// full (IngestOptions.ReceiveQueueBytes and friends).
	QueueDrops uint64
	// QueuePeakBytes is the most bytes the receive queue has held.
	QueuePeakBytes int64
	// Oversize counts messages dropped whole for exceeding
	// IngestOptions.MaxMessageBytes (their sequences were consumed).
	Oversize uint64
	// GapsKept counts gaps no replay healed whose gap policy kept the
	// stream's blocks (keep, expire; StaleClears counts those cleared),
	// ExpiredBlocks the block entries the expire policy dropped since, and
	// EvictedBlocks the (owner, block) pairs evicted over the registration's
	// block bound (core.Registration.MaxBlocks).
	GapsKept, ExpiredBlocks, EvictedBlocks uint64
	// LargestMessage is the largest message the stream has sent, in bytes,
	// and QueueMessages the high-water mark of its SUB socket's libzmq
	// queue, sized from it (IngestOptions.RcvHWM).
	LargestMessage int64
	QueueMessages  int
}

// Ingester subscribes to the ZMQ publishers of registered subscriptions and feeds
// their events to the index: one receive goroutine per subscription, which owns
// that subscription's sockets (libzmq sockets are not thread-safe) and is the
// subscription's single writer (core.Subscription.Apply).
//
// The receive protocol (sequence tracking, replay, stale and restart handling) is
// described on listener in zmq_listener.go.
//
// All methods are safe for concurrent use. Control operations (Register,
// Unregister, Pause, Resume, Close) are serialised by one mutex: they are rare, and
// serialising them makes "register while the same key is being unregistered"
// impossible to get wrong.
type Ingester struct {
	ix   *core.Index
	opts IngestOptions
	zctx *zcontext
	// poller waits for every listener's sockets (zmq_poller.go).
	poller *poller
	// series exposes the listeners' metrics in opts.Metrics.
	series *streamSeries

	// opMu serialises control operations; it is held across a listener's start
	// and join, which are bounded (no network wait).
	opMu   sync.Mutex
	closed bool
	nextID uint64 // listener ids for inproc names; guarded by opMu
	exited int    // listeners stopped since the last trimCHeap; guarded by opMu

	// queued is the bytes of every listener's receive queue (MaxQueuedBytes).
	queued atomic.Int64

	// mu guards listeners for Listeners(), which must not wait for a control
	// operation in progress. Lock order: opMu → mu.
	mu        sync.Mutex
	listeners map[core.ServiceKey]*listener

	// testCmdHook, set by tests before the first Register, runs on a listener's
	// goroutine after each command is handled and acknowledged: a yield point
	// that lets a test force an interleaving (export_test.go).
	testCmdHook func(l *listener, op cmdOp)
	// testLiveHook, likewise, runs after each live message handled straight
	// from the SUB socket (big: at least testBigLive bytes).
	testLiveHook func(l *listener, big bool)
}

// NewIngester returns an Ingester feeding ix. It creates its own libzmq context,
// terminated by Close.
func NewIngester(ix *core.Index, opts IngestOptions) (*Ingester, error) {
	if ix == nil {
		return nil, fmt.Errorf("NewIngester: nil index: %w", ErrInvalidIngestOptions)
	}
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	zctx, err := newZContext()
	if err != nil {
		return nil, fmt.Errorf("NewIngester: zmq context: %w", err)
	}
	if err := zctx.setMaxSockets(opts.MaxSockets); err != nil {
		_ = zctx.term()
		return nil, fmt.Errorf("NewIngester: MaxSockets=%d: %w: %w", opts.MaxSockets, err, ErrInvalidIngestOptions)
	}
	// Start libzmq's I/O and reaper threads here, from the caller's thread:
	// the context starts them with its first socket, and a new thread
	// inherits its creator's scheduling attributes, so a first socket opened
	// by a listener at ListenerNice would lower theirs too (TestListenerNice).
	if err := startContextThreads(zctx); err != nil {
		_ = zctx.term()
		return nil, fmt.Errorf("NewIngester: zmq context threads: %w", err)
	}
	p, err := newPoller()
	if err != nil {
		_ = zctx.term()
		return nil, fmt.Errorf("NewIngester: %w", err)
	}
	return &Ingester{
		ix:        ix,
		opts:      opts,
		zctx:      zctx,
		poller:    p,
		series:    newStreamSeries(opts.Metrics),
		listeners: make(map[core.ServiceKey]*listener),
	}, nil
}

// startContextThreads makes libzmq start zctx's background threads now (the
// first socket does it); they live until zctx is terminated.
func startContextThreads(zctx *zcontext) error {
	s, err := zctx.socket(zPAIR)
	if err != nil {
		return err
	}
	return s.close()
}

// Metrics returns the set exposing the per-stream conductor_ingest_* series.
func (g *Ingester) Metrics() *metrics.Set { return g.opts.Metrics }

// Register registers reg with the index and starts its subscriber. It does not wait
// for the publisher: a publisher that is not up yet leaves the listener pending
// until it appears. An identical registration of an existing key returns
// created=false and keeps the running subscriber. The endpoints are registered
// and connected to in their canonical form, a tcp host name resolved once to
// the address the sockets connect to (IngestOptions.Lookup), so that the index
// refuses a second registration of one publisher under another spelling
// (core.Index.Register). A malformed endpoint, or a name that does not
// resolve, is refused (ErrBadEndpoint, also wrapping core.ErrInvalid) before
// the index is touched; if
// libzmq refuses to connect, the registration is rolled back (core.Unregister)
// and the error returned (the same sentinels). Past MaxListeners listeners, or
// when libzmq or the OS refuses a listener its sockets or descriptors, the
// error wraps ErrListenerLimit and core.ErrLimit. Core's own errors
// (ErrInvalid, ErrConflict, ErrLimit) are returned as core wrapped them.
func (g *Ingester) Register(reg core.Registration) (created bool, err error) {
	// Refusals of the registration's content also wrap core.ErrInvalid, which the
	// HTTP layer answers with 400 (like core's own validation errors).
	if reg.Endpoint, err = g.canonicalEndpoint("endpoint", reg.Endpoint); err != nil {
		return false, fmt.Errorf("register: %w: %w", err, core.ErrInvalid)
	}
	if reg.ReplayEndpoint != "" {
		if reg.ReplayEndpoint, err = g.canonicalEndpoint("replay_endpoint", reg.ReplayEndpoint); err != nil {
			return false, fmt.Errorf("register: %w: %w", err, core.ErrInvalid)
		}
	}
	dialect, err := dialectOf(reg.Type)
	if err != nil {
		return false, fmt.Errorf("register: %w: %w", err, core.ErrInvalid)
	}
	g.opMu.Lock()
	defer g.opMu.Unlock()
	if g.closed {
		return false, fmt.Errorf("register: %w", ErrIngesterClosed)
	}
	g.mu.Lock()
	full := len(g.listeners) >= g.opts.MaxListeners
	existing := g.listeners[normKey(reg.Key())]
	g.mu.Unlock()
	if full && existing == nil {
		// Checked before core is touched; an existing key (idempotent
		// re-registration or a replacement) needs no new listener.
		return false, fmt.Errorf("register: %d listeners (MaxListeners): %w: %w", g.opts.MaxListeners, ErrListenerLimit, core.ErrLimit)
	}
	sub, created, err := g.ix.Register(reg)
	if err != nil {
		return false, err
	}
	key := sub.Key()
	g.mu.Lock()
	old := g.listeners[key]
	g.mu.Unlock()
	switch {
	case old != nil && !created:
		return false, nil
	case old != nil:
		// core created a new subscription although a listener runs: the old one
		// was unregistered from core directly. Its listener feeds a closed
		// handle; replace it.
		old.stop()
		old.m.unregister()
		g.mu.Lock()
		delete(g.listeners, key)
		g.mu.Unlock()
	}
	// A subscription core knows but nobody listens to (registered in core directly,
	// e.g. restored from a state file) gets its listener here too.
	g.nextID++
	l := newListener(g, sub, dialect, g.nextID)
	if err := l.start(); err != nil {
		l.m.unregister()
		if created {
			if _, uerr := g.ix.Unregister(key); uerr != nil {
				err = errors.Join(err, uerr)
			}
		}
		switch {
		case errors.Is(err, ErrBadEndpoint):
			err = fmt.Errorf("%w: %w", err, core.ErrInvalid)
		case errors.Is(err, ErrListenerLimit):
			err = fmt.Errorf("%w: %w", err, core.ErrLimit)
		}
		return false, fmt.Errorf("register %s: %w", key, err)
	}
	g.mu.Lock()
	g.listeners[key] = l
	g.mu.Unlock()
	return created, nil
}

// reserveQueue takes n bytes of the shared receive-queue budget; false when
// MaxQueuedBytes would be exceeded (nothing is taken then).
func (g *Ingester) reserveQueue(n int) bool {
	if g.queued.Add(int64(n)) > g.opts.MaxQueuedBytes {
		g.queued.Add(-int64(n))
		return false
	}
	return true
}

func (g *Ingester) releaseQueue(n int) {
	if n != 0 {
		g.queued.Add(-int64(n))
	}
}

func dialectOf(t core.PublisherType) (wire.Dialect, error) {
	switch t {
	case core.PublisherVLLM:
		return wire.DialectVLLM, nil
	case core.PublisherSGLang:
		return wire.DialectSGLang, nil
	case core.PublisherMooncake:
		return wire.DialectMooncake, nil
	case core.PublisherStandard:
		return wire.DialectStandard, nil
	}
	return 0, fmt.Errorf("publisher type %d: %w", t, wire.ErrUnknownDialect)
}

// normKey applies core's key normalisation (tenant "" is "default").
func normKey(k core.ServiceKey) core.ServiceKey {
	if k.TenantID == "" {
		k.TenantID = "default"
	}
	return k
}

// Unregister stops k's subscriber, waits until its in-flight batch is applied and
// its sockets are closed, then unregisters k from the index (which removes its
// contributions) and drops its metrics. An unknown key returns core's error
// (wrapping core.ErrNotFound).
func (g *Ingester) Unregister(k core.ServiceKey) (core.Registration, error) {
	k = normKey(k)
	g.opMu.Lock()
	defer g.opMu.Unlock()
	g.mu.Lock()
	l := g.listeners[k]
	delete(g.listeners, k)
	g.mu.Unlock()
	if l != nil {
		l.sub.Abort() // a receiver held by the index's apply gate must be able to stop
		l.stop()
		l.m.unregister()
		g.exited++
		if g.exited >= trimEvery || len(g.listeners) == 0 {
			g.exited = 0
			scheduleTrim()
		}
	}
	reg, err := g.ix.Unregister(k)
	if err != nil {
		return core.Registration{}, fmt.Errorf("unregister: %w", err)
	}
	return reg, nil
}

// Pause stops receiving for k: its sockets are closed (the publisher stops queueing
// for it) and the listener reports paused; the index keeps its blocks. Pausing a
// paused listener does nothing. Pause returns once the receiver has acknowledged.
func (g *Ingester) Pause(k core.ServiceKey) error {
	return g.control(normKey(k), cmdPause, "pause")
}

// Resume reopens k's sockets after Pause. On connection the listener replays from
// its last applied sequence when a replay endpoint is registered, so what was
// published while paused is recovered as far as the publisher's ring allows;
// without one, the first live message reveals the gap and the stream is cleared
// as stale. Resuming a listener that is not paused does nothing.
func (g *Ingester) Resume(k core.ServiceKey) error {
	return g.control(normKey(k), cmdResume, "resume")
}

func (g *Ingester) control(k core.ServiceKey, op cmdOp, what string) error {
	g.opMu.Lock()
	defer g.opMu.Unlock()
	if g.closed {
		return fmt.Errorf("%s %s: %w", what, k, ErrIngesterClosed)
	}
	g.mu.Lock()
	l := g.listeners[k]
	g.mu.Unlock()
	if l == nil {
		return fmt.Errorf("%s %s: no listener: %w", what, k, core.ErrNotFound)
	}
	l.command(op)
	return nil
}

// Listeners returns the status of every listener, sorted by key.
func (g *Ingester) Listeners() []ListenerStatus {
	g.mu.Lock()
	out := make([]ListenerStatus, 0, len(g.listeners))
	for _, l := range g.listeners {
		out = append(out, l.status())
	}
	g.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return keyLess(out[i].Key, out[j].Key) })
	return out
}

func keyLess(a, b core.ServiceKey) bool {
	if a.InstanceID != b.InstanceID {
		return a.InstanceID < b.InstanceID
	}
	if a.TenantID != b.TenantID {
		return a.TenantID < b.TenantID
	}
	return a.DPRank < b.DPRank
}

// Close stops every subscriber (in parallel) and terminates the libzmq context. The
// registrations stay in the index (a restarted process restores them from its
// state file); their metrics are dropped. Close is idempotent.
func (g *Ingester) Close() {
	g.opMu.Lock()
	defer g.opMu.Unlock()
	if g.closed {
		return
	}
	g.closed = true
	g.mu.Lock()
	ls := make([]*listener, 0, len(g.listeners))
	for k, l := range g.listeners {
		ls = append(ls, l)
		delete(g.listeners, k)
	}
	g.mu.Unlock()
	for _, l := range ls {
		l.signal(cmdStop)
	}
	for _, l := range ls {
		l.stop() // joins; the command was already sent
		l.m.unregister()
	}
	// Every socket of this context is closed (LINGER 0), so Term returns at once.
	_ = g.zctx.term()
	g.poller.close()
}
