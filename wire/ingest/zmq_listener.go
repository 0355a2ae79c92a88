package ingest

import (
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/wire"
)

// listener is one subscription's receiver. Its goroutine (run) owns every socket
// it uses — SUB to the publisher, a PAIR reading the SUB's libzmq monitor, and a
// DEALER to the replay endpoint — and is the subscription's single writer. It
// waits for them, and for the controller's commands, through the Ingester's
// poller (zmq_poller.go: one epoll for every listener's sockets, a channel per
// listener), so a listener costs at most ListenerSockets libzmq sockets (SUB,
// both ends of its monitor, DEALER), ListenerFDs file descriptors
// (TestZMQListenerSocketsAndFDs) and a goroutine, but no OS thread while it
// waits: the process's threads do not grow with its registrations
// (TestZMQThreadsBounded).
//
// # Idle cost
//
// The goroutine waits without a timeout unless it has time-based work (RFC
// events held in core to flush after PollInterval, a replay's deadlines, a
// gap expiry): a registration whose publisher is down costs no CPU in Go, and
// libzmq retries the TCP connection with exponential backoff (ReconnectMin
// doubling to ReconnectMax) without waking it, since its monitor does not
// report retries (TestZMQPendingListenersIdleCPU).
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
//   - stale: the lost events are gone for good; the subscription's gap policy
//     decides what the index keeps (Subscription.Gap: keep what is indexed,
//     clear the stream, or expire what it held unless announced again; counted
//     and logged), and the message that revealed the gap starts a new baseline.
//     A GapExpire mark's deadline is kept by the listener, which calls
//     Subscription.ExpireDue when it passes.
//   - restart (the live sequence went backwards, or fell more than
//     RestartThreshold below the last applied one): the stream's blocks are
//     cleared and ingestion restarts as for a new stream.
//   - first (no baseline): with a replay endpoint and seq > 0, what the ring holds
//     before seq is replayed first; then the message is applied. A stream
//     restored from a prior run's snapshot whose first live sequence is at or
//     below the snapshot's is a publisher that restarted meanwhile: its
//     restored blocks are cleared and its ring replayed again
//     (listener.firstLive).
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
// buffered in the receive queue and are handled after it, in order, so a late
// live Stored(A) cannot resurrect a replayed Removed(A): its sequence is by then a
// duplicate. The queue is bounded in messages (ReplayMaxBuffered) and bytes
// (ReceiveQueueBytes, and MaxQueuedBytes for all listeners); a live message that
// does not fit is still read and dropped, counted as a queue drop: the next
// message kept is a gap, healed by the next replay (TestZMQReceiveQueueBytes).
// Each reply must arrive within ReplayTimeout and the whole replay within
// ReplayTotalTimeout. Replies the publisher dropped on the way (its ROUTER
// drops what does not fit its send high-water mark while the DEALER pushes
// back) are requested again from the last applied sequence (replayOnce). A
// failed replay (timeout, malformed reply, socket error) closes the DEALER (a
// late reply must not be mistaken for the next replay's) and holds further
// replays off for a backoff (ReconnectMin doubling to ReconnectMax).
//
// # Memory
//
// Outside a replay, live messages are handled straight from the SUB socket,
// without a copy; what arrives meanwhile waits in libzmq's queue, which the
// socket options bound in bytes (IngestOptions.RcvHWM): ReceiveQueueBytes of
// messages the size of the stream's largest so far, L (at least 1 MiB), plus
// the message being received. The listener lowers the queue's high-water
// mark once it reads a message larger than any before (sized), as soon as
// libzmq's flow control allows (queueMark), so only such a first larger
// message, and the ones like it queued behind it meanwhile (up to the old
// mark), can exceed the bound. When it is full libzmq stops reading the
// connection, and the publisher queues, then drops: a gap, replayed from
// its ring. Beside the index, a registration holds at most:
//
//   - libzmq's SUB queue: max(ReceiveQueueBytes, L) + L;
//   - during a replay, libzmq's replay queue, the same, and the receive queue,
//     ReceiveQueueBytes (all registrations' together at most MaxQueuedBytes);
//   - the message being handled: its copy out of libzmq (in a buffer rounded
//     up to a power of two), a copy of the live message a replay holds back,
//     and its decoded batch. Hashes and token ids decode to about their size
//     on the wire (token ids below 128 to four times it), but every event
//     takes a core.Event (400 bytes), so a batch of many empty events
//     decodes to many times its size.
//
// With the defaults and messages up to 1 MiB that is 65 MiB outside a replay
// and 194 MiB during one, plus the message being handled; a store master
// whose flushes reach 8 MiB holds up to 336 MiB (TestZMQBurstMemory
// measures both). A message above MaxMessageBytes is dropped whole without a
// copy (handleLive, consume); libzmq holds it until it is read, and ends the
// connection for a single frame above four times the limit. libzmq's queues
// are per registration: size ReceiveQueueBytes for the number of
// registrations. The Go share (receive queue, copies, batch) is heap, which
// the garbage collector lets grow past what is live by GOGC percent. Buffers
// kept between messages are released after a message above maxKeptFrameBuf
// (4 MiB). libzmq bounds each frame, not the number of frames of one message:
// a message of many large frames is received whole before the listener
// drops it.
//
// # Control
//
// The controller (Ingester, under its opMu) sends a cmdReq on cmds and
// notifies the goroutine (kick); the goroutine, which looks at cmds whenever it
// waits, drains them, acts, and closes the request's ack channel. done is
// closed when the goroutine has closed every socket and returned.
type listener struct {
	g       *Ingester
	opts    *IngestOptions
	log     *slog.Logger
	sub     *core.Subscription
	reg     core.Registration
	key     core.ServiceKey
	dialect wire.Dialect
	id      uint64
	m       *streamMetrics

	// Published for Listeners(); written by the goroutine.
	state   atomic.Uint32 // ListenerState
	lastErr atomic.Pointer[string]
	hasSeq  atomic.Bool
	// queuePeak is the most bytes the receive queue has held.
	queuePeak atomic.Int64
	// largest publishes rx.largest, hwm the SUB socket's mark (rx.subMark).
	largest atomic.Int64
	hwm     atomic.Int32
	// tid is the OS thread the goroutine is locked to with ListenerNice
	// (0: not locked).
	tid atomic.Int64

	cmds chan cmdReq
	done chan struct{}
	// expiryWake is set (with a kick) when core's next gap expiry became
	// earlier than the wait's timeout knew (core.Subscription.SetExpiryWake);
	// the wait then returns, and the next round sets its timeout afresh.
	expiryWake atomic.Bool
	// notify wakes the goroutine's wait (kick): the poller sends when one of
	// its sockets signals, the controller after queueing a command.
	notify chan struct{}
	// fired has bit i set by the poller when the socket at position i of the
	// wait sets signalled (see poller); waitSet.poll takes it.
	fired atomic.Uint32

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
	subSoc, monSoc, dealer *zsocket
	// poll waits on [commands, mon, sub], rpoll (a replay's) on [commands,
	// mon, sub, dealer]; n == 0 when absent (no SUB, or no DEALER for rpoll).
	poll, rpoll waitSet
	// check is the positions whose sockets the next poll asks (see poller).
	check uint32
	// timer times the waits that have a timeout (waitSet.poll).
	timer *time.Timer
	gen   uint64
	// epoch changes whenever the SUB socket is closed (Pause, failure): work
	// that spans command handling (a replay, a held live message) captures it
	// and stops when it changed, even if a Resume in the same batch of commands
	// reopened the sockets (TestZMQPauseResumeDuringReplay).
	epoch uint64

	dec   wire.Decoder
	batch core.Batch
	seq   seqTracker
	seed  maphash.Seed
	req   [][]byte

	// reader receives whole messages into its reused buffer (one cgo call per
	// message).
	reader *frameReader
	// monReader reads monitor events (its own small buffer: monitor messages
	// are a few dozen bytes, and reading one must not clobber frames of reader).
	monReader *frameReader
	// held keeps the payload of the live message that triggered a replay: the
	// replay reads through reader, whose buffer the payload aliases.
	held []byte
	// largest is the largest message the stream has sent (0: none yet), and
	// hwm the high-water mark of its sockets, sized from it (sized);
	// subMark and dealerMark follow the open sockets' marks on their way to
	// it.
	largest             int64
	hwm                 int
	subMark, dealerMark queueMark

	pending      []pendingMsg // live messages buffered by a replay, FIFO from head
	pendingHead  int
	pendingBytes int // of pending[pendingHead:], also reserved in Ingester.queued
	// tailDrop: a live message was dropped (queue full) after the last one
	// kept, so the gap may have no later message to reveal it.
	tailDrop bool
	// resub: the SUB's connection dropped. libzmq reconnects by itself unless
	// it ended the session for a protocol error (a frame above
	// ZMQ_MAXMSGSIZE), and its monitor reports both alike; so once the
	// messages that arrived before are handled, the SUB is replaced
	// (resubscribe), unless a handshake came first.
	resub bool

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
	bigLogNext        time.Time
	bigLogSuppressed  int
	monLogNext        time.Time
	monLogSuppressed  int
	dropLogNext       time.Time
	dropLogSuppressed int
}

const (
	// drainMax bounds how many messages are handled per poll wake-up before the
	// control and monitor sockets are looked at again.
	drainMax = 512
	// maxKeptFrames: frames beyond this are read (to keep the stream aligned) but
	// not kept; wire.ParseLive / wire.ParseReplayReply then refuse the message.
	maxKeptFrames = 5
	// errLogEvery rate-limits decode-error logging per stream.
	errLogEvery = 10 * time.Second
	// No EVENT_CONNECT_RETRIED: a publisher that is down would wake the goroutine
	// at every reconnection attempt.
	monitorEvents = evHandshakeSucceeded | evDisconnected |
		evHandshakeFailedDetail | evHandshakeFailedProto | evHandshakeFailedAuth
)

func newListener(g *Ingester, sub *core.Subscription, d wire.Dialect, id uint64) *listener {
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
		m:       g.series.newStreamMetrics(key, d),
		cmds:    make(chan cmdReq, 4),
		done:    make(chan struct{}),
		notify:  make(chan struct{}, 1),
	}
	l.m.applierGauges(sub)
	l.log = g.opts.Logger.With("service", key.String(), "endpoint", reg.Endpoint)
	l.rx.seq.threshold = g.opts.RestartThreshold
	l.rx.reader = newFrameReader(initialFrameBuf)
	l.rx.monReader = newFrameReader(monitorFrameBuf)
	if g.opts.MaxMessageBytes > 0 {
		l.rx.reader.max = int(min(g.opts.MaxMessageBytes, math.MaxInt))
	}
	l.rx.seed = maphash.MakeSeed()
	l.rx.hwm = g.opts.queueHWM(0)
	l.hwm.Store(int32(l.rx.hwm))
	l.rx.backoff = g.opts.ReconnectMin
	l.rx.replayBackoff = g.opts.ReconnectMin
	l.state.Store(uint32(ListenerPending))
	return l
}

// start runs the goroutine and waits until its sockets exist and the SUB has
// been told to connect (which does not wait for the publisher).
func (l *listener) start() error {
	l.g.poller.ls.Store(l.id, l)
	ready := make(chan error, 1)
	go l.run(ready)
	if err := <-ready; err != nil {
		<-l.done
		l.g.poller.ls.Delete(l.id)
		return err
	}
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
	l.kick()
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
	l.kick()
}

// stop asks the goroutine to exit, joins it, and leaves the poller.
func (l *listener) stop() {
	l.command(cmdStop)
	<-l.done
	l.g.poller.ls.Delete(l.id)
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
		QueueDrops:       l.m.queueDrops.Get(),
		QueuePeakBytes:   l.queuePeak.Load(),
		Oversize:         l.m.oversize.Get(),
		GapsKept:         l.m.gapsKept.Get(),
		ExpiredBlocks:    l.m.expiredBlocks.Get(),
		EvictedBlocks:    l.m.evictedBlocks.Get(),
		LargestMessage:   l.largest.Load(),
		QueueMessages:    int(l.hwm.Load()),
	}
	if e := l.lastErr.Load(); e != nil {
		st.LastError = *e
	} else if st.State == ListenerPending {
		// Derived, not reported per attempt: the monitor does not wake the
		// goroutine for each reconnection attempt (see Idle cost).
		st.LastError = "not connected to the publisher at " + l.reg.Endpoint + " yet; libzmq retries with backoff"
	}
	return st
}

func (l *listener) canReplay() bool { return l.reg.ReplayEndpoint != "" }

// ---- goroutine -------------------------------------------------------------

func (l *listener) run(ready chan<- error) {
	defer close(l.done)
	defer l.closeAll()
	if n := l.opts.ListenerNice; n > 0 {
		// Locked from here to the exit, so the thread with the lowered
		// priority runs this goroutine only and dies with it (IngestOptions).
		runtime.LockOSThread()
		tid, nice, err := setThreadNice(n)
		l.tid.Store(int64(tid))
		if err != nil {
			l.log.Warn("listener thread priority unchanged", "nice_delta", n, "nice", nice, "err", err)
		}
	}
	rx := &l.rx
	l.sub.SetExpiryWake(func() { l.expiryWake.Store(true); l.kick() })
	defer l.sub.SetExpiryWake(nil)
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
		case rx.subSoc == nil: // failed or disconnected: rebuild after the backoff
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
	if h := l.g.testCmdHook; h != nil {
		h(l, req.op)
	}
}

// interrupted reports whether a command requires the current work to stop.
func (l *listener) interrupted() bool {
	return l.rx.stopping || l.rx.paused || l.rx.subSoc == nil
}

// changed reports whether the work begun at epoch must stop: a command asked
// for it, or the sockets were closed since (and maybe reopened by a Resume
// handled in the same batch: the poller, the DEALER and any held message
// belong to the old sockets).
func (l *listener) changed(epoch uint64) bool {
	return l.interrupted() || l.rx.epoch != epoch
}

// step does one round of the receive loop: buffered live messages first, then a
// proactive replay if a (re)connection asked for one, then a poll.
func (l *listener) step() {
	rx := &l.rx
	if at, ok := l.sub.NextExpiry(); ok && !time.Now().Before(at) {
		l.expire()
	}
	if rx.pendingHead < len(rx.pending) {
		epoch := rx.epoch
		for i := 0; i < drainMax && rx.pendingHead < len(rx.pending); i++ {
			m := l.popPending()
			l.handleLive(m.frames, m.refused)
			if l.changed(epoch) {
				return
			}
		}
		if rx.pendingHead < len(rx.pending) || !l.healTailDrop() {
			l.pollCmds()
		}
		return
	}
	if l.healTailDrop() {
		return
	}
	if rx.resub {
		// What arrived before the connection dropped is handled first.
		if l.drainSub() {
			l.resubscribe()
		}
		return
	}
	if rx.connectReplay {
		rx.connectReplay = false
		l.replay(0, false)
		return
	}
	timeout := time.Duration(-1) // nothing time-based to do: wait for an event
	if rx.heldDirty {
		timeout = l.opts.PollInterval
	}
	if at, ok := l.sub.NextExpiry(); ok {
		d := max(time.Until(at), time.Millisecond)
		if timeout < 0 || d < timeout {
			timeout = d
		}
	}
	n, err := rx.poll.poll(l, timeout)
	if err != nil {
		l.fail(fmt.Errorf("poll: %w", err))
		return
	}
	if n == 0 {
		l.idle()
		l.pollCmds()
		return
	}
	epoch := rx.epoch
	if rx.poll.ready(pollWake) {
		l.pollCmds()
		if l.changed(epoch) {
			return // the other ready items may be closed sockets
		}
	}
	if rx.poll.ready(pollMon) {
		l.drainMonitor()
		if rx.connectReplay {
			return // replay before reading live messages
		}
	}
	if rx.poll.ready(pollSub) {
		l.drainSub()
	}
}

// healTailDrop runs once the receive queue is empty: if live messages were
// dropped after the last one it kept (or while it held none), no later
// message may come to show the gap, so it is healed now, by a replay from the
// last applied sequence or, without a replay endpoint, by marking the stream
// stale (TestZMQReplayHealsDroppedBatches, buffer-1;
// TestZMQReplayHealsTailDropWithEmptyQueue). It reports whether it did.
func (l *listener) healTailDrop() bool {
	rx := &l.rx
	rx.pending, rx.pendingHead = rx.pending[:0], 0
	if !rx.tailDrop {
		return false
	}
	rx.tailDrop = false
	if l.canReplay() {
		l.replay(0, false)
	} else {
		l.stale("the receive queue dropped messages and there is no replay endpoint")
	}
	return true
}

// idle runs when PollInterval passed without a message.
func (l *listener) idle() {
	if l.rx.heldDirty {
		l.rx.heldDirty = false
		st := l.sub.FlushHeld()
		l.account(&st, 0)
	}
}

func (l *listener) drainMonitor() {
	rx := &l.rx
	for {
		frames, err := rx.monReader.read(rx.monSoc)
		if err != nil {
			return
		}
		ev, peer, ok := parseMonitorEvent(frames)
		if !ok {
			continue // not an event libzmq sends
		}
		addr := string(peer)
		switch {
		case ev&evHandshakeSucceeded != 0:
			if rx.everConnected {
				l.m.reconnects.Inc()
			}
			rx.connected, rx.everConnected, rx.resub = true, true, false
			rx.backoff = l.opts.ReconnectMin
			l.setState(ListenerActive)
			l.log.Info("listener connected", "peer", addr)
			if l.canReplay() {
				rx.connectReplay = true
			}
		case ev&evDisconnected != 0:
			rx.connected, rx.resub = false, true
			l.setState(ListenerPending)
			l.setErr("disconnected from " + addr)
			// A frame above MaxMessageBytes is one cause: libzmq ends the
			// connection rather than buffer it.
			l.warnMonitor("listener disconnected (a publisher gone, or a message above max_message_bytes); reconnecting",
				"peer", addr, "max_message_bytes", l.opts.MaxMessageBytes)
		default: // handshake failures
			l.setErr(fmt.Sprintf("%s with %s", eventName(ev), addr))
			l.warnMonitor("ZMTP handshake failed", "event", eventName(ev), "peer", addr)
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

// drainSub handles up to drainMax live messages straight from the SUB socket
// (no copy: what waits meanwhile stays in libzmq's queue, bounded in bytes by
// IngestOptions.RcvHWM and MaxMessageBytes, and pushes back on the publisher
// when full). It reports whether it emptied the socket.
func (l *listener) drainSub() (empty bool) {
	rx := &l.rx
	epoch := rx.epoch
	for i := 0; i < drainMax; i++ {
		frames, err := l.recv(rx.subSoc)
		var refused refusal
		switch {
		case errors.Is(err, ErrMessageTooBig):
			refused = rx.reader.refusal()
		case isEAGAIN(err):
			rx.check &^= 1 << pollSub // EAGAIN processed its commands, as a check does
			return true
		case err != nil:
			l.fail(fmt.Errorf("receive: %w", err))
			return false
		}
		big := rx.reader.size >= testBigLive
		l.handleLive(frames, refused)
		if h := l.g.testLiveHook; h != nil {
			h(l, big)
		}
		if l.changed(epoch) || rx.pendingHead < len(rx.pending) {
			return false // buffered messages go before anything still in the socket
		}
	}
	return false
}

// testBigLive is the size from which Ingester.testLiveHook calls a live
// message big.
const testBigLive = 64 << 10

// handleLive processes one live message (see the protocol on listener).
// refused.size > 0: the message was above MaxMessageBytes, and
// its payload was not read; it takes its place in the stream all the same,
// and consume drops it.
func (l *listener) handleLive(frames [][]byte, refused refusal) {
	rx := &l.rx
	_, s, payload, err := wire.ParseLive(frames)
	if err != nil {
		l.decodeError(fmt.Errorf("live message: %w", err))
		return
	}
	if s > math.MaxInt64 {
		l.decodeError(fmt.Errorf("live message seq=%d: %w", s, ErrSeqRange))
		return
	}
	if !rx.seq.hasLive {
		l.firstLive(s) // may forget the baseline: then s is seqFirst
	}
	v := rx.seq.live(s)
	switch v {
	case seqNext:
		l.consume(s, payload, refused)
		return
	case seqDuplicate:
		// A replay may have delivered s before its live copy; a different
		// payload under s means a new incarnation instead.
		if !l.canReplay() || !rx.seq.conflicts(s, l.payloadSum(payload, refused)) {
			l.m.duplicates.Inc()
			return
		}
		v = seqRestart
	}
	// What follows may replay, which reuses the receive buffer payload aliases.
	epoch := rx.epoch
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
	if cap(rx.held) > maxKeptFrameBuf {
		// Like frameReader's buffer: one huge message must not pin its size
		// per listener (the slice stays valid below).
		defer func() { rx.held = nil }()
	}
	if l.changed(epoch) {
		return // paused or stopping: the message is dropped; resume replays it
	}
	// Place the message after whatever the replay applied.
	switch rx.seq.replayed(s) {
	case seqFirst, seqNext:
		l.consume(s, payload, refused)
	case seqDuplicate:
		l.m.duplicates.Inc()
	case seqGap:
		l.stale(fmt.Sprintf("seq %d..%d lost", rx.seq.last+1, s-1))
		l.consume(s, payload, refused)
	}
}

// consume decodes and applies the message at sequence s; one above
// MaxMessageBytes (refused.size > 0: payload not read) is dropped
// and counted instead.
func (l *listener) consume(s uint64, payload []byte, refused refusal) {
	rx := &l.rx
	var sum msgSum
	if l.canReplay() {
		sum = l.payloadSum(payload, refused)
	}
	rx.seq.consumed(s, sum)
	// Published once the message is done with (applied, or dropped), so a
	// reader that sees last_seq reach s sees batch s in the index.
	defer func() {
		l.m.lastSeq.Store(s)
		l.hasSeq.Store(true)
	}()
	if refused.size > 0 {
		l.oversize(s, refused.size)
		return
	}
	if err := rx.dec.Decode(l.dialect, payload, &rx.batch); err != nil {
		l.decodeError(fmt.Errorf("seq=%d: %w", s, err))
		return
	}
	rx.batch.Seq, rx.batch.HasSeq = s, true
	st := l.sub.Apply(&rx.batch)
	l.account(&st, rx.batch.Skipped)
	l.m.batches.Inc()
	if st.Held { // whatever the dialect: engine registrations may carry RFC maps (TestZMQIdleFlushesHeldEvents)
		rx.heldDirty = true
	}
	if lag, ok := batchLag(&rx.batch, l.dialect); ok {
		l.m.lagBits.Store(math.Float64bits(lag))
	}
	if len(payload) > maxKeptFrameBuf {
		rx.batch = core.Batch{} // its slices are sized for a rare huge message
	}
}

// payloadSum fingerprints a payload so a replayed message can be compared with the
// one applied under the same sequence (msgSum). maphash is process-local, which
// suffices. A refused message (payload not read) has only its payload's length.
func (l *listener) payloadSum(p []byte, refused refusal) msgSum {
	if refused.size > 0 {
		return msgSum{n: refused.payload}
	}
	return msgSum{n: len(p), hash: maphash.Bytes(l.rx.seed, p), hashed: true}
}

// refusal describes a message above MaxMessageBytes, read without its payload
// (frameReader.refusal); the zero value is a message read whole.
type refusal struct {
	size    int // every frame's bytes: what the limit counts
	payload int // the payload frame's bytes
}

// oversize counts and logs (at most once per errLogEvery) a message dropped
// for exceeding MaxMessageBytes at sequence s.
func (l *listener) oversize(s uint64, n int) {
	rx := &l.rx
	l.m.oversize.Inc()
	l.setErr(fmt.Sprintf("seq=%d: a %d-byte message above the %d-byte limit was dropped (--max-message-bytes)", s, n, l.opts.MaxMessageBytes))
	now := time.Now()
	if now.Before(rx.bigLogNext) {
		rx.bigLogSuppressed++
		return
	}
	l.log.Warn("dropped a message above the message size limit; its events are lost: raise --max-message-bytes (config max_message_bytes) to accept such messages",
		"seq", s, "bytes", n, "max_message_bytes", l.opts.MaxMessageBytes, "suppressed", rx.bigLogSuppressed)
	rx.bigLogNext, rx.bigLogSuppressed = now.Add(errLogEvery), 0
}

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
	if st.Evicted > 0 {
		m.evictedBlocks.Add(st.Evicted)
	}
	if d := st.Dropped + skipped; d > 0 {
		m.dropped.Add(d)
	}
	if st.Blocks > 0 {
		m.blocks.Add(st.Blocks)
		m.dialectBlocks.Add(st.Blocks)
	}
}

// batchLag returns now minus the batch's publisher timestamp, in seconds: engine
// batches carry float seconds, Mooncake (and RFC) batches integer milliseconds.
func batchLag(b *core.Batch, d wire.Dialect) (float64, bool) {
	now := time.Now()
	switch {
	// An integer timestamp (TimestampU; the decoder mirrors it into
	// TimestampF) is milliseconds in the Mooncake and standard dialects:
	// check it before the float seconds (TestBatchLagUnits).
	case b.TimestampU > 0 && (d == wire.DialectMooncake || d == wire.DialectStandard):
		return float64(now.UnixMilli()-int64(b.TimestampU)) / 1e3, true
	case b.TimestampF > 0:
		return float64(now.UnixNano())/1e9 - b.TimestampF, true
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

// stale applies the subscription's gap policy because events were lost for
// good (Subscription.Gap), and forgets the baseline (the next consumed
// message starts a new one).
func (l *listener) stale(reason string) {
	res := l.sub.Gap(reason)
	switch res.Policy {
	case core.GapClear:
		l.m.staleClears.Inc()
		l.m.clearedBlocks.Add(res.Blocks)
	default:
		l.m.gapsKept.Inc()
	}
	l.account(&res.Applied, 0)
	l.setErr(fmt.Sprintf("events lost for good (%s); gap_policy %s", reason, res.Policy))
	l.log.Debug("stream stale", "reason", reason, "gap_policy", res.Policy.String(), "blocks", res.Blocks)
	l.rx.seq.rebase()
}

// expire applies the gap expiries that are due (GapExpire).
func (l *listener) expire() {
	if n := l.sub.ExpireDue(time.Now()); n > 0 {
		l.m.expiredBlocks.Add(n)
	}
}

// firstLive tells core the sequence of the first live message: on a stream
// restored from a prior run's snapshot, one at or below the snapshot's
// proves the publisher restarted while this process was down
// (core.Subscription.FirstLive). Its restored blocks are then cleared and
// the baseline forgotten, so the new incarnation's ring, which a connect
// replay may have skipped as the snapshot's, is replayed again and applied.
// It reports whether that happened. Only a live sequence decides: the end
// of a replay's ring does not, since the publisher may have dropped its
// newest replies on the way.
func (l *listener) firstLive(next uint64) bool {
	n, ok := l.sub.FirstLive(next)
	if !ok {
		return false
	}
	l.m.restarts.Inc()
	l.m.clearedBlocks.Add(n)
	l.log.Warn("publisher restarted while conductor was down: cleared the blocks its snapshot restored",
		"next_seq", next, "cleared_blocks", n)
	l.rx.seq.rebase()
	return true
}

// restart clears the stream's blocks because its publisher restarted.
func (l *listener) restart(reason string) {
	n := l.sub.Clear("publisher restart: " + reason)
	l.m.restarts.Inc()
	l.m.clearedBlocks.Add(n)
	l.log.Warn("publisher restart detected: cleared the stream's blocks", "reason", reason, "cleared_blocks", n)
	l.rx.seq.rebase()
}
