package httpd

import (
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/core"
)

// Status classes counted per endpoint; anything else is "other".
var statusCodes = [...]int{200, 400, 404, 405, 413, 500, 503}

const numCodes = len(statusCodes) + 1

// latencyBuckets (seconds) resolve the microsecond range /query lives in.
var latencyBuckets = []float64{25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 100e-3, 1}

// serverMetrics are one Server's Prometheus metrics. Counters for a
// (path, code) or (path, reason) pair are created on first use and cached in
// atomic slots, so the hot path neither formats names nor locks.
type serverMetrics struct {
	set      *metrics.Set
	requests [numEndpoints][numCodes]atomic.Pointer[metrics.Counter]
	errors   [numEndpoints][numReasons]atomic.Pointer[metrics.Counter]
	latency  [numEndpoints]*metrics.PrometheusHistogram

	queryTokens   *metrics.Counter // tokens (or hashes) submitted to /query*
	queryMisses   *metrics.Counter // queries whose context does not exist
	queryHitRows  *metrics.Counter // instance rows with longest_matched > 0
	queryRowsSeen *metrics.Counter // instance rows returned
}

func newServerMetrics(ix *core.Index) *serverMetrics {
	m := &serverMetrics{set: metrics.NewSet()}
	for ep := endpoint(0); ep < numEndpoints; ep++ {
		m.latency[ep] = m.set.NewPrometheusHistogramExt(
			fmt.Sprintf(`conductor_http_request_duration_seconds{path=%q}`, ep.String()), latencyBuckets)
	}
	m.queryTokens = m.set.NewCounter("conductor_query_tokens_total")
	m.queryMisses = m.set.NewCounter("conductor_query_context_misses_total")
	m.queryRowsSeen = m.set.NewCounter("conductor_query_rows_total")
	m.queryHitRows = m.set.NewCounter("conductor_query_hit_rows_total")
	m.set.RegisterMetricsWriter(func(w io.Writer) { writeIndexMetrics(w, ix) })
	return m
}

func codeIndex(code int) int {
	for i, c := range statusCodes {
		if c == code {
			return i
		}
	}
	return len(statusCodes)
}

// observe counts one request and its latency.
func (m *serverMetrics) observe(ep endpoint, code int, start time.Time) {
	ci := codeIndex(code)
	slot := &m.requests[ep][ci]
	c := slot.Load()
	if c == nil {
		label := "other"
		if ci < len(statusCodes) {
			label = fmt.Sprint(statusCodes[ci])
		}
		c = m.set.GetOrCreateCounter(fmt.Sprintf(`conductor_http_requests_total{path=%q,code=%q}`, ep.String(), label))
		slot.Store(c)
	}
	c.Inc()
	m.latency[ep].UpdateDuration(start)
}

// requestError counts one rejected request by reason.
func (m *serverMetrics) requestError(ep endpoint, e error) {
	ri := reasonIndex(e)
	if ri < 0 {
		return
	}
	slot := &m.errors[ep][ri]
	c := slot.Load()
	if c == nil {
		c = m.set.GetOrCreateCounter(fmt.Sprintf(`conductor_http_request_errors_total{path=%q,reason=%q}`,
			ep.String(), reasons[ri].reason))
		slot.Store(c)
	}
	c.Inc()
}

// queryRows counts a served query.
func (m *serverMetrics) queryRows(q *core.QueryRequest, res *core.QueryResult) {
	if q.ByHash {
		m.queryTokens.Add(len(q.Hashes))
	} else {
		m.queryTokens.Add(len(q.Tokens))
	}
	if !res.ContextFound {
		m.queryMisses.Inc()
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

// writeIndexMetrics writes gauges and counters read from the index at scrape
// time: contexts, prefixes, (block, owner) holdings per tier, registrations by
// publisher type, event counters. All O(contexts + registrations): the index
// keeps its per-tier holding counts as blocks change.
func writeIndexMetrics(w io.Writer, ix *core.Index) {
	gv := ix.GlobalView()
	var prefixes uint64
	for i := range gv.Contexts {
		prefixes += uint64(gv.Contexts[i].PrefixCount)
	}
	metrics.WriteGaugeUint64(w, "conductor_contexts", uint64(len(gv.Contexts)))
	metrics.WriteGaugeUint64(w, "conductor_prefixes", prefixes)

	byType := map[string]uint64{}
	for _, r := range ix.Services() {
		byType[r.Type.String()]++
	}
	for _, t := range []string{"vLLM", "SGLang", "Mooncake", "standard"} {
		metrics.WriteGaugeUint64(w, fmt.Sprintf(`conductor_registrations{type=%q}`, t), byType[t])
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

// handleMetrics writes the Prometheus text exposition.
func (s *Server) handleMetrics(ctx *fasthttp.RequestCtx) {
	ctx.SetStatusCode(200)
	ctx.SetContentType("text/plain; version=0.0.4; charset=utf-8")
	s.m.set.WritePrometheus(ctx)
	for _, set := range s.opts.ExtraMetrics {
		set.WritePrometheus(ctx)
	}
	if !s.opts.DisableProcessMetrics {
		metrics.WriteProcessMetrics(ctx)
	}
}
