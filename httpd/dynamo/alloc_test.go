//go:build !race

package dynamo

import (
	"testing"

	"github.com/seed-c7a81618/conductor/core"
)

// TestDynamoQueryAllocs: the Dynamo /query and /query_by_hash handler path
// (routing, pooled state, parsing, the lock-free indexer lookup, the query,
// the score response, metrics) allocates nothing in steady state.
func TestDynamoQueryAllocs(t *testing.T) {
	ix := core.New(core.Options{Logger: quietLogger()})
	reg := newCoreRegistrar(ix)
	d, err := newDynamo(ix, reg, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	for rank := uint32(0); rank < 2; rank++ {
		if err := d.Register(Worker{InstanceID: 1, DPRank: rank, Endpoint: "tcp://127.0.0.1:" + string(rune('1'+rank)), ModelName: "m", BlockSize: 16}); err != nil {
			t.Fatal(err)
		}
	}
	toks := seqTokens(8192, 1)
	apply(t, reg.sub(t, "1", "default", 0), engineStore("", 16, seqHashesFor(512), 0, false, toks))
	for _, c := range []struct{ path, body string }{
		{"/query", `{"token_ids":` + jsonEnc(toks) + `,"model_name":"m"}`},
		{"/query_by_hash", `{"block_hashes":` + jsonEnc(localHashes(toks, 16)) + `,"model_name":"m","routing_group":"default"}`},
	} {
		ctx := requestCtx(c.path, "application/json", []byte(c.body))
		d.Handler(ctx)
		d.Handler(ctx)
		if ctx.Response.StatusCode() != 200 {
			t.Fatalf("%s: %d %s", c.path, ctx.Response.StatusCode(), ctx.Response.Body())
		}
		if a := testing.AllocsPerRun(100, func() { d.Handler(ctx) }); a != 0 {
			t.Errorf("%s: %.1f allocs per request, want 0", c.path, a)
		}
	}
}

func seqHashesFor(n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(i) + 1000
	}
	return out
}
