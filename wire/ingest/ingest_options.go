package ingest

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/seed-c7a81618/conductor/endpoint"
)

// Defaults of IngestOptions. They follow the Mooncake C++v2 conductor (§4.4 of the
// reference notes) where it has a figure, and vLLM's publisher where it does not.
const (
	DefaultPollInterval       = 100 * time.Millisecond
	DefaultReconnectMin       = 100 * time.Millisecond
	DefaultReconnectMax       = 5 * time.Second
	DefaultReplayTimeout      = 5 * time.Second
	DefaultReplayTotalTimeout = 30 * time.Second
	DefaultReplayMaxBuffered  = 10000
	DefaultReceiveQueueBytes  = 64 << 20
	DefaultMaxQueuedBytes     = 1 << 30
	// DefaultMaxMessageBytes is four times the largest message real
	// producers send: a Mooncake store master flushes a request's stores
	// and evictions as one batch (16 MB and 60k events for long prompts,
	// ~262 bytes an event), and one vLLM step storing a 1M-token prompt
	// carries its token ids and 65,536 block hashes (~8 MB).
	DefaultMaxMessageBytes = 64 << 20
	// queueMsgFloor is the message size libzmq's queues are sized for
	// until a stream sends a larger one (IngestOptions.RcvHWM): with
	// DefaultReceiveQueueBytes, 64 messages, the depth below which libzmq's
	// hand-offs between its I/O thread and the listener cut the throughput
	// of streams of small batches (32 cost a sixth of it, 4 half:
	// BenchmarkZMQIngestHWM).
	queueMsgFloor = 1 << 20
	// frameGuardFactor: libzmq ends the connection of a peer that sends a
	// single frame above this many times MaxMessageBytes (ZMQ_MAXMSGSIZE),
	// since it cannot skip a frame without holding it whole; messages
	// between the two are read and dropped by the listener.
	frameGuardFactor = 4
	// DefaultRestartThreshold equals vLLM's and SGLang's default replay ring
	// (buffer_steps = 10 000 batches): a message can only be a late duplicate of
	// something within one ring's reach of the newest applied sequence, so a drop
	// further than that is an engine restart.
	DefaultRestartThreshold = 10000
	DefaultRcvHWM           = 200000
	// DefaultMaxListeners is the supported number of registrations per
	// Ingester (TestZMQSupportedListeners registers that many), equal to
	// core's default MaxRegistrations.
	DefaultMaxListeners = 4096
	// MaxListenersLimit bounds MaxListeners. A waiting listener holds no OS
	// thread (the Ingester's poller waits for all of them), so what bounds
	// them is file descriptors (ListenerFDs each) and libzmq's sockets.
	MaxListenersLimit = 1 << 16
	// MaxNiceListeners bounds MaxListeners when ListenerNice is set: then
	// each listener runs on an OS thread of its own, and the Go runtime
	// aborts the process past 10,000 threads (runtime/debug.SetMaxThreads).
	MaxNiceListeners = 8192
	// MaxListenerNice is the largest IngestOptions.ListenerNice (Linux's
	// lowest priority).
	MaxListenerNice = 19
)

// Per-listener resource costs, for sizing RLIMIT_NOFILE and budgets.
const (
	// ListenerSockets is the most libzmq sockets one listener holds: SUB, the
	// SUB's monitor (libzmq's PAIR and ours), and the replay DEALER (only with
	// a replay endpoint: 3 without).
	ListenerSockets = 4
	// ListenerFDs is the most file descriptors one listener holds: one per
	// socket (its libzmq mailbox), and a TCP connection each for SUB and
	// DEALER (4 without a replay endpoint, 3 while the publisher is down
	// between reconnection attempts).
	ListenerFDs = ListenerSockets + 2
)

// IngestOptions configure an Ingester. The zero value is valid: EnsureDefaults fills
// every zero field with the default its comment names.
type IngestOptions struct {
	// PollInterval is how long after its last message a subscriber flushes RFC
	// events held in core (Subscription.FlushHeld), and the granularity of a
	// replay's timeouts. An idle subscriber with nothing held blocks without a
	// timeout (commands wake it at once). Default 100ms.
	PollInterval time.Duration
	// ReconnectMin and ReconnectMax bound the exponential backoff between attempts
	// to rebuild a failed subscriber's sockets and, as ZMQ_RECONNECT_IVL and
	// ZMQ_RECONNECT_IVL_MAX, libzmq's own TCP reconnection. After a failed replay
	// the same backoff delays the next replay attempt. Defaults 100ms and 5s.
	ReconnectMin, ReconnectMax time.Duration
	// ReplayTimeout is the longest wait for any one replay reply frame set (the
	// first reply included). Default 5s.
	ReplayTimeout time.Duration
	// ReplayTotalTimeout bounds a whole replay, request to end marker. Default 30s.
	ReplayTotalTimeout time.Duration
	// ReplayMaxBuffered is how many live messages a subscriber buffers while a
	// replay runs (its receive queue); ReceiveQueueBytes and MaxQueuedBytes
	// bound the same queue in bytes. While the queue is full, further live
	// messages are still read from the SUB socket and dropped, counted in
	// conductor_ingest_queue_drops_total; the next message kept reveals the
	// gap, which a replay heals (or, without one, a stale clear). Outside a
	// replay live messages are not queued here: they wait in libzmq's queue
	// (see RcvHWM). Default 10000.
	ReplayMaxBuffered int
	// ReceiveQueueBytes bounds, in bytes, each of a subscriber's three queues:
	// its receive queue (see ReplayMaxBuffered), and libzmq's queues of the
	// SUB and replay sockets, sized in messages from it (see RcvHWM). Default
	// 64 MiB.
	ReceiveQueueBytes int
	// MaxQueuedBytes bounds the bytes of every subscriber's receive queue
	// together. Default 1 GiB.
	MaxQueuedBytes int64
	// MaxMessageBytes bounds one live message or replay reply. A larger
	// one is read and dropped whole by the listener, without being copied
	// or decoded: its sequence is consumed (so the messages after it are
	// applied as usual and no gap is seen), and it is counted in
	// conductor_ingest_oversize_messages_total and logged with its size.
	// Its events are lost: what it stored is missing from the index, what
	// it removed stays. libzmq reads a message whole before the listener
	// sees it, so ZMQ_MAXMSGSIZE is set to frameGuardFactor (4) times this:
	// a single frame above that ends the connection (libzmq cannot skip
	// it), which the listener reopens after ReconnectMin, and the messages
	// lost meanwhile are a gap. Default 64 MiB (DefaultMaxMessageBytes);
	// -1: no limit, and libzmq's queues are then bounded in messages only.
	MaxMessageBytes int64
	// RestartThreshold: a live sequence s below the last applied sequence L is an
	// engine restart when the live stream itself went backwards (s ≤ the previous
	// live sequence: one publisher incarnation never repeats a sequence on its PUB
	// socket) or when L−s > RestartThreshold; otherwise it is a late duplicate of
	// a replayed message and is dropped. Default 10000 (DefaultRestartThreshold).
	RestartThreshold uint64
	// RcvHWM caps the ZMQ_RCVHWM, in messages, of the SUB and replay sockets.
	// libzmq counts messages, not bytes, so their high-water mark is
	// ReceiveQueueBytes/L messages (at least 1, at most RcvHWM; RcvHWM alone
	// with MaxMessageBytes -1), where L is the largest message the stream
	// has sent, or 1 MiB until it sent a larger one; sockets opened later
	// get the new mark, and open ones as soon as libzmq's flow control lets
	// it be lowered without stalling the connection (queueMark): at once
	// to at least twice the messages read since libzmq's last
	// acknowledgement, and to the full amount within half the old mark in
	// messages. So libzmq holds at most max(ReceiveQueueBytes, L) per
	// socket plus the message it is receiving — with one exception:
	// messages larger than any before, arriving while the mark is still
	// sized for smaller ones, can fill the queue to the old mark (at most
	// ReceiveQueueBytes/1 MiB of them). When the SUB's queue is full, libzmq stops reading the
	// connection: the publisher queues up to its own send high-water mark,
	// then drops, and the subscriber sees a gap. The replay socket pushes
	// back the same way; a replay whose replies the publisher dropped is
	// requested again from its last applied sequence. Below 64 messages,
	// libzmq's hand-offs between its I/O thread and the listener cut the
	// throughput of streams of small messages (BenchmarkZMQIngestHWM), so
	// a stream of large messages trades throughput it does not need (each
	// carries thousands of events) for the byte bound.
	// Default 200000.
	RcvHWM int
	// MaxListeners bounds the listeners (registrations) of the Ingester: one
	// more is refused with ErrListenerLimit, which wraps core.ErrLimit (HTTP 400
	// limit_exceeded). Each costs up to ListenerSockets libzmq sockets,
	// ListenerFDs file descriptors, a goroutine (no OS thread, but with
	// ListenerNice) and its buffers (TestZMQThreadsBounded measures it); size
	// RLIMIT_NOFILE to MaxListeners×ListenerFDs plus the rest of the process.
	// At most MaxListenersLimit (MaxNiceListeners with ListenerNice). Default
	// DefaultMaxListeners (4096).
	MaxListeners int
	// MaxSockets is ZMQ_MAX_SOCKETS of the Ingester's libzmq context (libzmq's
	// own default, 1023, would cap an Ingester at ~250 listeners). It must leave
	// room for MaxListeners×ListenerSockets. Default that plus 64.
	MaxSockets int
	// Logger receives listener life-cycle events, gaps, replays, stale and
	// restart clears, and (rate-limited) decode errors. Default slog.Default().
	Logger *slog.Logger
	// Metrics is the set the per-stream series are exposed in, from
	// Register to Unregister, through one metrics writer the Ingester
	// registers in it (streamSeries). Default: a new set, returned by
	// Ingester.Metrics.
	Metrics *metrics.Set
	// ListenerNice, when 1..19, runs each listener — the stream's receiver,
	// decoder and single writer — on an OS thread of its own whose nice value
	// is this much above the process's own (capped at 19: a process started
	// at nice 0 runs its listeners at ListenerNice; Linux; elsewhere it is
	// locked to a thread but keeps its priority),
	// so that when ingest and queries compete for the CPUs the kernel runs the
	// query threads first: the Go scheduler cannot, it preempts a running
	// goroutine only every ~10 ms. The thread is never returned to the
	// runtime's pool (it exits with the listener; had the runtime put the
	// listener on the process's main thread, it parks that thread for good
	// instead), so no other goroutine runs at the lowered priority, and
	// libzmq's own threads are started before any listener so that they do
	// not inherit it. Pair it with a GOMAXPROCS above the CPU count
	// (conductor's --ingest-nice does): a P held by a descheduled low-priority
	// thread is otherwise a P queries cannot use. Measured effect:
	// BENCHMARKS.md, "Query tail latency under full ingest".
	// Default 0: the listener runs like any goroutine.
	ListenerNice int
	// Lookup resolves the host name of a registration's tcp endpoint, once,
	// at Register: the sockets connect to the address it gives
	// (endpoint.Resolve). Default endpoint.DefaultLookup, the system
	// resolver.
	Lookup endpoint.Lookup
}

// queueHWM is the ZMQ_RCVHWM of the SUB and replay sockets of a stream
// whose largest message so far is largest bytes (see RcvHWM):
// ReceiveQueueBytes/max(largest, 1 MiB) messages, at least 1, at most RcvHWM.
func (o *IngestOptions) queueHWM(largest int64) int {
	if o.MaxMessageBytes <= 0 {
		return o.RcvHWM
	}
	return int(min(max(int64(o.ReceiveQueueBytes)/max(largest, queueMsgFloor), 1), int64(o.RcvHWM)))
}

// frameGuard is the ZMQ_MAXMSGSIZE of the SUB and replay sockets (see
// MaxMessageBytes); 0: none.
func (o *IngestOptions) frameGuard() int64 {
	if o.MaxMessageBytes <= 0 {
		return 0
	}
	if o.MaxMessageBytes > math.MaxInt64/frameGuardFactor {
		return math.MaxInt64
	}
	return frameGuardFactor * o.MaxMessageBytes
}

// EnsureDefaults fills zero fields with their documented defaults.
func (o *IngestOptions) EnsureDefaults() {
	if o.PollInterval == 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.ReconnectMin == 0 {
		o.ReconnectMin = DefaultReconnectMin
	}
	if o.ReconnectMax == 0 {
		o.ReconnectMax = DefaultReconnectMax
	}
	if o.ReplayTimeout == 0 {
		o.ReplayTimeout = DefaultReplayTimeout
	}
	if o.ReplayTotalTimeout == 0 {
		o.ReplayTotalTimeout = DefaultReplayTotalTimeout
	}
	if o.ReplayMaxBuffered == 0 {
		o.ReplayMaxBuffered = DefaultReplayMaxBuffered
	}
	if o.ReceiveQueueBytes == 0 {
		o.ReceiveQueueBytes = DefaultReceiveQueueBytes
	}
	if o.MaxQueuedBytes == 0 {
		o.MaxQueuedBytes = DefaultMaxQueuedBytes
	}
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.RestartThreshold == 0 {
		o.RestartThreshold = DefaultRestartThreshold
	}
	if o.RcvHWM == 0 {
		o.RcvHWM = DefaultRcvHWM
	}
	if o.MaxListeners == 0 {
		o.MaxListeners = DefaultMaxListeners
	}
	if o.MaxSockets == 0 {
		o.MaxSockets = o.MaxListeners*ListenerSockets + 64
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Lookup == nil {
		o.Lookup = endpoint.DefaultLookup
	}
	if o.Metrics == nil {
		o.Metrics = metrics.NewSet()
	}
}

// Validate reports every bad field (after EnsureDefaults, zero fields are fine).
func (o *IngestOptions) Validate() error {
	var errs []error
	bad := func(field string, v any, why string) {
		errs = append(errs, fmt.Errorf("%s=%v: %s: %w", field, v, why, ErrInvalidIngestOptions))
	}
	// zmq_poll takes milliseconds: a positive interval below 1ms would poll with 0.
	if o.PollInterval < time.Millisecond {
		bad("PollInterval", o.PollInterval, "must be >= 1ms")
	}
	if o.ReconnectMin < time.Millisecond {
		bad("ReconnectMin", o.ReconnectMin, "must be >= 1ms")
	}
	if o.ReconnectMax < o.ReconnectMin {
		bad("ReconnectMax", o.ReconnectMax, "must be >= ReconnectMin")
	}
	if o.ReplayTimeout < time.Millisecond {
		bad("ReplayTimeout", o.ReplayTimeout, "must be >= 1ms")
	}
	if o.ReplayTotalTimeout < time.Millisecond || o.ReplayTotalTimeout < o.ReplayTimeout {
		bad("ReplayTotalTimeout", o.ReplayTotalTimeout, "must be >= 1ms and >= ReplayTimeout")
	}
	if o.ReplayMaxBuffered < 1 {
		bad("ReplayMaxBuffered", o.ReplayMaxBuffered, "must be >= 1")
	}
	if o.ReceiveQueueBytes < 1 {
		bad("ReceiveQueueBytes", o.ReceiveQueueBytes, "must be >= 1")
	}
	if o.MaxQueuedBytes < 1 {
		bad("MaxQueuedBytes", o.MaxQueuedBytes, "must be >= 1")
	}
	if o.MaxMessageBytes < -1 {
		bad("MaxMessageBytes", o.MaxMessageBytes, "must be >= 1, or -1 for no limit")
	}
	if o.RcvHWM < 0 {
		bad("RcvHWM", o.RcvHWM, "must be >= 0")
	}
	if o.ListenerNice < 0 || o.ListenerNice > MaxListenerNice {
		bad("ListenerNice", o.ListenerNice, fmt.Sprintf("must be 0..%d", MaxListenerNice))
	}
	if o.MaxListeners < 1 || o.MaxListeners > MaxListenersLimit {
		bad("MaxListeners", o.MaxListeners, fmt.Sprintf("must be 1..%d", MaxListenersLimit))
	}
	if o.ListenerNice > 0 && o.MaxListeners > MaxNiceListeners {
		bad("MaxListeners", o.MaxListeners, fmt.Sprintf("must be at most %d with ListenerNice (a thread each)", MaxNiceListeners))
	}
	if o.MaxSockets < o.MaxListeners*ListenerSockets {
		bad("MaxSockets", o.MaxSockets, "must be >= MaxListeners×ListenerSockets")
	}
	return errors.Join(errs...)
}
