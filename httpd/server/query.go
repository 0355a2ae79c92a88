package server

import (
	"encoding/base64"
	"errors"
	"strconv"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
)

// Query field ids (bits of the seen-set, which catches duplicate keys).
const (
	qModel = 1 << iota
	qBlockSize
	qTokens // token_ids, or seq_hashes / block_hash for /query_by_hash
	qTenant
	qLora
	qLoraID
	qSalt
	qInstance
)

// queryKey maps a request key to its field id and canonical name, or 0 when
// the key is unknown for this dialect and endpoint. msgpack takes exactly the
// C++ conductor's keys; JSON adds the seed's aliases and lora_id; RPC takes the
// Python query() argument names (model_name, instance_filter) and nothing else.
func queryKey(key []byte, d Dialect, byHash bool) (int, string) {
	if d == DialectRPC {
		switch string(key) {
		case "model_name":
			return qModel, "model_name"
		case "block_size":
			return qBlockSize, "block_size"
		case "tenant_id":
			return qTenant, "tenant_id"
		case "lora_name":
			return qLora, "lora_name"
		case "cache_salt":
			return qSalt, "cache_salt"
		case "instance_filter":
			return qInstance, "instance_filter"
		case "token_ids":
			return qTokens, "token_ids"
		}
		return 0, ""
	}
	switch string(key) {
	case "model":
		return qModel, "model"
	case "block_size":
		return qBlockSize, "block_size"
	case "tenant_id":
		return qTenant, "tenant_id"
	case "lora_name":
		return qLora, "lora_name"
	case "cache_salt":
		return qSalt, "cache_salt"
	case "instance_id":
		return qInstance, "instance_id"
	case "token_ids":
		if !byHash {
			return qTokens, "token_ids"
		}
	case "seq_hashes":
		if byHash {
			return qTokens, "seq_hashes"
		}
	case "block_hash":
		if byHash {
			return qTokens, "block_hash"
		}
	}
	if d == DialectJSON {
		switch string(key) {
		case "model_name":
			return qModel, "model_name"
		case "modelname":
			return qModel, "modelname"
		case "lora_id":
			return qLoraID, "lora_id"
		}
	}
	return 0, ""
}

// parseQuery decodes a /query or /query_by_hash body into st.Q, in key order
// (the first bad key is reported), then checks required keys: model, block_size,
// then the token (hash) array. On success the request strings are views of the
// body: st.Q is valid for the request only. In the RPC dialect token_ids may
// also be a base64 string of little-endian int32s (base64Tokens).
func (c *Core) parseQuery(r *Reader, d Dialect, byHash bool, st *State) *RequestError {
	json := d.JSON()
	q := &st.Q
	// The JSON dialect reports the seed's per-medium GPU/CPU/DISK.
	*q = core.QueryRequest{ByHash: byHash, PerMedium: json}
	var seen int
	var fe *RequestError
	var loraID bool
	var loraIDVal int64
	for {
		key, ok := r.NextKey()
		if !ok {
			break
		}
		if fe != nil {
			r.Skip()
			continue
		}
		id, name := queryKey(key, d, byHash)
		switch {
		case id == 0:
			fe = NewError(ErrUnknownField, string(key), "unknown field "+string(key))
			r.Skip()
			continue
		case seen&id != 0:
			fe = NewError(ErrInvalidValue, name, "duplicate field "+name)
			r.Skip()
			continue
		}
		seen |= id
		if id == qTokens {
			if d == DialectRPC {
				if v, ok := r.StrValue(); ok {
					q.Tokens, fe = base64Tokens(&v, &st.b64, &st.TokBuf, name, c.opts.MaxQueryTokens)
					continue
				}
			}
			if byHash {
				q.Hashes, fe = r.Uint64s(&st.HashBuf, name, c.opts.MaxQueryTokens)
			} else {
				q.Tokens, fe = r.Int32s(&st.TokBuf, name, c.opts.MaxQueryTokens)
			}
			continue
		}
		v := r.Value()
		var b []byte
		switch id {
		case qModel:
			b, fe = StrField(&v, name)
			q.Model = B2S(b)
		case qBlockSize:
			var n int64
			n, fe = BlockSizeField(&v, name)
			q.BlockSize = int(n)
		case qTenant:
			b, fe = OptStrField(&v, name, json)
			q.TenantID = B2S(b)
		case qLora:
			b, fe = OptStrField(&v, name, json)
			q.LoraName = B2S(b)
		case qInstance:
			b, fe = OptStrField(&v, name, json)
			q.Instance = B2S(b)
		case qSalt:
			if v.Kind != KindNil {
				b, fe = OptStrField(&v, name, false)
				if fe != nil {
					fe.Msg = "cache_salt must be a string or null"
				}
				if len(b) > 0 {
					q.CacheSalt = b
				}
			}
		case qLoraID:
			switch {
			case v.Kind == KindNil:
			case v.Kind == KindInt:
				loraID, loraIDVal = true, v.Int
			case v.IsInt():
				fe = NewError(ErrOutOfRange, name, "lora_id must be a 64-bit signed integer")
			default:
				fe = NewError(ErrInvalidType, name, "lora_id must be an integer or null")
			}
		}
	}
	if err := r.Err(); err != nil {
		return err
	}
	if fe != nil {
		return fe
	}
	switch {
	case seen&qModel == 0 && d == DialectRPC:
		return NewError(ErrMissing, "model_name", "model_name is required")
	case seen&qModel == 0:
		return NewError(ErrMissing, "model", "model is required")
	case seen&qBlockSize == 0:
		return NewError(ErrMissing, "block_size", "block_size is required")
	case seen&qTokens == 0 && byHash:
		return NewError(ErrMissing, "seq_hashes", "seq_hashes is required")
	case seen&qTokens == 0:
		return NewError(ErrMissing, "token_ids", "token_ids is required")
	case !utf8.ValidString(q.LoraName):
		return NewError(ErrInvalidValue, "lora_name", "lora_name must be valid UTF-8")
	case !utf8.Valid(q.CacheSalt):
		return NewError(ErrInvalidValue, "cache_salt", "cache_salt must be valid UTF-8")
	}
	if q.TenantID == "" {
		q.TenantID = "default"
	}
	if loraID {
		// The deprecated numeric id resolves through the (lora_id, lora_name)
		// pairs engines published; unknown or conflicting ids are refused.
		name, err := c.ix.LoraNameForID(q.TenantID, q.Model, loraIDVal)
		switch {
		case err != nil:
			return NewError(ErrInvalidValue, "lora_id", err.Error())
		case seen&qLora != 0 && name != q.LoraName:
			return NewError(ErrInvalidValue, "lora_id", "lora_id "+strconv.FormatInt(loraIDVal, 10)+" is adapter "+
				strconv.Quote(name)+", which conflicts with lora_name "+strconv.Quote(q.LoraName))
		}
		q.LoraName = name
	}
	return nil
}

// RunQuery is the part of a query request the Mooncake API and the RPC's
// Query share: the body's syntax from its Content-Type (RequestDialect),
// parsing st.Body into st.Q in dialect d's keys (DialectJSON stands for the
// Mooncake API's two dialects, chosen by the syntax), resolving the context
// and running core.Index.Query into st.Res, then the query counters. A
// query whose context does not exist succeeds with no rows and st.Miss
// naming why (QueryMiss); otherwise st.Miss is MissNone. A failure the
// request caused is rerr (answered 4xx or INVALID_PARAMS); any other is
// err, logged here with path (answered 500 or INTERNAL_ERROR). On success
// the request strings in st.Q are views of the body: valid for the request
// only. Steady state allocates nothing (a miss does: QueryMiss walks the
// contexts).
//
// The Mooncake dialects and the RPC's take different keys: msgpack exactly
// the C++ conductor's; JSON adds the seed's aliases (model_name, modelname)
// and lora_id; RPC takes the Python query() argument names (model_name,
// instance_filter) and nothing else, and token_ids also as the base64 text
// of little-endian int32s.
func (c *Core) RunQuery(ctx *fasthttp.RequestCtx, st *State, d Dialect, byHash bool, path string) (json bool, rerr *RequestError, err error) {
	st.Miss = MissNone
	if json, rerr = RequestDialect(ctx, st.Body); rerr != nil {
		return json, rerr, nil
	}
	if d != DialectRPC {
		d = DialectOf(json)
	}
	if rerr = c.parseQuery(st.Reader(json), d, byHash, st); rerr != nil {
		return json, rerr, nil
	}
	if err = c.ix.Query(&st.Q, &st.Res); err != nil {
		if rerr = queryInputError(&st.Q, err); rerr != nil {
			return json, rerr, nil
		}
		c.opts.Logger.Error("query failed", "path", path, "err", err)
		return json, nil, err
	}
	c.m.queryRows(&st.Q, &st.Res)
	if !st.Res.ContextFound {
		st.Miss = c.QueryMiss(&st.Q)
	}
	return json, nil, nil
}

// queryInputError maps an error from core.Index.Query that the request caused
// (a negative token under a strategy that forbids it, invalid UTF-8 in a
// hashed string, core.ErrInvalid) to its *RequestError; nil means an internal
// failure.
func queryInputError(q *core.QueryRequest, err error) *RequestError {
	field := "token_ids"
	if q.ByHash {
		field = "seq_hashes"
	}
	switch {
	case errors.Is(err, hash.ErrNegativeToken):
		if te := new(hash.TokenError); errors.As(err, &te) {
			return elemErr(ErrOutOfRange, field, te.Index, "token ids must be non-negative for this context's hash strategy")
		}
		return NewError(ErrOutOfRange, field, "token ids must be non-negative for this context's hash strategy")
	case errors.Is(err, hash.ErrInvalidUTF8), errors.Is(err, core.ErrInvalid):
		return NewError(ErrInvalidValue, "", err.Error())
	}
	return nil
}

// base64Tokens decodes token_ids given as a base64 string (RFC 4648 standard
// alphabet, padded) of little-endian int32s: the Python client sends
// base64(array('i', ids).tobytes()). The bytes are decoded into *b64 and viewed
// in place where the host allows, else copied into *tokBuf (leInt32s). A
// length that is not a multiple of 4 bytes, or bad base64, is invalid_value;
// more than max tokens is out_of_range.
func base64Tokens(v *Value, b64 *[]byte, tokBuf *[]int32, field string, max int) ([]int32, *RequestError) {
	if v.Kind != KindStr {
		return nil, NewError(ErrInvalidType, field, field+" must be an array or a base64 string")
	}
	n := base64.StdEncoding.DecodedLen(len(v.Bytes))
	if n/4 > max+1 {
		return nil, NewError(ErrOutOfRange, field, field+" has more than "+strconv.Itoa(max)+" elements")
	}
	buf := *b64
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	k, err := base64.StdEncoding.Decode(buf, v.Bytes)
	*b64 = buf[:0]
	switch {
	case err != nil:
		return nil, NewError(ErrInvalidValue, field, field+" is not valid base64: "+err.Error())
	case k%4 != 0:
		return nil, NewError(ErrInvalidValue, field, field+" must decode to a multiple of 4 bytes (little-endian int32s)")
	case k/4 > max:
		return nil, NewError(ErrOutOfRange, field, field+" has more than "+strconv.Itoa(max)+" elements")
	}
	return leInt32s(tokBuf, buf[:k]), nil
}
