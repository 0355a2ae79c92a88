package sim

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

// httpConn is one keep-alive HTTP/1.1 connection with a minimal client
// (POST with Content-Length, status line, Content-Length body): enough for the
// indexer APIs and cheap enough not to dominate a 2-core machine's CPU the way
// net/http's client would. Not safe for concurrent use.
type httpConn struct {
	addr    string
	c       net.Conn
	r       *bufio.Reader
	req     []byte
	body    []byte
	timeout time.Duration
}

// ErrStatus wraps a non-2xx response.
var ErrStatus = errors.New("sim: unexpected HTTP status")

func newHTTPConn(addr string, timeout time.Duration) *httpConn {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	return &httpConn{addr: addr, timeout: timeout}
}

func (h *httpConn) close() {
	if h.c != nil {
		_ = h.c.Close()
		h.c = nil
	}
}

// post sends body and returns the response body (valid until the next call).
// A broken connection is redialled once.
func (h *httpConn) post(path, contentType string, body []byte) ([]byte, error) {
	for attempt := 0; ; attempt++ {
		out, status, err := h.roundTrip(path, contentType, body)
		if err != nil {
			h.close()
			if attempt == 0 {
				continue
			}
			return nil, err
		}
		if status < 200 || status > 299 {
			return out, fmt.Errorf("%w %d from %s: %.300s", ErrStatus, status, path, out)
		}
		return out, nil
	}
}

func (h *httpConn) roundTrip(path, contentType string, body []byte) ([]byte, int, error) {
	if h.c == nil {
		c, err := net.DialTimeout("tcp", h.addr, h.timeout)
		if err != nil {
			return nil, 0, err
		}
		h.c, h.r = c, bufio.NewReaderSize(c, 64<<10)
	}
	_ = h.c.SetDeadline(time.Now().Add(h.timeout))
	h.req = fmt.Appendf(h.req[:0], "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n",
		path, h.addr, contentType, len(body))
	h.req = append(h.req, body...)
	if _, err := h.c.Write(h.req); err != nil {
		return nil, 0, err
	}
	line, err := h.r.ReadSlice('\n')
	if err != nil {
		return nil, 0, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return nil, 0, fmt.Errorf("sim: bad status line %q", line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return nil, 0, fmt.Errorf("sim: bad status line %q", line)
	}
	n, closeAfter := -1, false
	for {
		hl, err := h.r.ReadSlice('\n')
		if err != nil {
			return nil, 0, err
		}
		if len(hl) <= 2 {
			break
		}
		k, v, ok := bytes.Cut(hl, []byte(":"))
		if !ok {
			continue
		}
		v = bytes.TrimSpace(v)
		switch {
		case bytes.EqualFold(k, []byte("Content-Length")):
			if n, err = strconv.Atoi(string(v)); err != nil || n < 0 || n > 256<<20 {
				return nil, 0, fmt.Errorf("sim: bad Content-Length %q", v)
			}
		case bytes.EqualFold(k, []byte("Connection")) && bytes.EqualFold(v, []byte("close")):
			closeAfter = true
		}
	}
	if n < 0 {
		return nil, 0, errors.New("sim: response without Content-Length")
	}
	if cap(h.body) < n {
		h.body = make([]byte, n)
	}
	h.body = h.body[:n]
	if _, err := io.ReadFull(h.r, h.body); err != nil {
		return nil, 0, err
	}
	if closeAfter {
		h.close()
	}
	return h.body, status, nil
}
