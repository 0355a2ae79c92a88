//go:build !race

package mooncake

import (
	"testing"

	"github.com/seed-c7a81618/conductor/hash"
)

// TestQueryHandlerAllocs proves the /query and /query_by_hash handler path
// allocates nothing in steady state, in both dialects, through the real
// handler on a reused fasthttp.RequestCtx (routing, pooled state, parsing,
// core.Index.Query, response encoding, metrics).
func TestQueryHandlerAllocs(t *testing.T) {
	t.Run("memo=off", func(t *testing.T) { testQueryHandlerAllocs(t, newFixture(t)) })
	t.Run("memo=on", func(t *testing.T) { testQueryHandlerAllocs(t, newFixtureMemo(t, hash.NewMemo(1<<20))) })
}

func testQueryHandlerAllocs(t *testing.T, f *fixture) {
	for _, form := range []string{"msgpack", "bin", "json", "msgpack_hash", "json_hash"} {
		for _, n := range []int{1024, 8192} {
			path, ct := ctOf(form)
			ctx := requestCtx(path, ct, f.body(form, n))
			f.serve(ctx) // warm: grows pooled buffers, creates metric slots
			f.serve(ctx)
			if ctx.Response.StatusCode() != 200 {
				t.Fatalf("%s: status %d: %s", form, ctx.Response.StatusCode(), ctx.Response.Body())
			}
			if a := testing.AllocsPerRun(200, func() { f.serve(ctx) }); a != 0 {
				t.Errorf("%s/%d tokens: %.1f allocs per request, want 0", form, n, a)
			}
		}
	}
}

// TestQueryErrorPathBounded: a rejected query allocates only its error value
// (no per-element or per-byte garbage).
func TestQueryErrorPathBounded(t *testing.T) {
	f := newFixture(t)
	ctx := requestCtx("/query", "application/msgpack", mp(obj{"model", 5, "block_size", 16, "token_ids", seqTokens(4096, 0)}))
	f.serve(ctx)
	if a := testing.AllocsPerRun(100, func() { f.serve(ctx) }); a > 3 {
		t.Errorf("error path: %.1f allocs", a)
	}
}
