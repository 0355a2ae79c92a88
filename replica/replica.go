package replica

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/seed-c7a81618/conductor/core"
)

// Replica builds an index from the relay's stream; the package doc states
// its consistency and fault contract. One goroutine, started by Start,
// consumes the stream (from the newest snapshot when one loads) and applies
// registrations, batches, clears, flushes and state transfers in stream
// order. Ready, Stale and Metrics are safe for concurrent use with it.
//
// Sequence checks: a batch whose ZMQ sequence is at or below the last one
// applied for its subscription (and no clear came between) is skipped
// (conductor_replica_duplicates_total), unless it is more than
// Options.RestartThreshold below it: an engine that restarted while its relay
// did too, so no relay saw the sequence go back; the subscription is then
// cleared and the batch applied (conductor_replica_restarts_total). One
// whose sequence jumps is applied and counts conductor_replica_seq_gaps_total,
// and the relay's state transfer of that subscription replaces the
// replica's copy (section).
type Replica struct {
	ix   *core.Index
	opts Options
	set  *metrics.Set
	// OnRegister, when set, is called after a registration from the stream
	// is applied (cmd/conductor records Dynamo indexers).
	onRegister func(core.Registration)

	d Decoder

	mu   sync.Mutex // guards seqs (the consumer writes, /metrics reads)
	seqs map[core.ServiceKey]*seqState
	// restorers of state transfers in progress (consumer goroutine only);
	// no snapshot is written while one is
	restorers map[core.ServiceKey]*core.StreamRestorer

	applied   atomic.Uint64 // stream sequence of the last message applied
	pending   atomic.Uint64 // messages behind (consumer's NumPending)
	caughtUp  atomic.Bool
	connected atomic.Bool
	lostAt    atomic.Int64 // unix nanos NATS was lost; 0 while connected
	started   atomic.Bool

	msgs                                                         [8]*metrics.Counter
	decodeErrs, orphans, dups, gaps, regErrs, startGap, restarts *metrics.Counter
	snapWrites, snapErrs, snapLoads                              *metrics.Counter
	snapSeq, snapLoadSeconds, snapWriteSeconds                   atomic.Uint64 // seconds as float bits

	cancel context.CancelFunc
	done   chan struct{}
}

type seqState struct {
	last atomic.Uint64
	has  bool
}

// NewReplica returns a replica feeding ix; Start runs it. onRegister may be nil.
func NewReplica(ix *core.Index, opts Options, onRegister func(core.Registration)) (*Replica, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	r := &Replica{ix: ix, opts: opts, set: metrics.NewSet(), onRegister: onRegister,
		seqs: make(map[core.ServiceKey]*seqState), restorers: make(map[core.ServiceKey]*core.StreamRestorer),
		done: make(chan struct{})}
	for i, k := range msgKinds {
		r.msgs[i] = r.set.NewCounter(`conductor_replica_messages_total{kind="` + kindName(k) + `"}`)
	}
	r.decodeErrs = r.set.NewCounter("conductor_replica_decode_errors_total")
	r.orphans = r.set.NewCounter("conductor_replica_orphan_messages_total")
	r.dups = r.set.NewCounter("conductor_replica_duplicates_total")
	r.gaps = r.set.NewCounter("conductor_replica_seq_gaps_total")
	r.restarts = r.set.NewCounter("conductor_replica_restarts_total")
	r.regErrs = r.set.NewCounter("conductor_replica_registration_errors_total")
	r.startGap = r.set.NewCounter("conductor_replica_stream_gaps_total")
	r.snapWrites = r.set.NewCounter("conductor_replica_snapshots_written_total")
	r.snapErrs = r.set.NewCounter("conductor_replica_snapshot_errors_total")
	r.snapLoads = r.set.NewCounter("conductor_replica_snapshots_loaded_total")
	r.set.NewGauge("conductor_replica_applied_stream_seq", func() float64 { return float64(r.applied.Load()) })
	r.set.NewGauge("conductor_replica_lag_messages", func() float64 { return float64(r.pending.Load()) })
	r.set.NewGauge("conductor_replica_stale_seconds", func() float64 { return r.Stale().Seconds() })
	r.set.NewGauge("conductor_replica_ready", func() float64 {
		if r.Ready() == nil {
			return 1
		}
		return 0
	})
	r.set.NewGauge("conductor_replica_snapshot_stream_seq", func() float64 { return float64(r.snapSeq.Load()) })
	r.set.NewGauge("conductor_replica_snapshot_write_seconds", func() float64 { return math.Float64frombits(r.snapWriteSeconds.Load()) })
	r.set.NewGauge("conductor_replica_snapshot_load_seconds", func() float64 { return math.Float64frombits(r.snapLoadSeconds.Load()) })
	r.set.RegisterMetricsWriter(func(w io.Writer) {
		r.mu.Lock()
		defer r.mu.Unlock()
		for k, st := range r.seqs {
			metrics.WriteGaugeUint64(w, fmt.Sprintf(`conductor_replica_last_seq{instance=%q,tenant=%q,dp_rank="%d"}`,
				k.InstanceID, k.TenantID, k.DPRank), st.last.Load())
		}
	})
	return r, nil
}

// msgKinds orders Replica.msgs.
var msgKinds = [...]Kind{KindBatch, KindClear, KindFlush, KindRegister, KindUnregister, KindSection, KindGap, KindExpire}

func kindName(k Kind) string {
	switch k {
	case KindBatch:
		return "batch"
	case KindClear:
		return "clear"
	case KindFlush:
		return "flush"
	case KindRegister:
		return "register"
	case KindUnregister:
		return "unregister"
	case KindSection:
		return "section"
	case KindGap:
		return "gap"
	case KindExpire:
		return "expire"
	}
	return "unknown"
}

// Metrics returns the replica's conductor_replica_* series.
func (r *Replica) Metrics() *metrics.Set { return r.set }

// Stale is how long NATS has been unreachable (0 while connected).
func (r *Replica) Stale() time.Duration {
	if t := r.lostAt.Load(); t != 0 {
		return time.Since(time.Unix(0, t))
	}
	return 0
}

// ErrNotReady wraps the reason a replica is not ready.
var ErrNotReady = errors.New("conductor: replica not ready")

// Ready reports nil once the replica has caught up (lag within MaxLag) and
// while NATS is reachable (or was lost less than MaxStale ago).
func (r *Replica) Ready() error {
	switch {
	case !r.caughtUp.Load():
		return fmt.Errorf("%w: catching up (%d messages behind, max %d)", ErrNotReady, r.pending.Load(), r.opts.MaxLag)
	case r.pending.Load() > r.opts.MaxLag:
		return fmt.Errorf("%w: %d messages behind (max %d)", ErrNotReady, r.pending.Load(), r.opts.MaxLag)
	case r.Stale() > r.opts.MaxStale:
		return fmt.Errorf("%w: NATS unreachable for %s (max %s)", ErrNotReady, r.Stale().Round(time.Second), r.opts.MaxStale)
	}
	return nil
}

// Start runs the replica in the background until Close.
func (r *Replica) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.started.Store(true)
	go func() {
		defer close(r.done)
		r.run(ctx)
	}()
}

// Close stops consuming and waits for the consumer.
func (r *Replica) Close() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	<-r.done
}

func (r *Replica) setConnected(c bool) {
	r.connected.Store(c)
	if c {
		r.lostAt.Store(0)
	} else {
		r.lostAt.CompareAndSwap(0, time.Now().UnixNano())
	}
}

func (r *Replica) filter() string {
	return FilterSubject(r.opts.SubjectPrefix, r.opts.FilterTenant, r.opts.FilterModel)
}

func (r *Replica) run(ctx context.Context) {
	log := r.opts.Logger
	r.lostAt.Store(time.Now().UnixNano())
	nc, err := connect(ctx, &r.opts, "conductor-replica", r.setConnected)
	if err != nil {
		log.Error("replica: cannot use the NATS URL", "url", r.opts.URL, "err", err)
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Error("replica: JetStream", "err", err)
		return
	}
	start := uint64(0)
	if !r.opts.NoSnapshotLoad {
		start = r.loadSnapshot(ctx, js)
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{r.filter()}}
	if start > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, start+1
	}
	var cons jetstream.Consumer
	if !retryJS(ctx, log, "replica: cannot consume the stream yet", r.opts.Stream, func(c context.Context) (err error) {
		cons, err = js.OrderedConsumer(c, r.opts.Stream, cfg)
		return err
	}) {
		return
	}
	it, err := cons.Messages()
	if err != nil {
		log.Error("replica: consume", "err", err)
		return
	}
	go func() { <-ctx.Done(); it.Stop() }()
	log.Info("replica consuming", "stream", r.opts.Stream, "filter", r.filter(), "from_seq", start+1)
	var lastSnap time.Time = time.Now()
	first := true
	for ctx.Err() == nil {
		msg, err := it.Next(jetstream.NextMaxWait(500 * time.Millisecond))
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return
			}
			if nc.IsConnected() && (errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoMessages)) {
				// Nothing delivered for a while: ask the server how many
				// messages are still pending (0 when caught up).
				ictx, cancel := context.WithTimeout(ctx, time.Second)
				info, ierr := cons.Info(ictx)
				cancel()
				if ierr == nil {
					r.pending.Store(info.NumPending)
					if info.NumPending <= r.opts.MaxLag {
						r.caughtUp.Store(true)
					}
				}
			}
			r.maybeSnapshot(ctx, js, &lastSnap)
			continue
		}
		md, merr := msg.Metadata()
		if merr == nil {
			if first && start > 0 && md.Sequence.Stream > start+1 {
				r.startGap.Inc()
				log.Warn("replica: the stream no longer holds every message after the snapshot",
					"snapshot_seq", start, "first_seq", md.Sequence.Stream)
			}
			first = false
			r.pending.Store(md.NumPending)
			if md.NumPending <= r.opts.MaxLag {
				r.caughtUp.Store(true)
			}
		}
		r.apply(msg.Data())
		if merr == nil {
			r.applied.Store(md.Sequence.Stream)
		}
		r.maybeSnapshot(ctx, js, &lastSnap)
	}
}

func (r *Replica) maybeSnapshot(ctx context.Context, js jetstream.JetStream, last *time.Time) {
	if r.opts.SnapshotInterval <= 0 || time.Since(*last) < r.opts.SnapshotInterval || r.applied.Load() == 0 {
		return
	}
	if len(r.restorers) > 0 {
		// Between two sections of a state transfer: a snapshot now would
		// hold half of it, and a replica loading it would take the rest
		// for orphans (TestSnapshotWaitsForTransfer). The next message
		// after the transfer's end writes it.
		return
	}
	if r.snapSeq.Load() == r.applied.Load() {
		*last = time.Now()
		return // nothing new since the last one
	}
	if err := r.writeSnapshot(ctx, js); err != nil {
		r.snapErrs.Inc()
		r.opts.Logger.Warn("replica: snapshot not written", "err", err)
	}
	// The interval runs from the end of a write: a snapshot slower than the
	// interval still leaves the consumer a whole interval of applying.
	*last = time.Now()
}

func (r *Replica) seqState(k core.ServiceKey) *seqState {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.seqs[k]
	if st == nil {
		st = &seqState{}
		r.seqs[k] = st
	}
	return st
}

// apply applies one message body. Bad messages are counted and skipped.
func (r *Replica) apply(body []byte) {
	m, err := r.d.Decode(body)
	if err != nil {
		r.decodeErrs.Inc()
		r.opts.Logger.Warn("replica: undecodable message skipped (the index may now differ from the relay's)", "err", err)
		return
	}
	for i, k := range msgKinds {
		if m.Kind == k {
			r.msgs[i].Inc()
		}
	}
	switch m.Kind {
	case KindRegister:
		r.register(m.Reg)
		return
	case KindUnregister:
		if _, err := r.ix.Unregister(m.Key); err != nil && !errors.Is(err, core.ErrNotFound) {
			r.regErrs.Inc()
		}
		r.mu.Lock()
		delete(r.seqs, normKey(m.Key))
		r.mu.Unlock()
		delete(r.restorers, normKey(m.Key))
		return
	}
	sub, ok := r.ix.Lookup(m.Key)
	if !ok {
		r.orphans.Inc()
		return
	}
	if m.Kind == KindSection {
		r.section(sub, m.Section)
		return
	}
	if len(r.restorers) > 0 {
		// The relay queues a transfer's sections together: another
		// message of the subscription means its transfer was cut off (a
		// later one replaces it), so it no longer holds snapshots back.
		delete(r.restorers, normKey(m.Key))
	}
	switch m.Kind {
	case KindClear:
		sub.Clear("relay: cleared")
		st := r.seqState(normKey(m.Key))
		st.has = false
	case KindGap:
		sub.GapWith(m.Policy, "relay: gap")
		st := r.seqState(normKey(m.Key))
		st.has = false
	case KindExpire:
		sub.ExpireOldest()
	case KindFlush:
		sub.FlushHeld()
	case KindBatch:
		b := &m.Batch
		st := r.seqState(normKey(m.Key))
		if b.HasSeq && st.has {
			last := st.last.Load()
			switch {
			case b.Seq <= last && last-b.Seq <= r.opts.RestartThreshold:
				r.dups.Inc()
				return
			case b.Seq <= last:
				// No relay saw this engine's sequence go back (a relay that
				// restarted without state): the relay's index holds only the
				// new incarnation, and so must this one
				// (TestReplicaEngineRestartedUnderColdRelay).
				r.restarts.Inc()
				n := sub.Clear("replica: the engine restarted")
				st.has = false
				r.opts.Logger.Warn("replica: sequence fell far below the last applied (an engine that restarted while its relay did); cleared its blocks",
					"service", m.Key.String(), "last_seq", last, "seq", b.Seq, "restart_threshold", r.opts.RestartThreshold, "cleared_blocks", n)
			case b.Seq > last+1:
				r.gaps.Inc()
				r.opts.Logger.Warn("replica: sequence gap in the stream (a batch reordered across a NATS outage; a state transfer from the relay follows)",
					"service", m.Key.String(), "last_seq", last, "seq", b.Seq)
			}
		}
		sub.Apply(b)
		if b.HasSeq {
			st.last.Store(b.Seq)
			st.has = true
		}
	}
}

func normKey(k core.ServiceKey) core.ServiceKey {
	if k.TenantID == "" {
		k.TenantID = "default"
	}
	return k
}

// register applies a registration from the stream: new, identical (no-op),
// or changed (the old one is unregistered first).
func (r *Replica) register(reg core.Registration) {
	_, _, err := r.ix.Register(reg)
	if errors.Is(err, core.ErrConflict) {
		if old, ok := r.ix.Lookup(reg.Key()); ok {
			r.opts.Logger.Info("replica: registration changed; replacing it", "service", reg.Key().String(),
				"old", fmt.Sprintf("%+v", old.Registration()), "new", fmt.Sprintf("%+v", reg))
			_, _ = r.ix.Unregister(reg.Key())
			r.mu.Lock()
			delete(r.seqs, normKey(reg.Key()))
			r.mu.Unlock()
			delete(r.restorers, normKey(reg.Key()))
			_, _, err = r.ix.Register(reg)
		}
	}
	if err != nil {
		r.regErrs.Inc()
		r.opts.Logger.Warn("replica: registration from the stream refused", "service", reg.Key().String(), "err", err)
		return
	}
	if r.onRegister != nil {
		r.onRegister(reg)
	}
}

func fmtSeq(n uint64) string { return strconv.FormatUint(n, 10) }

// section applies one message of a state transfer: the first replaces the
// subscription by a fresh one (no blocks, no restored-dump skipping), each
// restores its holdings and engine entries, the last sets the sequence the
// next batch follows.
func (r *Replica) section(sub *core.Subscription, sec *Section) {
	k := normKey(sub.Key())
	if sec.Begin {
		reg := sub.Registration()
		if _, err := r.ix.Unregister(k); err != nil {
			r.regErrs.Inc()
			return
		}
		nsub, _, err := r.ix.Register(reg)
		if err != nil {
			r.regErrs.Inc()
			r.opts.Logger.Warn("replica: state transfer: re-registration refused", "service", k.String(), "err", err)
			return
		}
		rs, err := r.ix.RestoreStream(&core.StreamInfo{Reg: reg, Seq: sec.Seq, HasSeq: sec.HasSeq, Marks: sec.Marks})
		if err != nil {
			r.regErrs.Inc()
			return
		}
		// The replica orders the stream itself (seqs): core's skipping of
		// a restored dump would defer the relay's next Clear or clearing Gap
		// to a batch that may never come (TestReplicaClearAfterTransfer).
		nsub.EndSkip()
		r.restorers[k] = rs
	}
	rs := r.restorers[k]
	if rs == nil {
		r.orphans.Inc() // a section without its beginning
		return
	}
	for i := range sec.Holdings {
		rs.Holdings(&sec.Holdings[i].H, sec.Holdings[i].Keys)
	}
	for i := range sec.Engine {
		rs.Engine(&sec.Engine[i])
	}
	if sec.End {
		rs.End()
		delete(r.restorers, k)
		st := r.seqState(k)
		st.last.Store(sec.Seq)
		st.has = sec.HasSeq
	}
}
