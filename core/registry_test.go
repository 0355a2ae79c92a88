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

// TestRegistrationIdentityText: identities that are not printable text are
// refused, naming the field; printable ones of any script are not.
func TestRegistrationIdentityText(t *testing.T) {
	ix := New(Options{})
	p := cborProfile(t)
	set := map[string]func(r *Registration, v string){
		"instance_id": func(r *Registration, v string) { r.InstanceID = v },
		"modelname":   func(r *Registration, v string) { r.ModelName = v },
		"lora_name":   func(r *Registration, v string) { r.LoraName = v },
		"tenant_id":   func(r *Registration, v string) { r.TenantID = v },
	}
	for field, f := range set {
		for v, why := range map[string]string{
			"a\x00b":     "U+0000 at offset 1",
			"\x1b[31mx":  "U+001B at offset 0",
			"tab\there":  "U+0009",
			"line\n":     "U+000A",
			"del\x7f":    "U+007F",
			"c1\u009bx":  "U+009B",
			"bad\xffutf": "not valid UTF-8 (byte 0xff at offset 3)",
			"\xc3":       "not valid UTF-8",
		} {
			r := engineReg(t, "i", 0, p)
			f(&r, v)
			_, _, err := ix.Register(r)
			var fe *FieldError
			if !errors.Is(err, ErrInvalid) || !errors.As(err, &fe) || fe.Field != field || !strings.Contains(err.Error(), why) {
				t.Errorf("%s=%q: %v, want invalid %s saying %q", field, v, err, field, why)
			}
		}
	}
	r := engineReg(t, "节点-0 \ufffd", 0, p)
	r.ModelName, r.LoraName, r.TenantID = "Qwen/Qwen3-8B", "sql lora", "équipe"
	mustRegister(t, ix, r)
}
