package httpd

import (
	"io"
	"strconv"

	"github.com/valyala/fasthttp"
)

// readRequestBody reads a POST endpoint's body into st.in; false means the
// request was answered with the error.
func (s *Server) readRequestBody(ctx *fasthttp.RequestCtx, ep endpoint, st *reqState) bool {
	if !ep.post() {
		return true
	}
	body, rerr := s.readBody(ctx, st)
	if rerr != nil {
		s.writeError(ctx, ep, st, !wantsMsgpack(ctx), rerr)
		return false
	}
	st.in = body
	return true
}

// bodyChunk is the first allocation for a body and the unit a chunked body's
// reservation grows by.
const bodyChunk = 16 << 10

// readBody returns the request body, read from the connection into st.body.
//
// The server streams request bodies (fasthttp StreamRequestBody), so nothing
// is allocated from a declared Content-Length: the buffer doubles as bytes
// arrive. Before reading, the declared length (or, for a chunked body, each
// chunk's worth) is reserved from the Limiter's in-flight budget and held
// until the request ends (st.reserved, released by putState). Errors: 413
// limit_exceeded when the body is larger than Options.MaxBodyBytes (declared
// or as it arrives), 503 limit_exceeded when the budget is spent, 400
// invalid_request when the body ends early. The connection is closed after a
// refused body rather than drained.
//
// A handler called without a body stream (tests, embedding) gets
// ctx.PostBody() unchanged.
func (s *Server) readBody(ctx *fasthttp.RequestCtx, st *reqState) ([]byte, *RequestError) {
	return s.readBodyMax(ctx, st, s.opts.MaxBodyBytes)
}

// readBodyMax is readBody with its own size limit (a surface with a limit of
// its own, e.g. the Dynamo listener's), under the same in-flight budget.
func (s *Server) readBodyMax(ctx *fasthttp.RequestCtx, st *reqState, maxBytes int) ([]byte, *RequestError) {
	stream := ctx.RequestBodyStream()
	if stream == nil {
		return ctx.PostBody(), nil
	}
	limit := int64(maxBytes)
	declared := int64(ctx.Request.Header.ContentLength())
	if declared > limit {
		ctx.SetConnectionClose()
		return nil, bodyTooLarge(maxBytes)
	}
	buf := st.body[:0]
	if declared >= 0 {
		if !s.lim.reserveBody(declared) {
			ctx.SetConnectionClose()
			return nil, s.budgetSpent()
		}
		st.reserved += declared
		if int64(cap(buf)) < min(declared, bodyChunk) {
			buf = make([]byte, 0, min(declared, bodyChunk))
		}
	}
	for {
		if len(buf) == cap(buf) {
			grow := max(int64(cap(buf)), bodyChunk)
			if declared >= 0 {
				if int64(len(buf)) >= declared {
					break
				}
				grow = min(grow, declared-int64(len(buf)))
			} else {
				if int64(len(buf))+grow > limit {
					grow = limit + 1 - int64(len(buf)) // one byte past the limit tells "too large"
				}
				if st.reserved < int64(len(buf))+grow {
					need := int64(len(buf)) + grow - st.reserved
					if !s.lim.reserveBody(need) {
						ctx.SetConnectionClose()
						return nil, s.budgetSpent()
					}
					st.reserved += need
				}
			}
			nb := make([]byte, len(buf), int64(len(buf))+grow)
			copy(nb, buf)
			buf = nb
		}
		n, err := stream.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			st.body = buf
			ctx.SetConnectionClose()
			return nil, bodyTooLarge(maxBytes)
		}
		if err == io.EOF {
			if declared >= 0 && int64(len(buf)) < declared {
				st.body = buf
				ctx.SetConnectionClose()
				return nil, &RequestError{Err: ErrInvalidRequest, Index: noIndex, Status: 400,
					Msg: "request body shorter than its Content-Length"}
			}
			break
		}
		if err != nil {
			st.body = buf
			ctx.SetConnectionClose()
			return nil, &RequestError{Err: ErrInvalidRequest, Index: noIndex, Status: 400,
				Msg: "request body could not be read"}
		}
	}
	st.body = buf
	return buf, nil
}

func bodyTooLarge(maxBytes int) *RequestError {
	return &RequestError{Err: ErrLimitExceeded, Index: noIndex, Status: 413,
		Msg: "request body exceeds " + strconv.Itoa(maxBytes) + " bytes"}
}

func (s *Server) budgetSpent() *RequestError {
	return &RequestError{Err: ErrLimitExceeded, Index: noIndex, Status: 503,
		Msg: "request bodies in flight exceed " + strconv.FormatInt(s.lim.MaxInflightBodyBytes(), 10) +
			" bytes; retry later"}
}
