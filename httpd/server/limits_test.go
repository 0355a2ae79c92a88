package server_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/internal/apitest"
)

// TestDeclaredLengthIsNotReserved: a client that declares a large
// Content-Length and sends a little makes the server hold (and reserve) what
// arrived, not the declared size.
func TestDeclaredLengthIsNotReserved(t *testing.T) {
	const conns, declared = 20, 60 << 20
	lim := newTestLimiter(t, LimiterOptions{MaxInflightBodyBytes: 1 << 40, BodyGrace: time.Hour})
	env := startEnv(t, Options{MaxBodyBytes: 64 << 20, Limiter: lim}, core.Options{})
	base := heapInuse()
	// fasthttp reads up to 8 KiB of a body before the handler runs; send
	// a little more than that, then stall
	prefix := `{"model":"` + strings.Repeat("m", 9000)
	for range conns {
		rawConn(t, env.addr, fmt.Sprintf("POST /query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
			"Content-Length: %d\r\n\r\n%s", declared, prefix))
	}
	// every handler has reserved its first buffer and waits for the rest
	waitFor(t, "all bodies reading", func() bool { return lim.InflightBodyBytes() == conns*bodyChunk })
	if grown := heapInuse() - base; grown > 16<<20 {
		t.Fatalf("live heap grew by %d MiB for %d one-byte bodies declaring %d MiB each",
			grown>>20, conns, declared>>20)
	}
}

// TestInflightBodyBudget: bodies in flight share one budget, charged as
// their bytes arrive; a large body that finds it spent waits, then is
// answered 503 limit_exceeded with Retry-After, and the budget comes back
// when the holder finishes.
func TestInflightBodyBudget(t *testing.T) {
	lim := newTestLimiter(t, LimiterOptions{MaxInflightBodyBytes: 4 << 20, BodyGrace: time.Hour,
		BodyWait: 100 * time.Millisecond})
	env := startEnv(t, Options{MaxBodyBytes: 4 << 20, Limiter: lim}, core.Options{})
	body := jsonEnc(obj{"model", "m", "block_size", 16, "token_ids", seqTokens(100, 0)})
	pad := 2<<20 - len(body)
	full := string(body[:len(body)-1]) + `,"pad":"` + strings.Repeat("x", pad) + `"}`

	// the holder sends all but its last bytes: its 2 MiB buffer leaves 1.5
	// MiB of the large-body budget
	sent := len(full) - 10
	holder := rawConn(t, env.addr, fmt.Sprintf("POST /query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		"Content-Length: %d\r\n\r\n%s", len(full), full[:sent]))
	waitFor(t, "holder reserved", func() bool { return lim.InflightBodyBytes() == int64(len(full)) })

	// a second body of that size cannot grow past 512 KiB beside it (1.5 MiB
	// while it copies into 1 MiB): it waits, then is refused
	second := rawConn(t, env.addr, fmt.Sprintf("POST /query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		"Content-Length: %d\r\n\r\n%s", len(full), full[:sent]))
	code, hdr := readStatus(t, second)
	if code != 503 || !strings.Contains(hdr, "Retry-After: 1") {
		t.Fatalf("second body: %d\n%s", code, hdr)
	}
	// a chunked body is charged as it grows: 64 KiB chunks pass the budget too
	chunked := rawConn(t, env.addr, "POST /query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		"Transfer-Encoding: chunked\r\n\r\n")
	chunk := strings.Repeat("x", 64<<10)
	go func() {
		for range 40 {
			if _, err := fmt.Fprintf(chunked, "%x\r\n%s\r\n", len(chunk), chunk); err != nil {
				return
			}
		}
	}()
	if code, _ := readStatus(t, chunked); code != 503 {
		t.Fatalf("chunked body past the budget: %d", code)
	}
	// a small body is served while the large ones hold the budget
	if r := env.postJSON(t, "/query", string(body)); r.status != 200 {
		t.Fatalf("small body beside the holder: %d %s", r.status, r.body)
	}

	// the holder finishes (its unknown "pad" key is a 400, after the full read)
	if _, err := io.WriteString(holder, full[sent:]); err != nil {
		t.Fatal(err)
	}
	if code, _ := readStatus(t, holder); code != 400 {
		t.Fatalf("holder: %d", code)
	}
	waitFor(t, "budget released", func() bool { return lim.InflightBodyBytes() == 0 })
	if r := env.postJSON(t, "/query", string(body)); r.status != 200 {
		t.Fatalf("after release: %d %s", r.status, r.body)
	}
	if p := lim.Peak(); p > lim.MaxInflightBodyBytes() {
		t.Fatalf("in-flight peak %d past the budget %d", p, lim.MaxInflightBodyBytes())
	}
}

// TestBodyLengthMismatch: a body that ends before its Content-Length is 400
// invalid_request and releases its reservation.
func TestBodyLengthMismatch(t *testing.T) {
	lim := newTestLimiter(t, LimiterOptions{BodyGrace: time.Hour})
	env := startEnv(t, Options{Limiter: lim}, core.Options{})
	c := rawConn(t, env.addr, "POST /query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 20000\r\n\r\n"+
		`{"model":"`+strings.Repeat("m", 9000))
	waitFor(t, "reserved", func() bool { return lim.InflightBodyBytes() == bodyChunk })
	c.(*net.TCPConn).CloseWrite()
	if code, _ := readStatus(t, c); code != 400 {
		t.Fatalf("short body: %d", code)
	}
	waitFor(t, "released", func() bool { return lim.InflightBodyBytes() == 0 })
}

// rss is this process's resident set from /proc/self/statm.
func rss(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skip("no /proc/self/statm")
	}
	var size, res int64
	fmt.Sscan(string(b), &size, &res)
	return res * int64(os.Getpagesize())
}

// TestLargeBodiesAreNotRetained: after ten concurrent 8 MiB requests nothing
// keeps their buffers: the live heap returns to where it was, and the
// Limiter's release nudge returns the memory to the OS without any collection
// of the test's own.
func TestLargeBodiesAreNotRetained(t *testing.T) {
	lim := NewLimiter(0, 0, quietLogger())
	env := startEnv(t, Options{Limiter: lim}, core.Options{})
	// a valid 2M-token msgpack query body: 8 MiB of little-endian int32
	// raw connections, so no client-side pool keeps copies of the body
	req := []byte(string(mp(obj{"model", "m", "block_size", 16, "token_ids", leBin(seqTokens(2<<20, 0)...)})))
	req = append([]byte(fmt.Sprintf("POST /query HTTP/1.1\r\nHost: x\r\nContent-Type: application/msgpack\r\n"+
		"Content-Length: %d\r\n\r\n", len(req))), req...)
	env.postMP(t, "/query", mp(obj{"model", "m", "block_size", 16, "token_ids", []int32{1}}))
	heapBase := heapInuse()
	rssBase := rss(t)
	var wg sync.WaitGroup
	var bad atomic.Int32
	conns := make([]net.Conn, 10)
	for i := range conns {
		conns[i] = rawConn(t, env.addr, "")
	}
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// over MaxQueryTokens: 400 after the whole body was read and scanned
			if _, err := c.Write(req); err != nil {
				bad.Add(1)
				return
			}
			_ = c.SetReadDeadline(time.Now().Add(apitest.WaitBound))
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil || !strings.HasPrefix(line, "HTTP/1.1 400") {
				bad.Add(1)
			}
		}()
	}
	wg.Wait()
	req = nil
	if bad.Load() != 0 {
		t.Fatalf("%d requests not answered 400", bad.Load())
	}
	if !raceEnabled { // (make unit runs this without -race)
		waitFor(t, "RSS back near its base", func() bool { return rss(t)-rssBase < 48<<20 })
	}
	if grown := heapInuse() - heapBase; grown > 8<<20 {
		t.Fatalf("live heap grew by %d MiB after ten 8 MiB requests", grown>>20)
	}
}

// TestLargeQueryBodiesReuseBuffers: a stream of million-token queries (the
// largest the default token limit allows, 4 MiB msgpack bodies) reads each
// body into the buffer the last one left: after the first, nothing is
// dropped (so no release
// nudge, and no collection of a large heap per few queries), and one buffer
// of the body's size is kept between them. An 8 MiB body over the token
// limit is still dropped, not kept.
func TestLargeQueryBodiesReuseBuffers(t *testing.T) {
	lim := NewLimiter(0, 0, quietLogger())
	env := startEnv(t, Options{Limiter: lim}, core.Options{})
	body := mp(obj{"model", "m", "block_size", 16, "token_ids", leBin(seqTokens(1<<20, 0)...)})
	var first int64 // the first body outgrows a buffer on its way up
	for i := range 10 {
		if r := env.postMP(t, "/query", body); r.status != 200 {
			t.Fatalf("query %d: %d %s", i, r.status, r.body)
		}
		if i == 0 {
			first = lim.DroppedBytes()
		} else if d := lim.DroppedBytes() - first; d != 0 {
			t.Fatalf("query %d: %d bytes of body buffers dropped", i, d)
		}
		if n, bytes := env.c.BigKept(); n != 1 || bytes < len(body) || bytes > 2*len(body) {
			t.Fatalf("query %d: %d buffers kept, %d bytes; want one of about %d", i, n, bytes, len(body))
		}
	}
	over := mp(obj{"model", "m", "block_size", 16, "token_ids", leBin(seqTokens(2<<20, 0)...)})
	if r := env.postMP(t, "/query", over); r.status != 400 {
		t.Fatalf("2M tokens: %d %s", r.status, r.body)
	}
	if d := lim.DroppedBytes(); d < int64(len(over)) {
		t.Fatalf("the 8 MiB body's buffer was kept: %d bytes dropped", d)
	}
}

// TestConnLimiterRefusesPastMax: when every connection is inside a request
// (none idle to close, no control slot), a new one gets 503 and is closed; a
// slot frees when a connection closes.
func TestConnLimiterRefusesPastMax(t *testing.T) {
	lim := newTestLimiter(t, LimiterOptions{MaxConns: 4, ControlConns: -1, BodyGrace: time.Hour})
	env := startEnv(t, Options{Limiter: lim}, core.Options{})
	var held []net.Conn
	for range 4 {
		// inside a handler, reading a body that does not come
		held = append(held, rawConn(t, env.addr, "POST /query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
			"Content-Length: 20000\r\n\r\n"+`{"model":"`+strings.Repeat("m", 9000)))
	}
	waitFor(t, "4 inside a request", func() bool { return lim.InflightBodyBytes() == 4*bodyChunk })
	extra := rawConn(t, env.addr, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
	if code, _ := readStatus(t, extra); code != 503 {
		t.Fatalf("fifth connection: %d", code)
	}
	if _, err := extra.Read(make([]byte, 1)); err == nil {
		t.Fatal("refused connection left open")
	}
	held[0].Close()
	waitFor(t, "slot freed", func() bool { return lim.Open() == 3 })
	if r := env.do(t, "GET", "/health", "", nil); r.status != 200 {
		t.Fatalf("after a slot freed: %d", r.status)
	}
	if !strings.Contains(string(lim.MetricsText()), "conductor_http_connections_refused_total 1") {
		t.Fatal("refusal not counted")
	}
}

// flakyListener fails its first n accepts with EMFILE, as a process out of
// file descriptors does.
type flakyListener struct {
	net.Listener
	n atomic.Int32
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.n.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestAcceptErrorsAreNotFatal: EMFILE from accept is retried with backoff;
// Serve keeps serving.
func TestAcceptErrorsAreNotFatal(t *testing.T) {
	lim := NewLimiter(0, 0, quietLogger())
	ix := core.New(core.Options{Logger: quietLogger()})
	s, err := newServer(ix, newCoreRegistrar(ix), Options{Logger: quietLogger(), Limiter: lim})
	if err != nil {
		t.Fatal(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &flakyListener{Listener: inner}
	ln.n.Store(5)
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	c := rawConn(t, inner.Addr().String(), "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
	if code, _ := readStatus(t, c); code != 200 {
		t.Fatalf("health after accept errors: %d", code)
	}
	if !strings.Contains(string(lim.MetricsText()), "conductor_http_accept_errors_total 5") {
		t.Fatalf("accept errors not counted:\n%s", lim.MetricsText())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatalf("serve: %v", err)
	}
	if retryableAccept(net.ErrClosed) || !retryableAccept(syscall.ENFILE) {
		t.Fatal("retryableAccept")
	}
}

// TestShutdownDrainsRequestsInProgress: shutdown closes at once the
// connections with no request in progress (a new one that sent nothing, an
// idle keep-alive one), and drains the others: a request in its handler, one
// whose request line is half sent and one whose body is still arriving each
// finish and are answered, with Connection: close, once the rest arrives.
// Read and idle timeouts are an hour, so nothing here waits them out.
func TestShutdownDrainsRequestsInProgress(t *testing.T) {
	ix := core.New(core.Options{Logger: quietLogger()})
	br := apitest.NewBlockingRegistrar(ix)
	lim := newTestLimiter(t, LimiterOptions{})
	s, err := newServer(ix, br, Options{Logger: quietLogger(), ReadTimeout: time.Hour, IdleTimeout: time.Hour, Limiter: lim})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	addr := ln.Addr().String()

	query := `{"model":"m","block_size":16,"token_ids":[1,2,3]}`
	const line = "POST /query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
	full := fmt.Sprintf(line, len(query), query)
	half := rawConn(t, addr, full[:15]) // "POST /query HTT"
	cut := len(full) - len(query)/2
	arriving := rawConn(t, addr, full[:cut]) // headers and half the body
	fresh := rawConn(t, addr, "")
	idle := rawConn(t, addr, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
	if code, _ := readStatus(t, idle); code != 200 {
		t.Fatal(code)
	}
	body := string(mp(baseReg()))
	busy := rawConn(t, addr, fmt.Sprintf("POST /register HTTP/1.1\r\nHost: x\r\nContent-Type: application/msgpack\r\n"+
		"Content-Length: %d\r\n\r\n%s", len(body), body))
	<-br.Entered
	waitFor(t, "the server to read the two partial requests", func() bool { return lim.ReadingConns() == 2 })

	ctx, cancel := context.WithTimeout(context.Background(), apitest.WaitBound)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(ctx) }()
	for _, c := range []net.Conn{fresh, idle} {
		_ = c.SetReadDeadline(time.Now().Add(apitest.WaitBound))
		buf := make([]byte, 512)
		for {
			_, err := c.Read(buf)
			if err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatal("connection with no request in progress left open during shutdown")
				}
				break
			}
		}
	}
	// The requests in progress are still there: each completes now.
	if _, err := io.WriteString(half, full[15:]); err != nil {
		t.Fatalf("half-sent request cut at shutdown: %v", err)
	}
	if _, err := io.WriteString(arriving, full[cut:]); err != nil {
		t.Fatalf("request with its body arriving cut at shutdown: %v", err)
	}
	for name, c := range map[string]net.Conn{"half-sent request line": half, "body arriving": arriving} {
		code, hdr := readStatus(t, c)
		if code != 200 || !strings.Contains(strings.ToLower(hdr), "connection: close") {
			t.Fatalf("%s, finished during shutdown: %d %q", name, code, hdr)
		}
	}
	close(br.Release)
	if code, _ := readStatus(t, busy); code != 200 {
		t.Fatalf("in-flight request: %d", code)
	}
	if err := <-shut; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}

// TestShutdownBoundedByContext: a request in progress that never completes
// holds shutdown only until its context ends, which Shutdown then reports.
func TestShutdownBoundedByContext(t *testing.T) {
	ix := core.New(core.Options{Logger: quietLogger()})
	lim := newTestLimiter(t, LimiterOptions{})
	s, err := newServer(ix, newCoreRegistrar(ix), Options{Logger: quietLogger(), ReadTimeout: time.Hour, IdleTimeout: time.Hour, Limiter: lim})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	c := rawConn(t, ln.Addr().String(), "POST /query HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
	waitFor(t, "the server to read the partial request", func() bool { return lim.ReadingConns() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("shutdown with a request that never completes: %v, want the context's deadline", err)
	}
	_ = c.Close()
}
