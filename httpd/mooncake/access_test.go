package mooncake

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/server"
)

func accessEnv(t *testing.T, protectMetrics bool, logs *bytes.Buffer) *testEnv {
	t.Helper()
	a, err := server.NewAccess(server.AccessOptions{AdminToken: adminTok, QueryToken: queryTok, ProtectMetrics: protectMetrics,
		ClientTokens: map[string]string{"team-a": teamATok, "team-b": teamBTok}})
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Access: a}
	if logs != nil {
		opts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return startEnv(t, opts, core.Options{})
}

// TestAccessTokens: who may call what, with every kind of token.
func TestAccessTokens(t *testing.T) {
	var logs bytes.Buffer
	env := accessEnv(t, false, &logs)
	query := jsonEnc(obj{"model", "m", "block_size", 16, "token_ids", seqTokens(16, 0)})
	reg := func(inst, ep string, rank int) string {
		return jsonEnc(with(baseReg(), "instance_id", inst, "endpoint", ep, "dp_rank", rank, "modelname", "m", "block_size", 16))
	}
	unreg := func(inst string, rank int) string { return jsonEnc(obj{"instance_id", inst, "dp_rank", rank}) }
	cases := []struct {
		name, method, path, token string
		body                      string
		status                    int
		reason                    string
	}{
		{"health open", "GET", "/health", "", "", 200, ""},
		{"metrics open", "GET", "/metrics", "", "", 200, ""},
		{"query without token", "POST", "/query", "", query, 401, "unauthorized"},
		{"query wrong token", "POST", "/query", "not-a-token-at-all-0000", query, 401, "unauthorized"},
		{"query with query token", "POST", "/query", queryTok, query, 200, ""},
		{"query with client token", "POST", "/query", teamATok, query, 200, ""},
		{"query with admin token", "POST", "/query", adminTok, query, 200, ""},
		{"register without token", "POST", "/register", "", reg("a1", "tcp://10.0.0.1:1", 0), 401, "unauthorized"},
		{"register with query token", "POST", "/register", queryTok, reg("a1", "tcp://10.0.0.1:1", 0), 403, "forbidden"},
		{"register by team-a", "POST", "/register", teamATok, reg("a1", "tcp://10.0.0.1:1", 0), 200, ""},
		{"team-b unregisters team-a's", "POST", "/unregister", teamBTok, unreg("a1", 0), 403, "forbidden"},
		{"team-b squats the instance id", "POST", "/register", teamBTok, reg("a1", "tcp://10.0.0.2:1", 1), 403, "forbidden"},
		{"team-b squats the endpoint", "POST", "/register", teamBTok, reg("b1", "tcp://10.0.0.1:1", 0), 403, "forbidden"},
		{"team-a adds a rank", "POST", "/register", teamATok, reg("a1", "tcp://10.0.0.1:2", 1), 200, ""},
		{"team-a unregisters its own", "POST", "/unregister", teamATok, unreg("a1", 1), 200, ""},
		{"services needs admin", "GET", "/services", teamATok, "", 403, "forbidden"},
		{"global_view needs a token", "GET", "/global_view", "", "", 401, "unauthorized"},
		{"services with admin", "GET", "/services", adminTok, "", 200, ""},
		{"admin unregisters team-a's", "POST", "/unregister", adminTok, unreg("a1", 0), 200, ""},
	}
	for _, c := range cases {
		r := env.doAuth(t, c.method, c.path, c.token, c.body)
		if r.status != c.status {
			t.Fatalf("%s: %d %s, want %d", c.name, r.status, r.body, c.status)
		}
		if c.reason != "" && !strings.Contains(string(r.body), `"reason":"`+c.reason+`"`) {
			t.Fatalf("%s: body %s lacks reason %s", c.name, r.body, c.reason)
		}
	}
	if n := len(env.ix.Services()); n != 0 {
		t.Fatalf("%d registrations left", n)
	}
	for _, tok := range []string{adminTok, queryTok, teamATok, teamBTok} {
		if strings.Contains(logs.String(), tok) {
			t.Fatalf("a token was logged:\n%s", logs.String())
		}
	}
}

// TestAccessProtectMetrics: /metrics can be put behind the admin token.
func TestAccessProtectMetrics(t *testing.T) {
	env := accessEnv(t, true, nil)
	if r := env.doAuth(t, "GET", "/metrics", "", ""); r.status != 401 {
		t.Fatalf("%d", r.status)
	}
	if r := env.doAuth(t, "GET", "/metrics", adminTok, ""); r.status != 200 {
		t.Fatalf("%d", r.status)
	}
	if r := env.doAuth(t, "GET", "/health", "", ""); r.status != 200 {
		t.Fatalf("%d", r.status)
	}
}

// TestGateStateWriteFailure: when the state cannot be saved, the request
// fails with 500 state_not_saved and changes nothing.
func TestGateStateWriteFailure(t *testing.T) {
	env := startEnv(t, Options{}, core.Options{})
	fail := false
	env.c.Gate().OnChange = func([]core.Registration) error {
		if fail {
			return errors.New("write state: no space left on device")
		}
		return nil
	}
	if r := env.postJSON(t, "/register", jsonEnc(baseReg())); r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	fail = true
	other := jsonEnc(with(baseReg(), "instance_id", "other", "endpoint", "tcp://10.0.0.9:1"))
	checkError(t, env.postJSON(t, "/register", other), 500, "state_not_saved", "", -1)
	checkError(t, env.postJSON(t, "/unregister", jsonEnc(obj{"instance_id", "engine-a", "dp_rank", 0})),
		500, "state_not_saved", "", -1)
	svcs := env.ix.Services()
	if len(svcs) != 1 || svcs[0].InstanceID != "engine-a" {
		t.Fatalf("services after failed writes: %+v", svcs)
	}
	// queries keep working
	if r := env.postJSON(t, "/query", jsonEnc(obj{"model", "m", "block_size", 16, "token_ids", seqTokens(16, 0)})); r.status != 200 {
		t.Fatalf("query: %d", r.status)
	}
}
