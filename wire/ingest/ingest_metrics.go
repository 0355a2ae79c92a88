package ingest

import (
	"math"
	"strconv"
	"sync/atomic"
	"unicode/utf8"

	"github.com/VictoriaMetrics/metrics"
	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/wire"
)

// streamMetrics are one subscription's counters, registered in the Ingester's
// metrics.Set under `conductor_ingest_*{instance="…",tenant="…",dp_rank="…"}` and
// unregistered when the subscription is. Counters are atomic: the receive goroutine
// adds, Listeners and /metrics read.
type streamMetrics struct {
	set   *metrics.Set
	names []string

	batches          *metrics.Counter
	stored           *metrics.Counter // events applied by type …
	removed          *metrics.Counter
	cleared          *metrics.Counter
	dropped          *metrics.Counter // … events decoded but skipped (decoder) or refused (core)
	blocks           *metrics.Counter
	decodeErrors     *metrics.Counter
	duplicates       *metrics.Counter
	gaps             *metrics.Counter
	replaysRequested *metrics.Counter
	replaysSucceeded *metrics.Counter
	replaysFailed    *metrics.Counter
	staleClears      *metrics.Counter
	clearedBlocks    *metrics.Counter
	restarts         *metrics.Counter
	reconnects       *metrics.Counter
	queueDrops       *metrics.Counter
	oversize         *metrics.Counter
	gapsKept         *metrics.Counter
	expiredBlocks    *metrics.Counter
	evictedBlocks    *metrics.Counter
	// dialectBlocks is the publisher dialect's total over every subscription
	// (mDialectBlocks): shared, never unregistered.
	dialectBlocks *metrics.Counter

	// events counts every decoded event (applied, refused or skipped); it is the
	// sum of the type="…" series only when core's ApplyStats partition the events.
	events atomic.Uint64
	// lastSeq and lagBits back the gauges (read through callbacks, so the hot
	// path never converts to float).
	lastSeq atomic.Uint64
	lagBits atomic.Uint64 // math.Float64bits of the lag in seconds
}

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

func newStreamMetrics(set *metrics.Set, k core.ServiceKey, d wire.Dialect) *streamMetrics {
	m := &streamMetrics{set: set}
	m.dialectBlocks = set.GetOrCreateCounter(mDialectBlocks + `{dialect="` + d.String() + `"}`)
	labels := `instance="` + escapeLabel(k.InstanceID) + `",tenant="` + escapeLabel(k.TenantID) +
		`",dp_rank="` + strconv.Itoa(int(k.DPRank)) + `"`
	counter := func(name, extra string) *metrics.Counter {
		full := name + "{" + labels + extra + "}"
		m.names = append(m.names, full)
		return set.GetOrCreateCounter(full)
	}
	m.batches = counter(mBatches, "")
	m.stored = counter(mEvents, `,type="stored"`)
	m.removed = counter(mEvents, `,type="removed"`)
	m.cleared = counter(mEvents, `,type="cleared"`)
	m.dropped = counter(mEvents, `,type="dropped"`)
	m.blocks = counter(mBlocks, "")
	m.decodeErrors = counter(mDecodeErrors, "")
	m.duplicates = counter(mDuplicates, "")
	m.gaps = counter(mGaps, "")
	m.replaysRequested = counter(mReplaysRequested, "")
	m.replaysSucceeded = counter(mReplaysSucceeded, "")
	m.replaysFailed = counter(mReplaysFailed, "")
	m.staleClears = counter(mStaleClears, "")
	m.clearedBlocks = counter(mClearedBlocks, "")
	m.restarts = counter(mRestarts, "")
	m.reconnects = counter(mReconnects, "")
	m.queueDrops = counter(mQueueDrops, "")
	m.oversize = counter(mOversize, "")
	m.gapsKept = counter(mGapsKept, "")
	m.expiredBlocks = counter(mExpiredBlocks, "")
	m.evictedBlocks = counter(mEvictedBlocks, "")
	gauge := func(name string, f func() float64) {
		full := name + "{" + labels + "}"
		m.names = append(m.names, full)
		set.GetOrCreateGauge(full, f)
	}
	gauge(mLastSeq, func() float64 { return float64(m.lastSeq.Load()) })
	gauge(mLag, func() float64 { return math.Float64frombits(m.lagBits.Load()) })
	return m
}

// applierGauges exports sub's applier figures beside the stream's metrics
// (unregistered with them).
func (m *streamMetrics) applierGauges(sub *core.Subscription, k core.ServiceKey) {
	labels := `{instance="` + escapeLabel(k.InstanceID) + `",tenant="` + escapeLabel(k.TenantID) +
		`",dp_rank="` + strconv.Itoa(int(k.DPRank)) + `"}`
	m.names = append(m.names, mApplyRunMax+labels, mApplyYields+labels, mApplyDefers+labels)
	m.set.GetOrCreateGauge(mApplyDefers+labels, func() float64 { return float64(sub.ApplyDeferrals()) })
	m.set.GetOrCreateGauge(mApplyRunMax+labels, func() float64 { return sub.ApplyRunMax().Seconds() })
	m.set.GetOrCreateGauge(mApplyYields+labels, func() float64 { return float64(sub.ApplyYields()) })
}

// unregister removes every series of the stream from the set.
func (m *streamMetrics) unregister() {
	for _, n := range m.names {
		m.set.UnregisterMetric(n)
	}
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
