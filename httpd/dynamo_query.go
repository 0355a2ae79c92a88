package httpd

import (
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
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
// (context.LoraName; Dynamo registrations feed the base context, so a LoRA
// query finds what other registrations of that adapter hold) and cache_salt
// selects the salt namespace, exactly as the Mooncake /query does.
func dynamoNamespace(q *core.QueryRequest, lora, salt []byte) {
	q.LoraName = b2s(lora)
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
func (d *Dynamo) parseDynamoQuery(r *jsonReader, byHash bool, st *dynState) (dynKey, *RequestError) {
	var k dynKey
	q := &st.q
	*q = core.QueryRequest{ByHash: byHash}
	tokName := "token_ids"
	if byHash {
		tokName = "block_hashes"
	}
	var seen [numDynQuery]bool
	var fe *RequestError
	var model, group, lora, salt []byte
	for {
		key, ok := r.nextKey()
		if !ok {
			break
		}
		if fe != nil {
			r.skip()
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
			r.skip() // unknown keys are ignored, as serde does
			continue
		}
		if seen[id] {
			fe = reqErr(ErrInvalidValue, string(key), "duplicate field "+string(key))
			r.skip()
			continue
		}
		seen[id] = true
		if id == dqTokens {
			if byHash {
				q.Hashes, fe = r.hashBits(&st.hashBuf, tokName, d.opts.MaxQueryTokens)
			} else {
				q.Tokens, fe = r.int32s(&st.tokBuf, tokName, d.opts.MaxQueryTokens)
			}
			continue
		}
		v := r.value()
		switch id {
		case dqModel:
			model, fe = strField(&v, "model_name")
		case dqGroup:
			group, fe = optStrField(&v, "routing_group", true)
		case dqLora:
			lora, fe = optStrField(&v, "lora_name", true)
		case dqSalt:
			switch {
			case v.kind == kindNil:
			case byHash:
				// Hashes were computed by the caller: a salt cannot be applied now.
				fe = reqErr(ErrUnsupported, "cache_salt", "cache_salt is not accepted by /query_by_hash; precompute salted hashes or use /query")
			default:
				salt, fe = optStrField(&v, "cache_salt", true)
			}
		}
	}
	if err := r.err(); err != nil {
		return k, err
	}
	if fe != nil {
		return k, fe
	}
	st.model = append(st.model, model...)
	switch {
	case !seen[dqTokens]:
		return k, reqErr(ErrMissing, tokName, tokName+" is required")
	case !seen[dqModel]:
		return k, reqErr(ErrMissing, "model_name", "model_name is required")
	}
	// Views of the body (b2s): valid for the request, never retained.
	k = dynKey{model: b2s(model), group: "default"}
	if len(group) > 0 {
		k.group = b2s(group)
	}
	q.Model = k.model
	q.TenantID = k.group
	dynamoNamespace(q, lora, salt)
	return k, nil
}

func (d *Dynamo) handleQuery(ctx *fasthttp.RequestCtx, st *dynState, byHash bool) {
	if _, ok := d.jsonBody(ctx, st); !ok {
		return
	}
	k, fe := d.parseDynamoQuery(&st.js, byHash, st)
	if fe != nil {
		d.reqError(ctx, st, 400, fe)
		return
	}
	bs, ok := d.indexer(k)
	if !ok {
		d.opError(ctx, st, 404, ErrNotFound, "no indexer for model "+strconv.Quote(k.model)+" routing_group "+strconv.Quote(k.group))
		return
	}
	ck := dynamoContext(k, bs)
	st.q.TenantID, st.q.Model, st.q.BlockSize = ck.TenantID, ck.ModelName, ck.BlockSize
	if byHash {
		dynamoRollHashes(st.q.Hashes, hash.DefaultXXH3Seed)
	}
	if err := d.ix.Query(&st.q, &st.res); err != nil {
		d.opError(ctx, st, 400, ErrInvalidValue, err.Error())
		return
	}
	e := &st.enc
	e.reset(true)
	appendDynamoScores(e, &st.res, int64(bs))
	d.body(ctx, 200, e.buf)
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
func appendDynamoScores(e *encoder, res *core.QueryResult, bs int64) {
	rows := res.Instances
	e.mapHeader(3)
	e.str("scores")
	e.mapHeader(len(rows))
	maxBlocks := int64(0)
	for i := range rows {
		e.str(rows[i].ID)
		e.mapHeader(len(rows[i].Ranks))
		for _, r := range rows[i].Ranks {
			e.decKey(int64(r.Rank))
			e.int(r.Device)
			if bs > 0 {
				maxBlocks = max(maxBlocks, r.Device/bs)
			}
		}
	}
	e.str("frequencies")
	e.arrayHeader(int(maxBlocks))
	for b := int64(0); b < maxBlocks; b++ {
		n := int64(0)
		for i := range rows {
			for _, r := range rows[i].Ranks {
				if r.Device/bs > b {
					n++
				}
			}
		}
		e.int(n)
	}
	e.str("instances")
	e.mapHeader(len(rows))
	for i := range rows {
		row := &rows[i]
		e.str(row.ID)
		e.mapHeader(5)
		e.str("longest_matched")
		e.int(max(row.Device, row.CPULocal, row.Disk))
		e.str("gpu")
		e.int(row.Device)
		e.str("dp")
		e.mapHeader(len(row.Ranks))
		for _, r := range row.Ranks {
			e.decKey(int64(r.Rank))
			e.int(r.Device)
		}
		e.str("cpu")
		e.int(row.CPULocal)
		e.str("disk")
		e.int(row.Disk)
	}
}
