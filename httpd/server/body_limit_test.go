package server_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/internal/apitest"
)

// readAll reads what the server sends on c until it closes the connection
// (apitest.WaitBound; a server that keeps it open fails the test).
func readAll(t *testing.T, c net.Conn) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(apitest.WaitBound))
	b, err := io.ReadAll(c)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("no answer, or the connection left open; got %q", b)
	}
	return string(b)
}

// TestDeclaredLengthTooLarge: a request that declares a body past the limit
// is answered 413 limit_exceeded and its connection closed without a byte of
// the body (the read timeout is an hour: waiting for one would fail the
// test), with "Expect: 100-continue" too (413, no "100 Continue"); nothing
// sent after its headers is read as a request; a route that answers first
// (404) does so, also closing. A client cannot set the length aside itself,
// and an allowed length is read as before, with or without the expectation.
func TestDeclaredLengthTooLarge(t *testing.T) {
	const max = 4096
	env := startEnv(t, Options{MaxBodyBytes: max, ReadTimeout: time.Hour, IdleTimeout: time.Hour}, core.Options{})
	check413 := func(out string) {
		t.Helper()
		if !strings.HasPrefix(out, "HTTP/1.1 413 ") || strings.Contains(out, "100 Continue") ||
			!strings.Contains(out, `"reason":"limit_exceeded"`) || !strings.Contains(out, "exceeds 4096 bytes") ||
			!strings.Contains(strings.ToLower(out), "connection: close") || strings.Count(out, "HTTP/1.1 ") != 1 {
			t.Fatalf("answer %q, want one 413 limit_exceeded closing the connection", out)
		}
	}
	head := func(extra string, n int) string {
		return fmt.Sprintf("POST /register HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n", extra, n)
	}
	check413(readAll(t, apitest.RawConn(t, env.addr, head("", max+1))))
	check413(readAll(t, apitest.RawConn(t, env.addr, head("", 1<<40))))
	check413(readAll(t, apitest.RawConn(t, env.addr, head("Expect: 100-continue\r\n", max+1))))
	// What follows the headers is the body never read, not a request.
	check413(readAll(t, apitest.RawConn(t, env.addr, head("", 1<<20)+"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")))
	// HTTP/1.0 (no 100-continue there) likewise.
	check413(strings.Replace(readAll(t, apitest.RawConn(t, env.addr,
		strings.Replace(head("", max+1), "HTTP/1.1", "HTTP/1.0", 1))), "HTTP/1.0 ", "HTTP/1.1 ", 1))

	out := readAll(t, apitest.RawConn(t, env.addr, strings.Replace(head("", max+1), "/register", "/nowhere", 1)))
	if !strings.HasPrefix(out, "HTTP/1.1 404 ") || !strings.Contains(strings.ToLower(out), "connection: close") {
		t.Fatalf("unknown route with a long body: %q", out)
	}

	body := jsonEnc(with(baseReg(), "endpoint", "tcp://h:1"))
	// A client's own X-Conductor-Declared-Length is dropped.
	c := apitest.RawConn(t, env.addr, head("X-Conductor-Declared-Length: 99999999\r\nConnection: close\r\n", len(body))+body)
	if out := readAll(t, c); !strings.HasPrefix(out, "HTTP/1.1 200 ") {
		t.Fatalf("a client-sent X-Conductor-Declared-Length: %q", out)
	}
	// An allowed length with the expectation: 100 Continue, then the answer.
	c = apitest.RawConn(t, env.addr, head("Expect: 100-continue\r\nConnection: close\r\n", len(body)))
	buf := make([]byte, 64)
	_ = c.SetReadDeadline(time.Now().Add(apitest.WaitBound))
	n, err := io.ReadAtLeast(c, buf, len("HTTP/1.1 100 Continue\r\n\r\n"))
	if err != nil || !strings.HasPrefix(string(buf[:n]), "HTTP/1.1 100 Continue\r\n\r\n") {
		t.Fatalf("allowed length with 100-continue: %q %v", buf[:n], err)
	}
	if _, err := io.WriteString(c, body); err != nil {
		t.Fatal(err)
	}
	if out := string(buf[n:]) + readAll(t, c); !strings.Contains(out, "HTTP/1.1 200 ") {
		t.Fatalf("after 100 Continue: %q", out)
	}
	if n := len(env.ix.Services()); n != 1 {
		t.Fatalf("%d registrations, want 1", n)
	}
}
