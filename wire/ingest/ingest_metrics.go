package ingest

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/VictoriaMetrics/metrics"
	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/wire"
)

// streamMetrics are one subscription's counters and gauges, exposed as
// `conductor_ingest_*{instance="…",tenant="…",dp_rank="…"}` through the
// Ingester's streamSeries while the subscription is registered. They are
// atomics: the receive goroutine adds, Listeners and /metrics read.
type streamMetrics struct {
	series *streamSeries
	// labels is the series' label set without braces:
	// instance="…",tenant="…",dp_rank="…".
	labels string

	batches          counter
	stored           counter // events applied by type …
	removed          counter
	cleared          counter
	dropped          counter // … events decoded but skipped (decoder) or refused (core)
	blocks           counter
	decodeErrors     counter
	duplicates       counter
	gaps             counter
	replaysRequested counter
	replaysSucceeded counter
	replaysFailed    counter
	staleClears      counter
	clearedBlocks    counter
	restarts         counter
	reconnects       counter
	queueDrops       counter
	oversize         counter
	gapsKept         counter
	expiredBlocks    counter
	evictedBlocks    counter
	// dialectBlocks is the publisher dialect's total over every subscription
	// (mDialectBlocks): a series of the set itself, shared, never
	// unregistered.
	dialectBlocks *metrics.Counter

	// events counts every decoded event (applied, refused or skipped); it is the
	// sum of the type="…" series only when core's ApplyStats partition the events.
	events atomic.Uint64
	// lastSeq and lagBits back the gauges (the hot path never converts to
	// float).
	lastSeq atomic.Uint64
	lagBits atomic.Uint64 // math.Float64bits of the lag in seconds
	// sub backs the applier gauges (applierGauges; nil: not exposed).
	sub atomic.Pointer[core.Subscription]
}

// counter is a monotonic count written by one goroutine and read by others.
type counter struct{ v atomic.Uint64 }

func (c *counter) Inc()        { c.v.Add(1) }
func (c *counter) Add(n int)   { c.v.Add(uint64(n)) }
func (c *counter) Get() uint64 { return c.v.Load() }

// Metric names (without labels). Kept together so the /metrics documentation and
// the tests have one list to look at.
const (
	mBatches = "conductor_ingest_batches_total"
	mEvents  = "conductor_ingest_events_total" // label type="stored|removed|cleared|dropped"
	mBlocks  = "conductor_ingest_blocks_total"
	// mDialectBlocks sums mBlocks by publisher dialect (label dialect="vLLM|
	// SGLang|Mooncake|standard"); it outlives the subscriptions.
	mDialectBlocks = "conductor_ingest_dialect_blocks_total"
	mDecodeErrors  = "conductor_ingest_decode_errors_total"
	mDuplicates    = "conductor_ingest_duplicates_total"
	mGaps          = "conductor_ingest_gaps_total"
	// requested = succeeded + failed + abandoned (by Pause/Unregister, or on
	// proving a publisher restart, which starts a new replay).
	mReplaysRequested = "conductor_ingest_replays_requested_total"
	mReplaysSucceeded = "conductor_ingest_replays_succeeded_total"
	mReplaysFailed    = "conductor_ingest_replays_failed_total"
	mStaleClears      = "conductor_ingest_stale_clears_total"
	mClearedBlocks    = "conductor_ingest_cleared_blocks_total"
	mRestarts         = "conductor_ingest_restarts_total"
	mReconnects       = "conductor_ingest_reconnects_total"
	mQueueDrops       = "conductor_ingest_queue_drops_total"
	// Messages above IngestOptions.MaxMessageBytes, dropped whole.
	mOversize = "conductor_ingest_oversize_messages_total"
	// Gaps no replay healed whose gap policy kept the stream's blocks
	// (keep, expire; a clear counts in mStaleClears), the block entries
	// expire dropped, and the (owner, block) pairs evicted over the
	// registration's block bound.
	mGapsKept      = "conductor_ingest_gaps_kept_total"
	mExpiredBlocks = "conductor_ingest_expired_blocks_total"
	mEvictedBlocks = "conductor_ingest_evicted_blocks_total"
	mLastSeq       = "conductor_ingest_last_seq"
	mLag           = "conductor_ingest_lag_seconds"
	// The applier's longest run without yielding its P, and its yields
	// (core.ApplySliceBlocks).
	mApplyRunMax = "conductor_ingest_apply_run_max_seconds"
	mApplyYields = "conductor_ingest_apply_yields"
	mApplyDefers = "conductor_ingest_apply_deferrals" // stepped aside for queries in flight
)

// streamFamily is one per-stream metric family: for each stream, one series
// per label suffix (extra), its value from a counter or a gauge function.
type streamFamily struct {
	name   string
	series []streamValue
}

type streamValue struct {
	extra   string // labels after the stream's, with a leading comma
	counter func(m *streamMetrics) *counter
	gauge   func(m *streamMetrics) (float64, bool) // false: not exposed
}

func counterOf(f func(m *streamMetrics) *counter) []streamValue {
	return []streamValue{{counter: f}}
}

// streamFamilies is every per-stream family, sorted by name; the events
// family's series by their type label.
var streamFamilies = sortedFamilies([]streamFamily{
	{mBatches, counterOf(func(m *streamMetrics) *counter { return &m.batches })},
	{mEvents, []streamValue{
		{extra: `,type="cleared"`, counter: func(m *streamMetrics) *counter { return &m.cleared }},
		{extra: `,type="dropped"`, counter: func(m *streamMetrics) *counter { return &m.dropped }},
		{extra: `,type="removed"`, counter: func(m *streamMetrics) *counter { return &m.removed }},
		{extra: `,type="stored"`, counter: func(m *streamMetrics) *counter { return &m.stored }},
	}},
	{mBlocks, counterOf(func(m *streamMetrics) *counter { return &m.blocks })},
	{mDecodeErrors, counterOf(func(m *streamMetrics) *counter { return &m.decodeErrors })},
	{mDuplicates, counterOf(func(m *streamMetrics) *counter { return &m.duplicates })},
	{mGaps, counterOf(func(m *streamMetrics) *counter { return &m.gaps })},
	{mReplaysRequested, counterOf(func(m *streamMetrics) *counter { return &m.replaysRequested })},
	{mReplaysSucceeded, counterOf(func(m *streamMetrics) *counter { return &m.replaysSucceeded })},
	{mReplaysFailed, counterOf(func(m *streamMetrics) *counter { return &m.replaysFailed })},
	{mStaleClears, counterOf(func(m *streamMetrics) *counter { return &m.staleClears })},
	{mClearedBlocks, counterOf(func(m *streamMetrics) *counter { return &m.clearedBlocks })},
	{mRestarts, counterOf(func(m *streamMetrics) *counter { return &m.restarts })},
	{mReconnects, counterOf(func(m *streamMetrics) *counter { return &m.reconnects })},
	{mQueueDrops, counterOf(func(m *streamMetrics) *counter { return &m.queueDrops })},
	{mOversize, counterOf(func(m *streamMetrics) *counter { return &m.oversize })},
	{mGapsKept, counterOf(func(m *streamMetrics) *counter { return &m.gapsKept })},
	{mExpiredBlocks, counterOf(func(m *streamMetrics) *counter { return &m.expiredBlocks })},
	{mEvictedBlocks, counterOf(func(m *streamMetrics) *counter { return &m.evictedBlocks })},
	{mLastSeq, []streamValue{{gauge: func(m *streamMetrics) (float64, bool) { return float64(m.lastSeq.Load()), true }}}},
	{mLag, []streamValue{{gauge: func(m *streamMetrics) (float64, bool) { return math.Float64frombits(m.lagBits.Load()), true }}}},
	{mApplyRunMax, []streamValue{{gauge: func(m *streamMetrics) (float64, bool) {
		if s := m.sub.Load(); s != nil {
			return s.ApplyRunMax().Seconds(), true
		}
		return 0, false
	}}}},
	{mApplyYields, []streamValue{{gauge: func(m *streamMetrics) (float64, bool) {
		if s := m.sub.Load(); s != nil {
			return float64(s.ApplyYields()), true
		}
		return 0, false
	}}}},
	{mApplyDefers, []streamValue{{gauge: func(m *streamMetrics) (float64, bool) {
		if s := m.sub.Load(); s != nil {
			return float64(s.ApplyDeferrals()), true
		}
		return 0, false
	}}}},
})

func sortedFamilies(fs []streamFamily) []streamFamily {
	slices.SortFunc(fs, func(a, b streamFamily) int { return strings.Compare(a.name, b.name) })
	return fs
}

// streamSeries exposes the registered streams' metrics in a metrics.Set, as
// one metrics writer over the streams' own atomics
// (Set.RegisterMetricsWriter): adding or removing a stream is a map update.
// (A series of the set per stream and metric costs a check of its name by
// regexp when created and, when removed, a scan of every series in the set:
// quadratic in the fleet's size.) A scrape writes what the set would for the
// same series: each family's series together, families sorted by name, the
// series of a family by their full names (TestStreamSeriesAgreesWithSet).
type streamSeries struct {
	set     *metrics.Set
	mu      sync.Mutex
	streams map[*streamMetrics]struct{}
}

// newStreamSeries registers the writer in set.
func newStreamSeries(set *metrics.Set) *streamSeries {
	r := &streamSeries{set: set, streams: make(map[*streamMetrics]struct{})}
	set.RegisterMetricsWriter(r.write)
	return r
}

// newStreamMetrics returns k's metrics, exposed from now until unregister.
func (r *streamSeries) newStreamMetrics(k core.ServiceKey, d wire.Dialect) *streamMetrics {
	m := &streamMetrics{series: r,
		labels: `instance="` + escapeLabel(k.InstanceID) + `",tenant="` + escapeLabel(k.TenantID) +
			`",dp_rank="` + strconv.Itoa(int(k.DPRank)) + `"`,
		dialectBlocks: r.set.GetOrCreateCounter(mDialectBlocks + `{dialect="` + d.String() + `"}`),
	}
	r.mu.Lock()
	r.streams[m] = struct{}{}
	r.mu.Unlock()
	return m
}

// applierGauges exports sub's applier figures beside the stream's metrics.
func (m *streamMetrics) applierGauges(sub *core.Subscription) { m.sub.Store(sub) }

// unregister removes the stream's series.
func (m *streamMetrics) unregister() {
	m.series.mu.Lock()
	delete(m.series.streams, m)
	m.series.mu.Unlock()
}

// write writes every registered stream's series (the set's metrics writer).
func (r *streamSeries) write(w io.Writer) {
	r.mu.Lock()
	ms := make([]*streamMetrics, 0, len(r.streams))
	for m := range r.streams {
		ms = append(ms, m)
	}
	r.mu.Unlock()
	if len(ms) == 0 {
		return
	}
	// Label sets end with a closing quote and escape every quote inside, so
	// none is a prefix of another: ordering the streams by label set orders
	// each family's series by full name.
	slices.SortFunc(ms, func(a, b *streamMetrics) int { return strings.Compare(a.labels, b.labels) })
	b := make([]byte, 0, 64<<10)
	for _, f := range streamFamilies {
		for _, m := range ms {
			for i := range f.series {
				v := &f.series[i]
				var val float64
				if v.gauge != nil {
					var ok bool
					if val, ok = v.gauge(m); !ok {
						continue
					}
				}
				b = append(b, f.name...)
				b = append(b, '{')
				b = append(b, m.labels...)
				b = append(b, v.extra...)
				b = append(b, "} "...)
				if v.counter != nil {
					b = strconv.AppendUint(b, v.counter(m).Get(), 10)
				} else {
					b = appendGauge(b, val)
				}
				b = append(b, '\n')
			}
		}
		if len(b) >= 32<<10 {
			_, _ = w.Write(b)
			b = b[:0]
		}
	}
	_, _ = w.Write(b)
}

// appendGauge formats a gauge's value as metrics.Gauge does: an integral
// value as an integer, any other with %g.
func appendGauge(b []byte, v float64) []byte {
	if float64(int64(v)) == v {
		return strconv.AppendInt(b, int64(v), 10)
	}
	return fmt.Appendf(b, "%g", v)
}

// escapeLabel writes s as a Prometheus label value: backslash, quote and
// newline escaped as the text format defines, and every other byte that is
// not printable text (a C0 control, DEL, a C1 control, a byte of invalid
// UTF-8) as the label value \xHH (written \\xHH), so that no raw control
// byte reaches a scrape. core refuses such identities at registration; this keeps the
// exposition clean whatever reaches it (TestEscapeLabel).
func escapeLabel(s string) string {
	clean := true
	for i := 0; i < len(s) && clean; i++ {
		c := s[i]
		clean = c >= 0x20 && c < 0x7f && c != '\\' && c != '"'
	}
	if clean {
		return s
	}
	const hex = "0123456789abcdef"
	b := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case s[i] == '\\':
			b = append(b, `\\`...)
		case s[i] == '"':
			b = append(b, `\"`...)
		case s[i] == '\n':
			b = append(b, `\n`...)
		case (r == utf8.RuneError && n == 1) || r < 0x20 || (r >= 0x7f && r <= 0x9f):
			for _, c := range []byte(s[i : i+n]) {
				b = append(b, '\\', '\\', 'x', hex[c>>4], hex[c&15])
			}
		default:
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return string(b)
}
