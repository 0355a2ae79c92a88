package mooncake

import (
	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/httpd/server"
)

// handleQuery serves /query and /query_by_hash. Steady state allocates nothing:
// the request state is pooled, strings are views of the body, the result and
// the response are appended into reused buffers. A query whose context does
// not exist is answered as one without rows, plus the X-Conductor-Miss
// header naming the reason (server.QueryMiss).
func (s *Server) handleQuery(ctx *fasthttp.RequestCtx, ep endpoint, st *server.State) {
	json, rerr, err := s.c.RunQuery(ctx, st, server.DialectJSON, ep == epQueryByHash, ep.String())
	switch {
	case rerr != nil:
		s.writeError(ctx, ep, st, json, rerr)
		return
	case err != nil:
		s.writeOpError(ctx, ep, st, json, 500, server.ErrInternal, "query failed: "+err.Error())
		return
	}
	e := &st.Enc
	e.Reset(json)
	server.AppendQueryResult(e, st.Q.TenantID, &st.Res)
	server.SetMissHeader(ctx, st.Miss)
	server.WriteBody(ctx, 200, json, e.Bytes())
}
