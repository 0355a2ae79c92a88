package rpc

import (
	"encoding/base64"
	"fmt"
	"testing"
)

// BenchmarkRPCQueryHandler measures the RPC Query handler on a reused
// RequestCtx over the /query fixture (vLLM sha256_cbor, B=16, full hits up to
// 8k tokens, the first 512 blocks at 131k): a msgpack body with token_ids as
// a bin of LE int32s (what the Python client sends), JSON with base64 of them,
// JSON with an array. Compare with
// BenchmarkQueryHandler (msgpack, JSON). Run:
//
//	go test -run '^$' -bench BenchmarkRPCQueryHandler -benchmem ./httpd/rpc/
func BenchmarkRPCQueryHandler(b *testing.B) {
	f := newFixture(b)
	r := New(f.c)
	for _, form := range []string{"msgpack-bin", "base64", "array"} {
		for _, n := range []int{1024, 8192, fixtureMax} {
			b.Run(fmt.Sprintf("%s/tokens=%d", form, n), func(b *testing.B) {
				var tok any = f.prompt[:n]
				if form == "base64" {
					tok = base64.StdEncoding.EncodeToString(leBin(f.prompt[:n]...))
				}
				body := []byte(jsonEnc(obj{"model_name", "m", "block_size", fixtureBS, "token_ids", tok}))
				ct := "application/json"
				if form == "msgpack-bin" {
					body, ct = mp(obj{"token_ids", leBin(f.prompt[:n]...), "model_name", "m", "block_size", fixtureBS}), "application/msgpack"
				}
				ctx := requestCtx("/rpc/Query", ct, body)
				serve := func() {
					ctx.Response.Reset()
					r.Handler(ctx)
				}
				serve()
				if ctx.Response.StatusCode() != 200 {
					b.Fatalf("status %d", ctx.Response.StatusCode())
				}
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					serve()
				}
			})
		}
	}
}
