package httpd

import (
	"strconv"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
)

// Benchmark fixture: one vLLM sha256_cbor (seed "0") instance, B=16, holding the
// first fixtureBlocks blocks of fixturePrompt on GPU, so prompts of up to
// 8192 tokens are full hits and the 131072-token prompt hits its first 512 blocks.
const (
	fixtureBS     = 16
	fixtureBlocks = 512
	fixtureMax    = 131072
)

type fixture struct {
	s      *Server
	prompt []int32 // fixtureMax tokens
	hashes []uint64
}

func newFixture(tb testing.TB) *fixture { return newFixtureMemo(tb, nil) }

// newFixtureMemo is newFixture with a hash digest memo (nil: off).
func newFixtureMemo(tb testing.TB, memo *hash.Memo) *fixture {
	tb.Helper()
	ix := core.New(core.Options{Logger: quietLogger(), HashMemo: memo})
	reg := newCoreRegistrar(ix)
	s, err := New(ix, reg, Options{Logger: quietLogger()})
	if err != nil {
		tb.Fatal(err)
	}
	f := &fixture{s: s, prompt: seqTokens(fixtureMax, 1000)}
	r := core.Registration{Endpoint: "tcp://127.0.0.1:1", Type: core.PublisherVLLM, ModelName: "m", InstanceID: "engine-a",
		BlockSize: fixtureBS, Profile: cborProfile(tb), ProfileExplicit: true}
	if _, err := reg.Register(r); err != nil {
		tb.Fatal(err)
	}
	f.hashes = chain(tb, cborProfile(tb), f.prompt[:fixtureBlocks*fixtureBS], fixtureBS, "", "")
	apply(tb, reg.sub(tb, "engine-a", "default", 0), storeBatch("GPU", fixtureBS, f.hashes, nil))
	return f
}

// body encodes a /query body for the first n prompt tokens in the given form:
// "msgpack" (int array), "bin" (msgpack LE int32 bin), "json".
func (f *fixture) body(form string, n int) []byte {
	q := obj{"model", "m", "block_size", fixtureBS}
	switch form {
	case "msgpack":
		return mp(append(q, "token_ids", f.prompt[:n]))
	case "bin":
		return mp(append(q, "token_ids", leBin(f.prompt[:n]...)))
	case "json":
		return []byte(jsonEnc(append(q, "token_ids", f.prompt[:n])))
	case "json_hash":
		return []byte(jsonEnc(append(q, "seq_hashes", f.hashes[:n/fixtureBS])))
	case "msgpack_hash":
		return mp(append(q, "seq_hashes", f.hashes[:n/fixtureBS]))
	}
	panic(form)
}

// requestCtx prepares a reusable RequestCtx carrying one POST.
func requestCtx(path, ct string, body []byte) *fasthttp.RequestCtx {
	var req fasthttp.Request
	req.Header.SetMethod("POST")
	req.SetRequestURI(path)
	req.Header.SetContentType(ct)
	req.SetBody(body)
	ctx := &fasthttp.RequestCtx{}
	ctx.Init(&req, nil, nil)
	return ctx
}

// serve runs the handler once on ctx (as the server would, with a fresh response).
func (f *fixture) serve(ctx *fasthttp.RequestCtx) {
	ctx.Response.Reset()
	f.s.Handler(ctx)
}

func ctOf(form string) (string, string) {
	switch form {
	case "json":
		return "/query", "application/json"
	case "json_hash":
		return "/query_by_hash", "application/json"
	case "msgpack_hash":
		return "/query_by_hash", "application/msgpack"
	}
	return "/query", "application/msgpack"
}

func TestFixtureHits(t *testing.T) {
	f := newFixture(t)
	for _, form := range []string{"msgpack", "bin", "json", "json_hash", "msgpack_hash"} {
		for _, n := range []int{1024, 8192, fixtureMax} {
			if form == "json_hash" || form == "msgpack_hash" {
				if n > fixtureBlocks*fixtureBS {
					continue
				}
			}
			path, ct := ctOf(form)
			ctx := requestCtx(path, ct, f.body(form, n))
			f.serve(ctx)
			want := int64(min(n, fixtureBlocks*fixtureBS))
			r := response{status: ctx.Response.StatusCode(), ct: string(ctx.Response.Header.ContentType()), body: ctx.Response.Body()}
			m := decodeMap(t, r)
			var row map[string]any
			if ct == "application/json" {
				row = m["default"].(map[string]any)["engine-a"].(map[string]any)
			} else {
				row = m["instances"].(map[string]any)["engine-a"].(map[string]any)
			}
			if got := row["longest_matched"]; got == nil || got.(interface{ String() string }).String() != strconv.FormatInt(want, 10) {
				t.Fatalf("%s/%d: longest_matched %v, want %d", form, n, got, want)
			}
		}
	}
}
