package dynamo

import (
	"math/rand"
	"reflect"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/internal/apitest"
)

// TestHostileBodiesDynamo: the same corpus on every POST route of the Dynamo
// surface: never a 5xx, every refusal carries an error, and the index and
// the Dynamo registry are unchanged (404 is Dynamo's answer for an unknown
// model or worker).
func TestHostileBodiesDynamo(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	ix := core.New(core.Options{Logger: quietLogger()})
	d, err := newDynamo(ix, newCoreRegistrar(ix), Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Register(Worker{InstanceID: 1, Endpoint: "tcp://127.0.0.1:1", ModelName: "m", BlockSize: 16}); err != nil {
		t.Fatal(err)
	}
	before := apitest.SnapshotIndex(ix)
	for _, path := range []string{"/register", "/unregister", "/query", "/query_by_hash", "/register_peer", "/deregister_peer"} {
		for i, body := range apitest.HostileCorpus(seed) {
			var req fasthttp.Request
			req.Header.SetMethod("POST")
			req.SetRequestURI(path)
			req.Header.SetContentType("application/json")
			req.SetBody([]byte(body))
			ctx := &fasthttp.RequestCtx{}
			ctx.Init(&req, nil, nil)
			d.Handler(ctx)
			code, rb := ctx.Response.StatusCode(), ctx.Response.Body()
			if code >= 500 {
				t.Fatalf("%s body %d %q: %d %s", path, i, body, code, rb)
			}
			if code >= 400 && !strings.Contains(string(rb), "error") {
				t.Fatalf("%s body %d %q: %d without an error: %s", path, i, body, code, rb)
			}
			if code < 400 && (path == "/register" || path == "/unregister" || path == "/register_peer") {
				t.Fatalf("%s accepted hostile body %d %q: %d %s", path, i, body, code, rb)
			}
		}
	}
	if after := apitest.SnapshotIndex(ix); !reflect.DeepEqual(before, after) {
		t.Fatalf("index changed by refused requests:\nbefore %+v\nafter  %+v", before, after)
	}
}
