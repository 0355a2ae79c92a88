package httpd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/core"
)

// The Dynamo standalone-indexer dialect (seeds/dynamo-standalone-indexer.md),
// served on its own listener (--dynamo-port) over the same core.Index as the
// Mooncake API.
//
// # Indexers and contexts
//
// Dynamo keeps one indexer per (model_name, routing_group), its block size
// fixed by the first registration. dynamoContext is the one place that maps it
// onto a conductor context: tenant_id = routing_group, model_name =
// model_name, lora_name = "", block_size = the indexer's. So a Dynamo
// registration of model M in group "default" and a Mooncake registration of
// model M, tenant "default", the same block size and no LoRA feed (and query)
// the same context. Dynamo workers are registered with the xxh3 standard
// profile (seed 1337), whose local block hash is Dynamo's LocalBlockHash, so
// /query_by_hash takes Dynamo local block hashes (rolled into conductor's
// prefix keys by dynamoRollHashes).
//
// instance_id is a u64 (a number, or a string holding one); in the index it is
// its decimal text. tenant_id and additional_salt / additionalsalt are accepted
// and ignored, as Dynamo does.

// ListenerInfo is one subscription's receiver state for GET /workers.
type ListenerInfo struct {
	Key       core.ServiceKey
	State     string // pending, active, failed, paused
	LastError string
}

// DynamoOptions configure a Dynamo listener. The zero value is valid.
type DynamoOptions struct {
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
	// ReadTimeout, WriteTimeout and IdleTimeout as in Options (a /dump may
	// take longer than WriteTimeout while it progresses: the deadline moves
	// with every 64 KiB written). Defaults 30s, 30s, 60s.
	ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// EnsureDefaults fills zero fields.
func (o *DynamoOptions) EnsureDefaults() {
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
func (o *DynamoOptions) Validate() error {
	var errs []error
	if o.MaxBodyBytes < 0 {
		errs = append(errs, fmt.Errorf("MaxBodyBytes=%d: must be >= 0: %w", o.MaxBodyBytes, ErrInvalidOptions))
	}
	if o.MaxQueryTokens < 0 {
		errs = append(errs, fmt.Errorf("MaxQueryTokens=%d: must be >= 0: %w", o.MaxQueryTokens, ErrInvalidOptions))
	}
	if o.Threads < 0 {
		errs = append(errs, fmt.Errorf("Threads=%d: must be >= 0: %w", o.Threads, ErrInvalidOptions))
	}
	if o.Publisher != core.PublisherVLLM && o.Publisher != core.PublisherSGLang {
		errs = append(errs, fmt.Errorf("Publisher=%v: want vLLM or SGLang: %w", o.Publisher, ErrInvalidOptions))
	}
	for _, p := range o.Peers {
		if err := checkPeerURL(p); err != nil {
			errs = append(errs, fmt.Errorf("Peers: %w: %w", err, ErrInvalidOptions))
		}
	}
	return errors.Join(errs...)
}

// dynKey names one Dynamo indexer.
type dynKey struct{ model, group string }

func (k dynKey) String() string { return k.model + ":" + k.group }

// dynamoContext maps a Dynamo indexer onto its conductor context: the one
// documented place (see the file comment).
func dynamoContext(k dynKey, blockSize int) core.ContextKey {
	return core.ContextKey{TenantID: k.group, ModelName: k.model, LoraName: "", BlockSize: blockSize}
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

// Dynamo serves the Dynamo dialect. Create it with NewDynamo; safe for
// concurrent use.
type Dynamo struct {
	s    *Server // limiter, access, gate and body reading are the Server's
	ix   *core.Index
	gate *Gate
	opts DynamoOptions
	m    *dynMetrics
	alog *accessLog
	srv  *fasthttp.Server
	lns  listeners
	pool sync.Pool // *dynState

	// mu guards the Dynamo registry and the peer list. Registrar calls are
	// made under it so that the registry and the index change together.
	mu       sync.Mutex
	indexers map[dynKey]int // block size
	// snap is a copy of indexers for lock-free reads on the query path,
	// republished by setIndexerLocked.
	snap    atomic.Pointer[map[dynKey]int]
	workers map[uint64]*dynWorker
	peers   []string
	// onRegister is called (outside mu) after each successful registration
	// with the number of registered instances (the startup worker gate).
	onRegister func(workers int)
}

type dynState struct {
	reqState
	model []byte // for the access log
}

// NewDynamo returns the Dynamo surface of s: the same index, and, as the RPC
// surface, the Server's connection and body Limiter, bearer-token Access and
// registration Gate (every registration and unregistration goes through it
// with the requester's Principal). Its body limit and timeouts are its own.
func NewDynamo(s *Server, opts DynamoOptions) (*Dynamo, error) {
	if s == nil {
		return nil, fmt.Errorf("httpd.NewDynamo: a Server is required: %w", ErrInvalidOptions)
	}
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	d := &Dynamo{s: s, ix: s.ix, gate: s.gate, opts: opts, indexers: map[dynKey]int{}, workers: map[uint64]*dynWorker{},
		lns: listeners{lim: s.lim}}
	d.peers = append(d.peers, opts.Peers...)
	d.pool.New = func() any { return new(dynState) }
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
	fo := s.opts
	fo.MaxBodyBytes = opts.MaxBodyBytes
	fo.ReadTimeout, fo.WriteTimeout, fo.IdleTimeout = opts.ReadTimeout, opts.WriteTimeout, opts.IdleTimeout
	fo.Logger = opts.Logger
	d.srv = newFastServer(d.Handler, d.errorHandler, &fo)
	d.srv.Name = "conductor-dynamo"
	return d, nil
}

// Serve accepts connections on ln until Shutdown; it returns nil after
// Shutdown. Connections and bodies in flight count against the Server's
// Limiter.
func (d *Dynamo) Serve(ln net.Listener) error { return d.lns.serve(d.srv, ln) }

// Shutdown stops accepting connections, closes the ones not inside a request,
// waits for in-flight requests (or ctx) and closes the access log.
func (d *Dynamo) Shutdown(ctx context.Context) error {
	err := d.lns.shutdown(d.srv, ctx)
	if d.alog != nil {
		d.alog.close()
	}
	return err
}

// SetRegisterHook sets a function called after each successful registration
// with the number of registered instances.
func (d *Dynamo) SetRegisterHook(f func(workers int)) {
	d.mu.Lock()
	d.onRegister = f
	d.mu.Unlock()
}

// Peers returns the current peer URLs.
func (d *Dynamo) Peers() []string {
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
// and /metrics (unless protected) are open.
func (d *Dynamo) dynClass(r int) accessClass {
	switch r {
	case dQuery, dQueryByHash:
		return accessQuery
	case dRegister, dUnregister:
		return accessMutate
	case dWorkers, dDump, dPeers, dRegisterPeer, dDeregisterPeer, dReopenLogs:
		return accessInspect
	case dMetrics:
		if a := d.s.opts.Access; a != nil && a.protectMetrics {
			return accessInspect
		}
	}
	return accessPublic
}

func dynRoute(path []byte) int {
	for i := 1; i < numDynRoutes; i++ {
		if string(path) == dynPaths[i] {
			return i
		}
	}
	return dOther
}

// Handler is the fasthttp handler of the Dynamo listener.
func (d *Dynamo) Handler(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	end, ok := track(ctx)
	if !ok {
		return
	}
	defer end()
	r := dynRoute(ctx.Path())
	st := d.pool.Get().(*dynState)
	st.scratch = st.scratch[:0]
	st.model = st.model[:0]
	var rerr *RequestError
	switch {
	case r == dOther:
		d.opError(ctx, st, 404, ErrNotFound, "not found")
	case dynPost[r] && !ctx.IsPost():
		ctx.Response.Header.Set("Allow", "POST")
		d.opError(ctx, st, 405, ErrMethodNotAllowed, "method not allowed")
	case !dynPost[r] && !ctx.IsGet() && !ctx.IsHead():
		ctx.Response.Header.Set("Allow", "GET, HEAD")
		d.opError(ctx, st, 405, ErrMethodNotAllowed, "method not allowed")
	case d.auth(ctx, r, st, &rerr) != nil:
		d.reqError(ctx, st, rerr.status(), rerr)
	case dynPost[r] && d.readIn(ctx, st, &rerr) != nil:
		d.reqError(ctx, st, rerr.status(), rerr)
	default:
		switch r {
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
			d.handleQuery(ctx, st, r == dQueryByHash)
		case dDump:
			d.handleDump(ctx)
		case dRegisterPeer, dDeregisterPeer:
			d.handlePeer(ctx, st, r == dRegisterPeer)
		case dPeers:
			d.handlePeers(ctx, st)
		}
	}
	d.finish(ctx, r, st, start)
}

// auth sets st.who for route r; a non-nil result (also in *rerr) is the
// 401/403 to answer.
func (d *Dynamo) auth(ctx *fasthttp.RequestCtx, r int, st *dynState, rerr **RequestError) *RequestError {
	st.who, *rerr = d.s.opts.Access.authorize(ctx, d.dynClass(r))
	return *rerr
}

// readIn reads a POST route's body into st.in (streamed, under the Server's
// in-flight budget, never ctx.PostBody() on a live connection); a non-nil
// result (also in *rerr) is the 413/503/400 to answer.
func (d *Dynamo) readIn(ctx *fasthttp.RequestCtx, st *dynState, rerr **RequestError) *RequestError {
	st.in, *rerr = d.s.readBodyMax(ctx, &st.reqState, d.opts.MaxBodyBytes)
	if *rerr == nil && len(st.in) > d.opts.MaxBodyBytes {
		// a body handed over whole (no stream: embedding, tests)
		*rerr = bodyTooLarge(d.opts.MaxBodyBytes)
	}
	return *rerr
}

func (d *Dynamo) finish(ctx *fasthttp.RequestCtx, r int, st *dynState, start time.Time) {
	status := ctx.Response.StatusCode()
	d.m.observe(r, ctx.Method(), status, start)
	if d.alog != nil {
		d.alog.write(start, ctx.Method(), ctx.Path(), st.model, status, time.Since(start),
			ctx.Request.Header.Peek(d.opts.TraceIDHeader))
	}
	d.s.lim.releaseBody(&st.reserved)
	if cap(st.body) > retainBytes {
		d.s.lim.dropped(int64(cap(st.body)))
		st.body = nil
	}
	st.in = nil
	st.who = Principal{}
	st.reqState.q = core.QueryRequest{}
	st.js = jsonReader{}
	if cap(st.scratch) > retainBytes {
		st.scratch = nil
	}
	if cap(st.enc.buf) > retainBytes {
		st.enc.buf = nil
	}
	if cap(st.tokBuf) > retainTokens {
		st.tokBuf = nil
	}
	if cap(st.hashBuf) > retainHashes {
		st.hashBuf = nil
	}
	d.pool.Put(st)
}

func (d *Dynamo) errorHandler(ctx *fasthttp.RequestCtx, err error) {
	st := d.pool.Get().(*dynState)
	st.model = st.model[:0]
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		d.opError(ctx, st, 413, ErrLimitExceeded, "request body exceeds "+strconv.Itoa(d.opts.MaxBodyBytes)+" bytes")
	} else {
		d.opError(ctx, st, 400, ErrInvalidRequest, "malformed HTTP request")
	}
	d.finish(ctx, dOther, st, ctx.Time())
}

// opError answers an operational error with the error envelope, reason
// from sentinel.
func (d *Dynamo) opError(ctx *fasthttp.RequestCtx, st *dynState, status int, sentinel error, msg string) {
	d.reqError(ctx, st, status, opErr(sentinel, status, msg))
}

// reqError answers with the error envelope {"error", "reason", "field"?,
// "index"?} (Dynamo answers a bare message; the extra keys say why and which
// field).
func (d *Dynamo) reqError(ctx *fasthttp.RequestCtx, st *dynState, status int, re *RequestError) {
	e := &st.enc
	e.reset(true)
	appendErrorEnvelope(e, re)
	d.body(ctx, status, e.buf)
}

func (d *Dynamo) body(ctx *fasthttp.RequestCtx, status int, b []byte) {
	ctx.SetStatusCode(status)
	ctx.SetContentType(contentTypeJSON)
	ctx.SetBody(b)
}

func (d *Dynamo) ok(ctx *fasthttp.RequestCtx, st *dynState, status int) {
	e := &st.enc
	e.reset(true)
	e.mapHeader(1)
	e.str("status")
	e.str("ok")
	d.body(ctx, status, e.buf)
}

// jsonBody checks the Content-Type (JSON or absent) and returns a reader.
func (d *Dynamo) jsonBody(ctx *fasthttp.RequestCtx, st *dynState) (reader, bool) {
	if json, rerr := requestDialect(ctx, st.in); rerr != nil || !json {
		d.reqError(ctx, st, 415, &RequestError{Err: ErrUnsupportedContentType, Index: noIndex,
			Msg: "Content-Type must be application/json"})
		return nil, false
	}
	return st.reader(st.in, true), true
}

func (d *Dynamo) handleReopen(ctx *fasthttp.RequestCtx, st *dynState) {
	if d.alog != nil {
		if err := d.alog.reopen(); err != nil {
			d.opts.Logger.Error("access log reopen failed", "err", err)
			d.opError(ctx, st, 500, ErrInternal, "reopen access log: "+err.Error())
			return
		}
	}
	d.ok(ctx, st, 200)
}
