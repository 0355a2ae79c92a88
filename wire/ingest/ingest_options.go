package ingest

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/VictoriaMetrics/metrics"
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
	DefaultMaxMessageBytes    = 64 << 20
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
	// MaxListenersLimit bounds MaxListeners: a listener blocked in zmq_poll
	// holds an OS thread, and the Go runtime aborts the process past 10 000
	// threads (runtime/debug.SetMaxThreads).
	MaxListenersLimit = 8192
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
	// socket (its libzmq mailbox), the wake eventfd, and a TCP connection each
	// for SUB and DEALER (5 without a replay endpoint, 4 while the publisher is
	// down between reconnection attempts).
	ListenerFDs = ListenerSockets + 1 + 2
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
	// messages are still read from the SUB socket (so libzmq's queue does not
	// grow instead) and dropped, counted in conductor_ingest_queue_drops_total;
	// the next message kept reveals the gap, which a replay heals (or, without
	// one, a stale clear). Default 10000.
	ReplayMaxBuffered int
	// ReceiveQueueBytes bounds the bytes of one subscriber's receive queue
	// (see ReplayMaxBuffered). Default 64 MiB.
	ReceiveQueueBytes int
	// MaxQueuedBytes bounds the bytes of every subscriber's receive queue
	// together. Default 1 GiB.
	MaxQueuedBytes int64
	// MaxMessageBytes bounds one live message or replay reply (all its frames):
	// a larger one is dropped before it is copied out of libzmq (ErrMessageTooBig,
	// counted as a decode error; the gap it leaves is replayed, or the stream
	// cleared as stale). Not ZMQ_MAXMSGSIZE: libzmq treats an oversized message
	// as a protocol error and never reconnects a session that had one.
	// Default 64 MiB; -1: no limit.
	MaxMessageBytes int64
	// RestartThreshold: a live sequence s below the last applied sequence L is an
	// engine restart when the live stream itself went backwards (s ≤ the previous
	// live sequence: one publisher incarnation never repeats a sequence on its PUB
	// socket) or when L−s > RestartThreshold; otherwise it is a late duplicate of
	// a replayed message and is dropped. Default 10000 (DefaultRestartThreshold).
	RestartThreshold uint64
	// RcvHWM is the SUB socket's ZMQ_RCVHWM in messages. Default 200000.
	RcvHWM int
	// MaxListeners bounds the listeners (registrations) of the Ingester: one
	// more is refused with ErrListenerLimit, which wraps core.ErrLimit (HTTP 400
	// limit_exceeded). Each costs up to ListenerSockets libzmq sockets,
	// ListenerFDs file descriptors, a goroutine, an OS thread while it waits, and
	// ~20 KB; size RLIMIT_NOFILE to MaxListeners×ListenerFDs plus the rest of
	// the process. At most MaxListenersLimit. Default DefaultMaxListeners (4096).
	MaxListeners int
	// MaxSockets is ZMQ_MAX_SOCKETS of the Ingester's libzmq context (libzmq's
	// own default, 1023, would cap an Ingester at ~250 listeners). It must leave
	// room for MaxListeners×ListenerSockets. Default that plus 64.
	MaxSockets int
	// Logger receives listener life-cycle events, gaps, replays, stale and
	// restart clears, and (rate-limited) decode errors. Default slog.Default().
	Logger *slog.Logger
	// Metrics is the set per-stream counters are registered in (and unregistered
	// from on Unregister). Default: a new set, returned by Ingester.Metrics.
	Metrics *metrics.Set
	// ListenerNice, when 1..19, runs each listener — the stream's receiver,
	// decoder and single writer — on an OS thread of its own with this nice
	// value (Linux; elsewhere it is locked to a thread but keeps its priority),
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
	// BENCHMARKS.md, "Query tail latency under full ingest (issue #18)".
	// Default 0: the listener runs like any goroutine.
	ListenerNice int
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
	if o.MaxSockets < o.MaxListeners*ListenerSockets {
		bad("MaxSockets", o.MaxSockets, "must be >= MaxListeners×ListenerSockets")
	}
	return errors.Join(errs...)
}
