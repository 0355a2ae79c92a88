package server

import (
	"bytes"
	"time"

	"github.com/valyala/fasthttp"
)

// Content types of the two dialects.
const (
	ContentTypeJSON    = "application/json"
	ContentTypeMsgpack = "application/msgpack"
)

var (
	ctMsgpack = []byte(ContentTypeMsgpack)
	ctJSON    = []byte(ContentTypeJSON)
)

// RequestDialect picks the body syntax from Content-Type: msgpack when it
// contains "application/msgpack", JSON when it contains "application/json" or
// is absent, or any other type when the body is a JSON object (curl's
// default application/x-www-form-urlencoded); anything else is 400
// unsupported_content_type (answered in JSON). body is the request body as
// the preamble read it (State.Body; never ctx.PostBody(): bodies are
// streamed).
func RequestDialect(ctx *fasthttp.RequestCtx, body []byte) (json bool, err *RequestError) {
	ct := ctx.Request.Header.ContentType()
	switch {
	case bytes.Contains(ct, ctMsgpack):
		return false, nil
	case len(ct) == 0 || bytes.Contains(ct, ctJSON) || looksJSON(body):
		return true, nil
	}
	return true, &RequestError{Err: ErrUnsupportedContentType, Index: noIndex,
		Msg: "Content-Type must be application/json or application/msgpack"}
}

// WantsMsgpack is the dialect of responses to requests without a body (GET,
// 404, 405): the format query argument ("json" or "msgpack") wins, then an
// Accept header naming application/msgpack or application/json, then a
// Content-Type naming application/msgpack; the default is JSON.
func WantsMsgpack(ctx *fasthttp.RequestCtx) bool {
	switch string(ctx.QueryArgs().Peek("format")) {
	case "msgpack":
		return true
	case "json":
		return false
	}
	accept := ctx.Request.Header.Peek("Accept")
	switch {
	case bytes.Contains(accept, ctMsgpack):
		return true
	case bytes.Contains(accept, ctJSON):
		return false
	}
	return bytes.Contains(ctx.Request.Header.ContentType(), ctMsgpack)
}

// WriteBody answers with status and body in the dialect (JSON or msgpack).
// A body grown past the State's retention cap is handed to fasthttp without
// a copy (the State drops it).
func WriteBody(ctx *fasthttp.RequestCtx, status int, json bool, body []byte) {
	ctx.SetStatusCode(status)
	if json {
		ctx.SetContentType(ContentTypeJSON)
	} else {
		ctx.SetContentType(ContentTypeMsgpack)
	}
	if cap(body) > retainBytes {
		// putState drops this buffer (cap > retainBytes), so fasthttp may own
		// it: no copy into its pooled response buffer, which would keep it.
		ctx.Response.SetBodyRaw(body)
		return
	}
	ctx.SetBody(body)
}

// AppendErrorEnvelope writes {"error", "reason", "field"?, "index"?}: the
// refusal envelope of every surface that names its cause (the Mooncake API
// and the Dynamo dialect).
func AppendErrorEnvelope(enc *Encoder, e *RequestError) {
	n := 2
	if e.Field != "" {
		n++
	}
	if e.Index >= 0 {
		n++
	}
	enc.MapHeader(n)
	enc.Str("error")
	enc.Str(e.Msg)
	enc.Str("reason")
	enc.Str(ReasonOf(e))
	if e.Field != "" {
		enc.Str("field")
		enc.Str(e.Field)
	}
	if e.Index >= 0 {
		enc.Str("index")
		enc.Int(int64(e.Index))
	}
}

// DeadlinePusher sets the connection's write deadline now and returns a
// function that moves it timeout into the future again (fasthttp's
// RequestCtx.SetWriteDeadline, safe from a body stream's goroutine and
// refused once the response is done), or nil when there is no deadline to
// keep. A streamed /dump calls it as it progresses: the write timeout then
// bounds a stall, not the dump's length (TestDumpOutlivesWriteTimeout).
func DeadlinePusher(ctx *fasthttp.RequestCtx, timeout time.Duration) func() {
	if timeout <= 0 || ctx.SetWriteDeadline(time.Now().Add(timeout)) != nil {
		return nil
	}
	return func() { _ = ctx.SetWriteDeadline(time.Now().Add(timeout)) }
}
