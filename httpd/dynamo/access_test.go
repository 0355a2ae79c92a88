package dynamo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/server"
	"github.com/seed-c7a81618/conductor/wire/dump"
)

// TestDynamoAccessClasses: the Dynamo listener authorizes with the Server's
// Access as the main API does: open /health and /metrics, the query token on
// /query*, a registering identity on /register and /unregister (ownership
// through the Gate: team-b cannot remove team-a's worker), the admin token on
// the registry, the dump, the peer endpoints and /reopen_logs; GET /dump on
// the main port needs the admin token too.
func TestDynamoAccessClasses(t *testing.T) {
	a, err := server.NewAccess(server.AccessOptions{AdminToken: adminTok, QueryToken: queryTok,
		ClientTokens: map[string]string{"team-a": teamATok, "team-b": teamBTok}})
	if err != nil {
		t.Fatal(err)
	}
	e := startDynWith(t, server.Options{Access: a}, Options{})
	de := &testEnv{addr: e.addr, client: e.client}
	reg := `{"instance_id":1,"endpoint":"tcp://127.0.0.1:20001","model_name":"m","block_size":4}`
	unreg := `{"instance_id":1,"model_name":"m"}`
	query := `{"model_name":"m","token_ids":[1,2,3,4]}`
	peer := `{"url":"http://127.0.0.1:1"}`
	cases := []struct {
		name, method, path, token, body string
		status                          int
	}{
		{"health open", "GET", "/health", "", "", 200},
		{"metrics open", "GET", "/metrics", "", "", 200},
		{"register without token", "POST", "/register", "", reg, 401},
		{"register with query token", "POST", "/register", queryTok, reg, 403},
		{"register as team-a", "POST", "/register", teamATok, reg, 201},
		{"unregister team-a's worker as team-b", "POST", "/unregister", teamBTok, unreg, 403},
		{"query without token", "POST", "/query", "", query, 401},
		{"query with query token", "POST", "/query", queryTok, query, 200},
		{"workers without token", "GET", "/workers", "", "", 401},
		{"workers as team-a", "GET", "/workers", teamATok, "", 403},
		{"workers as admin", "GET", "/workers", adminTok, "", 200},
		{"dump without token", "GET", "/dump", "", "", 401},
		{"dump with query token", "GET", "/dump", queryTok, "", 403},
		{"dump as admin", "GET", "/dump", adminTok, "", 200},
		{"peers without token", "GET", "/peers", "", "", 401},
		{"register_peer as team-a", "POST", "/register_peer", teamATok, peer, 403},
		{"register_peer as admin", "POST", "/register_peer", adminTok, peer, 201},
		{"reopen_logs without token", "POST", "/reopen_logs", "", "", 401},
		{"unregister as team-a", "POST", "/unregister", teamATok, unreg, 200},
	}
	for _, c := range cases {
		r := de.doAuth(t, c.method, c.path, c.token, c.body)
		if r.status != c.status {
			t.Fatalf("%s: status %d, want %d: %s", c.name, r.status, c.status, r.body)
		}
	}
	if r := e.main.doAuth(t, "GET", "/dump", "", ""); r.status != 401 {
		t.Fatalf("main /dump without token: %d %s", r.status, r.body)
	}
	if r := e.main.doAuth(t, "GET", "/dump", adminTok, ""); r.status != 200 {
		t.Fatalf("main /dump as admin: %d %s", r.status, r.body)
	}
}

// TestDynamoClientQuota: a client identity past the Gate's ClientQuota is
// refused on the Dynamo port too (429 naming the flag), and this port's
// /metrics counts it as the main port's does.
func TestDynamoClientQuota(t *testing.T) {
	a, err := server.NewAccess(server.AccessOptions{AdminToken: adminTok,
		ClientTokens: map[string]string{"team-a": teamATok, "team-b": teamBTok}})
	if err != nil {
		t.Fatal(err)
	}
	e := startDynWith(t, server.Options{Access: a}, Options{})
	e.d.c.Gate().ClientQuota = 1
	de := &testEnv{addr: e.addr, client: e.client}
	reg := func(id int) string {
		return fmt.Sprintf(`{"instance_id":%d,"endpoint":"tcp://127.0.0.1:%d","model_name":"m","block_size":4}`, id, 21000+id)
	}
	if r := de.doAuth(t, "POST", "/register", teamATok, reg(1)); r.status != 201 {
		t.Fatalf("first registration: %d %s", r.status, r.body)
	}
	if r := de.doAuth(t, "POST", "/register", teamATok, reg(2)); r.status != 429 || !strings.Contains(string(r.body), "--max-registrations-per-client") {
		t.Fatalf("second registration past the quota: %d %s", r.status, r.body)
	}
	for _, env := range []*testEnv{de, e.main} {
		if r := env.doAuth(t, "GET", "/metrics", "", ""); !strings.Contains(string(r.body), `conductor_registrations_refused_total{reason="client_quota"} 1`) {
			t.Fatalf("%s /metrics lacks the refusal", env.addr)
		}
	}
}

// TestDynamoBodyLimit: a Dynamo body over its own MaxBodyBytes is refused
// with 413 through the Server's streamed body reader, and the in-flight
// budget is returned afterwards.
func TestDynamoBodyLimit(t *testing.T) {
	e := startDyn(t, Options{MaxBodyBytes: 256})
	big := `{"model_name":"m","token_ids":[` + strings.Repeat("1,", 200) + `1]}`
	if r := e.do(t, "POST", "/query", big); r.status != 413 {
		t.Fatalf("oversized body: %d %s", r.status, r.body)
	}
	wantResp(t, e.do(t, "POST", "/register", `{"instance_id":1,"endpoint":"tcp://127.0.0.1:20001","model_name":"m","block_size":4}`), 201, "")
	if n := e.main.c.Limiter().InflightBodyBytes(); n != 0 {
		t.Fatalf("in-flight body bytes after the requests: %d", n)
	}
}

// dumpHoldings lists a main-form dump's holdings, one line each (stream,
// rank, tier, key, copies), sorted: block order follows the hash table's.
func dumpHoldings(t testing.TB, body []byte) string {
	t.Helper()
	var md struct {
		Streams []struct {
			Events []map[string]any `json:"events"`
		} `json:"streams"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&md); err != nil {
		t.Fatalf("dump: %v\n%s", err, body)
	}
	var lines []string
	for _, s := range md.Streams {
		for _, ev := range s.Events {
			stream, _ := json.Marshal(ev["stream"])
			keys, _ := ev["seq_hashes"].([]any)
			for _, k := range keys {
				lines = append(lines, fmt.Sprintf("%v %s rank=%v %v key=%v copies=%v", ev["event_type"], stream, ev["dp_rank"], ev["medium"], k, ev["copies"]))
			}
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// stdEvent is a one-event standardized (RFC #1527) batch on the
// registration's context.
func stdEvent(kind core.EventKind, backend, medium, salt string, hashes ...uint64) *core.Batch {
	b := &core.Batch{}
	ev := b.NextEvent()
	ev.Kind, ev.Standard = kind, true
	ev.BackendID, ev.Medium = []byte(backend), []byte(medium)
	if salt != "" {
		ev.AdditionalSalt = []byte(salt)
	}
	ev.Hashes = append(ev.Hashes, hashes...)
	return b
}

// TestDumpStreamOwnersBothForms: holdings of RFC #1527 stream owners keep
// their stream (salt, backend_id, medium) through both /dump forms, so the
// same stream `cleared` applied to the source and to a replica restored from
// either form leaves both with the same index (compared as their main-form
// dumps, byte for byte).
func TestDumpStreamOwnersBothForms(t *testing.T) {
	a := startDyn(t, Options{})
	sa := registerDyn(t, a, 1, 0, 4, "llama", "")
	for _, b := range []*core.Batch{
		stdEvent(core.EventStored, "w0", "GPU", "", 11, 12),
		stdEvent(core.EventStored, "w0", "disk", "", 11, 12, 13),
		stdEvent(core.EventStored, "w1", "disk", "", 11),
		stdEvent(core.EventStored, "w0", "gpu", "x", 21),
	} {
		if st := sa.Apply(b); st.Dropped != 0 || st.Blocks == 0 {
			t.Fatalf("setup apply: %+v", st)
		}
	}
	dynDump := a.do(t, "GET", "/dump", "")
	mainDump := a.main.do(t, "GET", "/dump", "", nil)
	if dynDump.status != 200 || mainDump.status != 200 {
		t.Fatalf("dump status %d %d", dynDump.status, mainDump.status)
	}
	// The standardized-event form names each holding's stream.
	var md struct {
		Streams []struct {
			Events []struct {
				EventType string        `json:"event_type"`
				Medium    string        `json:"medium"`
				SeqHashes []json.Number `json:"seq_hashes"`
				Stream    *struct {
					Salt      string `json:"salt"`
					BackendID string `json:"backend_id"`
					Medium    string `json:"medium"`
				} `json:"stream"`
			} `json:"events"`
		} `json:"streams"`
	}
	dec := json.NewDecoder(bytes.NewReader(mainDump.body))
	dec.UseNumber()
	if err := dec.Decode(&md); err != nil {
		t.Fatalf("main dump: %v\n%s", err, mainDump.body)
	}
	got := map[string]int{}
	for _, s := range md.Streams {
		for _, ev := range s.Events {
			if ev.Stream == nil {
				t.Fatalf("stored event without its stream: %+v", ev)
			}
			got[ev.Stream.Salt+"|"+ev.Stream.BackendID+"|"+ev.Stream.Medium+"|"+ev.Medium] += len(ev.SeqHashes)
		}
	}
	want := map[string]int{"|w0|gpu|device": 2, "|w0|disk|disk": 3, "|w1|disk|disk": 1, "x|w0|gpu|device": 1}
	if len(got) != len(want) {
		t.Fatalf("dumped streams %v want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Fatalf("dumped streams %v want %v", got, want)
		}
	}
	if !bytes.Contains(dynDump.body, []byte(`"conductor_stream_owner":{"salt":"x","backend_id":"w0","medium":"gpu"}`)) {
		t.Fatalf("Dynamo form without the stream owner:\n%s", dynDump.body)
	}

	clear := func(s *core.Subscription) {
		t.Helper()
		for _, b := range []*core.Batch{
			stdEvent(core.EventCleared, "w0", "DISK", ""),
			stdEvent(core.EventCleared, "w0", "gpu", "x"),
		} {
			if st := s.Apply(b); st.Cleared != 1 {
				t.Fatalf("clear: %+v", st)
			}
		}
	}
	clear(sa)
	wantAfter := a.main.do(t, "GET", "/dump", "", nil).body
	if dumpHoldings(t, wantAfter) == dumpHoldings(t, mainDump.body) {
		t.Fatal("the clears changed nothing: the test would not see lost streams")
	}
	for _, form := range []struct {
		name string
		body []byte
	}{{"dynamo", dynDump.body}, {"main", mainDump.body}} {
		t.Run(form.name, func(t *testing.T) {
			b := startDyn(t, Options{})
			sb := registerDyn(t, b, 1, 0, 4, "llama", "")
			st, err := dump.Restore(b.ix, bytes.NewReader(form.body), b.d)
			if err != nil {
				t.Fatal(err)
			}
			if st.Streams != 1 || st.Skipped != 0 || st.Holdings != 7 {
				t.Fatalf("restore stats %+v", st)
			}
			if got, want := dumpHoldings(t, b.main.do(t, "GET", "/dump", "", nil).body), dumpHoldings(t, mainDump.body); got != want {
				t.Fatalf("restored replica's holdings differ:\n got %s\nwant %s", got, want)
			}
			clear(sb)
			if got, want := dumpHoldings(t, b.main.do(t, "GET", "/dump", "", nil).body), dumpHoldings(t, wantAfter); got != want {
				t.Fatalf("after the same clears the replica differs:\n got %s\nwant %s", got, want)
			}
		})
	}
}

// TestRecoverPresentsToken: a peer whose /dump needs the admin token refuses
// a replica without it (401: next peer, start empty) and serves one that
// presents it (RecoverOptions.Token).
func TestRecoverPresentsToken(t *testing.T) {
	acc, err := server.NewAccess(server.AccessOptions{AdminToken: adminTok})
	if err != nil {
		t.Fatal(err)
	}
	a := startDynWith(t, server.Options{Access: acc}, Options{})
	if err := a.d.Register(Worker{InstanceID: 1, Endpoint: "tcp://127.0.0.1:20001", ModelName: "llama", BlockSize: 4}); err != nil {
		t.Fatal(err)
	}
	sa := a.reg.sub(t, "1", "default", 0)
	if st := sa.Apply(stdEvent(core.EventStored, "w0", "gpu", "", 11, 12)); st.Blocks != 2 {
		t.Fatalf("setup: %+v", st)
	}
	for _, peer := range []string{"http://" + a.addr, "http://" + a.main.addr} {
		b := startDyn(t, Options{})
		registerDyn(t, b, 1, 0, 4, "llama", "")
		if _, ok, err := dump.Recover(t.Context(), b.ix, []string{peer}, dump.RecoverOptions{Indexers: b.d, Logger: quietLogger()}); ok || err != nil {
			t.Fatalf("%s without the token: ok %v err %v", peer, ok, err)
		}
		st, ok, err := dump.Recover(t.Context(), b.ix, []string{peer}, dump.RecoverOptions{Indexers: b.d, Logger: quietLogger(), Token: adminTok})
		if !ok || err != nil || st.Holdings != 2 {
			t.Fatalf("%s with the token: ok %v err %v stats %+v", peer, ok, err, st)
		}
		if got, want := b.ix.TierBlocks(), a.ix.TierBlocks(); got != want {
			t.Fatalf("%s: restored %v want %v", peer, got, want)
		}
	}
}
