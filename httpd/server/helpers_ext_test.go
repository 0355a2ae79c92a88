package server_test

import (
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/internal/apitest"
	"github.com/seed-c7a81618/conductor/httpd/mooncake"
	"github.com/seed-c7a81618/conductor/httpd/server"
)

// The core's behaviour through a surface: these tests drive the Limiter,
// the Gate and the endpoint policy through the Mooncake API (package
// mooncake), which an internal test of package server could not import.
// The shared helpers (package apitest) and package server's names appear
// under the names the tests use.
type (
	Options        = server.Options
	LimiterOptions = server.LimiterOptions
	Limiter        = server.Limiter
	obj            = apitest.Obj
	coreRegistrar  struct{ *apitest.Registrar }
)

var (
	NewLimiter      = server.NewLimiter
	newTestLimiter  = server.NewTestLimiter
	retryableAccept = server.RetryableAccept
	mp              = apitest.MP
	jsonEnc         = apitest.JSONEnc
	with            = apitest.With
	seqTokens       = apitest.SeqTokens
	leBin           = apitest.LeBin
	baseReg         = apitest.BaseReg
	quietLogger     = apitest.QuietLogger
	waitFor         = apitest.WaitFor
	heapInuse       = apitest.HeapInuse
	rawConn         = apitest.RawConn
	readStatus      = apitest.ReadStatus
)

const bodyChunk = server.BodyChunk

func newCoreRegistrar(ix *core.Index) *coreRegistrar { return &coreRegistrar{apitest.NewRegistrar(ix)} }

// newServer is the Mooncake API over a Core of its own.
func newServer(ix *core.Index, reg server.Registrar, opts Options) (*mooncake.Server, error) {
	c, err := server.New(ix, reg, opts)
	if err != nil {
		return nil, err
	}
	return mooncake.New(c), nil
}

// testEnv is the Mooncake API on a loopback port.
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

type response struct {
	status int
	ct     string
	body   []byte
	allow  string
}

func responseOf(r apitest.Response) response { return response{r.Status, r.CT, r.Body, r.Allow} }

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

// handlerEnv is the Mooncake API without listeners: requests run through
// its handler directly.
type handlerEnv struct {
	s   *mooncake.Server
	ix  *core.Index
	reg *coreRegistrar
}

// httpDo runs one request through the handler.
func (e *handlerEnv) httpDo(t testing.TB, method, path, ct string, body []byte) response {
	t.Helper()
	var req fasthttp.Request
	req.Header.SetMethod(method)
	req.SetRequestURI(path)
	if ct != "" {
		req.Header.SetContentType(ct)
	}
	req.SetBody(body)
	ctx := &fasthttp.RequestCtx{}
	ctx.Init(&req, nil, nil)
	e.s.Handler(ctx)
	return response{status: ctx.Response.StatusCode(), ct: string(ctx.Response.Header.ContentType()),
		body: append([]byte(nil), ctx.Response.Body()...)}
}
