package dynamo

import (
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/internal/apitest"
	"github.com/seed-c7a81618/conductor/httpd/mooncake"
	"github.com/seed-c7a81618/conductor/httpd/server"
)

// The shared test helpers (package apitest) under the names these tests use.
type coreRegistrar struct{ *apitest.Registrar }

var (
	jsonEnc     = apitest.JSONEnc
	with        = apitest.With
	canonJSON   = apitest.CanonJSON
	storeBatch  = apitest.StoreBatch
	apply       = apitest.Apply
	seqTokens   = apitest.SeqTokens
	baseReg     = apitest.BaseReg
	quietLogger = apitest.QuietLogger
	requestCtx  = apitest.RequestCtx
)

const (
	adminTok = apitest.AdminTok
	queryTok = apitest.QueryTok
	teamATok = apitest.TeamATok
	teamBTok = apitest.TeamBTok
)

func newCoreRegistrar(ix *core.Index) *coreRegistrar { return &coreRegistrar{apitest.NewRegistrar(ix)} }

func (r *coreRegistrar) sub(t testing.TB, inst, tenant string, rank int32) *core.Subscription {
	t.Helper()
	return r.Sub(t, inst, tenant, rank)
}

// newMooncake is the Mooncake API over a Core of its own.
func newMooncake(ix *core.Index, reg server.Registrar, opts server.Options) (*mooncake.Server, error) {
	c, err := server.New(ix, reg, opts)
	if err != nil {
		return nil, err
	}
	return mooncake.New(c), nil
}

// testEnv is a server on a loopback port: the Mooncake API of startEnv, or
// (addr and client only) a Dynamo listener.
type testEnv struct {
	s      *mooncake.Server
	c      *server.Core
	ix     *core.Index
	reg    *coreRegistrar
	addr   string
	client *fasthttp.HostClient
}

func startEnv(t testing.TB, opts server.Options, copts core.Options) *testEnv {
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

// do sends one request; ct "" sends no Content-Type header.
func (e *testEnv) do(t testing.TB, method, path, ct string, body []byte, hdr ...string) response {
	t.Helper()
	return responseOf(apitest.Do(t, e.client, e.addr, method, path, ct, body, hdr...))
}

func (e *testEnv) postJSON(t testing.TB, path, body string) response {
	t.Helper()
	return e.do(t, "POST", path, "application/json", []byte(body))
}

// doAuth sends a JSON request with an optional bearer token.
func (e *testEnv) doAuth(t *testing.T, method, path, token string, body string) response {
	t.Helper()
	return responseOf(apitest.DoAuth(t, e.client, e.addr, method, path, token, body))
}

// checkError asserts the error envelope of r.
func checkError(t testing.TB, r response, status int, reason, field string, index int) {
	t.Helper()
	apitest.CheckError(t, r.status, r.ct, r.body, status, reason, field, index)
}
