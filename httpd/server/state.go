package server

import "github.com/seed-c7a81618/conductor/core"

// State is the pooled per-request scratch of every surface: the Host takes
// one for each request and puts it back when the request ends, so a steady
// request allocates nothing. Everything in it is valid for that request
// only.
type State struct {
	// Enc writes the response; Reset it first.
	Enc Encoder
	// Body is the request body of a POST route, read by the preamble (a view
	// of the pooled buffer or of fasthttp's).
	Body []byte
	// Who is the caller, from its bearer token.
	Who Principal
	// Q and Res are the query and its result (RunQuery, or a surface's own
	// parser).
	Q   core.QueryRequest
	Res core.QueryResult
	// Miss is why the query of RunQuery found no context; MissNone when it
	// did (or did not run).
	Miss MissReason
	// TokBuf and HashBuf are scratch for token ids and hashes decoded from
	// the body; pass their addresses to Reader.Int32s and Reader.Uint64s.
	TokBuf  []int32
	HashBuf []uint64
	// Model is the model a request named, for an access log (the Dynamo
	// surface's); the preamble empties it.
	Model []byte
	// Ignored is the first body key a lenient dialect skipped as unknown (a
	// view of the body; the Dynamo surface names it back); the preamble
	// empties it.
	Ignored []byte

	rd      Reader
	scratch []byte // unescaped JSON strings
	buf     []byte // the owned buffer a streamed request body is read into (≤ retainBytes)
	big     []byte // a buffer past retainBytes the body was read into instead (Core.big)
	b64     []byte // decoded base64 token_ids (the RPC dialect)
	// reserved is the Limiter body budget this request holds (released by putState).
	reserved bodyHold
}

// Retention caps: a pooled state drops buffers grown beyond these by an
// unusually large request, so the pool does not pin them (a large response
// buffer is handed to fasthttp without a copy instead; see WriteBody). A
// request body past retainBytes goes to Core.big, which keeps a bounded few.
// Proved by TestLargeBodiesAreNotRetained.
const (
	retainBytes  = 1 << 20
	retainTokens = 1 << 20
	retainHashes = 1 << 19
)

// getState takes a State from the pool, emptied for a new request.
func (c *Core) getState() *State {
	st := c.pool.Get().(*State)
	st.scratch = st.scratch[:0]
	st.Model = st.Model[:0]
	st.Ignored = nil
	return st
}

// putState releases st's body budget, drops oversized buffers and pools it.
func (c *Core) putState(st *State) {
	c.lim.releaseBody(&st.reserved)
	if st.big != nil {
		if !c.big.put(st.big) {
			c.lim.dropped(int64(cap(st.big)))
		}
		st.big = nil
	}
	st.Body = nil
	st.Who = Principal{}
	st.Q = core.QueryRequest{}
	st.Miss = MissNone
	st.rd = Reader{}
	if cap(st.scratch) > retainBytes {
		st.scratch = nil
	}
	if cap(st.Enc.buf) > retainBytes {
		c.lim.dropped(int64(cap(st.Enc.buf)))
		st.Enc.buf = nil
	}
	if cap(st.b64) > retainBytes {
		st.b64 = nil
	}
	if cap(st.TokBuf) > retainTokens {
		st.TokBuf = nil
	}
	if cap(st.HashBuf) > retainHashes {
		st.HashBuf = nil
	}
	c.pool.Put(st)
}

// Reader starts the reader of the dialect's syntax (JSON or msgpack) over
// st.Body.
func (st *State) Reader(json bool) *Reader {
	st.rd.reset(st.Body, json, &st.scratch)
	return &st.rd
}

// JSON starts the JSON reader over st.Body.
func (st *State) JSON() *Reader { return st.Reader(true) }
