package replica

import (
	"context"
	"encoding/hex"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/zeebo/xxh3"

	"github.com/seed-c7a81618/conductor/core"
)

// Relay publishes what an index applies to a JetStream stream; the package
// doc states the roles, the messages and the fault contract. It is the
// index's core.Observer: the observer methods encode a message and queue it
// (they never wait for NATS), and one goroutine, started by Start, publishes
// the queue. The calls for one subscription arrive serialised by its lock,
// which is what keeps its messages in apply order.
//
// Message ids: a batch's id is the ZMQ stream (a hash of the service key and
// endpoint), its ZMQ sequence and a hash of its body; a clear's id is the
// stream and the sequence it follows. Registrations and unregistrations carry
// none (a registration is idempotent on replicas, and one that was
// unregistered and registered again is the same message); the reorder
// detection below covers them.
//
// Order: publishes go out asynchronously, at most MaxPending at a time; when
// any of a window fails (NATS down, timeout) the window is sent again from
// its first failure after a backoff. A subscription whose failed message is
// followed in the window by one of its own that was (or may have been)
// stored is made dirty (reorderedAfterFailure). Dirty subscriptions are
// transferred after every acknowledged window the buffer has room for, so a
// busy queue does not hold a transfer back.
//
// Bounds: the queue holds at most BufferBytes of batches, clears and flushes;
// past it they are dropped and counted (conductor_relay_dropped_total), and
// the subscription that lost one is dirty until its state transfer.
// Registrations are always queued: they are small and a replica must not
// miss one.
type Relay struct {
	opts Options
	set  *metrics.Set

	mu     sync.Mutex
	q      []outMsg // FIFO; q[0] is the oldest not yet acknowledged
	qBytes int64
	wake   chan struct{}
	// ix is the index observed (registration resyncs, state transfers); set by Start.
	ix *core.Index

	subs sync.Map // core.ServiceKey → *relaySub

	published, dropped, pubErrors, resyncs *metrics.Counter
	suppressed, transfers, oversize        *metrics.Counter
	reordered                              *metrics.Counter
	connected                              bool // guarded by mu

	cancel context.CancelFunc
	done   chan struct{}
}

// maxMessageBytes is the largest body a relay publishes: NATS's default
// max_payload (1 MiB) less room for headers. A bigger batch makes its
// subscription dirty (a state transfer, cut in sectionChunkBytes, follows).
const maxMessageBytes = 1<<20 - 4<<10

type outMsg struct {
	subject, id string
	body        []byte
	// sub is the subscription whose order the message is part of: its
	// batches, clears, gaps, expiries and flushes, its registration and
	// unregistration, and a state transfer's messages (nil for a resync's
	// registrations, which repeat one a replica already has).
	sub *relaySub
}

// relaySub is what the relay keeps per subscription. last is written under
// the subscription's lock (the observer's calls for one subscription are
// serialised by it).
type relaySub struct {
	key      core.ServiceKey
	subject  string
	streamID string
	last     uint64
	// expires counts the Expire messages since the batch of sequence last:
	// with it an Expire's message id names that expiry, so a resend of one
	// stored with its acknowledgement lost is a no-op, as for a batch
	// (TestRelayExpireResentOnce). Guarded, like last, by the
	// subscription's lock (the observer's calls hold it).
	expires uint64
	// dirty: a message of this subscription was dropped, too large, or may
	// be stored out of order; nothing more is queued for it until a state
	// transfer (section.go) replaces it.
	dirty atomic.Bool
}

// NewRelay returns a relay; Start connects it. Options are validated.
func NewRelay(opts Options) (*Relay, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	r := &Relay{opts: opts, set: metrics.NewSet(), wake: make(chan struct{}, 1), done: make(chan struct{})}
	r.published = r.set.NewCounter("conductor_relay_published_total")
	r.dropped = r.set.NewCounter("conductor_relay_dropped_total")
	r.pubErrors = r.set.NewCounter("conductor_relay_publish_errors_total")
	r.resyncs = r.set.NewCounter("conductor_relay_registration_resyncs_total")
	r.suppressed = r.set.NewCounter("conductor_relay_suppressed_total")
	r.transfers = r.set.NewCounter("conductor_relay_state_transfers_total")
	r.oversize = r.set.NewCounter("conductor_relay_oversize_total")
	r.reordered = r.set.NewCounter("conductor_relay_reordered_total")
	r.set.NewGauge("conductor_relay_queued_bytes", func() float64 {
		r.mu.Lock()
		defer r.mu.Unlock()
		return float64(r.qBytes)
	})
	r.set.NewGauge("conductor_relay_queued_messages", func() float64 {
		r.mu.Lock()
		defer r.mu.Unlock()
		return float64(len(r.q))
	})
	r.set.NewGauge("conductor_relay_connected", func() float64 {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.connected {
			return 1
		}
		return 0
	})
	return r, nil
}

// Metrics returns the relay's conductor_relay_* series.
func (r *Relay) Metrics() *metrics.Set { return r.set }

func (r *Relay) sub(reg *core.Registration) *relaySub {
	k := reg.Key()
	if v, ok := r.subs.Load(k); ok {
		return v.(*relaySub)
	}
	id := xxh3.HashString(k.String() + "|" + reg.Endpoint)
	var b [8]byte
	for i := range b {
		b[i] = byte(id >> (56 - 8*i))
	}
	rs := &relaySub{key: k, subject: Subject(r.opts.SubjectPrefix, reg.TenantID, reg.ModelName), streamID: hex.EncodeToString(b[:])}
	v, _ := r.subs.LoadOrStore(k, rs)
	return v.(*relaySub)
}

func (r *Relay) subOf(s *core.Subscription) *relaySub {
	if v, ok := r.subs.Load(s.Key()); ok {
		return v.(*relaySub)
	}
	reg := s.Registration()
	return r.sub(&reg)
}

// enqueue queues m; past BufferBytes it is dropped (false) unless force
// (registrations: small, and a replica must not miss one).
func (r *Relay) enqueue(m outMsg, force bool) bool {
	r.mu.Lock()
	if !force && r.qBytes+int64(len(m.body)) > r.opts.BufferBytes {
		r.mu.Unlock()
		r.dropped.Inc()
		return false
	}
	r.q = append(r.q, m)
	r.qBytes += int64(len(m.body))
	r.mu.Unlock()
	r.kick()
	return true
}

func (r *Relay) kick() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// enqueueSub queues a message of rs's subscription (called under its lock):
// nothing while rs is dirty; a drop makes it dirty and wakes the publisher,
// which transfers dirty subscriptions once it has room: an idle publisher
// would otherwise wait for other traffic or the next resync, since nothing
// more of rs is queued (TestRelayOversizeWhileIdle).
func (r *Relay) enqueueSub(rs *relaySub, m outMsg) {
	m.sub = rs
	if rs.dirty.Load() {
		r.suppressed.Inc()
		return
	}
	if len(m.body) > maxMessageBytes {
		// Larger than NATS lets one message be: the subscription's state
		// goes over in sections instead.
		r.oversize.Inc()
		rs.dirty.Store(true)
		r.kick()
		return
	}
	if !r.enqueue(m, false) {
		rs.dirty.Store(true)
		r.kick()
	}
}

// Registered implements core.Observer.
func (r *Relay) Registered(reg *core.Registration) {
	rs := r.sub(reg)
	r.enqueue(outMsg{subject: rs.subject, body: AppendRegister(nil, reg), sub: rs}, true)
}

// Unregistered implements core.Observer.
func (r *Relay) Unregistered(reg *core.Registration) {
	rs := r.sub(reg)
	r.subs.Delete(reg.Key())
	r.enqueue(outMsg{subject: rs.subject, body: AppendKeyMessage(nil, KindUnregister, reg.Key()), sub: rs}, true)
}

// Applied implements core.Observer.
func (r *Relay) Applied(s *core.Subscription, b *core.Batch) {
	rs := r.subOf(s)
	body := AppendBatch(make([]byte, 0, 64+len(b.Events)*96), s.Key(), b)
	m := outMsg{subject: rs.subject, body: body}
	if b.HasSeq {
		m.id = rs.streamID + "-" + strconv.FormatUint(b.Seq, 10) + "-" + strconv.FormatUint(xxh3.Hash(body), 16)
		rs.last, rs.expires = b.Seq, 0
	}
	r.enqueueSub(rs, m)
}

// Cleared implements core.Observer.
func (r *Relay) Cleared(s *core.Subscription) {
	rs := r.subOf(s)
	r.enqueueSub(rs, outMsg{subject: rs.subject, id: rs.streamID + "-c-" + strconv.FormatUint(rs.last, 10),
		body: AppendKeyMessage(nil, KindClear, s.Key())})
}

// Gapped implements core.Observer.
func (r *Relay) Gapped(s *core.Subscription, p core.GapPolicy) {
	rs := r.subOf(s)
	r.enqueueSub(rs, outMsg{subject: rs.subject, id: rs.streamID + "-g-" + strconv.FormatUint(rs.last, 10),
		body: AppendGap(nil, s.Key(), p)})
}

// Expired implements core.Observer.
func (r *Relay) Expired(s *core.Subscription) {
	rs := r.subOf(s)
	rs.expires++
	r.enqueueSub(rs, outMsg{subject: rs.subject, id: rs.streamID + "-e-" + strconv.FormatUint(rs.last, 10) + "-" + strconv.FormatUint(rs.expires, 10),
		body: AppendKeyMessage(nil, KindExpire, s.Key())})
}

// Flushed implements core.Observer.
func (r *Relay) Flushed(s *core.Subscription) {
	rs := r.subOf(s)
	r.enqueueSub(rs, outMsg{subject: rs.subject, body: AppendKeyMessage(nil, KindFlush, s.Key())})
}

// resync queues a register message for every registration: under r.mu, so
// an unregistration the listing saw cannot be queued before it (its
// Unregistered waits for r.mu).
func (r *Relay) resync() {
	if r.ix == nil {
		return
	}
	r.mu.Lock()
	regs := r.ix.Services()
	for i := range regs {
		rs := r.sub(&regs[i])
		body := AppendRegister(nil, &regs[i])
		r.q = append(r.q, outMsg{subject: rs.subject, body: body})
		r.qBytes += int64(len(body))
	}
	r.mu.Unlock()
	r.resyncs.Inc()
}

// StreamConfig is the stream a relay creates or updates.
func (o *Options) StreamConfig() jetstream.StreamConfig {
	st := jetstream.FileStorage
	if o.MemoryStorage {
		st = jetstream.MemoryStorage
	}
	return jetstream.StreamConfig{Name: o.Stream, Subjects: []string{o.SubjectPrefix + ".>"},
		Retention: jetstream.LimitsPolicy, MaxAge: o.MaxAge, MaxBytes: o.MaxBytes, Replicas: o.Replicas,
		Duplicates: o.Duplicates, Storage: st, Discard: jetstream.DiscardOld}
}

// Start connects to NATS in the background (retrying while it is down) and
// publishes the queue until Close. ix is the index the relay observes: its
// registrations are published again on every (re)connection and every
// RegistrationInterval, and dirty subscriptions are transferred from it.
func (r *Relay) Start(ix *core.Index) {
	r.ix = ix
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go r.run(ctx)
}

// connect dials NATS with unbounded reconnection; it fails only when ctx ends.
func connect(ctx context.Context, o *Options, name string, onChange func(bool)) (*nats.Conn, error) {
	opts := []nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(true), nats.ReconnectBufSize(8 << 20), nats.Timeout(2 * time.Second),
		nats.ConnectHandler(func(*nats.Conn) { onChange(true) }),
		nats.ReconnectHandler(func(*nats.Conn) { onChange(true) }),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { onChange(false) }),
	}
	nc, err := nats.Connect(o.URL, opts...)
	if err != nil {
		return nil, err
	}
	if nc.IsConnected() {
		onChange(true)
	}
	return nc, nil
}

func (r *Relay) setConnected(c bool) {
	r.mu.Lock()
	was := r.connected
	r.connected = c
	r.mu.Unlock()
	if c && !was {
		r.opts.Logger.Info("relay connected to NATS", "url", r.opts.URL)
		go r.resync()
	} else if !c && was {
		r.opts.Logger.Warn("relay lost NATS; buffering", "buffer_bytes", r.opts.BufferBytes)
	}
}

func (r *Relay) run(ctx context.Context) {
	defer close(r.done)
	log := r.opts.Logger
	nc, err := connect(ctx, &r.opts, "conductor-relay", r.setConnected)
	if err != nil {
		log.Error("relay: cannot use the NATS URL", "url", r.opts.URL, "err", err)
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(max(r.opts.MaxPending, 1)))
	if err != nil {
		log.Error("relay: JetStream", "err", err)
		return
	}
	cfg := r.opts.StreamConfig()
	if !retryJS(ctx, log, "relay: cannot create the JetStream stream yet", cfg.Name, func(c context.Context) error {
		_, err := js.CreateOrUpdateStream(c, cfg)
		return err
	}) {
		return
	}
	log.Info("relay publishing", "stream", cfg.Name, "subjects", cfg.Subjects[0])
	tick := time.NewTicker(r.opts.RegistrationInterval)
	defer tick.Stop()
	backoff := 50 * time.Millisecond
	for {
		n := r.publishWindow(ctx, js)
		switch {
		case n > 0:
			backoff = 50 * time.Millisecond
			r.transferDirty()
			continue
		case n < 0:
			if !sleepCtx(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		if r.transferDirty() {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-tick.C:
			r.resync()
		}
	}
}

// retryJS calls fn, 5 s at most per attempt, until it succeeds (true) or
// ctx ends (false), logging each failure as msg with the stream's name and
// waiting 100 ms, doubling to 5 s, between attempts: how the relay creates
// its stream and a replica opens its consumer while NATS is not there yet.
func retryJS(ctx context.Context, log *slog.Logger, msg, stream string, fn func(context.Context) error) bool {
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := fn(cctx)
		cancel()
		if err == nil {
			return true
		}
		log.Warn(msg, "stream", stream, "err", err)
		if !sleepCtx(ctx, backoff) {
			return false
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// publishWindow publishes up to MaxPending queued messages and waits for
// their acknowledgements. It returns how many were acknowledged and removed
// from the queue, 0 when the queue was empty, -1 when a publish failed
// (those before the first failure are removed).
func (r *Relay) publishWindow(ctx context.Context, js jetstream.JetStream) int {
	r.mu.Lock()
	n := min(len(r.q), max(r.opts.MaxPending, 1))
	win := append([]outMsg(nil), r.q[:n]...)
	r.mu.Unlock()
	if n == 0 {
		return 0
	}
	futs := make([]jetstream.PubAckFuture, 0, n)
	var err error
	// No client-side retry: nats.go would publish a message that met no
	// responders (a stream leader being elected) again 250 ms later, after
	// the rest of the window, and report both stored, a reorder nothing here
	// could see. The window's resend is the only retry.
	opts := []jetstream.PublishOpt{jetstream.WithRetryAttempts(0), nil}
	for i := range win {
		m := nats.NewMsg(win[i].subject)
		m.Data = win[i].body
		po := opts[:1]
		if win[i].id != "" {
			po = append(po, jetstream.WithMsgID(win[i].id))
		}
		var f jetstream.PubAckFuture
		if f, err = js.PublishMsgAsync(m, po...); err != nil {
			break
		}
		futs = append(futs, f)
	}
	ok := 0
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	timedOut := false
wait:
	for _, f := range futs {
		select {
		case <-f.Ok():
			ok++
		case e := <-f.Err():
			err = e
			break wait
		case <-timeout.C:
			err = errors.New("publish acknowledgement timeout")
			timedOut = true
			break wait
		case <-ctx.Done():
			return -1
		}
	}
	if ok < len(futs)-1 {
		r.reorderedAfterFailure(win, futs, ok, timedOut, timeout.C)
	}
	r.mu.Lock()
	var freed int64
	for i := 0; i < ok; i++ {
		freed += int64(len(r.q[i].body))
		r.q[i] = outMsg{}
	}
	r.q = r.q[ok:]
	r.qBytes -= freed
	r.mu.Unlock()
	r.published.Add(ok)
	if err != nil || ok < n {
		r.pubErrors.Inc()
		r.opts.Logger.Debug("relay: publish failed; resending from the first failure", "acked", ok, "window", n, "err", err)
		return -1
	}
	return ok
}

// reorderedAfterFailure handles a window whose message ok failed (or got no
// acknowledgement) while later ones were sent. Those later ones may be stored
// already, ahead of the failed one, which the resend then stores after them:
// a replica would apply a subscription's batch N+1 (counting a sequence gap)
// and then skip N as old (a duplicate); would take a batch stored before its
// registration for an orphan; or would apply an unregistration resent after
// the re-registration and batches that followed it, losing them. So every
// service key with a message that failed (or is unknown) followed in the
// window by one of its own that was (or may have been) stored makes its
// current subscription dirty: its queued messages still go out, nothing new
// is queued for it, and a state transfer replaces the replicas' copy
// (TestRelayReorderedWindowTransfers, TestRelayRegistrationReorderTransfers,
// TestRelayDisconnectedWindowTransfers; the replica's gap healing end to end:
// TestRelayReorderHealsReplica). Asynchronous publishing cannot avoid the
// reorder itself across a lost connection; this is how it heals.
func (r *Relay) reorderedAfterFailure(win []outMsg, futs []jetstream.PubAckFuture, ok int, timedOut bool, timeout <-chan time.Time) {
	missing := map[core.ServiceKey]bool{} // service keys with a message that may not be stored
	for i := ok; i < len(win); i++ {
		acked, unknown := false, i < len(futs) && timedOut
		if i > ok && i < len(futs) && !timedOut {
			select {
			case <-futs[i].Ok():
				acked = true
			case e := <-futs[i].Err():
				unknown = mayBeStored(e)
			case <-timeout:
				timedOut, unknown = true, true
			}
		}
		rs := win[i].sub
		if rs == nil {
			continue
		}
		if (acked || unknown) && missing[rs.key] {
			// The subscription registered now under the key (an
			// unregistration's message names one that is gone); none: it
			// is unregistered, and nothing is left to transfer.
			if v, ok := r.subs.Load(rs.key); ok && !v.(*relaySub).dirty.Load() {
				v.(*relaySub).dirty.Store(true)
				r.reordered.Inc()
				r.opts.Logger.Warn("relay: a later message may be stored before a failed one; the subscription's state will be transferred",
					"service", rs.key.String())
			}
		}
		if !acked {
			missing[rs.key] = true
		}
	}
}

// mayBeStored reports whether a publish whose acknowledgement failed with
// err may be stored all the same. nats.ErrDisconnected fails every
// acknowledgement outstanding when the connection drops: the message may have
// been stored before the server went, or may sit in the client's reconnect
// buffer (published after the drop, before the client failed the pending
// acknowledgements), which it sends on reconnecting, ahead of the window's
// resend. ErrAsyncPublishTimeout is as uncertain. The stream's own answers
// (no responders, an API error) mean it was not stored.
func mayBeStored(err error) bool {
	return errors.Is(err, nats.ErrDisconnected) || errors.Is(err, jetstream.ErrAsyncPublishTimeout)
}

// Close publishes what is queued for up to drain, then disconnects.
func (r *Relay) Close(drain time.Duration) {
	if r.cancel == nil {
		return
	}
	deadline := time.Now().Add(drain)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		empty := len(r.q) == 0
		r.mu.Unlock()
		if empty {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.cancel()
	<-r.done
}

// queued is how many messages wait for an acknowledgement.
func (r *Relay) queued() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.q)
}

// transferDirty queues a state transfer for every dirty subscription the
// buffer has room for; it reports whether it queued any.
func (r *Relay) transferDirty() bool {
	queued := false
	r.subs.Range(func(_, v any) bool {
		rs := v.(*relaySub)
		if !rs.dirty.Load() {
			return true
		}
		t := &transfer{r: r, rs: rs, w: sectionWriter{key: rs.key}}
		if err := r.ix.DumpStreams(func(reg *core.Registration) bool { return reg.Key() == rs.key }, t); err != nil {
			r.opts.Logger.Warn("relay: state transfer failed", "service", rs.key.String(), "err", err)
		}
		queued = queued || t.done
		return true
	})
	return queued
}

// transfer is the visitor of one state transfer: it builds the sections and,
// at the end of the subscription's dump (still under its lock, so no batch
// of it can slip between), queues its registration and the sections
// together and clears dirty — or, without room, leaves it dirty for later.
type transfer struct {
	r    *Relay
	rs   *relaySub
	w    sectionWriter
	done bool
}

func (t *transfer) Stream(i *core.StreamInfo) error  { t.w.info.Reg = i.Reg; return t.w.Stream(i) }
func (t *transfer) Holding(h *core.Holding) error    { return t.w.Holding(h) }
func (t *transfer) Engine(e *core.EngineEntry) error { return t.w.Engine(e) }
func (t *transfer) EndStream(i *core.StreamInfo) error {
	if err := t.w.EndStream(i); err != nil {
		return err
	}
	r := t.r
	msgs := append([]outMsg{{subject: t.rs.subject, body: AppendRegister(nil, &i.Reg), sub: t.rs}}, make([]outMsg, 0, len(t.w.msgs))...)
	var n int64
	for _, b := range t.w.msgs {
		msgs = append(msgs, outMsg{subject: t.rs.subject, body: b, sub: t.rs})
	}
	for _, m := range msgs {
		n += int64(len(m.body))
	}
	r.mu.Lock()
	if r.qBytes+n > r.opts.BufferBytes && len(r.q) > 0 {
		r.mu.Unlock()
		return nil // no room yet: later
	}
	r.q = append(r.q, msgs...)
	r.qBytes += n
	t.rs.dirty.Store(false)
	r.mu.Unlock()
	r.transfers.Inc()
	t.done = true
	r.kick()
	r.opts.Logger.Info("relay: state transfer queued after dropped or reordered messages", "service", t.rs.key.String(),
		"messages", len(t.w.msgs), "bytes", n, "seq", i.Seq)
	return nil
}
