package mooncake

import (
	"strconv"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/hash"
	"github.com/seed-c7a81618/conductor/httpd/internal/apitest"
)

// fixture is the Mooncake API over apitest's /query fixture: one vLLM
// sha256_cbor (seed "0") instance, B=16, holding the first fixtureBlocks
// blocks of the prompt on GPU, so prompts of up to 8192 tokens are full hits
// and the 131072-token prompt hits its first 512 blocks.
const (
	fixtureBS     = apitest.FixtureBS
	fixtureBlocks = apitest.FixtureBlocks
	fixtureMax    = apitest.FixtureMax
)

type fixture struct {
	s      *Server
	prompt []int32 // fixtureMax tokens
	hashes []uint64
	fx     *apitest.Fixture
}

func newFixture(tb testing.TB) *fixture { return newFixtureMemo(tb, nil) }

// newFixtureMemo is newFixture with a hash digest memo (nil: off).
func newFixtureMemo(tb testing.TB, memo *hash.Memo) *fixture {
	tb.Helper()
	fx := apitest.NewFixture(tb, memo)
	s, err := newServer(fx.Ix, fx.Reg, Options{Logger: quietLogger()})
	if err != nil {
		tb.Fatal(err)
	}
	return &fixture{s: s, prompt: fx.Prompt, hashes: fx.Hashes, fx: fx}
}

// body encodes a /query body for the first n prompt tokens in the given form
// (apitest.Fixture.Body).
func (f *fixture) body(form string, n int) []byte { return f.fx.Body(form, n) }

// serve runs the handler once on ctx (as the server would, with a fresh response).
func (f *fixture) serve(ctx *fasthttp.RequestCtx) {
	ctx.Response.Reset()
	f.s.Handler(ctx)
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
