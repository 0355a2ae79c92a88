package httpd

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/core"
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

// RPCServer serves the Python client's RPC surface (package doc, "RPC") on a
// listener of its own, over the Server's index, registrar, options, pooled
// request state and metric set: the same parsers and validation as the HTTP
// API, in the RPC dialect. Create it with NewRPC; it is safe for concurrent use.
type RPCServer struct {
	s   *Server
	srv *fasthttp.Server
	m   rpcMetrics
	lns listeners
}

// NewRPC returns the RPC surface of s. Its metrics join s.Metrics().
func NewRPC(s *Server) *RPCServer {
	r := &RPCServer{s: s, lns: listeners{lim: s.lim}}
	r.m.init(s.m.set)
	r.srv = newFastServer(r.Handler, r.errorHandler, &s.opts)
	r.srv.Name = "conductor-rpc"
	return r
}

// Serve accepts connections on ln until Shutdown; it returns nil after
// Shutdown. Connections and bodies in flight count against the Server's
// Limiter.
func (r *RPCServer) Serve(ln net.Listener) error { return r.lns.serve(r.srv, ln) }

// Shutdown stops accepting connections, closes the ones not inside a request
// and waits for in-flight requests to finish (or ctx to expire, returning
// ctx.Err()).
func (r *RPCServer) Shutdown(ctx context.Context) error { return r.lns.shutdown(r.srv, ctx) }

// rpcClass is the access class of an RPC method: Register and Unregister
// need a registering identity, GetGlobalView and ListServices the admin,
// Query the query token when one is set.
func (m rpcMethod) class() accessClass {
	switch m {
	case rpcQuery:
		return accessQuery
	case rpcRegister, rpcUnregister:
		return accessMutate
	case rpcGetGlobalView, rpcListServices:
		return accessInspect
	}
	return accessPublic
}

// Handler is the fasthttp request handler of the RPC surface (exported for
// embedding and tests).
func (r *RPCServer) Handler(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	end, ok := track(ctx)
	if !ok {
		return
	}
	defer end()
	s := r.s
	m := rpcRoute(ctx.Path())
	st := s.pool.Get().(*reqState)
	defer s.putState(st)
	st.scratch = st.scratch[:0]

	var ret int
	var who Principal
	var rerr *RequestError
	if m != rpcOther && ctx.IsPost() {
		if who, rerr = s.opts.Access.authorize(ctx, m.class()); rerr == nil {
			st.who = who
			st.in, rerr = s.readBody(ctx, st)
		}
	}
	switch {
	case rerr != nil:
		// A body the request itself makes unusable (too large, cut short) is
		// the caller's parameters; auth and a full budget are not.
		code := RetRPCFail
		if s := rerr.status(); s == 400 || s == 413 {
			code = RetInvalidParams
		}
		ret = r.writeFailure(ctx, st, m, rerr.status(), code, rerr)
	case m == rpcOther:
		ret = r.writeFailure(ctx, st, m, 404, RetRPCFail,
			reqErr(ErrNotFound, "", "unknown RPC method; want POST /rpc/{Query,Register,Unregister,GetGlobalView,ListServices}"))
	case !ctx.IsPost():
		ctx.Response.Header.Set("Allow", "POST")
		ret = r.writeFailure(ctx, st, m, 405, RetRPCFail, reqErr(ErrMethodNotAllowed, "", "RPC methods take POST"))
	case m == rpcQuery:
		ret = r.query(ctx, st)
	case m == rpcRegister:
		ret = r.register(ctx, st)
	case m == rpcUnregister:
		ret = r.unregister(ctx, st)
	case m == rpcGetGlobalView:
		ret = r.globalView(ctx, st)
	case m == rpcListServices:
		ret = r.listServices(ctx, st)
	}
	r.m.observe(m, ret, start)
}

// errorHandler answers requests fasthttp could not read: 413 (ret
// INVALID_PARAMS) for an oversized body, 400 (ret RPC_FAIL) otherwise.
func (r *RPCServer) errorHandler(ctx *fasthttp.RequestCtx, err error) {
	st := r.s.pool.Get().(*reqState)
	defer r.s.putState(st)
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		ret := r.writeFailure(ctx, st, rpcOther, 413, RetInvalidParams, &RequestError{Err: ErrLimitExceeded, Index: noIndex,
			Msg: "request body exceeds " + strconv.Itoa(r.s.opts.MaxBodyBytes) + " bytes"})
		r.m.observe(rpcOther, ret, ctx.Time())
		return
	}
	ret := r.writeFailure(ctx, st, rpcOther, 400, RetRPCFail, &RequestError{Err: ErrInvalidRequest, Index: noIndex,
		Msg: "malformed HTTP request"})
	r.m.observe(rpcOther, ret, ctx.Time())
}

// query serves Query: {"ret": 0, "hits": {id: row}} (appendInstanceRows).
// The request is JSON, or msgpack when its Content-Type says so (the same
// keys; token_ids then also as a bin of little-endian int32s, viewed in place
// when aligned: what the Python client sends). Steady state allocates nothing
// (TestRPCQueryAllocs).
func (r *RPCServer) query(ctx *fasthttp.RequestCtx, st *reqState) int {
	s := r.s
	_, rerr, err := s.runQuery(ctx, st, dialectRPC, false, "/rpc/Query")
	switch {
	case rerr != nil:
		return r.writeFailure(ctx, st, rpcQuery, 200, RetInvalidParams, rerr)
	case err != nil:
		return r.writeFailure(ctx, st, rpcQuery, 200, RetInternalError, reqErr(ErrInternal, "", "query failed: "+err.Error()))
	}
	e := &st.enc
	e.reset(true)
	e.mapHeader(2)
	e.str("ret")
	e.int(RetOK)
	e.str("hits")
	appendInstanceRows(e, st.res.Instances)
	s.writeBody(ctx, 200, true, e.buf)
	return RetOK
}

// register serves Register: decodeRegistration in the RPC dialect, then the
// Registrar. Refusals are INVALID_PARAMS, other failures INTERNAL_ERROR.
func (r *RPCServer) register(ctx *fasthttp.RequestCtx, st *reqState) int {
	s := r.s
	reg, rerr := decodeRegistration(st.reader(st.in, true), dialectRPC, DecodeOptions{})
	if rerr != nil {
		return r.writeFailure(ctx, st, rpcRegister, 200, RetInvalidParams, rerr)
	}
	rerr, err := s.register(st.who, reg)
	switch {
	case rerr != nil:
		return r.writeFailure(ctx, st, rpcRegister, 200, RetInvalidParams, rerr)
	case err != nil:
		return r.writeFailure(ctx, st, rpcRegister, 200, RetInternalError, reqErr(ErrInternal, "", "Failed to subscribe: "+err.Error()))
	}
	return r.writeOK(ctx, st)
}

// unregister serves Unregister: an unknown subscription is SERVICE_NOT_FOUND.
func (r *RPCServer) unregister(ctx *fasthttp.RequestCtx, st *reqState) int {
	s := r.s
	k, rerr := decodeUnregister(st.reader(st.in, true), dialectRPC)
	if rerr != nil {
		return r.writeFailure(ctx, st, rpcUnregister, 200, RetInvalidParams, rerr)
	}
	key := serviceKey(k.InstanceID, k.TenantID, k.DPRank)
	if err := s.unregister(st.who, k, key); err != nil {
		switch {
		case errors.Is(err, core.ErrNotFound):
			return r.writeFailure(ctx, st, rpcUnregister, 200, RetServiceNotFound, reqErr(ErrNotFound, "", "service not found: "+key))
		case errors.Is(err, ErrForbidden):
			return r.writeFailure(ctx, st, rpcUnregister, 403, RetRPCFail, &RequestError{Err: ErrForbidden, Index: noIndex, Status: 403, Msg: err.Error()})
		case errors.Is(err, ErrStateWrite):
			return r.writeFailure(ctx, st, rpcUnregister, 500, RetInternalError, &RequestError{Err: ErrStateWrite, Index: noIndex, Status: 500, Msg: err.Error()})
		}
		return r.writeFailure(ctx, st, rpcUnregister, 200, RetInternalError, reqErr(ErrInternal, "", "Failed to unregister: "+err.Error()))
	}
	return r.writeOK(ctx, st)
}

// globalView serves GetGlobalView: {"ret", "context_count", "contexts"} with
// the contexts of /global_view.
func (r *RPCServer) globalView(ctx *fasthttp.RequestCtx, st *reqState) int {
	if rerr := noArgs(st, st.in); rerr != nil {
		return r.writeFailure(ctx, st, rpcGetGlobalView, 200, RetInvalidParams, rerr)
	}
	cs := r.s.ix.GlobalView().Contexts
	e := &st.enc
	e.reset(true)
	e.mapHeader(3)
	e.str("ret")
	e.int(RetOK)
	e.str("context_count")
	e.uint(uint64(len(cs)))
	e.str("contexts")
	appendContexts(e, cs)
	r.s.writeBody(ctx, 200, true, e.buf)
	return RetOK
}

// listServices serves ListServices: {"ret", "count", "services"} with the 11
// export keys of the Python API.
func (r *RPCServer) listServices(ctx *fasthttp.RequestCtx, st *reqState) int {
	if rerr := noArgs(st, st.in); rerr != nil {
		return r.writeFailure(ctx, st, rpcListServices, 200, RetInvalidParams, rerr)
	}
	svcs := r.s.ix.Services()
	e := &st.enc
	e.reset(true)
	e.mapHeader(3)
	e.str("ret")
	e.int(RetOK)
	e.str("count")
	e.uint(uint64(len(svcs)))
	e.str("services")
	appendServices(e, svcs, false)
	r.s.writeBody(ctx, 200, true, e.buf)
	return RetOK
}

// noArgs accepts an empty body or an empty JSON object (methods without
// parameters); any key is unknown_field.
func noArgs(st *reqState, body []byte) *RequestError {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	return scanFields(st.reader(body, true), "", nil, func([]byte) (int, bool) { return -1, false }, func(int, []byte) {})
}

func (r *RPCServer) writeOK(ctx *fasthttp.RequestCtx, st *reqState) int {
	e := &st.enc
	e.reset(true)
	e.mapHeader(1)
	e.str("ret")
	e.int(RetOK)
	r.s.writeBody(ctx, 200, true, e.buf)
	return RetOK
}

// writeFailure answers {"ret": ret, <the method's empty payload>, "error",
// "reason", "field"?, "index"?}: the payload is what the Python API returns on
// failure (hits {}; context_count 0 and contexts []; count 0 and services []),
// the rest names the cause as the HTTP API's error envelope does (the client
// logs it at debug level). It returns ret.
func (r *RPCServer) writeFailure(ctx *fasthttp.RequestCtx, st *reqState, m rpcMethod, status, ret int, e *RequestError) int {
	if r.s.opts.Logger.Enabled(context.Background(), slog.LevelDebug) {
		r.s.opts.Logger.Debug("RPC request failed", "method", m.String(), "ret", ret, "err", e.Error())
	}
	n := 2
	switch m {
	case rpcQuery:
		n++
	case rpcGetGlobalView, rpcListServices:
		n += 2
	}
	reason := ReasonOf(e)
	if reason != "" {
		n++
	}
	if e.Field != "" {
		n++
	}
	if e.Index >= 0 {
		n++
	}
	enc := &st.enc
	enc.reset(true)
	enc.mapHeader(n)
	enc.str("ret")
	enc.int(int64(ret))
	switch m {
	case rpcQuery:
		enc.str("hits")
		enc.mapHeader(0)
	case rpcGetGlobalView:
		enc.str("context_count")
		enc.int(0)
		enc.str("contexts")
		enc.arrayHeader(0)
	case rpcListServices:
		enc.str("count")
		enc.int(0)
		enc.str("services")
		enc.arrayHeader(0)
	}
	enc.str("error")
	enc.str(e.Msg)
	if reason != "" {
		enc.str("reason")
		enc.str(reason)
	}
	if e.Field != "" {
		enc.str("field")
		enc.str(e.Field)
	}
	if e.Index >= 0 {
		enc.str("index")
		enc.int(int64(e.Index))
	}
	r.s.writeBody(ctx, status, true, enc.buf)
	return ret
}

// rpcTokens decodes token_ids given as a base64 string (RFC 4648 standard
// alphabet, padded) of little-endian int32s: the Python client sends
// base64(array('i', ids).tobytes()). The bytes are decoded into *b64 and viewed
// in place where the host allows, else copied into *tokBuf (leInt32s). A
// length that is not a multiple of 4 bytes, or bad base64, is invalid_value;
// more than max tokens is out_of_range.
func rpcTokens(v *value, b64 *[]byte, tokBuf *[]int32, field string, max int) ([]int32, *RequestError) {
	if v.kind != kindStr {
		return nil, reqErr(ErrInvalidType, field, field+" must be an array or a base64 string")
	}
	n := base64.StdEncoding.DecodedLen(len(v.s))
	if n/4 > max+1 {
		return nil, reqErr(ErrOutOfRange, field, field+" has more than "+strconv.Itoa(max)+" elements")
	}
	buf := *b64
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	k, err := base64.StdEncoding.Decode(buf, v.s)
	*b64 = buf[:0]
	switch {
	case err != nil:
		return nil, reqErr(ErrInvalidValue, field, field+" is not valid base64: "+err.Error())
	case k%4 != 0:
		return nil, reqErr(ErrInvalidValue, field, field+" must decode to a multiple of 4 bytes (little-endian int32s)")
	case k/4 > max:
		return nil, reqErr(ErrOutOfRange, field, field+" has more than "+strconv.Itoa(max)+" elements")
	}
	return leInt32s(tokBuf, buf[:k]), nil
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
			fmt.Sprintf(`conductor_rpc_request_duration_seconds{method=%q}`, mt.String()), latencyBuckets)
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
