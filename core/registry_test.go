package core

import (
	"errors"
	"strings"
	"testing"
)

// TestRegistrationEndpointAliases: once tcp://127.0.0.1:5557 is registered,
// every other spelling of a publisher on port 5557 of this host is refused
// for another service key, naming the holder, its endpoint and the field; a
// publisher elsewhere is not; the holder's unregistration frees them all.
func TestRegistrationEndpointAliases(t *testing.T) {
	ix := New(Options{})
	p := cborProfile(t)
	holder := engineReg(t, "real", 0, p)
	holder.Endpoint = "tcp://127.0.0.1:5557"
	mustRegister(t, ix, holder)
	aliases := []string{
		"tcp://127.0.0.1:5557", "tcp://127.0.0.1:05557", "tcp://[::ffff:127.0.0.1]:5557", "tcp://127.0.0.2:5557",
		"tcp://[::1]:5557", "tcp://localhost:5557", "tcp://LOCALHOST.:5557", "tcp://127.0.0.1:0;127.0.0.1:5557",
		"tcp://[::127.0.0.1]:5557", "tcp://[64:ff9b::7f00:1]:5557",
	}
	for i, ep := range aliases {
		r := engineReg(t, "alias", int32(i), p)
		r.Endpoint = ep
		_, _, err := ix.Register(r)
		var fe *FieldError
		if !errors.Is(err, ErrConflict) || !errors.As(err, &fe) || fe.Field != "endpoint" {
			t.Errorf("%s: %v, want a conflict on field endpoint", ep, err)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, "real|default|0") || !strings.Contains(msg, ep) {
			t.Errorf("%s: %q does not name the holder and the endpoint", ep, msg)
		}
		if ep != holder.Endpoint && (!strings.Contains(msg, holder.Endpoint) || !strings.Contains(msg, "port 5557 of this host")) {
			t.Errorf("%s: %q does not name the holder's endpoint and where they meet", ep, msg)
		}
	}
	if n := len(ix.Services()); n != 1 {
		t.Fatalf("%d registrations after the aliases", n)
	}

	// Other publishers: another port of this host, another host, the IPv4
	// address a NAT64 address does not carry.
	for i, ep := range []string{"tcp://127.0.0.1:5558", "tcp://192.0.2.7:5557", "tcp://[2001:db8::7]:5557", "ipc:///tmp/kv.sock"} {
		r := engineReg(t, "other", int32(i), p)
		r.Endpoint = ep
		mustRegister(t, ix, r)
	}
	// An IPv6 address that embeds a held IPv4 address meets it.
	r := engineReg(t, "nat64", 0, p)
	r.Endpoint = "tcp://[64:ff9b::c000:207]:5557"
	if _, _, err := ix.Register(r); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "other|default|1") {
		t.Fatalf("NAT64 of a held address: %v", err)
	}
	r.Endpoint = "ipc:///tmp//x/../kv.sock"
	if _, _, err := ix.Register(r); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "other|default|3") {
		t.Fatalf("another spelling of a held ipc path: %v", err)
	}

	if _, err := ix.Unregister(holder.Key()); err != nil {
		t.Fatal(err)
	}
	r = engineReg(t, "alias", 0, p)
	r.Endpoint = "tcp://[::1]:5557"
	mustRegister(t, ix, r)
}
