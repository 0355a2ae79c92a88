package fuzz

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/seed-c7a81618/conductor/endpoint"
)

// FuzzEndpointParse: the registration endpoint parser never panics; what it
// accepts has a canonical form that is valid UTF-8 without control bytes,
// parses back to the same endpoint (a fixed point) and reaches the same
// publishers (endpoint.Keys); an accepted tcp endpoint has a port and either
// a name or an address that is not unspecified.
func FuzzEndpointParse(f *testing.F) {
	for _, s := range []string{
		"tcp://127.0.0.1:5557", "tcp://127.0.0.1:05557", "tcp://[::ffff:127.0.0.1]:5557", "tcp://localhost:5557",
		"tcp://0.0.0.0:5557", "tcp://[::]:5557", "tcp://[::1]:5557", "tcp://127.0.0.2:5557", "tcp://127.0.0.1:0;127.0.0.1:5557",
		"tcp://127.1:5557", "tcp://0x7f000001:1", "tcp://[fe80::1%lo]:1", "tcp://[64:ff9b::a00:1]:1", "tcp://Engine.Svc.:1",
		"ipc:///tmp//a/../kv.sock", "ipc://@abstract", "inproc://kv", "tcp://*:1", "udp://x:1", "tcp://a..b:1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 1024 {
			return
		}
		e, err := endpoint.Parse(s)
		if err != nil {
			return
		}
		c := e.String()
		if !utf8.ValidString(c) || strings.IndexFunc(c, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
			t.Fatalf("%q: canonical form %q", s, c)
		}
		e2, err := endpoint.Parse(c)
		if err != nil || e2 != e || e2.String() != c {
			t.Fatalf("%q: canonical %q parses to %+v, %v (was %+v)", s, c, e2, err, e)
		}
		if k1, k2 := e.Keys(nil), endpoint.Keys(c); !slices.Equal(k1, k2) || len(k1) == 0 {
			t.Fatalf("%q: keys %q, canonical's %q", s, k1, k2)
		}
		if e.Scheme == "tcp" && (e.Port == 0 || (!e.IsName() && e.Addr.IsUnspecified()) || (e.IsName() && e.Host == "")) {
			t.Fatalf("%q: accepted %+v", s, e)
		}
	})
}
