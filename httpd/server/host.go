package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// Route is where the preamble sends a request (Surface.Route).
type Route struct {
	// ID is the surface's number for the route; 0 means no such route (404).
	ID int
	// Post is set for a route that takes POST (its body is read before
	// Serve); the others take GET and HEAD.
	Post bool
	// Class is who may call the route.
	Class AccessClass
}

// Refusal says why the preamble answered a request itself (Surface.Refuse).
type Refusal uint8

const (
	NoRoute    Refusal = iota + 1 // no such route: 404; the surface words it (e is nil)
	BadMethod                     // the route takes another method: 405, Allow set; the surface words it (e is nil)
	Denied                        // Access refused the caller: 401 or 403 (e)
	BadBody                       // the body could not be read: 413, 503, 408 or 400 (e)
	Unreadable                    // fasthttp could not read the request: 413 or 400 (e)
)

// Surface is one API a Host serves (the Mooncake API, the RPC, the Dynamo
// dialect). Its methods run on the request's goroutine; st is the request's
// pooled State.
type Surface interface {
	// Route maps a request path to its route.
	Route(path []byte) Route
	// Serve answers a request the preamble admitted: st.Who is the caller
	// and, for a POST route, st.Body the body. Its result is handed to Done.
	Serve(ctx *fasthttp.RequestCtx, st *State, r Route) (result int)
	// Refuse answers a request the preamble refused, for why (with e where
	// the preamble has the error). Its result is handed to Done.
	Refuse(ctx *fasthttp.RequestCtx, st *State, r Route, why Refusal, e *RequestError) (result int)
	// Done is called once per request, after Serve or Refuse, with their
	// result (a surface's own outcome code, e.g. the RPC's ret) and the
	// request's start: metrics, access logs.
	Done(ctx *fasthttp.RequestCtx, st *State, r Route, result int, start time.Time)
}

// HostOptions adjust one surface's listener; zero fields take the Core's
// Options.
type HostOptions struct {
	// Name is fasthttp's Server.Name (not sent: the Server header is off).
	// Default "conductor".
	Name string
	// MaxBodyBytes bounds a request body (413 beyond).
	MaxBodyBytes int
	// ReadTimeout, WriteTimeout and IdleTimeout as in Options.
	ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// Logger receives fasthttp's lines (debug).
	Logger *slog.Logger
}

// Host serves one Surface over the Core: a fasthttp server whose handler is
// the preamble every surface shares, on listeners guarded by the Core's
// Limiter. Create it with Core.Host; safe for concurrent use.
//
// The preamble, in order: the connection is marked busy (track: shutdown
// and eviction leave it alone); a State is taken from the pool; an unknown
// route is refused (NoRoute), a wrong method too (BadMethod); the caller is
// authorized for the route's class (Denied: 401, 403); a POST route's body is
// read under the Limiter's budget and the body limit (BadBody); then the
// Surface serves it. Done follows either way and the State goes back to
// the pool, its body budget released. Requests fasthttp cannot read are
// refused (Unreadable) through the same Surface. A steady request allocates
// nothing here (TestQueryHandlerAllocs, TestRPCQueryAllocs,
// TestDynamoQueryAllocs).
type Host struct {
	c       *Core
	s       Surface
	maxBody int
	srv     *fasthttp.Server
	lns     listeners
}

// Host returns the Host of surface s.
func (c *Core) Host(s Surface, o HostOptions) *Host {
	fo := c.opts
	if o.MaxBodyBytes != 0 {
		fo.MaxBodyBytes = o.MaxBodyBytes
	}
	if o.ReadTimeout != 0 {
		fo.ReadTimeout = o.ReadTimeout
	}
	if o.WriteTimeout != 0 {
		fo.WriteTimeout = o.WriteTimeout
	}
	if o.IdleTimeout != 0 {
		fo.IdleTimeout = o.IdleTimeout
	}
	if o.Logger != nil {
		fo.Logger = o.Logger
	}
	h := &Host{c: c, s: s, maxBody: fo.MaxBodyBytes, lns: listeners{lim: c.lim}}
	h.srv = newFastServer(h.Handler, h.errorHandler, &fo)
	if o.Name != "" {
		h.srv.Name = o.Name
	}
	return h
}

// newFastServer configures fasthttp for a conductor surface. Bodies are
// streamed (StreamRequestBody) so that a declared Content-Length reserves no
// memory; the preamble reads them with readBody. A declared length past the
// body limit reaches the handler at once (headerReceived).
func newFastServer(h fasthttp.RequestHandler, eh func(*fasthttp.RequestCtx, error), opts *Options) *fasthttp.Server {
	return &fasthttp.Server{
		Handler:                      h,
		ErrorHandler:                 eh,
		HeaderReceived:               headerReceived(opts.MaxBodyBytes),
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

// tooLargeHeader carries a request's declared Content-Length from
// headerReceived to the handler when it is past the body limit.
const tooLargeHeader = "X-Conductor-Declared-Length"

// headerReceived runs once a request's headers are in, before fasthttp reads
// any of its body. fasthttp reads the first bytes of a body (up to 8 KiB)
// before it calls the handler, and answers "Expect: 100-continue" with "100
// Continue", whatever the declared length: a request declaring more than
// maxBody bytes would wait for body bytes it will never be allowed to send,
// up to the read timeout, or be invited to send them. So such a request's
// length moves to tooLargeHeader, its Content-Length becomes 0 and its
// Expect is dropped: fasthttp reads no body and runs the handler at once,
// which closes the connection (Handler) and answers 413 (readBody), or what
// the route answers first (404, 405, 401), without reading the body. A
// tooLargeHeader sent by the client is removed first.
// TestDeclaredLengthTooLarge proves it.
func headerReceived(maxBody int) func(*fasthttp.RequestHeader) fasthttp.RequestConfig {
	return func(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
		h.Del(tooLargeHeader)
		if cl := h.ContentLength(); maxBody > 0 && cl > maxBody {
			h.Set(tooLargeHeader, strconv.Itoa(cl))
			h.SetContentLength(0)
			h.Del(fasthttp.HeaderExpect)
		}
		return fasthttp.RequestConfig{}
	}
}

// declaredLength is the request's declared Content-Length (-1 chunked, -2
// none), the one headerReceived set aside included.
func declaredLength(ctx *fasthttp.RequestCtx) int64 {
	if v := ctx.Request.Header.Peek(tooLargeHeader); len(v) > 0 {
		if n, err := strconv.ParseInt(B2S(v), 10, 64); err == nil {
			return n
		}
	}
	return int64(ctx.Request.Header.ContentLength())
}

// fastLogger routes fasthttp's log lines to slog at debug level: they report
// client-caused failures (malformed requests, reset connections), which a
// client could otherwise use to flood the log; the surfaces count them
// anyway.
type fastLogger struct{ l *slog.Logger }

func (f fastLogger) Printf(format string, args ...any) {
	if f.l.Enabled(context.Background(), slog.LevelDebug) {
		f.l.Debug("fasthttp: " + fmt.Sprintf(format, args...))
	}
}

// Serve accepts connections on ln until Shutdown; it returns nil after
// Shutdown. Connections are bounded and accept errors retried by the Core's
// Limiter.
func (h *Host) Serve(ln net.Listener) error { return h.lns.serve(h.srv, ln) }

// Shutdown stops accepting connections, closes every connection with no
// request in progress (new connections that have sent nothing, idle
// keep-alive connections) and waits for the requests in progress to finish
// and be answered, with Connection: close: those in a handler and those
// still arriving (part of the headers or of the body sent), until ctx
// expires (returning ctx.Err()); what is left is then the caller's to cut.
// Proved by TestShutdownDrainsRequestsInProgress.
func (h *Host) Shutdown(ctx context.Context) error { return h.lns.shutdown(h.srv, ctx) }

// Handler is the fasthttp request handler: the preamble, then the Surface.
func (h *Host) Handler(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	end, ok := track(ctx)
	if !ok {
		return
	}
	defer end()
	if len(ctx.Request.Header.Peek(tooLargeHeader)) > 0 {
		// The body was not read (headerReceived): nothing after it on this
		// connection is a request.
		ctx.SetConnectionClose()
	}
	c := h.c
	r := h.s.Route(ctx.Path())
	st := c.getState()
	defer c.putState(st)

	var why Refusal
	var rerr *RequestError
	switch {
	case r.ID == 0:
		why = NoRoute
	case r.Post && !ctx.IsPost():
		ctx.Response.Header.Set("Allow", "POST")
		why = BadMethod
	case !r.Post && !ctx.IsGet() && !ctx.IsHead():
		ctx.Response.Header.Set("Allow", "GET, HEAD")
		why = BadMethod
	default:
		if st.Who, rerr = c.opts.Access.authorize(ctx, r.Class); rerr != nil {
			why = Denied
		} else if r.Post {
			if st.Body, rerr = c.readBody(ctx, st, h.maxBody); rerr != nil {
				why = BadBody
			}
		}
	}
	var result int
	if why != 0 {
		result = h.s.Refuse(ctx, st, r, why, rerr)
	} else {
		result = h.s.Serve(ctx, st, r)
	}
	h.s.Done(ctx, st, r, result, start)
}

// errorHandler answers requests fasthttp could not read: 413 for an
// oversized body, 400 otherwise.
func (h *Host) errorHandler(ctx *fasthttp.RequestCtx, err error) {
	st := h.c.getState()
	defer h.c.putState(st)
	var e *RequestError
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		e = BodyTooLarge(h.maxBody)
	} else {
		// fasthttp's error text may quote the whole raw request: answer with
		// a fixed message (the client knows what it sent).
		e = &RequestError{Err: ErrInvalidRequest, Index: noIndex, Status: 400, Msg: "malformed HTTP request"}
	}
	result := h.s.Refuse(ctx, st, Route{}, Unreadable, e)
	h.s.Done(ctx, st, Route{}, result, ctx.Time())
}
