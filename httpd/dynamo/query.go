package dynamo

import (
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
	"github.com/seed-c7a81618/conductor/httpd/server"
)

// Dynamo query field ids.
const (
	dqTokens = iota // token_ids, or block_hashes for /query_by_hash
	dqModel
	dqGroup
	dqLora
	dqSalt
	numDynQuery
)

// dynamoNamespace fills the query's namespace fields from Dynamo's lora_name
// and cache_salt. This is the one place where Dynamo's per-request LoRA and
// salt meet conductor's hash namespaces: lora_name selects the LoRA context
// (context.LoraName: where Dynamo workers' events naming that adapter are
// filed, core.Registration.AdaptersFromEvents, and other registrations of
// the adapter feed) and cache_salt selects the salt namespace, exactly as
// the Mooncake /query does.
func dynamoNamespace(q *core.QueryRequest, lora, salt []byte) {
	q.LoraName = server.B2S(lora)
	if len(salt) > 0 {
		q.CacheSalt = salt
	}
}

// dynamoRollHashes turns Dynamo local block hashes (XXH3-64 of each block's
// u32 LE tokens, seed 1337, position independent) into conductor's prefix
// keys under the xxh3 standard profile: the RFC #1527 rolling sequence hash
// seq_0 = local_0, seq_i = XXH3-64(le64(seq_{i-1}) ‖ le64(local_i), 1337).
// It rewrites hs in place.
func dynamoRollHashes(hs []uint64, seed uint64) {
	for i := 1; i < len(hs); i++ {
		hs[i] = hash.XXH3Seq(hs[i-1], hs[i], seed)
	}
}

// parseDynamoQuery reads a /query or /query_by_hash body into st.q (strings
// are views of the body). It returns the indexer key.
func (d *Server) parseDynamoQuery(r *server.Reader, byHash bool, st *server.State) (dynKey, *server.RequestError) {
	var k dynKey
	q := &st.Q
	*q = core.QueryRequest{ByHash: byHash}
	tokName := "token_ids"
	if byHash {
		tokName = "block_hashes"
	}
	var seen [numDynQuery]bool
	var fe *server.RequestError
	var model, group, lora, salt []byte
	for {
		key, ok := r.NextKey()
		if !ok {
			break
		}
		if fe != nil {
			r.Skip()
			continue
		}
		id := -1
		switch string(key) {
		case tokName:
			id = dqTokens
		case "model_name":
			id = dqModel
		case "routing_group":
			id = dqGroup
		case "lora_name":
			if !byHash {
				id = dqLora
			}
		case "cache_salt":
			id = dqSalt
		}
		if id < 0 {
			ignore(st, key) // unknown keys are ignored, as serde does
			r.Skip()
			continue
		}
		if seen[id] {
			fe = server.NewError(server.ErrInvalidValue, string(key), "duplicate field "+string(key))
			r.Skip()
			continue
		}
		seen[id] = true
		if id == dqTokens {
			if byHash {
				q.Hashes, fe = r.HashBits(&st.HashBuf, tokName, d.opts.MaxQueryTokens)
			} else {
				q.Tokens, fe = r.Int32s(&st.TokBuf, tokName, d.opts.MaxQueryTokens)
			}
			continue
		}
		v := r.Value()
		switch id {
		case dqModel:
			model, fe = server.StrField(&v, "model_name")
		case dqGroup:
			group, fe = server.OptStrField(&v, "routing_group", true)
		case dqLora:
			lora, fe = server.OptStrField(&v, "lora_name", true)
		case dqSalt:
			switch {
			case v.Kind == server.KindNil:
			case byHash:
				// Hashes were computed by the caller: a salt cannot be applied now.
				fe = server.NewError(server.ErrUnsupported, "cache_salt", "cache_salt is not accepted by /query_by_hash; precompute salted hashes or use /query")
			default:
				salt, fe = server.OptStrField(&v, "cache_salt", true)
			}
		}
	}
	if err := r.Err(); err != nil {
		return k, err
	}
	if fe != nil {
		return k, fe
	}
	st.Model = append(st.Model, model...)
	switch {
	case !seen[dqTokens]:
		return k, server.NewError(server.ErrMissing, tokName, tokName+" is required")
	case !seen[dqModel]:
		return k, server.NewError(server.ErrMissing, "model_name", "model_name is required")
	}
	// Views of the body (b2s): valid for the request, never retained.
	k = dynKey{model: server.B2S(model), group: "default"}
	if len(group) > 0 {
		k.group = server.B2S(group)
	}
	q.Model = k.model
	q.TenantID = k.group
	dynamoNamespace(q, lora, salt)
	return k, nil
}

func (d *Server) handleQuery(ctx *fasthttp.RequestCtx, st *server.State, byHash bool) {
	r, ok := d.jsonBody(ctx, st)
	if !ok {
		return
	}
	k, fe := d.parseDynamoQuery(r, byHash, st)
	if fe != nil {
		d.reqError(ctx, st, 400, fe)
		return
	}
	bs, ok := d.indexer(k)
	if !ok {
		d.opError(ctx, st, 404, server.ErrNotFound, "no indexer for model "+strconv.Quote(k.model)+" routing_group "+strconv.Quote(k.group))
		return
	}
	ck := dynamoContext(k, bs)
	st.Q.TenantID, st.Q.Model, st.Q.BlockSize = ck.TenantID, ck.ModelName, ck.BlockSize
	if byHash {
		dynamoRollHashes(st.Q.Hashes, hash.DefaultXXH3Seed)
	}
	if err := d.ix.Query(&st.Q, &st.Res); err != nil {
		d.opError(ctx, st, 400, server.ErrInvalidValue, err.Error())
		return
	}
	if !st.Res.ContextFound {
		// The indexer exists but its context does not (a lora_name no worker
		// publishes, an indexer known only from a peer's dump): the empty
		// scores, with the reason in a header and the Core's miss counters.
		server.SetMissHeader(ctx, d.c.QueryMiss(&st.Q))
	}
	e := &st.Enc
	e.Reset(true)
	appendDynamoScores(e, &st.Res, int64(bs))
	d.body(ctx, 200, e.Bytes())
}

// appendDynamoScores writes Dynamo's score response, all counts in tokens:
//
//	scores:      {instance: {dp_rank: device tokens}}
//	frequencies: [n_0, n_1, ...], n_i = (instance, rank) pairs whose device
//	             match covers block i
//	instances:   {instance: {longest_matched, gpu, dp, cpu, disk}}
//
// Dynamo's tiers are cumulative: gpu = device (max over ranks), cpu = through
// the host tier (conductor's cpu_local boundary), disk = through disk and
// external/shared tiers (conductor's final boundary), longest_matched = the
// largest of the three (= disk).
//
// Only rows whose instance id is a Dynamo instance id (dynamoInstanceID) are
// written, in all three fields alike: frequencies count the kept rows' ranks
// only.
func appendDynamoScores(e *server.Encoder, res *core.QueryResult, bs int64) {
	rows := res.Instances
	kept := 0 // rows a Dynamo client can parse
	for i := range rows {
		if dynamoInstanceID(rows[i].ID) {
			kept++
		}
	}
	// foreign reports a row to leave out; with every row kept (the usual
	// answer) it checks no id again, in the per-block loop least of all.
	foreign := func(id string) bool { return kept < len(rows) && !dynamoInstanceID(id) }
	e.MapHeader(3)
	e.Str("scores")
	e.MapHeader(kept)
	maxBlocks := int64(0)
	for i := range rows {
		if foreign(rows[i].ID) {
			continue
		}
		e.Str(rows[i].ID)
		e.MapHeader(len(rows[i].Ranks))
		for _, r := range rows[i].Ranks {
			e.DecKey(int64(r.Rank))
			e.Int(r.Device)
			if bs > 0 {
				maxBlocks = max(maxBlocks, r.Device/bs)
			}
		}
	}
	e.Str("frequencies")
	e.ArrayHeader(int(maxBlocks))
	for b := int64(0); b < maxBlocks; b++ {
		n := int64(0)
		for i := range rows {
			if foreign(rows[i].ID) {
				continue
			}
			for _, r := range rows[i].Ranks {
				if r.Device/bs > b {
					n++
				}
			}
		}
		e.Int(n)
	}
	e.Str("instances")
	e.MapHeader(kept)
	for i := range rows {
		row := &rows[i]
		if foreign(row.ID) {
			continue
		}
		e.Str(row.ID)
		e.MapHeader(5)
		e.Str("longest_matched")
		e.Int(max(row.Device, row.CPULocal, row.Disk))
		e.Str("gpu")
		e.Int(row.Device)
		e.Str("dp")
		e.MapHeader(len(row.Ranks))
		for _, r := range row.Ranks {
			e.DecKey(int64(r.Rank))
			e.Int(r.Device)
		}
		e.Str("cpu")
		e.Int(row.CPULocal)
		e.Str("disk")
		e.Int(row.Disk)
	}
}

// dynamoInstanceID reports whether id, an instance id of the index, is one a
// Dynamo client can read back: the canonical decimal text of a u64 (no sign,
// no leading zero, at most 2^64-1), which is exactly what /register writes
// for a Dynamo worker (strconv.FormatUint).
//
// A Dynamo answer can hold other ids because a Mooncake-API registration of
// the same model, tenant "default" and block size feeds the indexer's context
// (doc.go, "Indexers and contexts"). Dynamo keys scores and instances by
// worker id and a client parses every key as a u64, so one id like "mc-node"
// would fail the whole response: such rows are left out. A non-canonical
// numeric id ("07", "+7") is left out too, since a lenient parser would fold
// it onto "7", another holder's key. A Mooncake holder whose id is canonical
// is kept: it is a real holder of the shared context, which the design means
// both APIs to query, and a router that does not know the id can ignore it
// without failing. TestDynamoQueryForeignInstanceIDs, TestDynamoInstanceID.
//
// It does not allocate (strconv.ParseUint allocates its error).
func dynamoInstanceID(id string) bool {
	const maxU64 = "18446744073709551615"
	switch {
	case id == "" || len(id) > len(maxU64):
		return false
	case id[0] == '0':
		return id == "0"
	}
	for i := 0; i < len(id); i++ {
		if id[i] < '0' || id[i] > '9' {
			return false
		}
	}
	return len(id) < len(maxU64) || id <= maxU64
}
