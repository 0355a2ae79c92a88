package dynamo

import (
	"fmt"

	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/httpd/server"
)

// Dynamo peer list: POST /register_peer, /deregister_peer, GET /peers (used
// by recovery at start; peers never sync continuously).

func checkPeerURL(u string) error {
	if len(u) < 8 || (u[:7] != "http://" && (len(u) < 9 || u[:8] != "https://")) {
		return fmt.Errorf("peer %q: want an http:// or https:// URL", u)
	}
	return nil
}

func (d *Server) handlePeer(ctx *fasthttp.RequestCtx, st *server.State, add bool) {
	r, ok := d.jsonBody(ctx, st)
	if !ok {
		return
	}
	var v server.Value
	var seen [1]bool
	if fe := server.ScanFields(r, "", seen[:], func(key []byte) (int, bool) {
		if string(key) == "url" {
			return 0, false
		}
		return -1, true
	}, func(int, []byte) { v = r.Value() }); fe != nil {
		d.reqError(ctx, st, 400, fe)
		return
	}
	if !seen[0] {
		d.reqError(ctx, st, 400, server.NewError(server.ErrMissing, "url", "url is required"))
		return
	}
	b, fe := server.StrField(&v, "url")
	if fe != nil {
		d.reqError(ctx, st, 400, fe)
		return
	}
	u := string(b)
	if err := checkPeerURL(u); err != nil {
		d.reqError(ctx, st, 400, server.NewError(server.ErrInvalidValue, "url", err.Error()))
		return
	}
	d.mu.Lock()
	idx := -1
	for i, p := range d.peers {
		if p == u {
			idx = i
		}
	}
	switch {
	case add && idx < 0:
		d.peers = append(d.peers, u)
	case !add && idx >= 0:
		d.peers = append(d.peers[:idx], d.peers[idx+1:]...)
	case !add:
		d.mu.Unlock()
		d.opError(ctx, st, 404, server.ErrNotFound, "peer not registered: "+u)
		return
	}
	d.mu.Unlock()
	if add {
		d.ok(ctx, st, 201)
	} else {
		d.ok(ctx, st, 200)
	}
}

func (d *Server) handlePeers(ctx *fasthttp.RequestCtx, st *server.State) {
	peers := d.Peers()
	e := &st.Enc
	e.Reset(true)
	e.ArrayHeader(len(peers))
	for _, p := range peers {
		e.Str(p)
	}
	d.body(ctx, 200, e.Bytes())
}
