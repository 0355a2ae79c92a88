package server_test

import (
	"errors"
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
