package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// Conn is one keep-alive HTTP/1.1 client connection to an indexer: POST with
// Content-Length, then a status line, headers and a Content-Length body.
// That is all the indexer APIs need, and it keeps the client's own CPU low on
// a machine it shares with the server it measures: once its buffers have
// grown a request allocates nothing (TestFixedLoadZeroAllocs). The connection
// is dialled on first use and redialled once when a request on it fails.
// A Conn is not safe for concurrent use; make one per goroutine.
type Conn struct {
	addr    string
	timeout time.Duration
	c       net.Conn
	r       *bufio.Reader
	req     []byte // Post's request, reused
	body    []byte // the last response body, reused
}

// ErrLoadStatus is returned for a response with an unexpected status.
var ErrLoadStatus = errors.New("bench: unexpected HTTP status")

// maxResponseBytes bounds a response body (/dump of a large index is the
// largest the harness reads).
const maxResponseBytes = 256 << 20

// NewConn returns a connection to addr (host:port); timeout bounds each
// request, dial included (default 10s).
func NewConn(addr string, timeout time.Duration) *Conn {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	return &Conn{addr: addr, timeout: timeout}
}

// Close closes the connection; a later request dials again.
func (c *Conn) Close() {
	if c.c != nil {
		_ = c.c.Close()
		c.c = nil
	}
}

// Post sends body to path and returns the response body, valid until the next
// request on c. A status outside 2xx is an error wrapping ErrLoadStatus that
// quotes the start of the body.
func (c *Conn) Post(path, contentType string, body []byte) ([]byte, error) {
	c.req = AppendPost(c.req[:0], c.addr, path, contentType, body)
	status, out, err := c.RoundTrip(c.req)
	if err != nil {
		return nil, err
	}
	if status < 200 || status > 299 {
		return out, fmt.Errorf("%w %d from %s: %.300s", ErrLoadStatus, status, path, out)
	}
	return out, nil
}

// AppendPost appends an HTTP/1.1 POST of body to path on host, for RoundTrip.
func AppendPost(dst []byte, host, path, contentType string, body []byte) []byte {
	dst = append(dst, "POST "...)
	dst = append(dst, path...)
	dst = append(dst, " HTTP/1.1\r\nHost: "...)
	dst = append(dst, host...)
	dst = append(dst, "\r\nContent-Type: "...)
	dst = append(dst, contentType...)
	dst = append(dst, "\r\nContent-Length: "...)
	dst = strconv.AppendInt(dst, int64(len(body)), 10)
	dst = append(dst, "\r\n\r\n"...)
	return append(dst, body...)
}

// RoundTrip writes req (a whole request, as AppendPost makes) and reads the
// response: its status and body, valid until the next request on c. A
// failure closes the connection; the first failure is retried once on a new
// one (a keep-alive connection the server closed).
func (c *Conn) RoundTrip(req []byte) (status int, body []byte, err error) {
	for attempt := 0; ; attempt++ {
		status, body, err = c.roundTrip(req)
		if err == nil {
			return status, body, nil
		}
		c.Close()
		if attempt > 0 {
			return 0, nil, err
		}
	}
}

func (c *Conn) roundTrip(req []byte) (int, []byte, error) {
	if c.c == nil {
		nc, err := net.DialTimeout("tcp", c.addr, c.timeout)
		if err != nil {
			return 0, nil, err
		}
		c.c, c.r = nc, bufio.NewReaderSize(nc, 64<<10)
	}
	_ = c.c.SetDeadline(time.Now().Add(c.timeout))
	if _, err := c.c.Write(req); err != nil {
		return 0, nil, err
	}
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return 0, nil, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return 0, nil, fmt.Errorf("bench: bad status line %q", line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, nil, fmt.Errorf("bench: bad status line %q", line)
	}
	n, closeAfter := -1, false
	for {
		h, err := c.r.ReadSlice('\n')
		if err != nil {
			return 0, nil, err
		}
		if len(h) <= 2 {
			break
		}
		k, v, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			continue
		}
		v = bytes.TrimSpace(v)
		switch {
		case bytes.EqualFold(k, []byte("Content-Length")):
			if n, err = strconv.Atoi(string(v)); err != nil || n < 0 || n > maxResponseBytes {
				return 0, nil, fmt.Errorf("bench: bad Content-Length %q", v)
			}
		case bytes.EqualFold(k, []byte("Connection")) && bytes.EqualFold(v, []byte("close")):
			closeAfter = true
		}
	}
	if n < 0 {
		return 0, nil, errors.New("bench: response without Content-Length")
	}
	if cap(c.body) < n {
		c.body = make([]byte, n)
	}
	c.body = c.body[:n]
	if _, err := io.ReadFull(c.r, c.body); err != nil {
		return 0, nil, err
	}
	if closeAfter {
		c.Close()
	}
	return status, c.body, nil
}
