package dynamo

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/server"
	"github.com/seed-c7a81618/conductor/internal/syncbuf"
)

// TestDynamoIgnoredKeys: a body key the route does not know is ignored, as
// Dynamo ignores it (the request succeeds as if it were absent), and named
// back: the X-Conductor-Ignored-Key header carries the first such key, the
// route's conductor_dynamo_ignored_keys_total counts the request, and a WARN
// line names the key and the known key nearest to it. Keys Dynamo accepts
// and ignores (tenant_id on /register) and requests with none are not
// reported.
func TestDynamoIgnoredKeys(t *testing.T) {
	var logs syncbuf.Buffer
	e := startDyn(t, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	post := func(path, body string) (int, string) {
		t.Helper()
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI("http://" + e.addr + path)
		req.Header.SetMethod("POST")
		req.Header.SetContentType("application/json")
		req.SetBodyString(body)
		if err := e.client.Do(req, resp); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode(), string(resp.Header.Peek(ignoredHeader))
	}
	cases := []struct {
		path, body string
		status     int
		ignored    string
	}{
		{"/register", `{"instance_id":1,"endpoint":"tcp://127.0.0.1:5601","model_name":"m","block_size":16,"routing_grup":"a","tenant_id":"t"}`, 201, "routing_grup"},
		{"/register", `{"instance_id":2,"endpoint":"tcp://127.0.0.1:5602","model_name":"m","block_size":16,"tenant_id":"t"}`, 201, ""},
		{"/query", `{"token_ids":[1,2,3],"model_name":"m","cache_slt":"x","lora":"y"}`, 200, "cache_slt"},
		{"/query", `{"token_ids":[1,2,3],"model_name":"m"}`, 200, ""},
		{"/query_by_hash", `{"block_hashes":[1],"model_name":"m","lora_name":"A"}`, 200, "lora_name"},
		{"/unregister", `{"instance_id":1,"model_name":"m","dp_rnk":0,"x\n":1}`, 200, "dp_rnk"},
	}
	for i, c := range cases {
		status, ignored := post(c.path, c.body)
		if status != c.status || ignored != c.ignored {
			t.Errorf("%s %s: status %d, ignored %q; want %d, %q", c.path, c.body, status, ignored, c.status, c.ignored)
		}
		if i == 1 {
			// routing_grup was ignored: worker 1 is in the default group.
			if w := string(e.do(t, "GET", "/workers?routing_group=default", "").body); !strings.Contains(w, `"instance_id":1,`) {
				t.Errorf("workers of the default group: %s", w)
			}
		}
	}
	m := string(e.do(t, "GET", "/metrics", "").body)
	for _, want := range []string{
		`conductor_dynamo_ignored_keys_total{endpoint="/register"} 1`,
		`conductor_dynamo_ignored_keys_total{endpoint="/query"} 1`,
		`conductor_dynamo_ignored_keys_total{endpoint="/query_by_hash"} 1`,
		`conductor_dynamo_ignored_keys_total{endpoint="/unregister"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// One line per 10 s: the first, with its suggestion.
	if l := logs.String(); strings.Count(l, "request key ignored") != 1 ||
		!strings.Contains(l, "key=routing_grup") || !strings.Contains(l, "did_you_mean=routing_group") {
		t.Errorf("log: %s", l)
	}
	if got := headerText([]byte("a\nb\"")); got != `"a\nb\""` {
		t.Errorf("headerText of a control character and a quote: %s", got)
	}
}

// TestDynamoSlowNameHoldsNothing: while a registration waits on a DNS name
// that does not answer, the surface's other work that takes its registry
// lock (what /metrics counts, /workers, another registration) goes on: the
// endpoint is resolved before the lock.
func TestDynamoSlowNameHoldsNothing(t *testing.T) {
	ix := core.New(core.Options{Logger: quietLogger()})
	reg := newCoreRegistrar(ix)
	policy, err := server.ParseEndpointPolicy("tcp://*:*")
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	policy.SetLookup(func(ctx context.Context, host string) ([]netip.Addr, error) {
		if host == "slow.example" {
			close(entered)
			<-release
			return nil, errors.New("no answer")
		}
		return nil, errors.New("unknown")
	})
	c, err := server.New(ix, reg, server.Options{Logger: quietLogger(), Gate: server.NewGate(reg, ix, policy)})
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(c, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	slow := make(chan error, 1)
	go func() {
		slow <- d.register(server.AdminPrincipal, Worker{InstanceID: 1, Endpoint: "tcp://slow.example:5557", ModelName: "m", BlockSize: 16})
	}()
	<-entered
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.counts()
		if err := d.register(server.AdminPrincipal, Worker{InstanceID: 2, Endpoint: "tcp://127.0.0.1:5558", ModelName: "m", BlockSize: 16}); err != nil {
			t.Errorf("a registration beside the slow one: %v", err)
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Minute): // a bound on a hang, not a timing
		close(release)
		t.Fatal("the registry lock was held while a name resolved")
	}
	close(release)
	if err := <-slow; err == nil {
		t.Fatal("the unresolvable name was registered")
	}
	if models, workers, _ := d.counts(); models != 1 || workers != 1 {
		t.Fatalf("counts: %d indexers, %d workers; want the one registration", models, workers)
	}
}
