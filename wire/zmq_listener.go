package wire

import (
	"fmt"
	"hash/maphash"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	zmq "github.com/pebbe/zmq4"
	"github.com/seed-c7a81618/conductor/core"
)

// listener is one subscription's receiver. Its goroutine (run) owns every socket
// it uses — SUB to the publisher, a PAIR reading the SUB's libzmq monitor, a PAIR
// receiving wake-ups, and a DEALER to the replay endpoint — and is the
// subscription's single writer.
//
// # Receive protocol
//
// Each live message must be [topic, seq(8 bytes BE), payload]; any other shape, a
// sequence above INT64_MAX, or an undecodable payload is counted as a decode error
// and dropped (a decodable sequence is still consumed, so a bad payload does not
// look like a gap). Messages are read whole (every frame up to the last), so a
// truncated or over-long multipart cannot desynchronise the stream. The topic is
// ignored: the registered publisher type selects the decoder.
//
// Sequence decisions are made by seqTracker (zmq_seq.go):
//
//   - next (last+1): decode and apply.
//   - gap (> last+1): with a replay endpoint, replay from last (see below) while
//     buffering live messages; then the live message is applied, dropped as a
//     duplicate, or — if the ring no longer held the gap — the stream is stale.
//     Without a replay endpoint (or while replay is backing off after a failure)
//     a gap makes the stream stale at once.
//   - stale: the subscription's blocks are cleared (Subscription.Clear, counted and
//     logged) and the message that revealed the gap starts a new baseline. What is
//     in the index afterwards is true, if incomplete; nothing is silently wrong.
//   - restart (the live sequence went backwards, or fell more than
//     RestartThreshold below the last applied one): the stream's blocks are
//     cleared and ingestion restarts as for a new stream.
//   - first (no baseline): with a replay endpoint and seq > 0, what the ring holds
//     before seq is replayed first; then the message is applied.
//   - duplicate (≤ last, within RestartThreshold, not a live regression): dropped.
//
// # Replay
//
// A replay sends [empty, start_seq(8 bytes BE)] on the DEALER and accepts replies
// ["", seq, payload] and ["", topic, seq, payload] until one whose last frame is
// empty (the end marker). The start is last (not last+1) when a baseline exists: a
// reply for last whose payload differs from what was applied at last proves that
// the publisher restarted (its ring is a new incarnation's), which the sequence
// numbers alone cannot show after a reconnect; the stream is then cleared and
// replayed from 0. (A new incarnation whose batch at that sequence is
// byte-identical to the old one's passes for the same; engine batches carry a
// timestamp, so in practice they never are.) Replies are deduplicated by sequence; a reply past last+1 means
// the ring lost part of the gap (stale). While a replay runs, live messages are
// buffered (at most ReplayMaxBuffered; then the SUB socket is left unread until
// the replay ends) and are handled after it, in order, so a late live Stored(A)
// cannot resurrect a replayed Removed(A): its sequence is by then a duplicate.
// Each reply must arrive within ReplayTimeout and the whole replay within
// ReplayTotalTimeout. A failed replay (timeout, malformed reply, socket error)
// closes the DEALER (a late reply must not be mistaken for the next replay's) and
// holds further replays off for a backoff (ReconnectMin doubling to ReconnectMax).
//
// On every (re)connection (the SUB's ZMTP handshake, seen on its monitor) a
// subscription with a replay endpoint replays proactively, from its baseline or
// from 0, so what was published before it connected (a slow joiner) or while it
// was disconnected or paused is recovered as far as the ring allows.
//
// # Control
//
// The controller (Ingester, under its opMu) sends a cmdReq on cmds and a byte on
// the wake PAIR; the goroutine, polling that PAIR with its other sockets, drains
// cmds, acts, and closes the request's ack channel. done is closed when the
// goroutine has closed every socket and returned.
type listener struct {
	g       *Ingester
	opts    *IngestOptions
	log     *slog.Logger
	sub     *core.Subscription
	reg     core.Registration
	key     core.ServiceKey
	dialect Dialect
	id      uint64
	m       *streamMetrics

	// Published for Listeners(); written by the goroutine.
	state   atomic.Uint32 // ListenerState
	lastErr atomic.Pointer[string]
	hasSeq  atomic.Bool

	cmds   chan cmdReq
	done   chan struct{}
	wakeTx *zmq.Socket // controller side of the wake pair; used under Ingester.opMu only

	rx receiver // owned by the goroutine
}

type cmdOp uint8

const (
	cmdStop cmdOp = iota + 1
	cmdPause
	cmdResume
)

type cmdReq struct {
	op  cmdOp
	ack chan struct{} // nil: no acknowledgement wanted
}

// receiver is the goroutine-owned part of a listener.
type receiver struct {
	subSoc, monSoc, wakeRx, dealer *zmq.Socket
	poller, rpoller                *zmq.Poller
	rpollSub                       int // index of subSoc in rpoller
	gen                            uint64

	dec   Decoder
	batch core.Batch
	seq   seqTracker
	seed  maphash.Seed
	req   [][]byte

	// reader receives whole messages into its reused buffer (one cgo call per
	// message); subFast and dealerFast say whether it can read those sockets
	// (handleMatches), else pebbe's receive is used. frames is that path's scratch.
	reader              *frameReader
	subFast, dealerFast bool
	frames              [][]byte
	// held keeps the payload of the live message that triggered a replay: the
	// replay reads through reader, whose buffer the payload aliases.
	held []byte

	pending     [][][]byte // live messages buffered by a replay, FIFO from head
	pendingHead int

	stopping, paused  bool
	connectReplay     bool
	connected         bool // a handshake succeeded since the SUB was opened
	everConnected     bool
	backoff           time.Duration
	replayBackoff     time.Duration
	replayNotBefore   time.Time
	heldDirty         bool // RFC events may be held in core: FlushHeld when idle
	errLogNext        time.Time
	errLogSuppressed  int
	monLogNext        time.Time
	monLogSuppressed  int
	replayFailLogNext time.Time
}

const (
	// drainMax bounds how many messages are handled per poll wake-up before the
	// control and monitor sockets are looked at again.
	drainMax = 512
	// maxKeptFrames: frames beyond this are read (to keep the stream aligned) but
	// not kept; ParseLive / ParseReplayReply then refuse the message.
	maxKeptFrames = 5
	// errLogEvery rate-limits decode-error logging per stream.
	errLogEvery   = 10 * time.Second
	monitorEvents = zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED |
		zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)

var wakeByte = []byte{1}

func newListener(g *Ingester, sub *core.Subscription, d Dialect, id uint64) *listener {
	reg := sub.Registration()
	key := sub.Key()
	l := &listener{
		g:       g,
		opts:    &g.opts,
		sub:     sub,
		reg:     reg,
		key:     key,
		dialect: d,
		id:      id,
		m:       newStreamMetrics(g.opts.Metrics, key),
		cmds:    make(chan cmdReq, 4),
		done:    make(chan struct{}),
	}
	l.log = g.opts.Logger.With("service", key.String(), "endpoint", reg.Endpoint)
	l.rx.seq.threshold = g.opts.RestartThreshold
	l.rx.reader = newFrameReader()
	l.rx.seed = maphash.MakeSeed()
	l.rx.backoff = g.opts.ReconnectMin
	l.rx.replayBackoff = g.opts.ReconnectMin
	l.state.Store(uint32(ListenerPending))
	return l
}

func (l *listener) wakeAddr() string { return fmt.Sprintf("inproc://conductor-ingest-wake-%d", l.id) }

// start runs the goroutine and waits until its sockets exist and the SUB has
// been told to connect (which does not wait for the publisher).
func (l *listener) start() error {
	ready := make(chan error, 1)
	go l.run(ready)
	if err := <-ready; err != nil {
		<-l.done
		return err
	}
	tx, err := l.g.zctx.NewSocket(zmq.PAIR)
	if err == nil {
		_ = tx.SetLinger(0)
		if err = tx.Connect(l.wakeAddr()); err != nil {
			_ = tx.Close()
		}
	}
	if err != nil {
		l.stop() // without a wake socket the goroutine notices within PollInterval
		return fmt.Errorf("wake socket: %w", err)
	}
	l.wakeTx = tx
	return nil
}

// command sends op and waits until the goroutine acknowledged it (or exited).
func (l *listener) command(op cmdOp) {
	req := cmdReq{op: op, ack: make(chan struct{})}
	select {
	case l.cmds <- req:
	case <-l.done:
		return
	}
	l.wake()
	select {
	case <-req.ack:
	case <-l.done:
	}
}

// signal sends op without waiting.
func (l *listener) signal(op cmdOp) {
	select {
	case l.cmds <- cmdReq{op: op}:
	case <-l.done:
		return
	}
	l.wake()
}

func (l *listener) wake() {
	if l.wakeTx != nil {
		// DONTWAIT: a full pipe means wake-ups are already pending.
		_, _ = l.wakeTx.SendBytes(wakeByte, zmq.DONTWAIT)
	}
}

// stop asks the goroutine to exit, joins it, and closes the wake sender.
func (l *listener) stop() {
	l.command(cmdStop)
	<-l.done
	if l.wakeTx != nil {
		_ = l.wakeTx.Close()
		l.wakeTx = nil
	}
}

func (l *listener) setState(s ListenerState) { l.state.Store(uint32(s)) }

func (l *listener) setErr(msg string) { l.lastErr.Store(&msg) }

func (l *listener) status() ListenerStatus {
	st := ListenerStatus{
		Key:              l.key,
		Endpoint:         l.reg.Endpoint,
		ReplayEndpoint:   l.reg.ReplayEndpoint,
		State:            ListenerState(l.state.Load()),
		LastSeq:          l.m.lastSeq.Load(),
		HasSeq:           l.hasSeq.Load(),
		Batches:          l.m.batches.Get(),
		Events:           l.m.events.Load(),
		Blocks:           l.m.blocks.Get(),
		DecodeErrors:     l.m.decodeErrors.Get(),
		Gaps:             l.m.gaps.Get(),
		ReplaysRequested: l.m.replaysRequested.Get(),
		ReplaysSucceeded: l.m.replaysSucceeded.Get(),
		ReplaysFailed:    l.m.replaysFailed.Get(),
		StaleClears:      l.m.staleClears.Get(),
		Restarts:         l.m.restarts.Get(),
		Duplicates:       l.m.duplicates.Get(),
		Reconnects:       l.m.reconnects.Get(),
	}
	if e := l.lastErr.Load(); e != nil {
		st.LastError = *e
	}
	return st
}

func (l *listener) canReplay() bool { return l.reg.ReplayEndpoint != "" }

// ---- goroutine -------------------------------------------------------------

func (l *listener) run(ready chan<- error) {
	defer close(l.done)
	defer l.closeAll()
	rx := &l.rx
	var err error
	if rx.wakeRx, err = l.g.zctx.NewSocket(zmq.PAIR); err == nil {
		_ = rx.wakeRx.SetLinger(0)
		err = rx.wakeRx.Bind(l.wakeAddr())
	}
	if err != nil {
		ready <- fmt.Errorf("wake socket: %w", err)
		return
	}
	if err := l.openSub(); err != nil {
		ready <- err
		return
	}
	if l.canReplay() {
		// Connect the replay socket now: a first replay follows the connection,
		// and an endpoint libzmq refuses fails the registration.
		if err := l.ensureDealer(); err != nil {
			ready <- err
			return
		}
	}
	ready <- nil
	for !rx.stopping {
		switch {
		case rx.paused:
			l.waitCmd(0)
		case rx.subSoc == nil: // failed: rebuild after the backoff
			if l.waitCmd(rx.backoff) {
				continue
			}
			rx.backoff = min(2*rx.backoff, l.opts.ReconnectMax)
			if err := l.openSub(); err != nil {
				l.fail(err)
			}
		default:
			l.step()
		}
	}
}

// waitCmd blocks until a command arrives (true) or d passes (false; d == 0 waits
// for a command only).
func (l *listener) waitCmd(d time.Duration) bool {
	var timeout <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case req := <-l.cmds:
		l.handleCmd(req)
		return true
	case <-timeout:
		return false
	}
}

// pollCmds handles every queued command without blocking.
func (l *listener) pollCmds() {
	for {
		select {
		case req := <-l.cmds:
			l.handleCmd(req)
		default:
			return
		}
	}
}

func (l *listener) handleCmd(req cmdReq) {
	rx := &l.rx
	switch req.op {
	case cmdStop:
		rx.stopping = true
	case cmdPause:
		if !rx.paused {
			rx.paused = true
			l.closeSub()
			l.resetDealer()
			l.dropPending()
			l.setState(ListenerPaused)
			l.log.Info("listener paused")
		}
	case cmdResume:
		if rx.paused {
			rx.paused = false
			l.setState(ListenerPending)
			l.log.Info("listener resumed")
			if err := l.openSub(); err != nil {
				l.fail(err)
			}
		}
	}
	if req.ack != nil {
		close(req.ack)
	}
}

// interrupted reports whether a command requires the current work to stop.
func (l *listener) interrupted() bool {
	return l.rx.stopping || l.rx.paused || l.rx.subSoc == nil
}

// step does one round of the receive loop: buffered live messages first, then a
// proactive replay if a (re)connection asked for one, then a poll.
func (l *listener) step() {
	rx := &l.rx
	if rx.pendingHead < len(rx.pending) {
		for i := 0; i < drainMax && rx.pendingHead < len(rx.pending); i++ {
			frames := rx.pending[rx.pendingHead]
			rx.pending[rx.pendingHead] = nil
			rx.pendingHead++
			l.handleLive(frames)
			if l.interrupted() {
				return
			}
		}
		if rx.pendingHead == len(rx.pending) {
			rx.pending, rx.pendingHead = rx.pending[:0], 0
		}
		l.pollCmds()
		return
	}
	if rx.connectReplay {
		rx.connectReplay = false
		l.replay(0, false)
		return
	}
	polled, err := rx.poller.Poll(l.opts.PollInterval)
	if err != nil {
		l.fail(fmt.Errorf("poll: %w", err))
		return
	}
	if len(polled) == 0 {
		l.idle()
		l.pollCmds()
		return
	}
	for _, p := range polled {
		switch p.Socket {
		case rx.wakeRx:
			l.drainWake()
			l.pollCmds()
			if l.interrupted() {
				return
			}
		case rx.monSoc:
			l.drainMonitor()
			if rx.connectReplay {
				return // replay before reading live messages
			}
		case rx.subSoc:
			l.drainSub()
			if l.interrupted() {
				return
			}
		}
	}
}

// idle runs when PollInterval passed without a message.
func (l *listener) idle() {
	if l.rx.heldDirty {
		l.rx.heldDirty = false
		st := l.sub.FlushHeld()
		l.account(&st, 0)
	}
}

func (l *listener) drainWake() {
	for {
		if _, err := l.rx.wakeRx.RecvBytes(zmq.DONTWAIT); err != nil {
			return
		}
	}
}

func (l *listener) drainMonitor() {
	rx := &l.rx
	for {
		ev, addr, _, err := rx.monSoc.RecvEvent(zmq.DONTWAIT)
		if err != nil {
			return
		}
		switch {
		case ev&zmq.EVENT_HANDSHAKE_SUCCEEDED != 0:
			if rx.everConnected {
				l.m.reconnects.Inc()
			}
			rx.connected, rx.everConnected = true, true
			rx.backoff = l.opts.ReconnectMin
			l.setState(ListenerActive)
			l.log.Info("listener connected", "peer", addr)
			if l.canReplay() {
				rx.connectReplay = true
			}
		case ev&zmq.EVENT_DISCONNECTED != 0:
			rx.connected = false
			l.setState(ListenerPending)
			l.setErr("disconnected from " + addr)
			l.warnMonitor("listener disconnected; libzmq reconnects", "peer", addr)
		case ev&zmq.EVENT_CONNECT_RETRIED != 0:
			if !rx.connected {
				l.setErr("publisher not reachable at " + l.reg.Endpoint + "; retrying")
			}
		default: // handshake failures
			l.setErr(fmt.Sprintf("%v with %s", ev, addr))
			l.warnMonitor("ZMTP handshake failed", "event", ev.String(), "peer", addr)
		}
	}
}

// warnMonitor logs a connection problem at most once per errLogEvery: a peer
// that accepts TCP but does not speak ZMTP makes libzmq retry several times a
// second, and every retry is an event. last_error always has the newest.
func (l *listener) warnMonitor(msg string, args ...any) {
	rx := &l.rx
	now := time.Now()
	if now.Before(rx.monLogNext) {
		rx.monLogSuppressed++
		return
	}
	l.log.Warn(msg, append(args, "suppressed", rx.monLogSuppressed)...)
	rx.monLogNext, rx.monLogSuppressed = now.Add(errLogEvery), 0
}

// drainSub handles up to drainMax live messages.
func (l *listener) drainSub() {
	rx := &l.rx
	for i := 0; i < drainMax; i++ {
		frames, err := l.recv(rx.subSoc, rx.subFast)
		if err != nil {
			if !isEAGAIN(err) {
				l.fail(fmt.Errorf("receive: %w", err))
			}
			return
		}
		l.handleLive(frames)
		if l.interrupted() || rx.pendingHead < len(rx.pending) {
			return // buffered messages go before anything still in the socket
		}
	}
}

// handleLive processes one live message (see the protocol on listener).
func (l *listener) handleLive(frames [][]byte) {
	rx := &l.rx
	_, s, payload, err := ParseLive(frames)
	if err != nil {
		l.decodeError(fmt.Errorf("live message: %w", err))
		return
	}
	if s > math.MaxInt64 {
		l.decodeError(fmt.Errorf("live message seq=%d: %w", s, ErrSeqRange))
		return
	}
	v := rx.seq.live(s)
	switch v {
	case seqNext:
		l.consume(s, payload)
		return
	case seqDuplicate:
		// A replay may have delivered s before its live copy; a different
		// payload under s means a new incarnation instead.
		if !l.canReplay() || !rx.seq.conflicts(s, l.payloadSum(payload)) {
			l.m.duplicates.Inc()
			return
		}
		v = seqRestart
	}
	// What follows may replay, which reuses the receive buffer payload aliases.
	rx.held = append(rx.held[:0], payload...)
	payload = rx.held
	switch v {
	case seqRestart:
		l.restart(fmt.Sprintf("live seq=%d after seq=%d", s, rx.seq.last))
		if l.canReplay() && s > 0 {
			l.replay(s, true)
		}
	case seqFirst:
		if l.canReplay() && s > 0 {
			l.replay(s, true)
		}
	case seqGap:
		l.m.gaps.Inc()
		l.log.Warn("sequence gap", "last", rx.seq.last, "seq", s, "missed", s-rx.seq.last-1)
		if l.canReplay() {
			l.replay(s, true)
		}
	}
	if l.interrupted() {
		return // paused or stopping: the message is dropped; resume replays it
	}
	// Place the message after whatever the replay applied.
	switch rx.seq.replayed(s) {
	case seqFirst, seqNext:
		l.consume(s, payload)
	case seqDuplicate:
		l.m.duplicates.Inc()
	case seqGap:
		l.stale(fmt.Sprintf("seq %d..%d lost", rx.seq.last+1, s-1))
		l.consume(s, payload)
	}
}

// consume decodes and applies the message at sequence s.
func (l *listener) consume(s uint64, payload []byte) {
	rx := &l.rx
	var sum uint64
	if l.canReplay() {
		sum = l.payloadSum(payload)
	}
	rx.seq.consumed(s, sum)
	l.m.lastSeq.Store(s)
	l.hasSeq.Store(true)
	if err := rx.dec.Decode(l.dialect, payload, &rx.batch); err != nil {
		l.decodeError(fmt.Errorf("seq=%d: %w", s, err))
		return
	}
	rx.batch.Seq, rx.batch.HasSeq = s, true
	st := l.sub.Apply(&rx.batch)
	l.account(&st, rx.batch.Skipped)
	l.m.batches.Inc()
	if l.dialect == DialectMooncake || l.dialect == DialectStandard {
		rx.heldDirty = true
	}
	if lag, ok := batchLag(&rx.batch, l.dialect); ok {
		l.m.lagBits.Store(math.Float64bits(lag))
	}
}

// payloadSum fingerprints a payload so a replayed message can be compared with the
// one applied under the same sequence. maphash is process-local, which suffices.
func (l *listener) payloadSum(p []byte) uint64 { return maphash.Bytes(l.rx.seed, p) }

func (l *listener) account(st *core.ApplyStats, skipped int) {
	m := l.m
	m.events.Add(uint64(st.Events + skipped))
	if st.Stored > 0 {
		m.stored.Add(st.Stored)
	}
	if st.Removed > 0 {
		m.removed.Add(st.Removed)
	}
	if st.Cleared > 0 {
		m.cleared.Add(st.Cleared)
	}
	if d := st.Dropped + skipped; d > 0 {
		m.dropped.Add(d)
	}
	if st.Blocks > 0 {
		m.blocks.Add(st.Blocks)
	}
}

// batchLag returns now minus the batch's publisher timestamp, in seconds: engine
// batches carry float seconds, Mooncake (and RFC) batches integer milliseconds.
func batchLag(b *core.Batch, d Dialect) (float64, bool) {
	now := time.Now()
	switch {
	case b.TimestampF > 0:
		return float64(now.UnixNano())/1e9 - b.TimestampF, true
	case b.TimestampU > 0 && (d == DialectMooncake || d == DialectStandard):
		return float64(now.UnixMilli()-int64(b.TimestampU)) / 1e3, true
	}
	return 0, false
}

func (l *listener) decodeError(err error) {
	rx := &l.rx
	l.m.decodeErrors.Inc()
	l.setErr(err.Error())
	now := time.Now()
	if now.Before(rx.errLogNext) {
		rx.errLogSuppressed++
		return
	}
	l.log.Warn("dropped undecodable message", "err", err, "suppressed", rx.errLogSuppressed)
	rx.errLogNext, rx.errLogSuppressed = now.Add(errLogEvery), 0
}

// stale clears the stream's blocks because events were lost for good, and forgets
// the baseline (the next consumed message starts a new one).
func (l *listener) stale(reason string) {
	n := l.sub.Clear("stale: " + reason)
	l.m.staleClears.Inc()
	l.m.clearedBlocks.Add(n)
	l.setErr("stale: " + reason)
	l.log.Warn("stream stale: cleared its blocks", "reason", reason, "cleared_blocks", n)
	l.rx.seq.rebase()
}

// restart clears the stream's blocks because its publisher restarted.
func (l *listener) restart(reason string) {
	n := l.sub.Clear("publisher restart: " + reason)
	l.m.restarts.Inc()
	l.m.clearedBlocks.Add(n)
	l.log.Warn("publisher restart detected: cleared the stream's blocks", "reason", reason, "cleared_blocks", n)
	l.rx.seq.rebase()
}
