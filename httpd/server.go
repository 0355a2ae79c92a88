package httpd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/core"
)

// Registrar starts and stops event consumption for registrations; the ZMQ
// ingester (ingest.Ingester in wire/ingest) implements it. It must be safe for concurrent use.
type Registrar interface {
	// Register subscribes r. created=false means an identical registration
	// already existed (idempotent success). Errors wrapping core.ErrConflict or
	// core.ErrInvalid are answered 400 invalid_registration, core.ErrLimit 400
	// limit_exceeded, anything else 500.
	Register(r core.Registration) (created bool, err error)
	// Unregister stops the subscription k and removes its contributions. An
	// error wrapping core.ErrNotFound is answered 404.
	Unregister(k core.ServiceKey) (core.Registration, error)
}

// Server serves the Mooncake indexer API over fasthttp. Create it with New;
// it is safe for concurrent use.
type Server struct {
	ix    *core.Index
	reg   Registrar
	opts  Options
	start time.Time
	m     *serverMetrics
	srv   *fasthttp.Server
	lim   *Limiter
	gate  *Gate
	lns   listeners

	// pool holds *reqState: per-request scratch (readers, token buffers, the
	// query result, the response encoder), so /query allocates nothing.
	pool sync.Pool
}

// New returns a Server over ix that registers publishers through reg.
func New(ix *core.Index, reg Registrar, opts Options) (*Server, error) {
	if ix == nil || reg == nil {
		return nil, fmt.Errorf("httpd.New: index and registrar are required: %w", ErrInvalidOptions)
	}
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	s := &Server{ix: ix, reg: reg, opts: opts, start: time.Now(), lim: opts.Limiter, gate: opts.Gate}
	if s.gate == nil {
		s.gate = NewGate(reg, ix, nil)
	}
	if s.lim == nil {
		s.lim = NewLimiter(0, 0, opts.Logger)
		s.opts.ExtraMetrics = append(append([]*metrics.Set(nil), opts.ExtraMetrics...), s.lim.Metrics())
	}
	s.lns.lim = s.lim
	s.pool.New = func() any { return new(reqState) }
	s.m = newServerMetrics(ix)
	s.srv = newFastServer(s.Handler, s.errorHandler, &opts)
	return s, nil
}

// newFastServer configures fasthttp for a conductor surface. Bodies are
// streamed (StreamRequestBody) so that a declared Content-Length reserves no
// memory; handlers read them with readBody.
func newFastServer(h fasthttp.RequestHandler, eh func(*fasthttp.RequestCtx, error), opts *Options) *fasthttp.Server {
	return &fasthttp.Server{
		Handler:                      h,
		ErrorHandler:                 eh,
		Name:                         "conductor",
		MaxRequestBodySize:           opts.MaxBodyBytes,
		StreamRequestBody:            true,
		ReadTimeout:                  opts.ReadTimeout,
		WriteTimeout:                 opts.WriteTimeout,
		IdleTimeout:                  opts.IdleTimeout,
		Concurrency:                  opts.Concurrency,
		ReadBufferSize:               opts.ReadBufferBytes,
		CloseOnShutdown:              true,
		DisablePreParseMultipartForm: true,
		NoDefaultServerHeader:        true,
		Logger:                       fastLogger{opts.Logger},
	}
}

// Serve accepts connections on ln until Shutdown; it returns nil after
// Shutdown. Connections are bounded and accept errors retried by the
// server's Limiter (Options.Limiter).
func (s *Server) Serve(ln net.Listener) error { return s.lns.serve(s.srv, ln) }

// Shutdown stops accepting connections, closes every connection that is not
// inside a request (idle keep-alive connections, and connections that have
// not sent a complete request) and waits for in-flight requests to finish (or
// ctx to expire, returning ctx.Err()). Proved by TestShutdownClosesPartialRequests.
func (s *Server) Shutdown(ctx context.Context) error { return s.lns.shutdown(s.srv, ctx) }

// Metrics returns the server's metric set (request counts and latencies,
// errors by reason, index gauges).
func (s *Server) Metrics() *metrics.Set { return s.m.set }

// fastLogger routes fasthttp's log lines to slog at debug level: they report
// client-caused failures (malformed requests, reset connections), which a
// client could otherwise use to flood the log; they are counted in
// conductor_http_requests_total{path="other"} anyway.
type fastLogger struct{ l *slog.Logger }

func (f fastLogger) Printf(format string, args ...any) {
	if f.l.Enabled(context.Background(), slog.LevelDebug) {
		f.l.Debug("fasthttp: " + fmt.Sprintf(format, args...))
	}
}

// endpoint enumerates the routes (metric labels use endpoint.String()).
type endpoint uint8

const (
	epOther endpoint = iota
	epRegister
	epUnregister
	epQuery
	epQueryByHash
	epGlobalView
	epServices
	epHealth
	epMetrics
	epDump
	numEndpoints
)

var endpointPaths = [numEndpoints]string{"other", "/register", "/unregister", "/query", "/query_by_hash",
	"/global_view", "/services", "/health", "/metrics", "/dump"}

func (e endpoint) String() string { return endpointPaths[e] }

// class is the endpoint's access class.
func (e endpoint) class() accessClass {
	switch e {
	case epQuery, epQueryByHash:
		return accessQuery
	case epRegister, epUnregister:
		return accessMutate
	case epGlobalView, epServices, epDump:
		return accessInspect
	}
	return accessPublic
}

// post reports whether the endpoint takes POST (else GET and HEAD).
func (e endpoint) post() bool { return e >= epRegister && e <= epQueryByHash }

func route(path []byte) endpoint {
	switch string(path) {
	case "/register":
		return epRegister
	case "/unregister":
		return epUnregister
	case "/query":
		return epQuery
	case "/query_by_hash":
		return epQueryByHash
	case "/global_view":
		return epGlobalView
	case "/services":
		return epServices
	case "/health":
		return epHealth
	case "/metrics":
		return epMetrics
	case "/dump":
		return epDump
	}
	return epOther
}

// Handler is the fasthttp request handler (exported for embedding and tests).
func (s *Server) Handler(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	end, ok := track(ctx)
	if !ok {
		return
	}
	defer end()
	ep := route(ctx.Path())
	st := s.pool.Get().(*reqState)
	defer s.putState(st)
	st.scratch = st.scratch[:0]

	switch {
	case ep == epOther:
		s.writeOpError(ctx, ep, st, !wantsMsgpack(ctx), 404, ErrNotFound, "Not found")
	case ep.post() && !ctx.IsPost():
		ctx.Response.Header.Set("Allow", "POST")
		s.writeOpError(ctx, ep, st, !wantsMsgpack(ctx), 405, ErrMethodNotAllowed, "Method not allowed")
	case !ep.post() && !ctx.IsGet() && !ctx.IsHead():
		ctx.Response.Header.Set("Allow", "GET, HEAD")
		s.writeOpError(ctx, ep, st, !wantsMsgpack(ctx), 405, ErrMethodNotAllowed, "Method not allowed")
	case !s.authorize(ctx, ep, st):
		// answered by authorize
	case !s.readRequestBody(ctx, ep, st):
		// answered by readRequestBody
	case ep == epQuery || ep == epQueryByHash:
		s.handleQuery(ctx, ep, st)
	case ep == epRegister:
		s.handleRegister(ctx, ep, st)
	case ep == epUnregister:
		s.handleUnregister(ctx, ep, st)
	case ep == epServices:
		s.handleServices(ctx, ep, st)
	case ep == epGlobalView:
		s.handleGlobalView(ctx, ep, st)
	case ep == epHealth:
		s.handleHealth(ctx, ep, st)
	case ep == epMetrics:
		s.handleMetrics(ctx)
	case ep == epDump:
		s.handleDump(ctx) // dump.go
	}
	s.m.observe(ep, ctx.Response.StatusCode(), start)
}

// authorize sets st.who for the request; false means it was answered 401/403.
func (s *Server) authorize(ctx *fasthttp.RequestCtx, ep endpoint, st *reqState) bool {
	c := ep.class()
	if ep == epMetrics && s.opts.Access != nil && s.opts.Access.protectMetrics {
		c = accessInspect
	}
	p, rerr := s.opts.Access.authorize(ctx, c)
	if rerr != nil {
		s.writeError(ctx, ep, st, !wantsMsgpack(ctx), rerr)
		return false
	}
	st.who = p
	return true
}

// errorHandler answers requests fasthttp could not read: 413 for an oversized
// body, 400 otherwise.
func (s *Server) errorHandler(ctx *fasthttp.RequestCtx, err error) {
	st := s.pool.Get().(*reqState)
	defer s.putState(st)
	defer func() { s.m.observe(epOther, ctx.Response.StatusCode(), ctx.Time()) }()
	json := !wantsMsgpack(ctx)
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		s.writeError(ctx, epOther, st, json, &RequestError{Err: ErrLimitExceeded, Index: noIndex, Status: 413,
			Msg: "request body exceeds " + strconv.Itoa(s.opts.MaxBodyBytes) + " bytes"})
		return
	}
	// fasthttp's error text may quote the whole raw request: answer with a
	// fixed message (the client knows what it sent).
	s.writeError(ctx, epOther, st, json, &RequestError{Err: ErrInvalidRequest, Index: noIndex, Status: 400,
		Msg: "malformed HTTP request"})
}

// reqState is the pooled per-request scratch.
type reqState struct {
	enc     encoder
	js      jsonReader
	mp      mpReader
	scratch []byte // unescaped JSON strings
	body    []byte // owned buffer a streamed request body is read into
	in      []byte // the request body to parse (st.body or fasthttp's own buffer)
	// reserved is the Limiter body budget this request holds (released by putState).
	reserved bodyHold
	tokBuf   []int32
	hashBuf  []uint64
	b64      []byte // decoded base64 token_ids (RPC)
	q        core.QueryRequest
	res      core.QueryResult
	who      Principal // the caller (authorize)
}

// Retention caps: a pooled state drops buffers grown beyond these by an
// unusually large request, so the pool does not pin them (a large response
// buffer is handed to fasthttp without a copy instead; see writeBody).
// Proved by TestLargeBodiesAreNotRetained.
const (
	retainBytes  = 1 << 20
	retainTokens = 1 << 20
	retainHashes = 1 << 19
)

func (s *Server) putState(st *reqState) {
	s.lim.releaseBody(&st.reserved)
	if cap(st.body) > retainBytes {
		s.lim.dropped(int64(cap(st.body)))
		st.body = nil
	}
	st.in = nil
	st.who = Principal{}
	st.q = core.QueryRequest{}
	st.js = jsonReader{}
	st.mp = mpReader{}
	if cap(st.scratch) > retainBytes {
		st.scratch = nil
	}
	if cap(st.enc.buf) > retainBytes {
		s.lim.dropped(int64(cap(st.enc.buf)))
		st.enc.buf = nil
	}
	if cap(st.b64) > retainBytes {
		st.b64 = nil
	}
	if cap(st.tokBuf) > retainTokens {
		st.tokBuf = nil
	}
	if cap(st.hashBuf) > retainHashes {
		st.hashBuf = nil
	}
	s.pool.Put(st)
}

// reader starts the dialect's reader over body.
func (st *reqState) reader(body []byte, json bool) reader {
	if json {
		st.js.init(body, &st.scratch, true)
		return &st.js
	}
	st.mp.init(body, true)
	return &st.mp
}

var (
	ctMsgpack = []byte("application/msgpack")
	ctJSON    = []byte("application/json")
)

const (
	contentTypeJSON    = "application/json"
	contentTypeMsgpack = "application/msgpack"
)

// requestDialect picks the body dialect from Content-Type: msgpack when it
// contains "application/msgpack", JSON when it contains "application/json" or
// is absent, or any other type when the body is a JSON object (curl's default
// application/x-www-form-urlencoded); anything else is 400
// unsupported_content_type (answered in JSON). body is the request body as
// read by readRequestBody (never ctx.PostBody(): bodies are streamed).
func requestDialect(ctx *fasthttp.RequestCtx, body []byte) (json bool, err *RequestError) {
	ct := ctx.Request.Header.ContentType()
	switch {
	case bytes.Contains(ct, ctMsgpack):
		return false, nil
	case len(ct) == 0 || bytes.Contains(ct, ctJSON) || looksJSON(body):
		return true, nil
	}
	return true, &RequestError{Err: ErrUnsupportedContentType, Index: noIndex,
		Msg: "Content-Type must be application/json or application/msgpack"}
}

// wantsMsgpack is the dialect of responses to requests without a body (GET,
// 404, 405): the format query argument ("json" or "msgpack") wins, then an
// Accept header naming application/msgpack or application/json, then a
// Content-Type naming application/msgpack; the default is JSON.
func wantsMsgpack(ctx *fasthttp.RequestCtx) bool {
	switch string(ctx.QueryArgs().Peek("format")) {
	case "msgpack":
		return true
	case "json":
		return false
	}
	accept := ctx.Request.Header.Peek("Accept")
	switch {
	case bytes.Contains(accept, ctMsgpack):
		return true
	case bytes.Contains(accept, ctJSON):
		return false
	}
	return bytes.Contains(ctx.Request.Header.ContentType(), ctMsgpack)
}

func (s *Server) writeBody(ctx *fasthttp.RequestCtx, status int, json bool, body []byte) {
	ctx.SetStatusCode(status)
	if json {
		ctx.SetContentType(contentTypeJSON)
	} else {
		ctx.SetContentType(contentTypeMsgpack)
	}
	if cap(body) > retainBytes {
		// putState drops this buffer (cap > retainBytes), so fasthttp may own
		// it: no copy into its pooled response buffer, which would keep it.
		ctx.Response.SetBodyRaw(body)
		return
	}
	ctx.SetBody(body)
}

// writeError answers a rejected request with the envelope
// {"error", "reason", "field"?, "index"?} and counts it by reason.
func (s *Server) writeError(ctx *fasthttp.RequestCtx, ep endpoint, st *reqState, json bool, e *RequestError) {
	s.m.requestError(ep, e)
	if e.status() == 503 {
		ctx.Response.Header.Set("Retry-After", "1")
	}
	if s.opts.Logger.Enabled(context.Background(), slog.LevelDebug) {
		s.opts.Logger.Debug("request rejected", "path", ep.String(), "reason", ReasonOf(e), "err", e.Error())
	}
	enc := &st.enc
	enc.reset(json)
	appendErrorEnvelope(enc, e)
	s.writeBody(ctx, e.status(), json, enc.buf)
}

// appendErrorEnvelope writes {"error", "reason", "field"?, "index"?}: the
// refusal envelope of every surface that names its cause (the Mooncake API
// and the Dynamo dialect).
func appendErrorEnvelope(enc *encoder, e *RequestError) {
	n := 2
	if e.Field != "" {
		n++
	}
	if e.Index >= 0 {
		n++
	}
	enc.mapHeader(n)
	enc.str("error")
	enc.str(e.Msg)
	enc.str("reason")
	enc.str(ReasonOf(e))
	if e.Field != "" {
		enc.str("field")
		enc.str(e.Field)
	}
	if e.Index >= 0 {
		enc.str("index")
		enc.int(int64(e.Index))
	}
}

// writeOpError answers an operational error (404, 405, 500) with the error
// envelope, reason from sentinel.
func (s *Server) writeOpError(ctx *fasthttp.RequestCtx, ep endpoint, st *reqState, json bool, status int, sentinel error, msg string) {
	s.writeError(ctx, ep, st, json, opErr(sentinel, status, msg))
}
