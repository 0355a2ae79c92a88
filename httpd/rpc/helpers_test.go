package rpc

import (
	"errors"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/internal/apitest"
	"github.com/seed-c7a81618/conductor/httpd/mooncake"
	"github.com/seed-c7a81618/conductor/httpd/server"
)

// The shared test helpers (package apitest) under the names these tests use.
type (
	Options       = server.Options
	obj           = apitest.Obj
	rawJSON       = apitest.RawJSON
	coreRegistrar struct{ *apitest.Registrar }
)

var (
	mp          = apitest.MP
	jsonEnc     = apitest.JSONEnc
	with        = apitest.With
	drop        = apitest.Drop
	canonJSON   = apitest.CanonJSON
	deepEqual   = apitest.DeepEqual
	cborSpec    = apitest.CborSpec
	seqTokens   = apitest.SeqTokens
	trunc       = apitest.Trunc
	keys        = apitest.Keys
	leBin       = apitest.LeBin
	baseReg     = apitest.BaseReg
	quietLogger = apitest.QuietLogger
	requestCtx  = apitest.RequestCtx
)

const (
	adminTok = apitest.AdminTok
	queryTok = apitest.QueryTok
	teamATok = apitest.TeamATok
)

func newCoreRegistrar(ix *core.Index) *coreRegistrar { return &coreRegistrar{apitest.NewRegistrar(ix)} }

// swapRegistrar forwards to a Registrar a test may replace.
type swapRegistrar struct{ server.Registrar }

// failingRegistrar fails like a ZMQ start failure.
type failingRegistrar struct{ *coreRegistrar }

func (f failingRegistrar) Register(core.Registration) (bool, error) {
	return false, errors.New("failed to start ZMQ client: invalid endpoint")
}

// testEnv is the Mooncake API on a loopback port, beside which the RPC
// surface runs over the same Core.
type testEnv struct {
	s      *mooncake.Server
	c      *server.Core
	ix     *core.Index
	reg    *coreRegistrar
	addr   string
	client *fasthttp.HostClient
}

func startEnv(t testing.TB, opts Options, copts core.Options) *testEnv {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	if copts.Logger == nil {
		copts.Logger = opts.Logger
	}
	ix := core.New(copts)
	reg := newCoreRegistrar(ix)
	c, err := server.New(ix, reg, opts)
	if err != nil {
		t.Fatal(err)
	}
	env := &testEnv{s: mooncake.New(c), c: c, ix: ix, reg: reg}
	env.addr, env.client = apitest.Serve(t, env.s)
	return env
}

// do sends one request; ct "" sends no Content-Type header.
func (e *testEnv) do(t testing.TB, method, path, ct string, body []byte, hdr ...string) response {
	t.Helper()
	return responseOf(apitest.Do(t, e.client, e.addr, method, path, ct, body, hdr...))
}

func (e *testEnv) postMP(t testing.TB, path string, body []byte) response {
	t.Helper()
	return e.do(t, "POST", path, "application/msgpack", body)
}

// tieredEnv is apitest's tiered example on a Mooncake API (see the
// mooncake package's TestQueryTieredResults).
func tieredEnv(t *testing.T) (*testEnv, []int32, []uint64) {
	env := startEnv(t, Options{}, core.Options{})
	for _, body := range apitest.TieredRegs() {
		if resp := env.postMP(t, "/register", body); resp.status != 200 {
			t.Fatalf("register: %d %s", resp.status, canon(t, resp))
		}
	}
	tokens, h := apitest.TieredApply(t, env.reg.Registrar)
	return env, tokens, h
}

const tieredMsgpack = apitest.TieredMsgpack

type response struct {
	status int
	ct     string
	body   []byte
	allow  string
	miss   string // X-Conductor-Miss
}

func responseOf(r apitest.Response) response {
	return response{r.Status, r.CT, r.Body, r.Allow, r.Miss}
}

// canon decodes a response into a canonical JSON text (apitest.Canon).
func canon(t testing.TB, r response) string {
	t.Helper()
	return apitest.Canon(t, r.ct, r.body)
}

// decodeMap decodes a response into a generic map.
func decodeMap(t testing.TB, r response) map[string]any {
	t.Helper()
	return apitest.DecodeMap(t, r.ct, r.body)
}

// checkError asserts the error envelope of r.
func checkError(t testing.TB, r response, status int, reason, field string, index int) {
	t.Helper()
	apitest.CheckError(t, r.status, r.ct, r.body, status, reason, field, index)
}

// fixture is the RPC surface's view of apitest's /query fixture.
const (
	fixtureBS  = apitest.FixtureBS
	fixtureMax = apitest.FixtureMax
)

type fixture struct {
	c      *server.Core
	prompt []int32
}

func newFixture(tb testing.TB) *fixture {
	tb.Helper()
	fx := apitest.NewFixture(tb, nil)
	c, err := server.New(fx.Ix, fx.Reg, Options{Logger: quietLogger()})
	if err != nil {
		tb.Fatal(err)
	}
	return &fixture{c: c, prompt: fx.Prompt}
}
