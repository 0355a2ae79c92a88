package server_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/internal/apitest"
	"github.com/seed-c7a81618/conductor/httpd/server"
)

// TestGateEndpointAliases: with tcp://127.0.0.1:5557 registered, every other
// spelling of that publisher is refused for another instance, naming the
// field and the holder (or, across identities, that another identity holds
// it), or is the holder's own registration in another spelling; nothing
// else is registered.
func TestGateEndpointAliases(t *testing.T) {
	dns := map[string][]netip.Addr{"localhost": {netip.MustParseAddr("::1"), netip.MustParseAddr("127.0.0.1")}}
	for _, allowSource := range []bool{false, true} {
		ix := core.New(core.Options{Logger: quietLogger()})
		reg := newCoreRegistrar(ix)
		policy := server.TestPolicy(t, "", dns)
		policy.AllowSourceAddresses(allowSource)
		access, err := server.NewAccess(server.AccessOptions{AdminToken: apitest.AdminTok,
			ClientTokens: map[string]string{"team-a": apitest.TeamATok, "team-b": apitest.TeamBTok}})
		if err != nil {
			t.Fatal(err)
		}
		s, err := newServer(ix, reg, Options{Logger: quietLogger(), Access: access, Gate: server.NewGate(reg, ix, policy)})
		if err != nil {
			t.Fatal(err)
		}
		post := func(tok, inst, ep string) response {
			t.Helper()
			var req fasthttp.Request
			req.Header.SetMethod("POST")
			req.SetRequestURI("/register")
			req.Header.SetContentType("application/json")
			req.Header.Set("Authorization", "Bearer "+tok)
			req.SetBody([]byte(jsonEnc(with(baseReg(), "instance_id", inst, "endpoint", ep, "replay_endpoint", nil))))
			ctx := &fasthttp.RequestCtx{}
			ctx.Init(&req, nil, nil)
			s.Handler(ctx)
			return response{status: ctx.Response.StatusCode(), ct: string(ctx.Response.Header.ContentType()),
				body: append([]byte(nil), ctx.Response.Body()...)}
		}
		refused := func(r response, status int, reason, why string) {
			t.Helper()
			checkError(t, r, status, reason, "endpoint", -1)
			if msg, _ := decodeMap(t, r)["error"].(string); !strings.Contains(msg, why) {
				t.Fatalf("error %q does not say %q", msg, why)
			}
		}
		if r := post(apitest.AdminTok, "real", "tcp://127.0.0.1:5557"); r.status != 200 {
			t.Fatalf("holder: %d %s", r.status, r.body)
		}
		const holder = "real|default|0"
		for i, ep := range []string{"tcp://127.0.0.1:5557", "tcp://localhost:5557", "tcp://[::ffff:127.0.0.1]:5557",
			"tcp://127.0.0.1:05557", "tcp://127.0.0.2:5557", "tcp://[::1]:5557", "tcp://[::ffff:7f00:2]:5557"} {
			refused(post(apitest.AdminTok, "alias-"+string(rune('a'+i)), ep), 400, "invalid_registration", holder)
		}
		refused(post(apitest.AdminTok, "alias-0", "tcp://0.0.0.0:5557"), 400, "invalid_value", "unspecified")
		refused(post(apitest.AdminTok, "alias-1", "tcp://[::]:5557"), 400, "invalid_value", "unspecified")
		source := post(apitest.AdminTok, "alias-2", "tcp://127.0.0.1:0;127.0.0.1:5557")
		if allowSource {
			refused(source, 400, "invalid_registration", holder)
		} else {
			refused(source, 403, "forbidden", "--allow-source-endpoints")
		}
		// The holder itself, in another spelling: the same registration.
		if r := post(apitest.AdminTok, "real", "tcp://localhost:05557"); r.status != 200 {
			t.Fatalf("the holder's own registration, another spelling: %d %s", r.status, r.body)
		}

		// Across identities: team-b cannot take team-a's publisher by
		// another name.
		if r := post(apitest.TeamATok, "a1", "tcp://127.0.0.1:5560"); r.status != 200 {
			t.Fatalf("team-a: %d %s", r.status, r.body)
		}
		for _, ep := range []string{"tcp://localhost:5560", "tcp://[::1]:5560", "tcp://127.0.0.3:05560"} {
			refused(post(apitest.TeamBTok, "b1", ep), 403, "forbidden", "another identity")
		}
		if n := len(ix.Services()); n != 2 {
			t.Fatalf("%d registrations, want 2: %+v", n, ix.Services())
		}
		for _, r := range ix.Services() {
			if r.Endpoint != "tcp://127.0.0.1:5557" && r.Endpoint != "tcp://127.0.0.1:5560" {
				t.Fatalf("registered endpoint %s", r.Endpoint)
			}
		}
	}
}
