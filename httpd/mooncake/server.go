package mooncake

import (
	"context"
	"log/slog"
	"net"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/server"
)

// Server serves the Mooncake indexer API over a server.Core. Create it with
// New; it is safe for concurrent use.
type Server struct {
	c     *server.Core
	ix    *core.Index
	opts  server.Options
	start time.Time
	m     *endpointMetrics
	host  *server.Host
}

// New returns the Mooncake API over c, on the Core's options (limits,
// timeouts, Version, Ready, ExtraMetrics). Its request series join
// c.Metrics().
func New(c *server.Core) *Server {
	s := &Server{c: c, ix: c.Index(), opts: c.Options(), start: time.Now()}
	s.m = newEndpointMetrics(c.Metrics())
	s.host = c.Host((*surface)(s), server.HostOptions{})
	return s
}

// Serve accepts connections on ln until Shutdown; it returns nil after
// Shutdown. Connections are bounded and accept errors retried by the Core's
// Limiter (server.Options.Limiter).
func (s *Server) Serve(ln net.Listener) error { return s.host.Serve(ln) }

// Shutdown stops accepting connections, closes every connection with no
// request in progress (new and idle keep-alive connections) and waits for the
// requests in progress, in a handler or still arriving, to finish (or ctx to
// expire, returning ctx.Err()): server.Host.Shutdown.
func (s *Server) Shutdown(ctx context.Context) error { return s.host.Shutdown(ctx) }

// Handler is the fasthttp request handler (exported for embedding and tests).
func (s *Server) Handler(ctx *fasthttp.RequestCtx) { s.host.Handler(ctx) }

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
	epLivez
	numEndpoints
)

var endpointPaths = [numEndpoints]string{"other", "/register", "/unregister", "/query", "/query_by_hash",
	"/global_view", "/services", "/health", "/metrics", "/dump", "/livez"}

func (e endpoint) String() string { return endpointPaths[e] }

// class is the endpoint's access class.
func (e endpoint) class() server.AccessClass {
	switch e {
	case epQuery, epQueryByHash:
		return server.AccessQuery
	case epRegister, epUnregister:
		return server.AccessMutate
	case epGlobalView, epServices, epDump:
		return server.AccessInspect
	case epMetrics:
		return server.AccessMetrics
	}
	return server.AccessPublic
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
	case "/livez":
		return epLivez
	case "/metrics":
		return epMetrics
	case "/dump":
		return epDump
	}
	return epOther
}

// surface is the Server as its Host sees it (server.Surface).
type surface Server

func (f *surface) Route(path []byte) server.Route {
	ep := route(path)
	return server.Route{ID: int(ep), Post: ep.post(), Class: ep.class()}
}

func (f *surface) Serve(ctx *fasthttp.RequestCtx, st *server.State, r server.Route) int {
	s := (*Server)(f)
	switch ep := endpoint(r.ID); ep {
	case epQuery, epQueryByHash:
		s.handleQuery(ctx, ep, st)
	case epRegister:
		s.handleRegister(ctx, ep, st)
	case epUnregister:
		s.handleUnregister(ctx, ep, st)
	case epServices:
		s.handleServices(ctx, st)
	case epGlobalView:
		s.handleGlobalView(ctx, st)
	case epHealth:
		s.handleHealth(ctx, st)
	case epLivez:
		server.WriteBody(ctx, 200, true, livezBody)
	case epMetrics:
		s.handleMetrics(ctx)
	case epDump:
		s.handleDump(ctx)
	}
	return 0
}

// Refuse answers with the error envelope, in the dialect the request asks
// for (server.WantsMsgpack).
func (f *surface) Refuse(ctx *fasthttp.RequestCtx, st *server.State, r server.Route, why server.Refusal, e *server.RequestError) int {
	switch why {
	case server.NoRoute:
		e = server.StatusError(server.ErrNotFound, 404, "Not found")
	case server.BadMethod:
		e = server.StatusError(server.ErrMethodNotAllowed, 405, "Method not allowed")
	}
	(*Server)(f).writeError(ctx, endpoint(r.ID), st, !server.WantsMsgpack(ctx), e)
	return 0
}

func (f *surface) Done(ctx *fasthttp.RequestCtx, _ *server.State, r server.Route, _ int, start time.Time) {
	f.m.observe(endpoint(r.ID), ctx.Response.StatusCode(), start)
}

// writeError answers a rejected request with the envelope
// {"error", "reason", "field"?, "index"?} and counts it by reason.
func (s *Server) writeError(ctx *fasthttp.RequestCtx, ep endpoint, st *server.State, json bool, e *server.RequestError) {
	s.m.requestError(ep, e)
	status := e.HTTPStatus()
	if status == 503 {
		ctx.Response.Header.Set("Retry-After", "1")
	}
	if s.opts.Logger.Enabled(context.Background(), slog.LevelDebug) {
		s.opts.Logger.Debug("request rejected", "path", ep.String(), "reason", server.ReasonOf(e), "err", e.Error())
	}
	enc := &st.Enc
	enc.Reset(json)
	server.AppendErrorEnvelope(enc, e)
	server.WriteBody(ctx, status, json, enc.Bytes())
}

// writeOpError answers an operational error (404, 405, 500) with the error
// envelope, reason from sentinel.
func (s *Server) writeOpError(ctx *fasthttp.RequestCtx, ep endpoint, st *server.State, json bool, status int, sentinel error, msg string) {
	s.writeError(ctx, ep, st, json, server.StatusError(sentinel, status, msg))
}
