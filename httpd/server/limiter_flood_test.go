package server_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/internal/apitest"
)

// watchInflight samples the Limiter's gauges until stop is closed and
// records the largest values seen.
type watch struct {
	maxInflight, maxOpen atomic.Int64
	stop                 chan struct{}
	once                 sync.Once
	done                 sync.WaitGroup
}

func watchLimiter(g *Limiter) *watch {
	w := &watch{stop: make(chan struct{})}
	w.done.Go(func() {
		for {
			for v, m := g.InflightBodyBytes(), w.maxInflight.Load(); v > m && !w.maxInflight.CompareAndSwap(m, v); m = w.maxInflight.Load() {
			}
			for v, m := int64(g.Open()), w.maxOpen.Load(); v > m && !w.maxOpen.CompareAndSwap(m, v); m = w.maxOpen.Load() {
			}
			select {
			case <-w.stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	})
	return w
}

func (w *watch) end() { w.once.Do(func() { close(w.stop) }); w.done.Wait() }

// smallQuery is a 100-token JSON query.
func smallQuery() string {
	return jsonEnc(obj{"model", "m", "block_size", 16, "token_ids", seqTokens(100, 0)})
}

// TestBodyBudgetCountsReceivedBytes: clients that declare large bodies and
// send a little of each hold what arrived, not what they declared, so small
// /query, /register and /unregister requests are served beside them; the
// stalled bodies are cut by the rate rule and their budget comes back.
func TestBodyBudgetCountsReceivedBytes(t *testing.T) {
	const attackers, sent = 16, 70000
	lim := newTestLimiter(t, LimiterOptions{MaxInflightBodyBytes: 4 << 20, BodyGrace: 300 * time.Millisecond})
	env := startEnv(t, Options{MaxBodyBytes: 1 << 20, Limiter: lim}, core.Options{})
	w := watchLimiter(lim)
	defer w.end()

	var held []net.Conn
	for range attackers {
		held = append(held, rawConn(t, env.addr, fmt.Sprintf("POST /query HTTP/1.1\r\nHost: x\r\n"+
			"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"model\":\"%s",
			1<<20-1, strings.Repeat("m", sent-10))))
	}
	// and one chunked body that stalls after its first chunk
	held = append(held, rawConn(t, env.addr, "POST /query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		"Transfer-Encoding: chunked\r\n\r\n"+fmt.Sprintf("%x\r\n%s\r\n", sent, strings.Repeat("x", sent))))
	waitFor(t, "the stalled bodies in", func() bool { return lim.InflightBodyBytes() >= attackers*(64<<10) })

	for i := range 10 {
		if r := env.postJSON(t, "/query", smallQuery()); r.status != 200 {
			t.Fatalf("small query %d beside stalled bodies: %d %s", i, r.status, r.body)
		}
	}
	reg := baseReg()
	if r := env.postJSON(t, "/register", jsonEnc(reg)); r.status != 200 {
		t.Fatalf("register beside stalled bodies: %d %s", r.status, r.body)
	}
	if r := env.postJSON(t, "/unregister", jsonEnc(obj{"instance_id", reg[7], "dp_rank", 0})); r.status != 200 {
		t.Fatalf("unregister beside stalled bodies: %d %s", r.status, r.body)
	}
	// each stalled body holds at most twice what it sent, plus a chunk
	if n, most := lim.InflightBodyBytes(), int64(attackers+1)*(2*sent+bodyChunk); n > most {
		t.Fatalf("%d bytes reserved for %d bodies of %d bytes received", n, attackers+1, sent)
	}

	for i, c := range held {
		if code, _ := readStatus(t, c); code != 408 {
			t.Fatalf("stalled body %d: %d, want 408", i, code)
		}
	}
	waitFor(t, "budget back", func() bool { return lim.InflightBodyBytes() == 0 })
	if n := lim.Counter("conductor_http_body_too_slow_total"); n != attackers+1 {
		t.Fatalf("conductor_http_body_too_slow_total %d, want %d", n, attackers+1)
	}
	w.end()
	if m := w.maxInflight.Load(); m > lim.MaxInflightBodyBytes() {
		t.Fatalf("in-flight bytes reached %d, past the budget %d", m, lim.MaxInflightBodyBytes())
	}
}

// TestLargeBodyFloodKeepsSmallRequests: while clients flood the server with
// large bodies, many more than the budget holds, each arriving at a steady
// few MiB/s, a small /query and /health are answered 200 every time, the
// in-flight gauge never passes the budget, and large bodies still complete
// (the ones that started first finish).
func TestLargeBodyFloodKeepsSmallRequests(t *testing.T) {
	const flooders, size, piece = 16, 1 << 20, 64 << 10 // four such bodies declare the whole budget
	lim := newTestLimiter(t, LimiterOptions{MaxInflightBodyBytes: 4 << 20, BodyWait: time.Second})
	env := startEnv(t, Options{MaxBodyBytes: 2 << 20, Limiter: lim}, core.Options{})
	w := watchLimiter(lim)
	defer w.end()

	// a body read whole, then refused for its unknown key (400)
	big := `{"pad":"` + strings.Repeat("x", size-10) + `"}`
	req := []byte(fmt.Sprintf("POST /query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		"Content-Length: %d\r\n\r\n%s", len(big), big))
	var served, busy atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range flooders {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.DialTimeout("tcp", env.addr, 2*time.Second)
				if err != nil {
					return
				}
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				go func() { // 64 KiB every 20 ms: about 3 MiB/s
					tick := time.NewTicker(20 * time.Millisecond)
					defer tick.Stop()
					for off := 0; off < len(req); off += piece {
						if _, err := c.Write(req[off:min(off+piece, len(req))]); err != nil {
							return
						}
						<-tick.C
					}
				}()
				line, _ := bufio.NewReader(c).ReadString('\n')
				c.Close()
				switch {
				case strings.HasPrefix(line, "HTTP/1.1 400"):
					served.Add(1)
				case strings.HasPrefix(line, "HTTP/1.1 503"):
					busy.Add(1)
				}
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	waitFor(t, "the flood holding half the budget", func() bool { return lim.InflightBodyBytes() >= 2<<20 })

	for i := range 30 {
		if r := env.postJSON(t, "/query", smallQuery()); r.status != 200 {
			t.Fatalf("small query %d in the flood: %d %s", i, r.status, r.body)
		}
		if r := env.do(t, "GET", "/health", "", nil); r.status != 200 {
			t.Fatalf("health %d in the flood: %d %s", i, r.status, r.body)
		}
	}
	waitFor(t, "large bodies served in the flood", func() bool { return served.Load() > 0 })
	if m := w.maxInflight.Load(); m > lim.MaxInflightBodyBytes() {
		t.Fatalf("in-flight bytes reached %d, past the budget %d", m, lim.MaxInflightBodyBytes())
	}
	if p := lim.Peak(); p > lim.MaxInflightBodyBytes() {
		t.Fatalf("in-flight peak %d past the budget %d", p, lim.MaxInflightBodyBytes())
	}
	t.Logf("flood: %d large bodies served, %d refused 503", served.Load(), busy.Load())
}

// dialFrom dials addr from the loopback address src (127.0.0.x).
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Skipf("cannot dial from %s: %v", src, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// respConn is a client connection that reads whole responses.
type respConn struct {
	net.Conn
	br *bufio.Reader
}

func newRespConn(c net.Conn) *respConn { return &respConn{Conn: c, br: bufio.NewReader(c)} }

// get sends a GET of path on c and returns the status, having read the
// whole response (apitest.WaitBound).
func (c *respConn) get(t *testing.T, path string) int {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(apitest.WaitBound))
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	r, err := http.ReadResponse(c.br, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	_, _ = io.Copy(io.Discard, r.Body)
	r.Body.Close()
	return r.StatusCode
}

// get is a GET of path on a connection of its own.
func get(t *testing.T, c net.Conn, path string) int {
	t.Helper()
	return newRespConn(c).get(t, path)
}

// TestConnCapIdleFlood: one client holding more idle connections than the
// cap (all on 127.0.0.1, as the victim) does not keep anyone out: new
// connections take the slots of its longest-idle ones, so /health, /metrics
// and /query are answered 200 and the open count never passes the cap.
func TestConnCapIdleFlood(t *testing.T) {
	const maxConns = 64
	lim := newTestLimiter(t, LimiterOptions{MaxConns: maxConns})
	env := startEnv(t, Options{Limiter: lim}, core.Options{})
	w := watchLimiter(lim)
	defer w.end()
	for i := range 2 * maxConns {
		s := ""
		if i%2 == 1 {
			s = "GET /health HTT" // part of a request line
		}
		rawConn(t, env.addr, s)
	}
	waitFor(t, "the cap held", func() bool { return lim.Open() >= maxConns-4 })
	for i := range 5 {
		for _, path := range []string{"/health", "/metrics"} {
			if code := get(t, rawConn(t, env.addr, ""), path); code != 200 {
				t.Fatalf("%s %d at the cap: %d", path, i, code)
			}
		}
		c := rawConn(t, env.addr, "")
		body := smallQuery()
		fmt.Fprintf(c, "POST /query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			len(body), body)
		if code, _ := readStatus(t, c); code != 200 {
			t.Fatalf("/query %d at the cap: %d", i, code)
		}
	}
	if m := w.maxOpen.Load(); m > maxConns {
		t.Fatalf("open connections reached %d, past the cap %d", m, maxConns)
	}
	if lim.Counter("conductor_http_connections_evicted_total") == 0 {
		t.Fatal("no idle connection closed for room")
	}
}

// TestConnCapShareProtectsOthers: a client (127.0.0.2) opening connections
// past the cap recycles its own idle ones and never takes the idle
// keep-alive connections of a client holding fewer (127.0.0.1); a new
// connection of that client takes one of the heavy client's.
func TestConnCapShareProtectsOthers(t *testing.T) {
	const maxConns = 64
	lim := newTestLimiter(t, LimiterOptions{MaxConns: maxConns})
	env := startEnv(t, Options{Limiter: lim}, core.Options{})
	var mine []*respConn
	for range 3 {
		c := newRespConn(dialFrom(t, "127.0.0.1", env.addr))
		if code := c.get(t, "/health"); code != 200 {
			t.Fatal(code)
		}
		mine = append(mine, c)
	}
	for range 2 * maxConns {
		dialFrom(t, "127.0.0.2", env.addr)
	}
	waitFor(t, "every connection admitted or refused", func() bool {
		return lim.Counter("conductor_http_connections_accepted_total")+
			lim.Counter("conductor_http_connections_refused_total") >= len(mine)+2*maxConns
	})
	for i, c := range mine {
		if code := c.get(t, "/health"); code != 200 {
			t.Fatalf("kept connection %d: %d", i, code)
		}
	}
	if code := get(t, dialFrom(t, "127.0.0.1", env.addr), "/health"); code != 200 {
		t.Fatalf("new connection of the light client: %d", code)
	}
}

// TestControlSlotsAnswerHealth: with every ordinary slot inside a request
// (bodies that do not come), /health and /metrics are answered on a control
// slot and the connection closed; any other request there is 503, and a
// control slot held without a request is closed.
func TestControlSlotsAnswerHealth(t *testing.T) {
	lim := newTestLimiter(t, LimiterOptions{MaxConns: 8, ControlConns: 2, BodyGrace: time.Hour})
	env := startEnv(t, Options{Limiter: lim}, core.Options{})
	slow := "POST /query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
		"Content-Length: 20000\r\n\r\n" + `{"model":"` + strings.Repeat("m", 9000)
	for i := range 6 {
		rawConn(t, env.addr, slow)
		waitFor(t, "inside a request", func() bool { return lim.InflightBodyBytes() >= int64(i+1)*bodyChunk })
	}
	// past the ordinary slots: the same request on a control slot is refused,
	// and the slot is free again once the refused connection is closed
	extra := []net.Conn{rawConn(t, env.addr, slow), rawConn(t, env.addr, slow)}
	for _, c := range extra {
		if code, _ := readStatus(t, c); code != 503 {
			t.Fatalf("slow body on a control slot: %d", code)
		}
		c.Close()
	}
	waitFor(t, "the refused connections closed", func() bool { return lim.Open() == 6 })
	for _, path := range []string{"/health", "/metrics", "/health"} {
		c := rawConn(t, env.addr, "")
		if code := get(t, c, path); code != 200 {
			t.Fatalf("%s at the cap: %d", path, code)
		}
		_ = c.SetReadDeadline(time.Now().Add(apitest.WaitBound))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Fatalf("%s: control connection left open (%v)", path, err)
		}
	}
	// both control slots held without a request: refused, until they close
	waitFor(t, "control slots free", func() bool { return lim.Open() == 6 })
	rawConn(t, env.addr, "")
	rawConn(t, env.addr, "")
	waitFor(t, "control slots held", func() bool { return lim.Open() == 8 })
	if code, _ := readStatus(t, rawConn(t, env.addr, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")); code != 503 {
		t.Fatalf("health with the control slots held: %d", code)
	}
	waitFor(t, "idle control slots closed", func() bool { return lim.Open() == 6 })
	if code := get(t, rawConn(t, env.addr, ""), "/health"); code != 200 {
		t.Fatalf("health after the control slots freed: %d", code)
	}
}
