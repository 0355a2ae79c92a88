package mooncake

import (
	"errors"

	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/server"
)

// handleRegister serves POST /register.
func (s *Server) handleRegister(ctx *fasthttp.RequestCtx, ep endpoint, st *server.State) {
	json, rerr := server.RequestDialect(ctx, st.Body)
	if rerr != nil {
		s.writeError(ctx, ep, st, json, rerr)
		return
	}
	reg, rerr := st.Registration(server.DialectOf(json))
	if rerr != nil {
		s.writeError(ctx, ep, st, json, rerr)
		return
	}
	if rerr, err := s.c.Register(st.Who, reg); rerr != nil {
		s.writeError(ctx, ep, st, json, rerr)
		return
	} else if err != nil {
		s.writeOpError(ctx, ep, st, json, 500, server.ErrInternal, "Failed to subscribe: "+err.Error())
		return
	}
	e := &st.Enc
	e.Reset(json)
	e.MapHeader(2)
	e.Str("status")
	e.Str("registered successfully")
	e.Str("instance_id")
	e.Str(reg.InstanceID)
	server.WriteBody(ctx, 200, json, e.Bytes())
}

// handleUnregister serves POST /unregister.
func (s *Server) handleUnregister(ctx *fasthttp.RequestCtx, ep endpoint, st *server.State) {
	json, rerr := server.RequestDialect(ctx, st.Body)
	if rerr != nil {
		s.writeError(ctx, ep, st, json, rerr)
		return
	}
	k, rerr := st.UnregisterKey(server.DialectOf(json))
	if rerr != nil {
		s.writeError(ctx, ep, st, json, rerr)
		return
	}
	key := server.ServiceKey(k.InstanceID, k.TenantID, k.DPRank)
	if err := s.c.Unregister(st.Who, k, key); err != nil {
		switch {
		case errors.Is(err, core.ErrNotFound):
			s.writeOpError(ctx, ep, st, json, 404, server.ErrNotFound, "service not found: "+key)
			return
		case errors.Is(err, server.ErrForbidden):
			s.writeError(ctx, ep, st, json, server.StatusError(server.ErrForbidden, 403, err.Error()))
			return
		case errors.Is(err, server.ErrStateWrite):
			s.opts.Logger.Error("unregister not saved", "service", key, "err", err)
			s.writeError(ctx, ep, st, json, server.StatusError(server.ErrStateWrite, 500, err.Error()))
			return
		}
		s.writeOpError(ctx, ep, st, json, 500, server.ErrInternal, "Failed to unregister: "+err.Error())
		return
	}
	e := &st.Enc
	e.Reset(json)
	e.MapHeader(2)
	e.Str("status")
	e.Str("unregistered successfully")
	e.Str("removed_instances")
	e.ArrayHeader(1)
	e.Str(key)
	server.WriteBody(ctx, 200, json, e.Bytes())
}
