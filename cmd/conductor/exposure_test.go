package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestLoopbackHost: what --listen values count as loopback.
func TestLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1": true, "127.0.0.2": true, "::1": true, "localhost": true, "LOCALHOST": true,
		"0.0.0.0": false, "::": false, "": false, "192.0.2.1": false, "fe80::1": false, "example.com": false,
		"localhost.example.com": false, "::ffff:127.0.0.1": true,
	} {
		if got := loopbackHost(host); got != want {
			t.Errorf("loopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}

// TestOpenListenerRefusedBeyondLoopback: with no admin token, conductor
// refuses to start on a --listen address that is not loopback (exit 1, the
// reason and the way out named) unless --insecure says so. The addresses are
// refused before anything binds; 192.0.2.1 (TEST-NET-1, never assigned) shows
// that --insecure or a token lets start-up go on to bind, which then fails
// on an address this host does not have, so no test listens beyond loopback.
func TestOpenListenerRefusedBeyondLoopback(t *testing.T) {
	env := envOf(map[string]string{"CONDUCTOR_CONFIG_PATH": "/nonexistent"})
	start := func(extra ...string) (code int, logs string) {
		t.Helper()
		var stderr bytes.Buffer
		args := append([]string{"--http-port", "0", "--rpc-port", "0", "--state-dir", ""}, extra...)
		a, code := newApp(args, env, &stderr, &stderr)
		if a != nil {
			t.Fatalf("%v: started", extra) // the test process exits; nothing else runs it
		}
		return code, stderr.String()
	}
	for _, listen := range []string{"0.0.0.0", "::", "", "192.0.2.1"} {
		code, logs := start("--listen", listen)
		if code != 1 || !strings.Contains(logs, "refusing to serve without authentication beyond loopback") ||
			!strings.Contains(logs, "--insecure") || strings.Contains(logs, "cannot listen") {
			t.Fatalf("--listen %q without a token: exit %d\n%s", listen, code, logs)
		}
	}
	for _, extra := range [][]string{{"--insecure"}, {"--admin-token", "0123456789abcdef0123"}} {
		code, logs := start(append([]string{"--listen", "192.0.2.1"}, extra...)...)
		if code != 1 || strings.Contains(logs, "refusing") || !strings.Contains(logs, "cannot listen") {
			t.Fatalf("--listen 192.0.2.1 %v: exit %d (want the bind itself to fail)\n%s", extra, code, logs)
		}
	}
}
