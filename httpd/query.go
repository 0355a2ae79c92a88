package httpd

import (
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
func queryKey(key []byte, d dialect, byHash bool) (int, string) {
	if d == dialectRPC {
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
	if d == dialectJSON {
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

// parseQuery decodes a /query or /query_by_hash body into st.q, in key order
// (the first bad key is reported), then checks required keys: model, block_size,
// then the token (hash) array. On success the request strings are views of the
// body: st.q is valid for the request only. In the RPC dialect token_ids may
// also be a base64 string of little-endian int32s (rpcTokens).
func (s *Server) parseQuery(r reader, d dialect, byHash bool, st *reqState) *RequestError {
	json := d.json()
	q := &st.q
	// The JSON dialect reports the seed's per-medium GPU/CPU/DISK.
	*q = core.QueryRequest{ByHash: byHash, PerMedium: json}
	var seen int
	var fe *RequestError
	var loraID bool
	var loraIDVal int64
	for {
		key, ok := r.nextKey()
		if !ok {
			break
		}
		if fe != nil {
			r.skip()
			continue
		}
		id, name := queryKey(key, d, byHash)
		switch {
		case id == 0:
			fe = reqErr(ErrUnknownField, string(key), "unknown field "+string(key))
			r.skip()
			continue
		case seen&id != 0:
			fe = reqErr(ErrInvalidValue, name, "duplicate field "+name)
			r.skip()
			continue
		}
		seen |= id
		if id == qTokens {
			if jr, ok := r.(*jsonReader); ok && d == dialectRPC && jr.peek() == '"' {
				v, ok := jr.plainString()
				if !ok {
					v = r.value()
				}
				q.Tokens, fe = rpcTokens(&v, &st.b64, &st.tokBuf, name, s.opts.MaxQueryTokens)
				continue
			}
			if byHash {
				q.Hashes, fe = r.uint64s(&st.hashBuf, name, s.opts.MaxQueryTokens)
			} else {
				q.Tokens, fe = r.int32s(&st.tokBuf, name, s.opts.MaxQueryTokens)
			}
			continue
		}
		v := r.value()
		var b []byte
		switch id {
		case qModel:
			b, fe = strField(&v, name)
			q.Model = b2s(b)
		case qBlockSize:
			var n int64
			n, fe = blockSizeField(&v, name)
			q.BlockSize = int(n)
		case qTenant:
			b, fe = optStrField(&v, name, json)
			q.TenantID = b2s(b)
		case qLora:
			b, fe = optStrField(&v, name, json)
			q.LoraName = b2s(b)
		case qInstance:
			b, fe = optStrField(&v, name, json)
			q.Instance = b2s(b)
		case qSalt:
			if v.kind != kindNil {
				b, fe = optStrField(&v, name, false)
				if fe != nil {
					fe.Msg = "cache_salt must be a string or null"
				}
				if len(b) > 0 {
					q.CacheSalt = b
				}
			}
		case qLoraID:
			switch {
			case v.kind == kindNil:
			case v.kind == kindInt:
				loraID, loraIDVal = true, v.i
			case v.isInt():
				fe = reqErr(ErrOutOfRange, name, "lora_id must be a 64-bit signed integer")
			default:
				fe = reqErr(ErrInvalidType, name, "lora_id must be an integer or null")
			}
		}
	}
	if err := r.err(); err != nil {
		return err
	}
	if fe != nil {
		return fe
	}
	switch {
	case seen&qModel == 0 && d == dialectRPC:
		return reqErr(ErrMissing, "model_name", "model_name is required")
	case seen&qModel == 0:
		return reqErr(ErrMissing, "model", "model is required")
	case seen&qBlockSize == 0:
		return reqErr(ErrMissing, "block_size", "block_size is required")
	case seen&qTokens == 0 && byHash:
		return reqErr(ErrMissing, "seq_hashes", "seq_hashes is required")
	case seen&qTokens == 0:
		return reqErr(ErrMissing, "token_ids", "token_ids is required")
	case !utf8.ValidString(q.LoraName):
		return reqErr(ErrInvalidValue, "lora_name", "lora_name must be valid UTF-8")
	case !utf8.Valid(q.CacheSalt):
		return reqErr(ErrInvalidValue, "cache_salt", "cache_salt must be valid UTF-8")
	}
	if q.TenantID == "" {
		q.TenantID = "default"
	}
	if loraID {
		// The deprecated numeric id resolves through the (lora_id, lora_name)
		// pairs engines published; unknown or conflicting ids are refused.
		name, err := s.ix.LoraNameForID(q.TenantID, q.Model, loraIDVal)
		switch {
		case err != nil:
			return reqErr(ErrInvalidValue, "lora_id", err.Error())
		case seen&qLora != 0 && name != q.LoraName:
			return reqErr(ErrInvalidValue, "lora_id", "lora_id "+strconv.FormatInt(loraIDVal, 10)+" is adapter "+
				strconv.Quote(name)+", which conflicts with lora_name "+strconv.Quote(q.LoraName))
		}
		q.LoraName = name
	}
	return nil
}

// handleQuery serves /query and /query_by_hash. Steady state allocates nothing:
// the request state is pooled, strings are views of the body, the result and
// the response are appended into reused buffers.
func (s *Server) handleQuery(ctx *fasthttp.RequestCtx, ep endpoint, st *reqState) {
	json, rerr, err := s.runQuery(ctx, st, dialectJSON, ep == epQueryByHash, ep.String())
	switch {
	case rerr != nil:
		s.writeError(ctx, ep, st, json, rerr)
		return
	case err != nil:
		s.writeOpError(ctx, ep, st, json, 500, ErrInternal, "query failed: "+err.Error())
		return
	}
	e := &st.enc
	e.reset(json)
	appendQueryResult(e, st.q.TenantID, &st.res)
	s.writeBody(ctx, 200, json, e.buf)
}

// runQuery is the part of a query request the Mooncake API and the RPC's Query
// share: the body's syntax from its Content-Type (requestDialect), parsing
// into st.q in dialect d's keys (dialectJSON stands for the HTTP API's two
// dialects, chosen by the syntax), resolving the context and running
// core.Index.Query into st.res. A failure the request caused is rerr (answered
// 4xx or INVALID_PARAMS); any other is err, logged here with path (answered
// 500 or INTERNAL_ERROR).
func (s *Server) runQuery(ctx *fasthttp.RequestCtx, st *reqState, d dialect, byHash bool, path string) (json bool, rerr *RequestError, err error) {
	if json, rerr = requestDialect(ctx, st.in); rerr != nil {
		return json, rerr, nil
	}
	if d != dialectRPC {
		d = dialectOf(json)
	}
	if rerr = s.parseQuery(st.reader(st.in, json), d, byHash, st); rerr != nil {
		return json, rerr, nil
	}
	if err = s.ix.Query(&st.q, &st.res); err != nil {
		if rerr = queryInputError(&st.q, err); rerr != nil {
			return json, rerr, nil
		}
		s.opts.Logger.Error("query failed", "path", path, "err", err)
		return json, nil, err
	}
	s.m.queryRows(&st.q, &st.res)
	return json, nil, nil
}

// queryInputError maps an error from core.Index.Query that the request caused
// (a negative token under a strategy that forbids it, invalid UTF-8 in a
// hashed string, core.ErrInvalid) to its *RequestError; nil means an internal
// failure. Shared by /query and the RPC Query.
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
		return reqErr(ErrOutOfRange, field, "token ids must be non-negative for this context's hash strategy")
	case errors.Is(err, hash.ErrInvalidUTF8), errors.Is(err, core.ErrInvalid):
		return reqErr(ErrInvalidValue, "", err.Error())
	}
	return nil
}

// appendQueryResult writes the /query response.
//
// msgpack: {"instances": {id: R}} with R = {longest_matched, dp, rank_matches,
// device, cpu_local, cpu_share, disk}.
//
// JSON (the seed's shape): {tenant: {id: R'}}, {} without rows, with R' =
// {longest_matched, GPU, CPU, DISK, DP, device, cpu_local, cpu_share, disk,
// rank_matches}. The seed's keys have the seed's meaning: GPU, CPU and DISK
// are independent longest prefixes per medium (G1 device; G2 host =
// cpu_local ∪ cpu_share; G3 disk), each the maximum over the instance's
// ranks; DP[rank] is that rank's longest prefix across all media. The
// lowercase keys, msgpack's dp (per-rank device) and rank_matches are the
// cumulative tier boundaries.
func appendQueryResult(e *encoder, tenant string, res *core.QueryResult) {
	rows := res.Instances
	if !e.json {
		e.mapHeader(1)
		e.str("instances")
		appendInstanceRows(e, rows)
		return
	}
	if len(rows) == 0 {
		e.mapHeader(0)
		return
	}
	e.mapHeader(1)
	e.str(tenant)
	e.mapHeader(len(rows))
	for i := range rows {
		row := &rows[i]
		e.str(row.ID)
		e.mapHeader(10)
		e.str("longest_matched")
		e.int(row.LongestMatched)
		e.str("GPU")
		e.int(row.Media[core.MediumDevice])
		e.str("CPU")
		e.int(row.Media[core.MediumHost])
		e.str("DISK")
		e.int(row.Media[core.MediumDisk])
		e.str("DP")
		appendDP(e, row.Ranks, true)
		appendTiers(e, row.Device, row.CPULocal, row.CPUShare, row.Disk)
		e.str("rank_matches")
		appendRankMatches(e, row.Ranks)
	}
}

// appendInstanceRows writes {id: {longest_matched, dp, rank_matches, device,
// cpu_local, cpu_share, disk}}: the msgpack "instances" map and the RPC "hits".
func appendInstanceRows(e *encoder, rows []core.InstanceResult) {
	e.mapHeader(len(rows))
	for i := range rows {
		row := &rows[i]
		e.str(row.ID)
		e.mapHeader(7)
		e.str("longest_matched")
		e.int(row.LongestMatched)
		e.str("dp")
		appendDP(e, row.Ranks, false)
		e.str("rank_matches")
		appendRankMatches(e, row.Ranks)
		appendTiers(e, row.Device, row.CPULocal, row.CPUShare, row.Disk)
	}
}

// appendDP writes the per-rank map: each rank's longest prefix across all
// media (longest, the JSON dialect's DP) or its device boundary (msgpack dp).
func appendDP(e *encoder, ranks []core.RankResult, longest bool) {
	e.mapHeader(len(ranks))
	for i := range ranks {
		e.decKey(int64(ranks[i].Rank))
		if longest {
			e.int(ranks[i].Disk)
		} else {
			e.int(ranks[i].Device)
		}
	}
}

func appendRankMatches(e *encoder, ranks []core.RankResult) {
	e.mapHeader(len(ranks))
	for i := range ranks {
		rk := &ranks[i]
		e.decKey(int64(rk.Rank))
		e.mapHeader(4)
		appendTiers(e, rk.Device, rk.CPULocal, rk.CPUShare, rk.Disk)
	}
}

// appendTiers writes the four tier entries into an open map.
func appendTiers(e *encoder, device, cpuLocal, cpuShare, disk int64) {
	e.str("device")
	e.int(device)
	e.str("cpu_local")
	e.int(cpuLocal)
	e.str("cpu_share")
	e.int(cpuShare)
	e.str("disk")
	e.int(disk)
}
