package server

import (
	"errors"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// bodyChunk is a body buffer's first size and the least it grows by.
const bodyChunk = 16 << 10

// readBody returns the request body, read from the connection into st.buf;
// maxBytes is the surface's body limit (Options.MaxBodyBytes, or a limit
// of its own such as the Dynamo listener's).
//
// The server streams request bodies (fasthttp StreamRequestBody), so nothing
// is allocated or reserved from a declared Content-Length: the buffer starts
// at bodyChunk (or the declared length, when smaller) and doubles as bytes
// arrive (nextBodyCap), each growth reserved from the Limiter's body budget
// before it is allocated and held in st.reserved until the request ends
// (released by putState). A pooled buffer's capacity is reserved the same
// way as the body grows over it. Reads after the first have a deadline: the
// body must keep to the Limiter's MinBodyRate after BodyGrace, and never past
// the server's ReadTimeout (see Limiter, "Request bodies").
//
// Errors: 413 limit_exceeded when the body is larger than maxBytes
// (declared or as it arrives) or its growth could never fit the large-body
// budget, 503 limit_exceeded when the budget is spent (for a large body,
// after waiting for it), 408 limit_exceeded when the body arrives too slowly,
// 400 invalid_request when it ends early or cannot be read. After an error
// the connection is closed rather than drained and the reservation is handed
// back at once.
//
// A handler called without a body stream (tests, embedding) gets
// ctx.PostBody() unchanged.
func (c *Core) readBody(ctx *fasthttp.RequestCtx, st *State, maxBytes int) ([]byte, *RequestError) {
	stream := ctx.RequestBodyStream()
	if stream == nil {
		return ctx.PostBody(), nil
	}
	limit := int64(maxBytes)
	declared := declaredLength(ctx)
	if declared > limit {
		ctx.SetConnectionClose()
		return nil, BodyTooLarge(maxBytes)
	}
	g := c.lim
	tc, _ := ctx.Conn().(*trackedConn)
	h := &st.reserved
	g.beginBody(h, tc, declared)
	back := st.buf[:0] // the buffer; its capacity is reserved as buf grows over it
	buf := back[:0:0]  // the reserved part of back
	// clock is when the rate rule's time began, moved on by budget waits;
	// set at the second read (the first is served from what fasthttp read
	// with the headers, or is covered by its ReadTimeout).
	var clock, deadline time.Time
	rated := tc != nil && g.o.MinBodyRate > 0
	var rerr *RequestError
	for reads := 0; ; reads++ {
		if len(buf) == cap(buf) {
			if declared >= 0 && int64(len(buf)) >= declared {
				break
			}
			want := nextBodyCap(int64(cap(buf)), declared, limit)
			grow := want
			if want <= int64(cap(back)) {
				grow = want - int64(cap(buf))
			}
			v, waited := g.takeBody(h, grow)
			if v != bodyGranted {
				rerr = c.budgetError(v)
				break
			}
			if !clock.IsZero() {
				clock = clock.Add(waited)
			}
			if want <= int64(cap(back)) {
				buf = back[:len(buf):want]
			} else {
				// Past retainBytes, a buffer an earlier large body left
				// (Core.big) serves; its capacity beyond want is
				// reserved as the body grows over it, like the pooled
				// buffer's.
				var nb []byte
				if want > retainBytes {
					nb = c.big.take(want)
				}
				if nb == nil {
					nb = make([]byte, 0, want)
				}
				nb = append(nb, buf...)
				g.giveBody(h, int64(cap(buf)))
				if int64(cap(back)) > retainBytes {
					// A large buffer outgrown: a request holds one.
					c.lim.dropped(int64(cap(back)))
				}
				back, buf = nb, nb[:len(buf):want]
			}
		}
		if rated && reads > 0 {
			if clock.IsZero() {
				clock = time.Now()
			}
			deadline = clock.Add(g.o.BodyGrace + rateTime(int64(len(buf)), g.o.MinBodyRate))
			tc.setBodyDeadline(deadline)
		}
		n, err := stream.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			rerr = BodyTooLarge(maxBytes)
			break
		}
		if err == io.EOF {
			if declared >= 0 && int64(len(buf)) < declared {
				rerr = &RequestError{Err: ErrInvalidRequest, Index: noIndex, Status: 400,
					Msg: "request body shorter than its Content-Length"}
			}
			break
		}
		if err != nil {
			rerr = c.bodyReadError(err, tc, deadline)
			break
		}
	}
	if cap(back) > retainBytes {
		st.big = back // back to Core.big (or dropped) by putState
	} else {
		st.buf = back
	}
	if rerr != nil {
		ctx.SetConnectionClose()
		g.releaseBody(h)
		return nil, rerr
	}
	return buf, nil
}

// nextBodyCap is the capacity a body buffer of capacity c grows to: double
// (bodyChunk at first), or the declared length when that is at most an
// eighth more (one copy fewer: a body just past a power of two would
// otherwise need a second buffer of its whole size), never past the declared
// length, nor (chunked) one byte past limit, which tells "too large".
func nextBodyCap(c, declared, limit int64) int64 {
	want := c + max(c, bodyChunk)
	if declared >= 0 {
		if declared <= want+want/8 {
			return declared
		}
		return want
	}
	return min(want, limit+1)
}

// rateTime is how long n bytes take at rate bytes a second.
func rateTime(n, rate int64) time.Duration {
	return time.Duration(n/rate)*time.Second + time.Duration(n%rate)*time.Second/time.Duration(rate)
}

// bodyReadError is the answer to a failed body read: 408 when a read
// deadline (the body's, or the server's ReadTimeout) ran out, else 400.
func (c *Core) bodyReadError(err error, tc *trackedConn, deadline time.Time) *RequestError {
	timedOut := errors.Is(err, os.ErrDeadlineExceeded)
	if !timedOut && tc != nil {
		now := time.Now()
		timedOut = !deadline.IsZero() && !now.Before(deadline)
		if r := tc.readDeadline.Load(); r != 0 && now.UnixNano() >= r {
			timedOut = true
		}
	}
	if timedOut {
		c.lim.bodySlow.Inc()
		return &RequestError{Err: ErrLimitExceeded, Index: noIndex, Status: 408,
			Msg: "request body arrived slower than " + strconv.FormatInt(c.lim.o.MinBodyRate, 10) +
				" bytes/s or past the read timeout"}
	}
	return &RequestError{Err: ErrInvalidRequest, Index: noIndex, Status: 400,
		Msg: "request body could not be read"}
}

// BodyTooLarge is the 413 answer to a body over maxBytes.
func BodyTooLarge(maxBytes int) *RequestError {
	return &RequestError{Err: ErrLimitExceeded, Index: noIndex, Status: 413,
		Msg: "request body exceeds " + strconv.Itoa(maxBytes) + " bytes"}
}

// budgetError is the answer to a body the budget refused.
func (c *Core) budgetError(v bodyVerdict) *RequestError {
	if v == bodyNeverFits {
		return &RequestError{Err: ErrLimitExceeded, Index: noIndex, Status: 413,
			Msg: "request body needs more than the " + strconv.FormatInt(c.lim.largeMax, 10) +
				"-byte budget for large bodies"}
	}
	return &RequestError{Err: ErrLimitExceeded, Index: noIndex, Status: 503,
		Msg: "request bodies in flight exceed " + strconv.FormatInt(c.lim.MaxInflightBodyBytes(), 10) +
			" bytes; retry later"}
}
