package server

import (
	"sort"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
)

// Response documents the Mooncake API and the RPC share, in either syntax.

// appendProfile writes P5: {strategy, algorithm, python_hash_seed, root_digest,
// index_projection} (root_digest: lowercase hex, 64 characters, 32 for the
// xxhash algorithms; all zeros for strategies without a root).
func appendProfile(e *Encoder, p *hash.Profile) {
	e.MapHeader(5)
	e.Str("strategy")
	e.Str(p.Spec.Strategy)
	e.Str("algorithm")
	e.Str(p.Spec.Algorithm)
	e.Str("python_hash_seed")
	e.Str(p.Spec.PythonHashSeed)
	e.Str("root_digest")
	e.Str(p.RootHex())
	e.Str("index_projection")
	e.Str(p.Spec.IndexProjection)
}

// AppendServices writes the registrations as [S...]: the 11 export keys of
// reference §1.1 (Endpoint, ReplayEndpoint, Type, ModelName, LoraName,
// TenantID, InstanceID, BlockSize, DPRank, CacheGroup, HashProfile), then
// HashCheck (AppendHashCheck; the registration's self-check in ix, unverified
// for one no longer registered), plus AdditionalSalt, Source (SourceOf:
// config, kubernetes or api), Connection (AppendConnection, from conns;
// null for a registration conns lacks), GapPolicy (the policy in force: the
// registration's or the process's), MaxBlocks (the bound in force, 0 for
// none) and HeldBlocks (the (owner, block) pairs it holds) when withSalt
// (the HTTP /services; the Python API has the 12).
func AppendServices(e *Encoder, svcs []core.Registration, withSalt bool, ix *core.Index, conns map[core.ServiceKey]Connection) {
	e.ArrayHeader(len(svcs))
	for i := range svcs {
		r := &svcs[i]
		if withSalt {
			e.MapHeader(18)
		} else {
			e.MapHeader(12)
		}
		e.Str("Endpoint")
		e.Str(r.Endpoint)
		e.Str("ReplayEndpoint")
		e.Str(r.ReplayEndpoint)
		e.Str("Type")
		e.Str(r.Type.String())
		e.Str("ModelName")
		e.Str(r.ModelName)
		e.Str("LoraName")
		e.Str(r.LoraName)
		e.Str("TenantID")
		e.Str(r.TenantID)
		e.Str("InstanceID")
		e.Str(r.InstanceID)
		e.Str("BlockSize")
		e.Int(int64(r.BlockSize))
		e.Str("DPRank")
		e.Int(int64(r.DPRank))
		e.Str("CacheGroup")
		if r.CacheGroup == nil {
			e.Null()
		} else {
			e.Int(*r.CacheGroup)
		}
		e.Str("HashProfile")
		appendProfile(e, &r.Profile)
		e.Str("HashCheck")
		var c core.HashCheck
		if sub, ok := ix.Lookup(r.Key()); ok {
			c = sub.HashCheck()
		}
		AppendHashCheck(e, &c)
		if withSalt {
			e.Str("AdditionalSalt")
			e.Str(r.AdditionalSalt)
			e.Str("Source")
			e.Str(SourceOf(r))
			e.Str("Connection")
			if c, ok := conns[r.Key()]; ok {
				AppendConnection(e, &c)
			} else {
				e.Null()
			}
			policy, bound, held := r.GapPolicy, r.MaxBlocks, 0
			if sub, ok := ix.Lookup(r.Key()); ok {
				policy, bound, held = sub.GapPolicy(), sub.BlockBound(), sub.HeldBlocks()
			}
			e.Str("GapPolicy")
			e.Str(policy.String())
			e.Str("MaxBlocks")
			e.Int(int64(bound))
			e.Str("HeldBlocks")
			e.Int(int64(held))
		}
	}
}

// AppendConnection writes a registration's connection as {state,
// last_error, events, last_seq} (Connection).
func AppendConnection(e *Encoder, c *Connection) {
	e.MapHeader(4)
	e.Str("state")
	e.Str(c.State)
	e.Str("last_error")
	e.Str(c.LastError)
	e.Str("events")
	e.Uint(c.Events)
	e.Str("last_seq")
	e.Uint(c.LastSeq)
}

// AppendHashCheck writes a registration's hash-profile self-check as
// {state, samples, detail, found}: state "unverified", "verified" or
// "mismatch"; samples the events checked; detail the operator's sentence (""
// unless a mismatch); found the profile that reproduces the engine's hashes
// as {strategy, algorithm, python_hash_seed, index_projection}, or null.
func AppendHashCheck(e *Encoder, c *core.HashCheck) {
	e.MapHeader(4)
	e.Str("state")
	e.Str(c.State.String())
	e.Str("samples")
	e.Uint(c.Samples)
	e.Str("detail")
	e.Str(c.Detail)
	e.Str("found")
	if c.Found == (hash.Spec{}) {
		e.Null()
		return
	}
	e.MapHeader(4)
	e.Str("strategy")
	e.Str(c.Found.Strategy)
	e.Str("algorithm")
	e.Str(c.Found.Algorithm)
	e.Str("python_hash_seed")
	e.Str(c.Found.PythonHashSeed)
	e.Str("index_projection")
	e.Str(c.Found.IndexProjection)
}

// AppendContexts writes [C...] of /global_view and the RPC GetGlobalView:
// C = {model_name, lora_name, block_size, tenant_id, prefix_count,
// hash_profile (P5), instances: {id: [ranks ascending]}}, instances by id.
func AppendContexts(e *Encoder, cs []core.ContextView) {
	e.ArrayHeader(len(cs))
	var ids []string
	for i := range cs {
		c := &cs[i]
		e.MapHeader(7)
		e.Str("model_name")
		e.Str(c.ModelName)
		e.Str("lora_name")
		e.Str(c.LoraName)
		e.Str("block_size")
		e.Int(int64(c.BlockSize))
		e.Str("tenant_id")
		e.Str(c.TenantID)
		e.Str("prefix_count")
		e.Uint(uint64(c.PrefixCount))
		e.Str("hash_profile")
		appendProfile(e, &c.Profile)
		e.Str("instances")
		ids = ids[:0]
		for id := range c.Instances {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		e.MapHeader(len(ids))
		for _, id := range ids {
			ranks := c.Instances[id] // ascending
			e.Str(id)
			e.ArrayHeader(len(ranks))
			for _, r := range ranks {
				e.Int(int64(r))
			}
		}
	}
}

// AppendQueryResult writes the Mooncake /query response.
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
func AppendQueryResult(e *Encoder, tenant string, res *core.QueryResult) {
	rows := res.Instances
	if !e.json {
		e.MapHeader(1)
		e.Str("instances")
		AppendInstanceRows(e, rows)
		return
	}
	if len(rows) == 0 {
		e.MapHeader(0)
		return
	}
	e.MapHeader(1)
	e.Str(tenant)
	e.MapHeader(len(rows))
	for i := range rows {
		row := &rows[i]
		e.Str(row.ID)
		e.MapHeader(10)
		e.Str("longest_matched")
		e.Int(row.LongestMatched)
		e.Str("GPU")
		e.Int(row.Media[core.MediumDevice])
		e.Str("CPU")
		e.Int(row.Media[core.MediumHost])
		e.Str("DISK")
		e.Int(row.Media[core.MediumDisk])
		e.Str("DP")
		appendDP(e, row.Ranks, true)
		appendTiers(e, row.Device, row.CPULocal, row.CPUShare, row.Disk)
		e.Str("rank_matches")
		appendRankMatches(e, row.Ranks)
	}
}

// AppendInstanceRows writes {id: {longest_matched, dp, rank_matches, device,
// cpu_local, cpu_share, disk}}: the msgpack "instances" map and the RPC "hits".
func AppendInstanceRows(e *Encoder, rows []core.InstanceResult) {
	e.MapHeader(len(rows))
	for i := range rows {
		row := &rows[i]
		e.Str(row.ID)
		e.MapHeader(7)
		e.Str("longest_matched")
		e.Int(row.LongestMatched)
		e.Str("dp")
		appendDP(e, row.Ranks, false)
		e.Str("rank_matches")
		appendRankMatches(e, row.Ranks)
		appendTiers(e, row.Device, row.CPULocal, row.CPUShare, row.Disk)
	}
}

// appendDP writes the per-rank map: each rank's longest prefix across all
// media (longest, the JSON dialect's DP) or its device boundary (msgpack dp).
func appendDP(e *Encoder, ranks []core.RankResult, longest bool) {
	e.MapHeader(len(ranks))
	for i := range ranks {
		e.DecKey(int64(ranks[i].Rank))
		if longest {
			e.Int(ranks[i].Disk)
		} else {
			e.Int(ranks[i].Device)
		}
	}
}

func appendRankMatches(e *Encoder, ranks []core.RankResult) {
	e.MapHeader(len(ranks))
	for i := range ranks {
		rk := &ranks[i]
		e.DecKey(int64(rk.Rank))
		e.MapHeader(4)
		appendTiers(e, rk.Device, rk.CPULocal, rk.CPUShare, rk.Disk)
	}
}

// appendTiers writes the four tier entries into an open map.
func appendTiers(e *Encoder, device, cpuLocal, cpuShare, disk int64) {
	e.Str("device")
	e.Int(device)
	e.Str("cpu_local")
	e.Int(cpuLocal)
	e.Str("cpu_share")
	e.Int(cpuShare)
	e.Str("disk")
	e.Int(disk)
}
