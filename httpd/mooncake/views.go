package mooncake

import (
	"runtime"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
	"github.com/seed-c7a81618/conductor/httpd/server"
)

// handleServices serves GET /services: {"count", "services": [S...]}, S with
// the 11 keys of reference §1.1, HashCheck, AdditionalSalt, Source and
// Connection, sorted by service key.
func (s *Server) handleServices(ctx *fasthttp.RequestCtx, st *server.State) {
	json := !server.WantsMsgpack(ctx)
	svcs := s.ix.Services()
	var conns map[core.ServiceKey]server.Connection
	if s.opts.Connections != nil {
		conns = s.opts.Connections()
	}
	e := &st.Enc
	e.Reset(json)
	e.MapHeader(2)
	e.Str("count")
	e.Uint(uint64(len(svcs)))
	e.Str("services")
	server.AppendServices(e, svcs, true, s.ix, conns)
	server.WriteBody(ctx, 200, json, e.Bytes())
}

// handleGlobalView serves GET /global_view: {"context_count", "contexts": [C...]}
// with C = {model_name, lora_name, block_size, tenant_id, prefix_count,
// hash_profile (P5), instances: {id: [ranks ascending]}}. Contexts come sorted
// by (tenant, model, lora, block size) and instances by id, for stable output.
func (s *Server) handleGlobalView(ctx *fasthttp.RequestCtx, st *server.State) {
	json := !server.WantsMsgpack(ctx)
	cs := s.ix.GlobalView().Contexts // sorted by context key
	e := &st.Enc
	e.Reset(json)
	e.MapHeader(2)
	e.Str("context_count")
	e.Uint(uint64(len(cs)))
	e.Str("contexts")
	server.AppendContexts(e, cs)
	server.WriteBody(ctx, 200, json, e.Bytes())
}

// livezBody is GET /livez's answer: the process serves HTTP (a liveness
// probe; /health is the readiness one).
var livezBody = []byte(`{"status":"alive"}`)

// handleHealth serves GET /health: liveness, build info and the active hash
// backend: {"status":"ok","version","go","hash_backend","cpu_features":[...],
// "uptime_s"}; while Options.Ready fails, 503 with "status":"not_ready" and
// the error envelope's "error" and "reason" before the same keys.
func (s *Server) handleHealth(ctx *fasthttp.RequestCtx, st *server.State) {
	json := !server.WantsMsgpack(ctx)
	be := hash.Backend()
	e := &st.Enc
	e.Reset(json)
	var notReady error
	if s.opts.Ready != nil {
		notReady = s.opts.Ready()
	}
	code := 200
	if notReady != nil {
		code = 503
		e.MapHeader(8)
		e.Str("status")
		e.Str("not_ready")
		e.Str("error")
		e.Str(notReady.Error())
		e.Str("reason")
		e.Str(server.ReasonOf(server.ErrNotReady))
	} else {
		e.MapHeader(6)
		e.Str("status")
		e.Str("ok")
	}
	e.Str("version")
	e.Str(s.opts.Version)
	e.Str("go")
	e.Str(runtime.Version())
	e.Str("hash_backend")
	e.Str(be.Name)
	e.Str("cpu_features")
	e.ArrayHeader(len(be.Features))
	for _, f := range be.Features {
		e.Str(f)
	}
	e.Str("uptime_s")
	e.Float(float64(time.Since(s.start).Milliseconds()) / 1000)
	server.WriteBody(ctx, code, json, e.Bytes())
}
