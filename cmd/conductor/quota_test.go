package main

import (
	"fmt"
	"strings"
	"testing"
)

// TestClientQuotaShare: the default --max-registrations-per-client gives
// each client identity an equal share of --max-registrations: with two
// identities and 4 registrations, team-a's third registration is refused
// (400 limit_exceeded naming the flag, counted in /metrics), which leaves
// team-b its two; the admin is bound by --max-registrations alone.
func TestClientQuotaShare(t *testing.T) {
	const (
		admin = "quota-admin-token-0123456789"
		teamA = "quota-team-a-token-0123456789"
		teamB = "quota-team-b-token-0123456789"
	)
	adminFile, clientsFile := tokenFiles(t, admin, "team-a", teamA, "team-b", teamB)
	p := startFaultProc(t, "--admin-token-file", adminFile, "--client-tokens-file", clientsFile, "--max-registrations", "4")
	register := func(tok, inst string, port int) (int, string) {
		t.Helper()
		return p.authDo(tok, "POST", "/register", fmt.Sprintf(`{"endpoint":"tcp://127.0.0.1:%d","type":"vLLM","modelname":"m","instance_id":%q,"block_size":16,"dp_rank":0}`, port, inst))
	}
	for i, r := range []struct {
		tok, inst string
		want      int
	}{
		{teamA, "a1", 200}, {teamA, "a2", 200}, {teamA, "a3", 400}, {teamB, "b1", 200}, {teamB, "b2", 200},
	} {
		code, body := register(r.tok, r.inst, 27001+i)
		if code != r.want {
			t.Fatalf("register %s: %d %s, want %d", r.inst, code, body, r.want)
		}
		if code == 400 && (!strings.Contains(body, "limit_exceeded") || !strings.Contains(body, "--max-registrations-per-client")) {
			t.Fatalf("register %s refused with %s, want limit_exceeded naming --max-registrations-per-client", r.inst, body)
		}
	}
	if _, m := p.authDo(admin, "GET", "/metrics", ""); !strings.Contains(m, `conductor_registrations_refused_total{reason="client_quota"} 1`) {
		t.Fatalf("refusal not counted:\n%s", m)
	}
	if !strings.Contains(p.logs.String(), "client quota reached") {
		t.Fatalf("refusal not logged:\n%s", tail(p.logs.String()))
	}
}

// TestClientQuotaFlag: the flag's value, else an equal share of the
// registry (at least one each), else no bound of its own.
func TestClientQuotaFlag(t *testing.T) {
	for _, c := range []struct{ flag, regs, clients, want int }{
		{0, 4096, 0, 0},       // no client identities: nothing to bound
		{0, 4096, 1, 4096},    // one identity: the registry
		{0, 4096, 3, 1365},    // an equal share, rounded down
		{0, 2, 5, 1},          // at least one each
		{10, 4096, 3, 10},     // the flag
		{-1, 4096, 3, 0},      // no bound of its own
		{5000, 4096, 1, 5000}, // above the registry: the registry bounds first
	} {
		if got := clientQuota(c.flag, c.regs, c.clients); got != c.want {
			t.Errorf("clientQuota(%d, %d, %d) = %d, want %d", c.flag, c.regs, c.clients, got, c.want)
		}
	}
}
