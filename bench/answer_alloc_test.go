//go:build !race

package bench

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"testing"
)

// TestLoadConnZeroAllocs: once a connection has checked an answer, reading and
// checking the next identical one allocates nothing, so the answer check does
// not load the client side of a measurement. The server is a raw loopback
// socket replaying one fixed response per request (it allocates nothing
// either: AllocsPerRun counts every goroutine's allocations).
func TestLoadConnZeroAllocs(t *testing.T) {
	// JSON: Expect.Check allocates for it, so this also proves that an
	// identical body is not decoded again.
	body := []byte(`{"default":{"engine-a":{"longest_matched":1024}}}`)
	resp := fmt.Appendf(nil, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	req := []byte("POST /query HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		s, err := ln.Accept()
		if err != nil {
			return
		}
		defer s.Close()
		buf := make([]byte, len(req))
		for {
			if _, err := io.ReadFull(s, buf); err != nil {
				return
			}
			if _, err := s.Write(resp); err != nil {
				return
			}
		}
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := &loadConn{c: nc, r: bufio.NewReaderSize(nc, 64<<10), req: req, want: 200, ct: "application/json",
		expect: &Expect{Instance: "engine-a", LongestMatched: 1024}}
	for i := 0; i < 3; i++ {
		if err := c.do(); err != nil {
			t.Fatal(err)
		}
	}
	if n := testing.AllocsPerRun(200, func() {
		if err := c.do(); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per checked request, want 0", n)
	}
}
