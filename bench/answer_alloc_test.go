//go:build !race

package bench

import (
	"fmt"
	"io"
	"net"
	"testing"
)

// TestFixedLoadZeroAllocs: once a worker has checked an answer, sending the
// request again and reading and checking the next identical answer allocates
// nothing, so neither the client (Conn) nor the answer check loads the client
// side of a measurement. The server is a raw loopback socket replaying one
// fixed response per request (it allocates nothing either: AllocsPerRun
// counts every goroutine's allocations).
func TestFixedLoadZeroAllocs(t *testing.T) {
	// JSON: Expect.Check allocates for it, so this also proves that an
	// identical body is not decoded again.
	body := []byte(`{"default":{"engine-a":{"longest_matched":1024}}}`)
	resp := fmt.Appendf(nil, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	o := LoadOptions{Addr: ln.Addr().String(), ContentType: "application/json", Body: []byte(`{}`),
		Expect: &Expect{Instance: "engine-a", LongestMatched: 1024}}
	newWorker, err := o.fixedWorkers()
	if err != nil {
		t.Fatal(err)
	}
	reqLen := len(AppendPost(nil, o.Addr, o.Path, o.ContentType, o.Body))
	go func() {
		s, err := ln.Accept()
		if err != nil {
			return
		}
		defer s.Close()
		buf := make([]byte, reqLen)
		for {
			if _, err := io.ReadFull(s, buf); err != nil {
				return
			}
			if _, err := s.Write(resp); err != nil {
				return
			}
		}
	}()
	w, err := newWorker(0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := 0; i < 3; i++ {
		if err := w.Do(); err != nil {
			t.Fatal(err)
		}
	}
	if n := testing.AllocsPerRun(200, func() {
		if err := w.Do(); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per checked request, want 0", n)
	}
}
