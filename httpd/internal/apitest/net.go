package apitest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// Servable is a surface serving a listener.
type Servable interface {
	Serve(ln net.Listener) error
	Shutdown(ctx context.Context) error
}

// Serve runs s on a loopback port until the test ends, then shuts it down
// (an error from Shutdown or Serve fails the test), and returns its address
// and a client for it.
func Serve(t testing.TB, s Servable) (addr string, client *fasthttp.HostClient) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	addr = ln.Addr().String()
	client = &fasthttp.HostClient{Addr: addr, MaxResponseBodySize: 256 << 20}
	t.Cleanup(func() {
		client.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), WaitBound)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return addr, client
}

// Response is one answer: its status, Content-Type, body, and Allow and
// X-Conductor-Miss headers.
type Response struct {
	Status int
	CT     string
	Body   []byte
	Allow  string
	Miss   string // the X-Conductor-Miss header
}

// Do sends one request through client to addr; ct "" sends no Content-Type
// header; hdr are header (name, value) pairs.
func Do(t testing.TB, client *fasthttp.HostClient, addr, method, path, ct string, body []byte, hdr ...string) Response {
	t.Helper()
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://" + addr + path)
	req.Header.SetMethod(method)
	if ct != "" {
		req.Header.SetContentType(ct)
	} else {
		req.Header.SetNoDefaultContentType(true)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	if body != nil {
		req.SetBody(body)
	}
	if err := client.DoTimeout(req, resp, WaitBound); err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return Response{Status: resp.StatusCode(), CT: string(resp.Header.ContentType()),
		Body: append([]byte(nil), resp.Body()...), Allow: string(resp.Header.Peek("Allow")),
		Miss: string(resp.Header.Peek("X-Conductor-Miss"))}
}

// DoAuth sends a JSON request (body "" sends none) with an optional bearer
// token.
func DoAuth(t testing.TB, client *fasthttp.HostClient, addr, method, path, token string, body string) Response {
	t.Helper()
	var req fasthttp.Request
	var resp fasthttp.Response
	req.SetRequestURI("http://" + addr + path)
	req.Header.SetMethod(method)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.SetContentType("application/json")
		req.SetBodyString(body)
	}
	if err := client.Do(&req, &resp); err != nil {
		t.Fatal(err)
	}
	return Response{Status: resp.StatusCode(), CT: string(resp.Header.ContentType()), Body: append([]byte(nil), resp.Body()...)}
}

// RequestCtx prepares a reusable RequestCtx carrying one POST, for calling
// a handler directly.
func RequestCtx(path, ct string, body []byte) *fasthttp.RequestCtx {
	var req fasthttp.Request
	req.Header.SetMethod("POST")
	req.SetRequestURI(path)
	req.Header.SetContentType(ct)
	req.SetBody(body)
	ctx := &fasthttp.RequestCtx{}
	ctx.Init(&req, nil, nil)
	return ctx
}

// WaitBound bounds every wait of the surfaces' tests for something that
// will happen: a condition, an answer, a dial, a shutdown. Waits return as
// soon as it happens, so the bound only decides when a failure is declared:
// generous, for a loaded machine running the race detector.
const WaitBound = 2 * time.Minute

// WaitFor polls cond every 5 ms until it holds or WaitBound passes.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(WaitBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// HeapInuse is the live heap after two collections.
func HeapInuse() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

// RawConn dials addr and sends s; the connection closes when the test ends.
func RawConn(t testing.TB, addr, s string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, WaitBound)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if s != "" {
		if _, err := io.WriteString(c, s); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// ReadStatus reads one response's status code and headers from c
// (WaitBound).
func ReadStatus(t testing.TB, c net.Conn) (int, string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(WaitBound))
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil {
		t.Fatalf("reading status line: %v", err)
	}
	var code int
	if _, err := fmt.Sscanf(line, "HTTP/1.1 %d", &code); err != nil {
		t.Fatalf("status line %q: %v", line, err)
	}
	var hdr strings.Builder
	for {
		l, err := br.ReadString('\n')
		if err != nil || l == "\r\n" {
			break
		}
		hdr.WriteString(l)
	}
	return code, hdr.String()
}
