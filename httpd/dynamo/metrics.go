package dynamo

import (
	"fmt"
	"io"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/httpd/server"
)

// dynMetrics are the Dynamo listener's Prometheus series, named as the seed
// names them (dynamo_kvindexer_*, dynamo_kvrouter_*), written beside
// conductor's own on the Dynamo /metrics.
type dynMetrics struct {
	set *metrics.Set
	d   *Server
	// per route: latency histogram, requests by method, errors by class.
	dur  [numDynRoutes]*metrics.PrometheusHistogram
	reqs [numDynRoutes][3]*metrics.Counter // GET, POST, other
	errs [numDynRoutes][2]*metrics.Counter // 4xx, 5xx
	// ignored counts requests with a body key the route ignored
	// (noteIgnored), per route that reads a body of keys.
	ignored [numDynRoutes]*metrics.Counter
}

// dynBuckets: 0.1 ms doubling, 20 buckets (Dynamo's).
func dynBuckets() []float64 {
	b := make([]float64, 20)
	v := 0.0001
	for i := range b {
		b[i] = v
		v *= 2
	}
	return b
}

func newDynMetrics(d *Server) *dynMetrics {
	m := &dynMetrics{set: metrics.NewSet(), d: d}
	bk := dynBuckets()
	for r := 0; r < numDynRoutes; r++ {
		ep := dynPaths[r]
		m.dur[r] = m.set.NewPrometheusHistogramExt(fmt.Sprintf(`dynamo_kvindexer_request_duration_seconds{endpoint=%q}`, ep), bk)
		for i, meth := range []string{"GET", "POST", "other"} {
			m.reqs[r][i] = m.set.NewCounter(fmt.Sprintf(`dynamo_kvindexer_requests_total{endpoint=%q,method=%q}`, ep, meth))
		}
		for i, cl := range []string{"4xx", "5xx"} {
			m.errs[r][i] = m.set.NewCounter(fmt.Sprintf(`dynamo_kvindexer_errors_total{endpoint=%q,status_class=%q}`, ep, cl))
		}
		if routeKeys[r] != nil {
			m.ignored[r] = m.set.NewCounter(fmt.Sprintf(`conductor_dynamo_ignored_keys_total{endpoint=%q}`, ep))
		}
	}
	m.set.RegisterMetricsWriter(m.writeGauges)
	return m
}

func (m *dynMetrics) observe(r int, method []byte, status int, start time.Time) {
	m.dur[r].UpdateDuration(start)
	mi := 2
	switch string(method) {
	case "GET":
		mi = 0
	case "POST":
		mi = 1
	}
	m.reqs[r][mi].Inc()
	switch {
	case status >= 500:
		m.errs[r][1].Inc()
	case status >= 400:
		m.errs[r][0].Inc()
	}
}

// writeGauges writes the gauges read at scrape time, and the event counters.
// Conductor's core counts events across all tiers: the dynamo_kvrouter_*
// series are those counts (Dynamo's are device-tier only), with status "ok"
// for applied events and "parent_not_found" for stores whose parent was
// unknown; warning kinds are conductor's (duplicate_event_id, unknown_medium,
// partial_block, recovered_skip).
func (m *dynMetrics) writeGauges(w io.Writer) {
	models, workers, ls := m.d.counts()
	metrics.WriteGaugeUint64(w, "dynamo_kvindexer_models", uint64(models))
	metrics.WriteGaugeUint64(w, "dynamo_kvindexer_workers", uint64(workers))
	for _, s := range []string{"pending", "active", "paused", "failed"} {
		metrics.WriteGaugeUint64(w, fmt.Sprintf(`dynamo_kvindexer_listeners{status=%q}`, s), uint64(ls[s]))
	}
	c := m.d.ix.Counters()
	metrics.WriteCounterUint64(w, `dynamo_kvrouter_kv_cache_events_applied{event_type="stored",status="ok"}`, c.Stored.Load())
	metrics.WriteCounterUint64(w, `dynamo_kvrouter_kv_cache_events_applied{event_type="stored",status="parent_not_found"}`, c.UnknownParents.Load())
	metrics.WriteCounterUint64(w, `dynamo_kvrouter_kv_cache_events_applied{event_type="removed",status="ok"}`, c.Removed.Load())
	metrics.WriteCounterUint64(w, `dynamo_kvrouter_kv_cache_events_applied{event_type="cleared",status="ok"}`, c.Cleared.Load())
	metrics.WriteCounterUint64(w, `dynamo_kvrouter_kv_cache_event_warnings{warning_kind="duplicate_event_id"}`, c.DuplicateIDs.Load())
	metrics.WriteCounterUint64(w, `dynamo_kvrouter_kv_cache_event_warnings{warning_kind="unknown_medium"}`, c.UnknownMedia.Load())
	metrics.WriteCounterUint64(w, `dynamo_kvrouter_kv_cache_event_warnings{warning_kind="partial_block"}`, c.PartialBlocks.Load())
	metrics.WriteCounterUint64(w, `dynamo_kvrouter_kv_cache_event_warnings{warning_kind="recovered_skip"}`, c.RecoveredSkips.Load())
}

func (m *dynMetrics) write(ctx *fasthttp.RequestCtx) {
	ctx.SetStatusCode(200)
	ctx.SetContentType("text/plain; version=0.0.4; charset=utf-8")
	m.set.WritePrometheus(ctx)
	server.WriteIndexMetrics(ctx, m.d.ix)
	m.d.c.WriteQueryMissMetrics(ctx)
	m.d.c.WriteRegistrationMetrics(ctx)
	for _, set := range m.d.opts.ExtraMetrics {
		set.WritePrometheus(ctx)
	}
}
