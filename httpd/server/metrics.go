package server

import (
	"fmt"
	"io"

	"github.com/VictoriaMetrics/metrics"

	"github.com/seed-c7a81618/conductor/core"
)

// LatencyBuckets are the request-latency histogram buckets, in seconds: they
// resolve the microsecond range /query lives in.
func LatencyBuckets() []float64 {
	return []float64{25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 100e-3, 1}
}

// queryMetrics are the Core's own series in its set: what RunQuery counts
// (for the Mooncake API and the RPC alike), the context misses of every
// surface, and the index read at scrape time.
type queryMetrics struct {
	set *metrics.Set

	queryTokens   *metrics.Counter // tokens (or hashes) submitted to /query*
	queryHitRows  *metrics.Counter // instance rows with longest_matched > 0
	queryRowsSeen *metrics.Counter // instance rows returned
	// queryMisses are the queries whose context does not exist, by reason
	// (Core.QueryMiss, on every surface); [MissNone] is unused.
	queryMisses [NumMissReasons]*metrics.Counter
}

func newQueryMetrics(ix *core.Index) *queryMetrics {
	m := &queryMetrics{set: metrics.NewSet()}
	m.queryTokens = m.set.NewCounter("conductor_query_tokens_total")
	for r := MissNone + 1; r < NumMissReasons; r++ {
		m.queryMisses[r] = m.set.NewCounter(missMetricName(r))
	}
	m.queryRowsSeen = m.set.NewCounter("conductor_query_rows_total")
	m.queryHitRows = m.set.NewCounter("conductor_query_hit_rows_total")
	m.set.RegisterMetricsWriter(func(w io.Writer) { WriteIndexMetrics(w, ix) })
	return m
}

// queryRows counts a served query's tokens and rows; a miss is counted by
// Core.QueryMiss.
func (m *queryMetrics) queryRows(q *core.QueryRequest, res *core.QueryResult) {
	if q.ByHash {
		m.queryTokens.Add(len(q.Hashes))
	} else {
		m.queryTokens.Add(len(q.Tokens))
	}
	if !res.ContextFound {
		return
	}
	m.queryRowsSeen.Add(len(res.Instances))
	hits := 0
	for i := range res.Instances {
		if res.Instances[i].LongestMatched > 0 {
			hits++
		}
	}
	if hits > 0 {
		m.queryHitRows.Add(hits)
	}
}

// WriteIndexMetrics writes gauges and counters read from the index at scrape
// time: contexts, prefixes, (block, owner) holdings per tier, registrations by
// publisher type and by hash-profile self-check state, event counters. All O(contexts + registrations): the index
// keeps its per-tier holding counts as blocks change.
func WriteIndexMetrics(w io.Writer, ix *core.Index) {
	gv := ix.GlobalView()
	var prefixes uint64
	for i := range gv.Contexts {
		prefixes += uint64(gv.Contexts[i].PrefixCount)
	}
	metrics.WriteGaugeUint64(w, "conductor_contexts", uint64(len(gv.Contexts)))
	metrics.WriteGaugeUint64(w, "conductor_prefixes", prefixes)

	byType := map[string]uint64{}
	var byCheck [3]uint64
	for _, r := range ix.Services() {
		byType[r.Type.String()]++
		if sub, ok := ix.Lookup(r.Key()); ok {
			byCheck[sub.HashCheck().State]++
		}
	}
	for _, t := range []string{"vLLM", "SGLang", "Mooncake", "standard"} {
		metrics.WriteGaugeUint64(w, fmt.Sprintf(`conductor_registrations{type=%q}`, t), byType[t])
	}
	for st := core.HashUnverified; st <= core.HashMismatch; st++ {
		metrics.WriteGaugeUint64(w, fmt.Sprintf(`conductor_registrations_hash_check{state=%q}`, st.String()), byCheck[st])
	}

	tb := ix.TierBlocks()
	for t := core.Tier(0); t < core.NumTiers; t++ {
		metrics.WriteGaugeUint64(w, fmt.Sprintf(`conductor_blocks{tier=%q}`, t.String()), uint64(tb[t]))
	}

	c := ix.Counters()
	for _, kv := range []struct {
		name string
		v    uint64
	}{
		{`conductor_index_events_total{kind="stored"}`, c.Stored.Load()},
		{`conductor_index_events_total{kind="removed"}`, c.Removed.Load()},
		{`conductor_index_events_total{kind="cleared"}`, c.Cleared.Load()},
		{`conductor_index_blocks_stored_total`, c.BlocksStored.Load()},
		{`conductor_index_blocks_removed_total`, c.BlocksRemoved.Load()},
		{`conductor_index_blocks_cleared_total`, c.ClearedBlocks.Load()},
		{`conductor_index_rebind_clears_total`, c.RebindClears.Load()},
		{`conductor_index_events_dropped_total`, c.Dropped.Load()},
		{`conductor_index_unknown_media_total`, c.UnknownMedia.Load()},
		{`conductor_index_partial_blocks_total`, c.PartialBlocks.Load()},
		{`conductor_index_unknown_parents_total`, c.UnknownParents.Load()},
		{`conductor_index_duplicate_event_ids_total`, c.DuplicateIDs.Load()},
		{`conductor_index_event_id_gaps_total`, c.EventIDGaps.Load()},
		{`conductor_index_stream_gap_clears_total`, c.StreamGapClears.Load()},
		{`conductor_index_stream_evictions_total`, c.StreamEvictions.Load()},
		{`conductor_index_rank_rejects_total`, c.RankRejects.Load()},
	} {
		metrics.WriteCounterUint64(w, kv.name, kv.v)
	}
	for r := core.DropReason(0); r < core.NumDropReasons; r++ {
		metrics.WriteCounterUint64(w, fmt.Sprintf(`conductor_index_events_dropped_by_reason_total{reason=%q}`, r.String()), c.DroppedBy[r].Load())
	}
}
