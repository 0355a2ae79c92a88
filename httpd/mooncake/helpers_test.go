package mooncake

import (
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/internal/apitest"
	"github.com/seed-c7a81618/conductor/httpd/server"
)

// The shared test helpers (package apitest) under the names these tests use.
type (
	Options       = server.Options
	obj           = apitest.Obj
	mpRaw         = apitest.MPRaw
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
	mustResolve = apitest.MustResolve
	cborProfile = apitest.CborProfile
	chain       = apitest.Chain
	storeBatch  = apitest.StoreBatch
	apply       = apitest.Apply
	seqTokens   = apitest.SeqTokens
	trunc       = apitest.Trunc
	leBin       = apitest.LeBin
	baseReg     = apitest.BaseReg
	quietLogger = apitest.QuietLogger
	requestCtx  = apitest.RequestCtx
	ctOf        = apitest.CtOf
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

// newServer is the Mooncake API over a Core of its own.
func newServer(ix *core.Index, reg server.Registrar, opts Options) (*Server, error) {
	c, err := server.New(ix, reg, opts)
	if err != nil {
		return nil, err
	}
	return New(c), nil
}

// testEnv is a real server on a loopback port.
type testEnv struct {
	s      *Server
	c      *server.Core
	ix     *core.Index
	reg    *coreRegistrar
	addr   string
	client *fasthttp.HostClient
	// gateReg is the registrar behind the Core's Gate: reg, or what a test
	// puts in its place.
	gateReg *swapRegistrar
}

// swapRegistrar forwards to a Registrar a test may replace.
type swapRegistrar struct{ server.Registrar }

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
	gateReg := &swapRegistrar{reg}
	c, err := server.New(ix, gateReg, opts)
	if err != nil {
		t.Fatal(err)
	}
	env := &testEnv{s: New(c), c: c, ix: ix, reg: reg, gateReg: gateReg}
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

func (e *testEnv) postMP(t testing.TB, path string, body []byte) response {
	t.Helper()
	return e.do(t, "POST", path, "application/msgpack", body)
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

// errorCase is one validation row: body → status, reason, field, index (-1: none).
type errorCase struct {
	name   string
	body   []byte
	status int
	reason string
	field  string
	index  int
}

func withProfile(kvs ...any) obj {
	return with(baseReg(), "hash_profile", with(cborSpec(), kvs...))
}
