package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
)

// TestHealthcheck: `conductor healthcheck` exits 0 against a serving
// conductor's /health and /livez, 1 against a port nobody answers on or a
// path that is not 200, 2 on bad flags.
func TestHealthcheck(t *testing.T) {
	p := startConductor(t, "")
	_, port, err := net.SplitHostPort(p.addr)
	if err != nil {
		t.Fatal(err)
	}
	check := func(want int, args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(context.Background(), append([]string{"healthcheck"}, args...), envOf(nil), &out, &errb); code != want {
			t.Fatalf("healthcheck %q: exit %d, want %d (%s)", args, code, want, errb.String())
		}
		return errb.String()
	}
	check(0, "--port", port)
	check(0, "--port", port, "--path", "/livez")
	if msg := check(1, "--port", port, "--path", "/nope"); !strings.Contains(msg, "answered 404") {
		t.Errorf("404: %q", msg)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, free, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	check(1, "--port", free)
	check(2, "--port", "0")
	check(2, "--path", "health")
	check(2, "extra")
	check(0, "--help")
}
