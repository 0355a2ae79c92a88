package rpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/server"
)

// Return codes of the Python ConductorClient API (seed
// conductor-python-api.md, "Error Codes"). Every RPC response carries one as
// "ret"; RetRPCFail, RetRPCTimeout and RetConductorUnavailable are also
// produced by the client itself (transport failure, timeout, not connected).
const (
	RetOK                   = 0
	RetInternalError        = -1
	RetInvalidParams        = -600
	RetRPCFail              = -900
	RetRPCTimeout           = -901
	RetConductorUnavailable = -2000
	RetServiceNotFound      = -2001
)

// retCodes lists the codes the server answers with (metric labels).
var retCodes = [...]int{RetOK, RetInternalError, RetInvalidParams, RetRPCFail, RetServiceNotFound}

// rpcMethod enumerates the RPC operations (metric labels use its String).
type rpcMethod uint8

const (
	rpcOther rpcMethod = iota
	rpcQuery
	rpcRegister
	rpcUnregister
	rpcGetGlobalView
	rpcListServices
	numRPCMethods
)

var rpcMethodNames = [numRPCMethods]string{"other", "Query", "Register", "Unregister", "GetGlobalView", "ListServices"}

func (m rpcMethod) String() string { return rpcMethodNames[m] }

func rpcRoute(path []byte) rpcMethod {
	switch string(path) {
	case "/rpc/Query":
		return rpcQuery
	case "/rpc/Register":
		return rpcRegister
	case "/rpc/Unregister":
		return rpcUnregister
	case "/rpc/GetGlobalView":
		return rpcGetGlobalView
	case "/rpc/ListServices":
		return rpcListServices
	}
	return rpcOther
}

// Server serves the Python client's RPC surface (package doc) on a listener
// of its own, over a server.Core: the same index, registration Gate,
// parsers and validation as the Mooncake API, in the RPC dialect. Create it
// with New; it is safe for concurrent use.
type Server struct {
	c    *server.Core
	log  *slog.Logger
	m    rpcMetrics
	host *server.Host
}

// New returns the RPC surface over c. Its metrics join c.Metrics().
func New(c *server.Core) *Server {
	r := &Server{c: c, log: c.Options().Logger}
	r.m.init(c.Metrics())
	r.host = c.Host((*surface)(r), server.HostOptions{Name: "conductor-rpc"})
	return r
}

// Serve accepts connections on ln until Shutdown; it returns nil after
// Shutdown. Connections and bodies in flight count against the Core's
// Limiter.
func (r *Server) Serve(ln net.Listener) error { return r.host.Serve(ln) }

// Shutdown stops accepting connections, closes the ones with no request in
// progress and waits for the requests in progress, in a handler or still
// arriving, to finish (or ctx to expire, returning ctx.Err()).
func (r *Server) Shutdown(ctx context.Context) error { return r.host.Shutdown(ctx) }

// Handler is the fasthttp request handler of the RPC surface (exported for
// embedding and tests).
func (r *Server) Handler(ctx *fasthttp.RequestCtx) { r.host.Handler(ctx) }

// class is the access class of an RPC method: Register and Unregister
// need a registering identity, GetGlobalView and ListServices the admin,
// Query the query token when one is set.
func (m rpcMethod) class() server.AccessClass {
	switch m {
	case rpcQuery:
		return server.AccessQuery
	case rpcRegister, rpcUnregister:
		return server.AccessMutate
	case rpcGetGlobalView, rpcListServices:
		return server.AccessInspect
	}
	return server.AccessPublic
}

// surface is the Server as its Host sees it (server.Surface); results are
// the RPC's ret.
type surface Server

func (f *surface) Route(path []byte) server.Route {
	m := rpcRoute(path)
	return server.Route{ID: int(m), Post: true, Class: m.class()}
}

func (f *surface) Serve(ctx *fasthttp.RequestCtx, st *server.State, rt server.Route) int {
	r := (*Server)(f)
	switch rpcMethod(rt.ID) {
	case rpcQuery:
		return r.query(ctx, st)
	case rpcRegister:
		return r.register(ctx, st)
	case rpcUnregister:
		return r.unregister(ctx, st)
	case rpcGetGlobalView:
		return r.globalView(ctx, st)
	case rpcListServices:
		return r.listServices(ctx, st)
	}
	return RetRPCFail
}

// Refuse answers {"ret", ...} (writeFailure): an unknown method is 404 and
// another HTTP method 405, both RPC_FAIL; a body the request itself makes
// unusable (too large, cut short, unreadable) is the caller's parameters
// (INVALID_PARAMS), while auth and a full budget are not (RPC_FAIL); of the
// requests fasthttp cannot read, an oversized one is INVALID_PARAMS and the
// others RPC_FAIL.
func (f *surface) Refuse(ctx *fasthttp.RequestCtx, st *server.State, rt server.Route, why server.Refusal, e *server.RequestError) int {
	r, m := (*Server)(f), rpcMethod(rt.ID)
	switch why {
	case server.NoRoute:
		return r.writeFailure(ctx, st, m, 404, RetRPCFail,
			server.NewError(server.ErrNotFound, "", "unknown RPC method; want POST /rpc/{Query,Register,Unregister,GetGlobalView,ListServices}"))
	case server.BadMethod:
		return r.writeFailure(ctx, st, m, 405, RetRPCFail, server.NewError(server.ErrMethodNotAllowed, "", "RPC methods take POST"))
	}
	status, code := e.HTTPStatus(), RetRPCFail
	if status == 413 || (status == 400 && why != server.Unreadable) {
		code = RetInvalidParams
	}
	return r.writeFailure(ctx, st, m, status, code, e)
}

func (f *surface) Done(_ *fasthttp.RequestCtx, _ *server.State, rt server.Route, ret int, start time.Time) {
	f.m.observe(rpcMethod(rt.ID), ret, start)
}

// query serves Query: {"ret": 0, "hits": {id: row}} (server.AppendInstanceRows),
// plus "miss" naming the reason (server.MissReason) when no context serves
// the query (hits then {}; clients that do not know the key ignore it).
// The request is JSON, or msgpack when its Content-Type says so (the same
// keys; token_ids then also as a bin of little-endian int32s, viewed in place
// when aligned: what the Python client sends). Steady state allocates nothing
// (TestRPCQueryAllocs).
func (r *Server) query(ctx *fasthttp.RequestCtx, st *server.State) int {
	_, rerr, err := r.c.RunQuery(ctx, st, server.DialectRPC, false, "/rpc/Query")
	switch {
	case rerr != nil:
		return r.writeFailure(ctx, st, rpcQuery, 200, RetInvalidParams, rerr)
	case err != nil:
		return r.writeFailure(ctx, st, rpcQuery, 200, RetInternalError, server.NewError(server.ErrInternal, "", "query failed: "+err.Error()))
	}
	e := &st.Enc
	e.Reset(true)
	if st.Miss != server.MissNone {
		e.MapHeader(3)
	} else {
		e.MapHeader(2)
	}
	e.Str("ret")
	e.Int(RetOK)
	e.Str("hits")
	server.AppendInstanceRows(e, st.Res.Instances)
	if st.Miss != server.MissNone {
		e.Str("miss")
		e.Str(st.Miss.String())
	}
	server.WriteBody(ctx, 200, true, e.Bytes())
	return RetOK
}

// register serves Register: the registration in the RPC dialect, then the
// Core's Gate. Refusals are INVALID_PARAMS, other failures INTERNAL_ERROR.
func (r *Server) register(ctx *fasthttp.RequestCtx, st *server.State) int {
	reg, rerr := st.Registration(server.DialectRPC)
	if rerr != nil {
		return r.writeFailure(ctx, st, rpcRegister, 200, RetInvalidParams, rerr)
	}
	rerr, err := r.c.Register(st.Who, reg)
	switch {
	case rerr != nil:
		return r.writeFailure(ctx, st, rpcRegister, 200, RetInvalidParams, rerr)
	case err != nil:
		return r.writeFailure(ctx, st, rpcRegister, 200, RetInternalError, server.NewError(server.ErrInternal, "", "Failed to subscribe: "+err.Error()))
	}
	return r.writeOK(ctx, st)
}

// unregister serves Unregister: an unknown subscription is SERVICE_NOT_FOUND.
func (r *Server) unregister(ctx *fasthttp.RequestCtx, st *server.State) int {
	k, rerr := st.UnregisterKey(server.DialectRPC)
	if rerr != nil {
		return r.writeFailure(ctx, st, rpcUnregister, 200, RetInvalidParams, rerr)
	}
	key := server.ServiceKey(k.InstanceID, k.TenantID, k.DPRank)
	if err := r.c.Unregister(st.Who, k, key); err != nil {
		switch {
		case errors.Is(err, core.ErrNotFound):
			return r.writeFailure(ctx, st, rpcUnregister, 200, RetServiceNotFound, server.NewError(server.ErrNotFound, "", "service not found: "+key))
		case errors.Is(err, server.ErrForbidden):
			return r.writeFailure(ctx, st, rpcUnregister, 403, RetRPCFail, server.StatusError(server.ErrForbidden, 403, err.Error()))
		case errors.Is(err, server.ErrStateWrite):
			return r.writeFailure(ctx, st, rpcUnregister, 500, RetInternalError, server.StatusError(server.ErrStateWrite, 500, err.Error()))
		}
		return r.writeFailure(ctx, st, rpcUnregister, 200, RetInternalError, server.NewError(server.ErrInternal, "", "Failed to unregister: "+err.Error()))
	}
	return r.writeOK(ctx, st)
}

// globalView serves GetGlobalView: {"ret", "context_count", "contexts"} with
// the contexts of /global_view.
func (r *Server) globalView(ctx *fasthttp.RequestCtx, st *server.State) int {
	if rerr := noArgs(st); rerr != nil {
		return r.writeFailure(ctx, st, rpcGetGlobalView, 200, RetInvalidParams, rerr)
	}
	cs := r.c.Index().GlobalView().Contexts
	e := &st.Enc
	e.Reset(true)
	e.MapHeader(3)
	e.Str("ret")
	e.Int(RetOK)
	e.Str("context_count")
	e.Uint(uint64(len(cs)))
	e.Str("contexts")
	server.AppendContexts(e, cs)
	server.WriteBody(ctx, 200, true, e.Bytes())
	return RetOK
}

// listServices serves ListServices: {"ret", "count", "services"} with the 11
// export keys of the Python API and HashCheck.
func (r *Server) listServices(ctx *fasthttp.RequestCtx, st *server.State) int {
	if rerr := noArgs(st); rerr != nil {
		return r.writeFailure(ctx, st, rpcListServices, 200, RetInvalidParams, rerr)
	}
	svcs := r.c.Index().Services()
	e := &st.Enc
	e.Reset(true)
	e.MapHeader(3)
	e.Str("ret")
	e.Int(RetOK)
	e.Str("count")
	e.Uint(uint64(len(svcs)))
	e.Str("services")
	server.AppendServices(e, svcs, false, r.c.Index(), nil)
	server.WriteBody(ctx, 200, true, e.Bytes())
	return RetOK
}

// noArgs accepts an empty body or an empty JSON object (methods without
// parameters); any key is unknown_field.
func noArgs(st *server.State) *server.RequestError {
	if len(bytes.TrimSpace(st.Body)) == 0 {
		return nil
	}
	return server.ScanFields(st.Reader(true), "", nil, func([]byte) (int, bool) { return -1, false }, func(int, []byte) {})
}

func (r *Server) writeOK(ctx *fasthttp.RequestCtx, st *server.State) int {
	e := &st.Enc
	e.Reset(true)
	e.MapHeader(1)
	e.Str("ret")
	e.Int(RetOK)
	server.WriteBody(ctx, 200, true, e.Bytes())
	return RetOK
}

// writeFailure answers {"ret": ret, <the method's empty payload>, "error",
// "reason", "field"?, "index"?}: the payload is what the Python API returns on
// failure (hits {}; context_count 0 and contexts []; count 0 and services []),
// the rest names the cause as the HTTP API's error envelope does (the client
// logs it at debug level). It returns ret.
func (r *Server) writeFailure(ctx *fasthttp.RequestCtx, st *server.State, m rpcMethod, status, ret int, e *server.RequestError) int {
	if r.log.Enabled(context.Background(), slog.LevelDebug) {
		r.log.Debug("RPC request failed", "method", m.String(), "ret", ret, "err", e.Error())
	}
	n := 2
	switch m {
	case rpcQuery:
		n++
	case rpcGetGlobalView, rpcListServices:
		n += 2
	}
	reason := server.ReasonOf(e)
	if reason != "" {
		n++
	}
	if e.Field != "" {
		n++
	}
	if e.Index >= 0 {
		n++
	}
	enc := &st.Enc
	enc.Reset(true)
	enc.MapHeader(n)
	enc.Str("ret")
	enc.Int(int64(ret))
	switch m {
	case rpcQuery:
		enc.Str("hits")
		enc.MapHeader(0)
	case rpcGetGlobalView:
		enc.Str("context_count")
		enc.Int(0)
		enc.Str("contexts")
		enc.ArrayHeader(0)
	case rpcListServices:
		enc.Str("count")
		enc.Int(0)
		enc.Str("services")
		enc.ArrayHeader(0)
	}
	enc.Str("error")
	enc.Str(e.Msg)
	if reason != "" {
		enc.Str("reason")
		enc.Str(reason)
	}
	if e.Field != "" {
		enc.Str("field")
		enc.Str(e.Field)
	}
	if e.Index >= 0 {
		enc.Str("index")
		enc.Int(int64(e.Index))
	}
	server.WriteBody(ctx, status, true, enc.Bytes())
	return ret
}

// rpcMetrics count RPC requests by method and ret, and their latency; every
// series is created up front, so the hot path neither formats names nor locks.
type rpcMetrics struct {
	requests [numRPCMethods][len(retCodes) + 1]*metrics.Counter
	latency  [numRPCMethods]*metrics.PrometheusHistogram
}

func (m *rpcMetrics) init(set *metrics.Set) {
	for mt := rpcMethod(0); mt < numRPCMethods; mt++ {
		for i := range m.requests[mt] {
			label := "other"
			if i < len(retCodes) {
				label = strconv.Itoa(retCodes[i])
			}
			m.requests[mt][i] = set.GetOrCreateCounter(fmt.Sprintf(`conductor_rpc_requests_total{method=%q,ret=%q}`, mt.String(), label))
		}
		m.latency[mt] = set.GetOrCreatePrometheusHistogramExt(
			fmt.Sprintf(`conductor_rpc_request_duration_seconds{method=%q}`, mt.String()), server.LatencyBuckets())
	}
}

func (m *rpcMetrics) observe(mt rpcMethod, ret int, start time.Time) {
	i := len(retCodes)
	for j, c := range retCodes {
		if c == ret {
			i = j
			break
		}
	}
	m.requests[mt][i].Inc()
	m.latency[mt].UpdateDuration(start)
}
