package server_test

import (
	"strings"
	"testing"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/server"
)

// TestEndpointPolicyRefusalRendered: an endpoint the policy refuses is
// answered 403 forbidden, one it cannot read (a spelling libzmq reads as
// another address, a zone id, an unspecified address) 400 invalid_value,
// both naming the field, for endpoint and replay_endpoint alike, and nothing
// is registered.
func TestEndpointPolicyRefusalRendered(t *testing.T) {
	logger := quietLogger()
	ix := core.New(core.Options{Logger: logger})
	reg := newCoreRegistrar(ix)
	s, err := newServer(ix, reg, Options{Logger: logger, Gate: server.NewGate(reg, ix, server.TestPolicy(t, "", nil))})
	if err != nil {
		t.Fatal(err)
	}
	e := &handlerEnv{s: s, ix: ix, reg: reg}
	post := func(body string) response {
		t.Helper()
		return e.httpDo(t, "POST", "/register", "application/json", []byte(body))
	}
	for _, c := range []struct {
		field, ep, why string
		status         int
	}{
		{"endpoint", "tcp://127.1:13333", "not a dotted-quad IPv4 address", 400},
		{"endpoint", "tcp://[64:ff9b::a9fe:a9fe]:80", "link-local", 403},
		{"endpoint", "tcp://127.0.0.1:13333", "conductor's own listener", 403},
		{"endpoint", "tcp://127.0.0.1:0;10.0.0.6:5557", "--allow-source-endpoints", 403},
		{"endpoint", "tcp://0.0.0.0:5557", "unspecified", 400},
		{"replay_endpoint", "tcp://0x7f000001:50052", "not a dotted-quad IPv4 address", 400},
		{"replay_endpoint", "tcp://[fe80::1%lo]:5557", "zone", 400},
		{"replay_endpoint", "tcp://[::]:5558", "unspecified", 400},
		{"replay_endpoint", "tcp://no-such-host.test:5558", "does not resolve", 400},
	} {
		r := post(jsonEnc(with(baseReg(), "endpoint", "tcp://10.0.0.5:5557", c.field, c.ep)))
		reason := "forbidden"
		if c.status == 400 {
			reason = "invalid_value"
		}
		checkError(t, r, c.status, reason, c.field, -1)
		if msg, _ := decodeMap(t, r)["error"].(string); !strings.Contains(msg, c.field) || !strings.Contains(msg, c.why) {
			t.Fatalf("%s=%s: error %q does not say %q", c.field, c.ep, msg, c.why)
		}
	}
	if n := len(ix.Services()); n != 0 {
		t.Fatalf("%d registrations after refusals", n)
	}
	if r := post(jsonEnc(with(baseReg(), "endpoint", "tcp://10.0.0.5:5557", "replay_endpoint", "tcp://[fd00::5]:5558"))); r.status != 200 {
		t.Fatalf("canonical endpoints: %d %s", r.status, r.body)
	}
}
