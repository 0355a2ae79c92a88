package mooncake

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/httpd/server"
)

// Status classes counted per endpoint; anything else is "other".
var statusCodes = [...]int{200, 400, 404, 405, 413, 500, 503}

const numCodes = len(statusCodes) + 1

// endpointMetrics are the Mooncake API's request series, in the Core's set.
// Counters for a (path, code) or (path, reason) pair are created on first
// use and cached in atomic slots, so the hot path neither formats names nor
// locks.
type endpointMetrics struct {
	set      *metrics.Set
	requests [numEndpoints][numCodes]atomic.Pointer[metrics.Counter]
	errors   [numEndpoints][server.NumReasons]atomic.Pointer[metrics.Counter]
	latency  [numEndpoints]*metrics.PrometheusHistogram
}

func newEndpointMetrics(set *metrics.Set) *endpointMetrics {
	m := &endpointMetrics{set: set}
	for ep := endpoint(0); ep < numEndpoints; ep++ {
		m.latency[ep] = m.set.GetOrCreatePrometheusHistogramExt(
			fmt.Sprintf(`conductor_http_request_duration_seconds{path=%q}`, ep.String()), server.LatencyBuckets())
	}
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
func (m *endpointMetrics) observe(ep endpoint, code int, start time.Time) {
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
func (m *endpointMetrics) requestError(ep endpoint, e error) {
	ri := server.ReasonIndex(e)
	if ri < 0 {
		return
	}
	slot := &m.errors[ep][ri]
	c := slot.Load()
	if c == nil {
		c = m.set.GetOrCreateCounter(fmt.Sprintf(`conductor_http_request_errors_total{path=%q,reason=%q}`,
			ep.String(), server.ReasonOf(e)))
		slot.Store(c)
	}
	c.Inc()
}

// handleMetrics writes the Prometheus text exposition: the Core's set (this
// surface's and the RPC's request series, the query counters, the index),
// every Options.ExtraMetrics set, then the go_* and process_* metrics.
func (s *Server) handleMetrics(ctx *fasthttp.RequestCtx) {
	ctx.SetStatusCode(200)
	ctx.SetContentType("text/plain; version=0.0.4; charset=utf-8")
	s.c.Metrics().WritePrometheus(ctx)
	for _, set := range s.opts.ExtraMetrics {
		set.WritePrometheus(ctx)
	}
	if !s.opts.DisableProcessMetrics {
		metrics.WriteProcessMetrics(ctx)
	}
}
