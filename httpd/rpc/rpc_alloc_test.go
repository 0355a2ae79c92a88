//go:build !race

package rpc

import (
	"encoding/base64"
	"testing"
)

// TestRPCQueryAllocs proves the RPC Query path allocates nothing in steady
// state, with token_ids as a msgpack bin of little-endian int32s (the Python
// client's form), as base64 of them in JSON and as a JSON array,
// through the real handler on a reused fasthttp.RequestCtx (routing, pooled
// state, parsing, base64 decoding, core.Index.Query, response, metrics).
func TestRPCQueryAllocs(t *testing.T) {
	f := newFixture(t)
	r := New(f.c)
	for _, form := range []string{"msgpack-bin", "base64", "array"} {
		for _, n := range []int{1024, 8192} {
			q := obj{"model_name", "m", "block_size", fixtureBS}
			if form == "base64" {
				q = append(q, "token_ids", base64.StdEncoding.EncodeToString(leBin(f.prompt[:n]...)))
			} else {
				q = append(q, "token_ids", f.prompt[:n])
			}
			ctx := requestCtx("/rpc/Query", "application/json", []byte(jsonEnc(q)))
			if form == "msgpack-bin" {
				ctx = requestCtx("/rpc/Query", "application/msgpack", mp(obj{"token_ids", leBin(f.prompt[:n]...), "model_name", "m", "block_size", fixtureBS}))
			}
			serve := func() {
				ctx.Response.Reset()
				r.Handler(ctx)
			}
			serve() // warm: grows pooled buffers
			serve()
			m := decodeMap(t, response{status: ctx.Response.StatusCode(), ct: string(ctx.Response.Header.ContentType()), body: ctx.Response.Body()})
			if ctx.Response.StatusCode() != 200 || m["ret"] != jsonNumber(0) {
				t.Fatalf("%s: %d %s", form, ctx.Response.StatusCode(), ctx.Response.Body())
			}
			if a := testing.AllocsPerRun(200, serve); a != 0 {
				t.Errorf("%s/%d tokens: %.1f allocs per request, want 0", form, n, a)
			}
		}
	}
}
