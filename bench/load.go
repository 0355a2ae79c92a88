package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// LoadOptions configure a closed-loop HTTP load run: Connections keep-alive
// connections, each sending Body and waiting for the response before the next
// request. The zero value needs only Addr and Body.
type LoadOptions struct {
	// Addr is the server's host:port.
	Addr string
	// Path is the request path. Default "/query".
	Path string
	// ContentType of every request. Default "application/msgpack".
	ContentType string
	// Body of every request.
	Body []byte
	// Connections is the number of concurrent connections (one goroutine each).
	// Default 4.
	Connections int
	// Requests stops the run after this many responses in total (spread over
	// the connections); 0 means run for Duration.
	Requests int
	// Duration of a timed run. Default 5s (ignored when Requests > 0).
	Duration time.Duration
	// Warmup requests per connection, sent before measuring. Default 100;
	// negative means none.
	Warmup int
	// ExpectStatus is the status every response must have. Default 200.
	ExpectStatus int
	// Expect is checked against every response body (ErrLoadAnswer fails the
	// run). Required when ExpectStatus is 200: a run that only checks the
	// status would score a server answering 200 `{}`. A body identical to the
	// last one its connection checked is accepted without decoding it again,
	// so the check costs a comparison and no allocation per request
	// (TestLoadConnZeroAllocs).
	Expect *Expect
}

// LoadResult summarises a load run. Latencies are per request, measured from
// writing the request to reading the whole response.
type LoadResult struct {
	Requests      int
	Elapsed       time.Duration
	RPS           float64
	P50, P90, P99 time.Duration
	P999          time.Duration
	Max           time.Duration
	ResponseBytes int // of the last response
}

func (r LoadResult) String() string {
	return fmt.Sprintf("%d requests in %v: %.0f req/s, p50 %v, p90 %v, p99 %v, max %v",
		r.Requests, r.Elapsed.Round(time.Millisecond), r.RPS, r.P50, r.P90, r.P99, r.Max)
}

// ErrLoadStatus is returned when a response has an unexpected status.
var ErrLoadStatus = errors.New("bench: unexpected HTTP status")

// RunLoad runs the load described by o against a live server. Every response
// must have o.ExpectStatus and, for 200, the answer o.Expect describes.
func RunLoad(ctx context.Context, o LoadOptions) (LoadResult, error) {
	if o.Path == "" {
		o.Path = "/query"
	}
	if o.ContentType == "" {
		o.ContentType = "application/msgpack"
	}
	if o.Connections <= 0 {
		o.Connections = 4
	}
	if o.Duration <= 0 {
		o.Duration = 5 * time.Second
	}
	if o.Warmup == 0 {
		o.Warmup = 100
	}
	if o.ExpectStatus == 0 {
		o.ExpectStatus = 200
	}
	if o.ExpectStatus == 200 && o.Expect == nil {
		return LoadResult{}, errors.New("bench: RunLoad needs LoadOptions.Expect to check the answers")
	}
	req := fmt.Appendf(nil, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n",
		o.Path, o.Addr, o.ContentType, len(o.Body))
	req = append(req, o.Body...)

	conns := make([]*loadConn, o.Connections)
	for i := range conns {
		c, err := net.Dial("tcp", o.Addr)
		if err != nil {
			return LoadResult{}, err
		}
		defer c.Close()
		conns[i] = &loadConn{c: c, r: bufio.NewReaderSize(c, 64<<10), req: req, want: o.ExpectStatus,
			ct: o.ContentType, expect: o.Expect}
		for w := 0; w < o.Warmup; w++ {
			if err := conns[i].do(); err != nil {
				return LoadResult{}, err
			}
		}
	}

	var remaining atomic.Int64
	remaining.Store(int64(o.Requests))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if o.Requests <= 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeout(ctx, o.Duration)
		defer stop()
	}
	var wg sync.WaitGroup
	errs := make([]error, len(conns))
	start := time.Now()
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.lat = make([]time.Duration, 0, 1<<16)
			for ctx.Err() == nil {
				if o.Requests > 0 && remaining.Add(-1) < 0 {
					return
				}
				t0 := time.Now()
				if err := c.do(); err != nil {
					errs[i] = err
					cancel()
					return
				}
				c.lat = append(c.lat, time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return LoadResult{}, err
	}
	var all []time.Duration
	for _, c := range conns {
		all = append(all, c.lat...)
	}
	slices.Sort(all)
	res := LoadResult{Requests: len(all), Elapsed: elapsed, ResponseBytes: conns[0].lastLen}
	if len(all) > 0 {
		q := func(p float64) time.Duration { return all[min(len(all)-1, int(p*float64(len(all))))] }
		res.RPS = float64(len(all)) / elapsed.Seconds()
		res.P50, res.P90, res.P99, res.P999, res.Max = q(0.50), q(0.90), q(0.99), q(0.999), all[len(all)-1]
	}
	return res, nil
}

// loadConn is one keep-alive HTTP/1.1 connection with a minimal response
// reader (status line, Content-Length, body) and the answer check.
type loadConn struct {
	c       net.Conn
	r       *bufio.Reader
	req     []byte
	want    int
	ct      string
	expect  *Expect
	body    []byte // the last response body (reused)
	checked []byte // the last body that passed Expect.Check
	lat     []time.Duration
	lastLen int
}

func (c *loadConn) do() error {
	if _, err := c.c.Write(c.req); err != nil {
		return err
	}
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return fmt.Errorf("bench: bad status line %q", line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return fmt.Errorf("bench: bad status line %q", line)
	}
	n := -1
	for {
		h, err := c.r.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(h) <= 2 {
			break
		}
		if k, v, ok := bytes.Cut(h, []byte(":")); ok && bytes.EqualFold(k, []byte("Content-Length")) {
			if n, err = strconv.Atoi(string(bytes.TrimSpace(v))); err != nil {
				return fmt.Errorf("bench: bad Content-Length %q", v)
			}
		}
	}
	if n < 0 {
		return errors.New("bench: response without Content-Length")
	}
	c.body = slices.Grow(c.body[:0], n)[:n]
	if _, err := io.ReadFull(c.r, c.body); err != nil {
		return err
	}
	c.lastLen = n
	if status != c.want {
		return fmt.Errorf("%w: %d", ErrLoadStatus, status)
	}
	if c.expect == nil || c.checked != nil && bytes.Equal(c.body, c.checked) {
		return nil
	}
	if err := c.expect.Check(c.ct, c.body); err != nil {
		return err
	}
	c.checked = append(c.checked[:0], c.body...)
	return nil
}
