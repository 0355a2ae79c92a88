package httpd

import (
	"runtime"
	"sort"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
)

// appendProfile writes P5: {strategy, algorithm, python_hash_seed, root_digest,
// index_projection} (root_digest: 64 lowercase hex; all zeros for strategies
// without a root).
func appendProfile(e *encoder, p *hash.Profile) {
	e.mapHeader(5)
	e.str("strategy")
	e.str(p.Spec.Strategy)
	e.str("algorithm")
	e.str(p.Spec.Algorithm)
	e.str("python_hash_seed")
	e.str(p.Spec.PythonHashSeed)
	e.str("root_digest")
	e.str(p.RootHex())
	e.str("index_projection")
	e.str(p.Spec.IndexProjection)
}

// handleServices serves GET /services: {"count", "services": [S...]}, S with
// the 11 keys of reference §1.1 plus AdditionalSalt, sorted by service key.
func (s *Server) handleServices(ctx *fasthttp.RequestCtx, ep endpoint, st *reqState) {
	json := !wantsMsgpack(ctx)
	svcs := s.ix.Services()
	e := &st.enc
	e.reset(json)
	e.mapHeader(2)
	e.str("count")
	e.uint(uint64(len(svcs)))
	e.str("services")
	appendServices(e, svcs, true)
	s.writeBody(ctx, 200, json, e.buf)
}

// appendServices writes the registrations as [S...]: the 11 export keys of
// reference §1.1 (Endpoint, ReplayEndpoint, Type, ModelName, LoraName,
// TenantID, InstanceID, BlockSize, DPRank, CacheGroup, HashProfile), plus
// AdditionalSalt when withSalt (the HTTP /services; the Python API has exactly
// the 11).
func appendServices(e *encoder, svcs []core.Registration, withSalt bool) {
	e.arrayHeader(len(svcs))
	for i := range svcs {
		r := &svcs[i]
		if withSalt {
			e.mapHeader(12)
		} else {
			e.mapHeader(11)
		}
		e.str("Endpoint")
		e.str(r.Endpoint)
		e.str("ReplayEndpoint")
		e.str(r.ReplayEndpoint)
		e.str("Type")
		e.str(r.Type.String())
		e.str("ModelName")
		e.str(r.ModelName)
		e.str("LoraName")
		e.str(r.LoraName)
		e.str("TenantID")
		e.str(r.TenantID)
		e.str("InstanceID")
		e.str(r.InstanceID)
		e.str("BlockSize")
		e.int(int64(r.BlockSize))
		e.str("DPRank")
		e.int(int64(r.DPRank))
		e.str("CacheGroup")
		if r.CacheGroup == nil {
			e.null()
		} else {
			e.int(*r.CacheGroup)
		}
		e.str("HashProfile")
		appendProfile(e, &r.Profile)
		if withSalt {
			e.str("AdditionalSalt")
			e.str(r.AdditionalSalt)
		}
	}
}

// handleGlobalView serves GET /global_view: {"context_count", "contexts": [C...]}
// with C = {model_name, lora_name, block_size, tenant_id, prefix_count,
// hash_profile (P5), instances: {id: [ranks ascending]}}. Contexts come sorted
// by (tenant, model, lora, block size) and instances by id, for stable output.
func (s *Server) handleGlobalView(ctx *fasthttp.RequestCtx, ep endpoint, st *reqState) {
	json := !wantsMsgpack(ctx)
	cs := s.ix.GlobalView().Contexts // sorted by context key
	e := &st.enc
	e.reset(json)
	e.mapHeader(2)
	e.str("context_count")
	e.uint(uint64(len(cs)))
	e.str("contexts")
	appendContexts(e, cs)
	s.writeBody(ctx, 200, json, e.buf)
}

// appendContexts writes [C...] of handleGlobalView (shared with the RPC
// GetGlobalView).
func appendContexts(e *encoder, cs []core.ContextView) {
	e.arrayHeader(len(cs))
	var ids []string
	for i := range cs {
		c := &cs[i]
		e.mapHeader(7)
		e.str("model_name")
		e.str(c.ModelName)
		e.str("lora_name")
		e.str(c.LoraName)
		e.str("block_size")
		e.int(int64(c.BlockSize))
		e.str("tenant_id")
		e.str(c.TenantID)
		e.str("prefix_count")
		e.uint(uint64(c.PrefixCount))
		e.str("hash_profile")
		appendProfile(e, &c.Profile)
		e.str("instances")
		ids = ids[:0]
		for id := range c.Instances {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		e.mapHeader(len(ids))
		for _, id := range ids {
			ranks := c.Instances[id] // ascending
			e.str(id)
			e.arrayHeader(len(ranks))
			for _, r := range ranks {
				e.int(int64(r))
			}
		}
	}
}

// handleHealth serves GET /health: liveness, build info and the active hash
// backend: {"status":"ok","version","go","hash_backend","cpu_features":[...],
// "uptime_s"}; while Options.Ready fails, 503 with "status":"not_ready" and
// the error envelope's "error" and "reason" before the same keys.
func (s *Server) handleHealth(ctx *fasthttp.RequestCtx, ep endpoint, st *reqState) {
	json := !wantsMsgpack(ctx)
	be := hash.Backend()
	e := &st.enc
	e.reset(json)
	var notReady error
	if s.opts.Ready != nil {
		notReady = s.opts.Ready()
	}
	code := 200
	if notReady != nil {
		code = 503
		e.mapHeader(8)
		e.str("status")
		e.str("not_ready")
		e.str("error")
		e.str(notReady.Error())
		e.str("reason")
		e.str(ReasonOf(ErrNotReady))
	} else {
		e.mapHeader(6)
		e.str("status")
		e.str("ok")
	}
	e.str("version")
	e.str(s.opts.Version)
	e.str("go")
	e.str(runtime.Version())
	e.str("hash_backend")
	e.str(be.Name)
	e.str("cpu_features")
	e.arrayHeader(len(be.Features))
	for _, f := range be.Features {
		e.str(f)
	}
	e.str("uptime_s")
	e.float(float64(time.Since(s.start).Milliseconds()) / 1000)
	s.writeBody(ctx, code, json, e.buf)
}
