package server_test

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/server"
)

// TestGateUnregisterOwn: a principal removing only its own registrations
// (Kubernetes discovery, an admin) leaves a registration another identity
// made under the same key since, answered as not found, and removes its
// own; Owns tells the two apart.
func TestGateUnregisterOwn(t *testing.T) {
	ix := core.New(core.Options{Logger: quietLogger()})
	g := server.NewGate(newCoreRegistrar(ix), ix, server.TestPolicy(t, "", nil))
	reg := core.Registration{Endpoint: "tcp://127.0.0.1:5557", Type: core.PublisherVLLM, ModelName: "m", InstanceID: "a", BlockSize: 16}
	k := core.ServiceKey{InstanceID: "a", TenantID: "default"}
	if _, err := g.Register(server.DiscoveryPrincipal, reg); err != nil {
		t.Fatal(err)
	}
	if !g.Owns(server.DiscoveryPrincipal, k) || g.Owns(server.AdminPrincipal, k) {
		t.Fatal("Owns: want discovery's registration")
	}
	// The admin replaces it with one of its own.
	if _, err := g.Unregister(server.AdminPrincipal, k); err != nil {
		t.Fatal(err)
	}
	reg.Endpoint = "tcp://127.0.0.1:6000"
	if _, err := g.Register(server.AdminPrincipal, reg); err != nil {
		t.Fatal(err)
	}
	if _, err := g.UnregisterOwn(server.DiscoveryPrincipal, k); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("discovery removing the admin's registration: %v, want not found", err)
	}
	if svcs := ix.Services(); len(svcs) != 1 || svcs[0].Owner != "admin" || svcs[0].Endpoint != "tcp://127.0.0.1:6000" {
		t.Fatalf("services %+v, want the admin's", svcs)
	}
	if _, err := g.UnregisterOwn(server.AdminPrincipal, k); err != nil || len(ix.Services()) != 0 {
		t.Fatalf("the admin removing its own: %v, %d left", err, len(ix.Services()))
	}
}

// TestGateReplayEndpointOfAnother: a client identity cannot name, as its
// replay_endpoint, a socket another identity's registration uses (its
// replay socket, or its publisher): it would receive that engine's batches
// through replays. The same identity may (the ranks of one engine behind
// one replay socket), and so may the admin.
func TestGateReplayEndpointOfAnother(t *testing.T) {
	ix := core.New(core.Options{Logger: quietLogger()})
	dns := map[string][]netip.Addr{"localhost": {netip.MustParseAddr("127.0.0.1")}}
	g := server.NewGate(newCoreRegistrar(ix), ix, server.TestPolicy(t, "", dns))
	teamA, teamB := server.Principal{Name: "team-a"}, server.Principal{Name: "team-b"}
	reg := func(inst, ep, replay string) core.Registration {
		return core.Registration{Endpoint: ep, ReplayEndpoint: replay, Type: core.PublisherVLLM, ModelName: "m", InstanceID: inst, BlockSize: 16}
	}
	if _, err := g.Register(teamA, reg("a", "tcp://127.0.0.1:25567", "tcp://127.0.0.1:25568")); err != nil {
		t.Fatal(err)
	}
	for _, replay := range []string{"tcp://127.0.0.1:25568", "tcp://localhost:25568", "tcp://127.0.0.1:25567"} {
		_, err := g.Register(teamB, reg("b", "tcp://127.0.0.1:25577", replay))
		var fe *core.FieldError
		if !errors.Is(err, server.ErrForbidden) || !errors.As(err, &fe) || fe.Field != "replay_endpoint" {
			t.Fatalf("team-b with replay_endpoint %s: %v, want forbidden on replay_endpoint", replay, err)
		}
	}
	if _, err := g.Register(teamB, reg("b", "tcp://127.0.0.1:25577", "tcp://127.0.0.1:25578")); err != nil {
		t.Fatalf("team-b with its own replay socket: %v", err)
	}
	if _, err := g.Register(teamA, reg("a2", "tcp://127.0.0.1:25569", "tcp://127.0.0.1:25568")); err != nil {
		t.Fatalf("team-a sharing its own replay socket: %v", err)
	}
	if _, err := g.Register(server.AdminPrincipal, reg("c", "tcp://127.0.0.1:25587", "tcp://127.0.0.1:25568")); err != nil {
		t.Fatalf("the admin: %v", err)
	}
	// Once both of team-a's registrations and the admin's go, the socket is free.
	for _, k := range []core.ServiceKey{{InstanceID: "a", TenantID: "default"}, {InstanceID: "a2", TenantID: "default"}, {InstanceID: "c", TenantID: "default"}} {
		if _, err := g.Unregister(server.AdminPrincipal, k); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.Register(teamB, reg("b2", "tcp://127.0.0.1:25597", "tcp://127.0.0.1:25568")); err != nil {
		t.Fatalf("the freed replay socket: %v", err)
	}
}

// TestGateClientQuota: with ClientQuota 2, a client identity registers two
// services and its third is refused (core.ErrLimit, counted), while the
// same registration again (no new slot), another identity's and the
// admin's still go through; once it unregisters one it may register again.
func TestGateClientQuota(t *testing.T) {
	ix := core.New(core.Options{Logger: quietLogger()})
	g := server.NewGate(newCoreRegistrar(ix), ix, server.TestPolicy(t, "", nil))
	g.ClientQuota, g.Logger = 2, quietLogger()
	teamA, teamB := server.Principal{Name: "team-a"}, server.Principal{Name: "team-b"}
	reg := func(inst string, port int) core.Registration {
		return core.Registration{Endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", port), Type: core.PublisherVLLM, ModelName: "m", InstanceID: inst, BlockSize: 16}
	}
	ok := func(p server.Principal, r core.Registration) {
		t.Helper()
		if _, err := g.Register(p, r); err != nil {
			t.Fatalf("%s registering %s: %v", p.Name, r.InstanceID, err)
		}
	}
	ok(teamA, reg("a1", 26001))
	ok(teamA, reg("a2", 26002))
	if _, err := g.Register(teamA, reg("a3", 26003)); !errors.Is(err, core.ErrLimit) {
		t.Fatalf("team-a's third registration: %v, want its quota refused", err)
	}
	ok(teamA, reg("a2", 26002)) // the same again: no new slot
	ok(teamB, reg("b1", 26011))
	ok(teamB, reg("b2", 26012))
	ok(server.AdminPrincipal, reg("c1", 26021))
	ok(server.AdminPrincipal, reg("c2", 26022))
	ok(server.AdminPrincipal, reg("c3", 26023))
	if n := g.QuotaRefusals(); n != 1 {
		t.Fatalf("QuotaRefusals %d, want 1", n)
	}
	if _, err := g.Unregister(teamA, core.ServiceKey{InstanceID: "a1", TenantID: "default"}); err != nil {
		t.Fatal(err)
	}
	ok(teamA, reg("a3", 26003))
	if n := len(ix.Services()); n != 7 {
		t.Fatalf("%d registrations, want 7", n)
	}
}
