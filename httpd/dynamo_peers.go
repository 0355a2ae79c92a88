package httpd

import (
	"fmt"

	"github.com/valyala/fasthttp"
)

// Dynamo peer list: POST /register_peer, /deregister_peer, GET /peers (used
// by recovery at start; peers never sync continuously).

func checkPeerURL(u string) error {
	if len(u) < 8 || (u[:7] != "http://" && (len(u) < 9 || u[:8] != "https://")) {
		return fmt.Errorf("peer %q: want an http:// or https:// URL", u)
	}
	return nil
}

func (d *Dynamo) handlePeer(ctx *fasthttp.RequestCtx, st *dynState, add bool) {
	r, ok := d.jsonBody(ctx, st)
	if !ok {
		return
	}
	var v value
	var seen [1]bool
	if fe := scanFields(r, "", seen[:], func(key []byte) (int, bool) {
		if string(key) == "url" {
			return 0, false
		}
		return -1, true
	}, func(int, []byte) { v = r.value() }); fe != nil {
		d.reqError(ctx, st, 400, fe)
		return
	}
	if !seen[0] {
		d.reqError(ctx, st, 400, reqErr(ErrMissing, "url", "url is required"))
		return
	}
	b, fe := strField(&v, "url")
	if fe != nil {
		d.reqError(ctx, st, 400, fe)
		return
	}
	u := string(b)
	if err := checkPeerURL(u); err != nil {
		d.reqError(ctx, st, 400, reqErr(ErrInvalidValue, "url", err.Error()))
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
		d.opError(ctx, st, 404, ErrNotFound, "peer not registered: "+u)
		return
	}
	d.mu.Unlock()
	if add {
		d.ok(ctx, st, 201)
	} else {
		d.ok(ctx, st, 200)
	}
}

func (d *Dynamo) handlePeers(ctx *fasthttp.RequestCtx, st *dynState) {
	peers := d.Peers()
	e := &st.enc
	e.reset(true)
	e.arrayHeader(len(peers))
	for _, p := range peers {
		e.str(p)
	}
	d.body(ctx, 200, e.buf)
}
