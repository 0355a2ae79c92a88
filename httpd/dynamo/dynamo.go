package dynamo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/server"
	"github.com/seed-c7a81618/conductor/wire/dump"
)

// ListenerInfo is one subscription's receiver state for GET /workers.
type ListenerInfo struct {
	Key       core.ServiceKey
	State     string // pending, active, failed, paused
	LastError string
}

// Options configure a Dynamo listener. The zero value is valid.
type Options struct {
	// MaxBodyBytes bounds a request body (413 beyond). Default 8 MiB, Dynamo's.
	MaxBodyBytes int
	// MaxQueryTokens bounds token_ids / block_hashes per query. Default 1<<20.
	MaxQueryTokens int
	// Publisher is the event dialect of Dynamo registrations (Dynamo's
	// /register names none; a conductor extension field "type" overrides it
	// per registration). Default core.PublisherVLLM.
	Publisher core.PublisherType
	// Listeners reports receiver states for /workers and the listener gauge.
	// Default: every registration reported pending.
	Listeners func() []ListenerInfo
	// AccessLog is a file receiving one JSON line per request; "" disables.
	AccessLog string
	// TraceIDHeader is copied into each access-log line's trace_id. Default
	// "x-trace-id".
	TraceIDHeader string
	// AccessLogLocalTime writes local instead of UTC timestamps.
	AccessLogLocalTime bool
	// Peers are the initial peer URLs (GET /peers; recovery).
	Peers []string
	// ExtraMetrics are written on /metrics after the Dynamo series and the
	// index's (e.g. the ingester's per-stream counters). Default none.
	ExtraMetrics []*metrics.Set
	// Threads is Dynamo's --threads, accepted for compatibility: conductor
	// applies each subscription's events on its own goroutine and answers
	// queries on the HTTP goroutines, so there is no indexer thread pool; the
	// value caps GOMAXPROCS-independent nothing and is only reported.
	Threads int
	// ReadTimeout, WriteTimeout and IdleTimeout as in server.Options (a
	// /dump may take longer than WriteTimeout while it progresses: the
	// deadline moves with every 64 KiB written). Defaults 30s, 30s, 60s.
	ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// EnsureDefaults fills zero fields.
func (o *Options) EnsureDefaults() {
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = 8 << 20
	}
	if o.MaxQueryTokens == 0 {
		o.MaxQueryTokens = 1 << 20
	}
	if o.Publisher == 0 {
		o.Publisher = core.PublisherVLLM
	}
	if o.TraceIDHeader == "" {
		o.TraceIDHeader = "x-trace-id"
	}
	if o.Threads == 0 {
		o.Threads = 4
	}
	if o.ReadTimeout == 0 {
		o.ReadTimeout = 30 * time.Second
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = 30 * time.Second
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = 60 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate reports every bad field.
func (o *Options) Validate() error {
	var errs []error
	if o.MaxBodyBytes < 0 {
		errs = append(errs, fmt.Errorf("MaxBodyBytes=%d: must be >= 0: %w", o.MaxBodyBytes, server.ErrInvalidOptions))
	}
	if o.MaxQueryTokens < 0 {
		errs = append(errs, fmt.Errorf("MaxQueryTokens=%d: must be >= 0: %w", o.MaxQueryTokens, server.ErrInvalidOptions))
	}
	if o.Threads < 0 {
		errs = append(errs, fmt.Errorf("Options.Threads=%d: must be >= 0: %w", o.Threads, server.ErrInvalidOptions))
	}
	if o.Publisher != core.PublisherVLLM && o.Publisher != core.PublisherSGLang {
		errs = append(errs, fmt.Errorf("Options.Publisher=%v: want vLLM or SGLang: %w", o.Publisher, server.ErrInvalidOptions))
	}
	for _, p := range o.Peers {
		if err := checkPeerURL(p); err != nil {
			errs = append(errs, fmt.Errorf("Peers: %w: %w", err, server.ErrInvalidOptions))
		}
	}
	return errors.Join(errs...)
}

// dynKey names one Dynamo indexer.
type dynKey struct{ model, group string }

func (k dynKey) String() string { return k.model + ":" + k.group }

// dynamoContext maps a Dynamo indexer onto its conductor context: the one
// call every path of this surface makes (dump.Indexer.Context states the
// mapping, which the Dynamo form of the dump restores into).
func dynamoContext(k dynKey, blockSize int) core.ContextKey {
	return dump.Indexer{Model: k.model, Group: k.group, BlockSize: blockSize}.Context()
}

// dynRank is one registered (instance, dp_rank).
type dynRank struct {
	endpoint, replay string
}

// dynWorker is one Dynamo instance: bound to one indexer.
type dynWorker struct {
	key   dynKey
	ranks map[uint32]dynRank
}

// Server serves the Dynamo dialect. Create it with New; safe for concurrent
// use.
type Server struct {
	c    *server.Core // limiter, access, gate and the preamble are the Core's
	ix   *core.Index
	gate *server.Gate
	opts Options
	m    *dynMetrics
	alog *accessLog
	host *server.Host

	// mu guards the Dynamo registry and the peer list. Registrar calls are
	// made under it so that the registry and the index change together.
	mu       sync.Mutex
	indexers map[dynKey]int // block size
	// snap is a copy of indexers for lock-free reads on the query path,
	// republished by setIndexerLocked.
	snap    atomic.Pointer[map[dynKey]int]
	workers map[uint64]*dynWorker
	peers   []string
	// ignoredLogNext (unix ns) and ignoredQuiet rate-limit the log of
	// ignored body keys (noteIgnored).
	ignoredLogNext atomic.Int64
	ignoredQuiet   atomic.Uint64
	// onRegister is called (outside mu) after each successful registration
	// with the number of registered instances (the startup worker gate).
	onRegister func(workers int)
}

// New returns the Dynamo surface over c: the same index, and, as every
// surface, the Core's connection and body Limiter, bearer-token Access and
// registration Gate (every registration and unregistration goes through it
// with the requester's Principal). Its body limit and timeouts are its own.
func New(c *server.Core, opts Options) (*Server, error) {
	if c == nil {
		return nil, fmt.Errorf("dynamo.New: a server.Core is required: %w", server.ErrInvalidOptions)
	}
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	d := &Server{c: c, ix: c.Index(), gate: c.Gate(), opts: opts, indexers: map[dynKey]int{}, workers: map[uint64]*dynWorker{}}
	d.peers = append(d.peers, opts.Peers...)
	if opts.AccessLog != "" {
		loc := time.UTC
		if opts.AccessLogLocalTime {
			loc = time.Local
		}
		al, err := openAccessLog(opts.AccessLog, loc)
		if err != nil {
			return nil, err
		}
		d.alog = al
	}
	d.m = newDynMetrics(d)
	d.host = c.Host((*surface)(d), server.HostOptions{Name: "conductor-dynamo", MaxBodyBytes: opts.MaxBodyBytes,
		ReadTimeout: opts.ReadTimeout, WriteTimeout: opts.WriteTimeout, IdleTimeout: opts.IdleTimeout, Logger: opts.Logger})
	return d, nil
}

// Serve accepts connections on ln until Shutdown; it returns nil after
// Shutdown. Connections and bodies in flight count against the Core's
// Limiter.
func (d *Server) Serve(ln net.Listener) error { return d.host.Serve(ln) }

// Shutdown stops accepting connections, closes the ones with no request in
// progress, waits for the requests in progress, in a handler or still
// arriving (or ctx), and closes the access log.
func (d *Server) Shutdown(ctx context.Context) error {
	err := d.host.Shutdown(ctx)
	if d.alog != nil {
		d.alog.close()
	}
	return err
}

// Handler is the fasthttp handler of the Dynamo listener (exported for
// embedding and tests).
func (d *Server) Handler(ctx *fasthttp.RequestCtx) { d.host.Handler(ctx) }

// SetRegisterHook sets a function called after each successful registration
// with the number of registered instances.
func (d *Server) SetRegisterHook(f func(workers int)) {
	d.mu.Lock()
	d.onRegister = f
	d.mu.Unlock()
}

// Peers returns the current peer URLs.
func (d *Server) Peers() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.peers...)
}

// Dynamo routes.
const (
	dOther = iota
	dHealth
	dMetrics
	dReopenLogs
	dRegister
	dUnregister
	dWorkers
	dQuery
	dQueryByHash
	dDump
	dRegisterPeer
	dDeregisterPeer
	dPeers
	numDynRoutes
)

var dynPaths = [numDynRoutes]string{"other", "/health", "/metrics", "/reopen_logs", "/register", "/unregister",
	"/workers", "/query", "/query_by_hash", "/dump", "/register_peer", "/deregister_peer", "/peers"}

var dynPost = [numDynRoutes]bool{dReopenLogs: true, dRegister: true, dUnregister: true, dQuery: true,
	dQueryByHash: true, dRegisterPeer: true, dDeregisterPeer: true}

// dynClass is the access class of a Dynamo route: registrations need a
// registering identity; the registry, the dump, the peer list and log
// reopening the admin; queries the query token when one is set; /health
// is open, and /metrics unless protected.
func dynClass(r int) server.AccessClass {
	switch r {
	case dQuery, dQueryByHash:
		return server.AccessQuery
	case dRegister, dUnregister:
		return server.AccessMutate
	case dWorkers, dDump, dPeers, dRegisterPeer, dDeregisterPeer, dReopenLogs:
		return server.AccessInspect
	case dMetrics:
		return server.AccessMetrics
	}
	return server.AccessPublic
}

func dynRoute(path []byte) int {
	for i := 1; i < numDynRoutes; i++ {
		if string(path) == dynPaths[i] {
			return i
		}
	}
	return dOther
}

// surface is the Server as its Host sees it (server.Surface).
type surface Server

func (f *surface) Route(path []byte) server.Route {
	r := dynRoute(path)
	return server.Route{ID: r, Post: dynPost[r], Class: dynClass(r)}
}

func (f *surface) Serve(ctx *fasthttp.RequestCtx, st *server.State, rt server.Route) int {
	d := (*Server)(f)
	if rt.Post && len(st.Body) > d.opts.MaxBodyBytes {
		// a body handed over whole (no stream: embedding, tests)
		rerr := server.BodyTooLarge(d.opts.MaxBodyBytes)
		d.reqError(ctx, st, rerr.HTTPStatus(), rerr)
		return 0
	}
	switch rt.ID {
	case dHealth:
		ctx.SetStatusCode(200)
		ctx.SetContentType("text/plain; charset=utf-8")
		ctx.SetBodyString("OK")
	case dMetrics:
		d.m.write(ctx)
	case dReopenLogs:
		d.handleReopen(ctx, st)
	case dRegister:
		d.handleRegister(ctx, st)
	case dUnregister:
		d.handleUnregister(ctx, st)
	case dWorkers:
		d.handleWorkers(ctx, st)
	case dQuery, dQueryByHash:
		d.handleQuery(ctx, st, rt.ID == dQueryByHash)
	case dDump:
		d.handleDump(ctx)
	case dRegisterPeer, dDeregisterPeer:
		d.handlePeer(ctx, st, rt.ID == dRegisterPeer)
	case dPeers:
		d.handlePeers(ctx, st)
	}
	d.noteIgnored(ctx, st, rt.ID)
	return 0
}

// Refuse answers with the error envelope.
func (f *surface) Refuse(ctx *fasthttp.RequestCtx, st *server.State, _ server.Route, why server.Refusal, e *server.RequestError) int {
	d := (*Server)(f)
	switch why {
	case server.NoRoute:
		d.opError(ctx, st, 404, server.ErrNotFound, "not found")
	case server.BadMethod:
		d.opError(ctx, st, 405, server.ErrMethodNotAllowed, "method not allowed")
	default:
		d.reqError(ctx, st, e.HTTPStatus(), e)
	}
	return 0
}

// Done counts the request and writes its access-log line.
func (f *surface) Done(ctx *fasthttp.RequestCtx, st *server.State, rt server.Route, _ int, start time.Time) {
	status := ctx.Response.StatusCode()
	f.m.observe(rt.ID, ctx.Method(), status, start)
	if f.alog != nil {
		f.alog.write(start, ctx.Method(), ctx.Path(), st.Model, status, time.Since(start),
			ctx.Request.Header.Peek(f.opts.TraceIDHeader))
	}
}

// opError answers an operational error with the error envelope, reason
// from sentinel.
func (d *Server) opError(ctx *fasthttp.RequestCtx, st *server.State, status int, sentinel error, msg string) {
	d.reqError(ctx, st, status, server.StatusError(sentinel, status, msg))
}

// reqError answers with the error envelope {"error", "reason", "field"?,
// "index"?} (Dynamo answers a bare message; the extra keys say why and which
// field).
func (d *Server) reqError(ctx *fasthttp.RequestCtx, st *server.State, status int, re *server.RequestError) {
	e := &st.Enc
	e.Reset(true)
	server.AppendErrorEnvelope(e, re)
	d.body(ctx, status, e.Bytes())
}

func (d *Server) body(ctx *fasthttp.RequestCtx, status int, b []byte) {
	ctx.SetStatusCode(status)
	ctx.SetContentType(server.ContentTypeJSON)
	ctx.SetBody(b)
}

func (d *Server) ok(ctx *fasthttp.RequestCtx, st *server.State, status int) {
	e := &st.Enc
	e.Reset(true)
	e.MapHeader(1)
	e.Str("status")
	e.Str("ok")
	d.body(ctx, status, e.Bytes())
}

// jsonBody checks the Content-Type (JSON or absent) and returns a reader.
func (d *Server) jsonBody(ctx *fasthttp.RequestCtx, st *server.State) (*server.Reader, bool) {
	if json, rerr := server.RequestDialect(ctx, st.Body); rerr != nil || !json {
		d.reqError(ctx, st, 415, server.NewError(server.ErrUnsupportedContentType, "",
			"Content-Type must be application/json"))
		return nil, false
	}
	return st.JSON(), true
}

func (d *Server) handleReopen(ctx *fasthttp.RequestCtx, st *server.State) {
	if d.alog != nil {
		if err := d.alog.reopen(); err != nil {
			d.opts.Logger.Error("access log reopen failed", "err", err)
			d.opError(ctx, st, 500, server.ErrInternal, "reopen access log: "+err.Error())
			return
		}
	}
	d.ok(ctx, st, 200)
}
