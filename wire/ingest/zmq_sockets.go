package ingest

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/seed-c7a81618/conductor/core"
)

// Socket life cycle of a listener: every function here runs on the listener's
// goroutine, which owns the sockets.

// recv reads one whole multipart message from s without blocking, through the
// frame reader. The frames are valid until the next recv.
// A message above MaxMessageBytes returns ErrMessageTooBig with the frames
// frameReader.read describes (its size in rx.reader.size).
func (l *listener) recv(s *zsocket) ([][]byte, error) {
	frames, err := l.rx.reader.read(s)
	if err == nil || errors.Is(err, ErrMessageTooBig) {
		l.sized(l.rx.reader.size)
		rx := &l.rx
		mk := &rx.subMark
		if s == rx.dealer {
			mk = &rx.dealerMark
		}
		if hwm := mk.read(rx.hwm); hwm != 0 {
			if err := s.setInt(optRcvHWM, hwm); err != nil {
				l.log.Warn("could not lower the receive queue's high-water mark", "hwm", hwm, "err", err)
			} else {
				mk.lowered(hwm)
				if s == rx.subSoc {
					l.hwm.Store(int32(hwm))
				}
			}
		}
	}
	return frames, err
}

// queueMark follows libzmq's flow control on the one connection of a SUB or
// replay DEALER socket, so that its ZMQ_RCVHWM can be lowered while it is
// open. libzmq's protocol (pipe.cpp, 4.x): the I/O thread writes a
// connection's messages into a queue and stops once written − acked ≥ hwm;
// the socket acks its count of messages read (activate_write) each time
// that count is a multiple of lwm = (hwm+1)/2. Setting ZMQ_RCVHWM on an
// open socket changes hwm and lwm from then on but not the last ack: if the
// socket then reads everything without reaching a multiple of the new lwm
// while written − ack ≥ the new hwm, the writer waits for an ack that never
// comes and the connection stalls for good (TestZMQLowerMarkWhileOpen). So
// a mark h is set only when read − ack ≤ h/2: then either the socket reaches
// a multiple of the new lwm, or written − ack ≤ (lwm−1) + h/2 < h. A lower
// mark due while the socket is further from its last ack is reached in
// steps, each as low as that allows (read).
type queueMark struct {
	hwm int    // the socket's ZMQ_RCVHWM (0: no socket)
	n   uint64 // messages read from it since it was opened
	ack uint64 // n at its last ack
}

// opened starts following a socket opened with ZMQ_RCVHWM hwm.
func (m *queueMark) opened(hwm int) { *m = queueMark{hwm: hwm} }

// read counts one message read from the socket and returns the mark to set
// now on the way to want (0: none).
func (m *queueMark) read(want int) int {
	if m.hwm == 0 {
		return 0
	}
	m.n++
	if lwm := uint64(m.hwm+1) / 2; m.n%lwm == 0 {
		m.ack = m.n
	}
	if want >= m.hwm {
		return 0
	}
	h := max(want, int(2*(m.n-m.ack)))
	if h >= m.hwm {
		return 0
	}
	return h
}

// lowered records that ZMQ_RCVHWM was set to hwm.
func (m *queueMark) lowered(hwm int) { m.hwm = hwm }

func isEAGAIN(err error) bool { return errors.Is(err, syscall.EAGAIN) }

// setInts sets int socket options in order, stopping at the first error.
func setInts(s *zsocket, kv ...int) error {
	for i := 0; i+1 < len(kv); i += 2 {
		if err := s.setInt(zopt(kv[i]), kv[i+1]); err != nil {
			return fmt.Errorf("option %d=%d: %w", kv[i], kv[i+1], err)
		}
	}
	return nil
}

func ms(d time.Duration) int { return int(d / time.Millisecond) }

// setQueueLimits bounds what libzmq buffers for s in bytes: ZMQ_RCVHWM hwm
// messages (IngestOptions.queueHWM of the stream's largest message) and
// ZMQ_MAXMSGSIZE the frame guard (IngestOptions.frameGuard), so
// max(ReceiveQueueBytes, largest message) plus the message being received
// (TestQueueLimits).
func setQueueLimits(s *zsocket, o *IngestOptions, hwm int) error {
	if err := setInts(s, optRcvHWM, hwm); err != nil {
		return err
	}
	if m := o.frameGuard(); m > 0 {
		if err := s.setInt64(optMaxMsgSize, m); err != nil {
			return fmt.Errorf("option %d=%d: %w", optMaxMsgSize, m, err)
		}
	}
	return nil
}

// sized records that the stream sent a message of n bytes: past the largest
// so far, its queues' high-water mark is lowered so that they hold about
// ReceiveQueueBytes of messages that size: on the open sockets as soon as
// libzmq's flow control allows (queueMark), on sockets opened later at once.
func (l *listener) sized(n int) {
	rx := &l.rx
	if int64(n) <= rx.largest {
		return
	}
	rx.largest = int64(n)
	l.largest.Store(rx.largest)
	hwm := l.opts.queueHWM(rx.largest)
	if hwm == rx.hwm {
		return
	}
	rx.hwm = hwm
	l.log.Info("receive queue resized for larger messages", "largest_message_bytes", n, "queue_messages", hwm)
}

// openSub creates the SUB socket and its monitor and starts connecting. A connect
// error means libzmq refuses the endpoint (ErrBadEndpoint).
func (l *listener) openSub() error {
	rx := &l.rx
	rx.gen++
	monAddr := fmt.Sprintf("inproc://conductor-ingest-mon-%d-%d", l.id, rx.gen)
	s, err := l.g.zctx.socket(zSUB)
	if err != nil {
		return fmt.Errorf("SUB socket: %w", limitErr(err))
	}
	var mon *zsocket
	err = firstErr(
		setInts(s, optLinger, 0, optIPv6, 1,
			optReconnectIvl, ms(l.opts.ReconnectMin), optReconnectIvlMax, ms(l.opts.ReconnectMax)),
		setQueueLimits(s, l.opts, rx.hwm),
		s.subscribeAll(),
		s.monitor(monAddr, monitorEvents),
	)
	if err == nil {
		mon, err = l.g.zctx.socket(zPAIR)
		if err == nil {
			_ = mon.setInt(optLinger, 0)
			err = mon.connect(monAddr)
		}
	}
	if err != nil {
		closeSocket(s)
		closeSocket(mon)
		return fmt.Errorf("SUB socket setup: %w", limitErr(err))
	}
	if err := firstErr(l.watch(s, pollSub), l.watch(mon, pollMon)); err != nil {
		l.unwatch(s)
		l.unwatch(mon)
		closeSocket(s)
		closeSocket(mon)
		return fmt.Errorf("SUB socket setup: %w", limitErr(err))
	}
	if err := s.connect(l.reg.Endpoint); err != nil {
		l.unwatch(s)
		l.unwatch(mon)
		closeSocket(s)
		closeSocket(mon)
		return &core.FieldError{Field: "endpoint", Err: fmt.Errorf("connect endpoint=%q: %v: %w", l.reg.Endpoint, err, ErrBadEndpoint)}
	}
	rx.subSoc, rx.monSoc, rx.connected = s, mon, false
	rx.subMark.opened(rx.hwm)
	l.hwm.Store(int32(rx.hwm))
	l.rebuildPollers()
	l.setState(ListenerPending)
	return nil
}

// closeSub closes the SUB socket and its monitor (LINGER 0: nothing waits).
func (l *listener) closeSub() {
	rx := &l.rx
	if rx.subSoc != nil {
		// Stop the monitor first: libzmq sends monitor events with a blocking
		// send, so an event emitted while the SUB terminates (in the reaper
		// thread) after the reading PAIR is gone would block that thread for
		// good, and with it every later socket close of the context.
		// TestZMQRegisterUnregisterNoLeak catches it.
		_ = rx.subSoc.monitor("", 0)
	}
	if rx.subSoc != nil {
		rx.epoch++
	}
	l.unwatch(rx.subSoc)
	l.unwatch(rx.monSoc)
	closeSocket(rx.subSoc)
	closeSocket(rx.monSoc)
	rx.subSoc, rx.monSoc, rx.connected, rx.connectReplay, rx.resub = nil, nil, false, false, false
	rx.subMark = queueMark{}
	l.rebuildPollers()
}

// resubscribe closes the SUB socket after its connection dropped; run opens a
// new one after the reconnection backoff (ReconnectMin doubling to
// ReconnectMax until a handshake succeeds). libzmq would not reconnect a
// session it ended for a protocol error, such as a frame above
// ZMQ_MAXMSGSIZE (TestZMQMaxMessageBytes). The replay DEALER and the receive
// queue are kept: the new connection's replay follows what they hold.
func (l *listener) resubscribe() {
	l.closeSub()
	l.setState(ListenerPending)
	l.log.Debug("SUB socket replaced after a disconnection", "backoff", l.rx.backoff)
}

// ensureDealer opens the replay DEALER if it is not open.
func (l *listener) ensureDealer() error {
	rx := &l.rx
	if rx.dealer != nil {
		return nil
	}
	d, err := l.g.zctx.socket(zDEALER)
	if err != nil {
		return fmt.Errorf("DEALER socket: %w", limitErr(err))
	}
	// Bounded like the SUB: a whole ring of large replies must not pile up in
	// libzmq. The publisher's ROUTER then waits for the reader, and drops what
	// does not fit its own high-water mark; replay requests such replies
	// again (replayOnce).
	if err = firstErr(setInts(d, optLinger, 0, optIPv6, 1), setQueueLimits(d, l.opts, rx.hwm)); err != nil {
		closeSocket(d)
		return fmt.Errorf("DEALER socket setup: %w", err)
	}
	if err = l.watch(d, pollDealer); err != nil {
		closeSocket(d)
		return fmt.Errorf("DEALER socket setup: %w", limitErr(err))
	}
	if err = d.connect(l.reg.ReplayEndpoint); err != nil {
		l.unwatch(d)
		closeSocket(d)
		return &core.FieldError{Field: "replay_endpoint", Err: fmt.Errorf("connect replay_endpoint=%q: %v: %w", l.reg.ReplayEndpoint, err, ErrBadEndpoint)}
	}
	rx.dealer = d
	rx.dealerMark.opened(rx.hwm)
	l.rebuildPollers()
	return nil
}

// resetDealer closes the DEALER: after a failed or abandoned replay, replies still
// on their way must not be read as the next replay's.
func (l *listener) resetDealer() {
	rx := &l.rx
	if rx.dealer == nil {
		return
	}
	l.unwatch(rx.dealer)
	closeSocket(rx.dealer)
	rx.dealer = nil
	rx.dealerMark = queueMark{}
	l.rebuildPollers()
}

// rebuildPollers lays out the poll sets for the open sockets.
func (l *listener) rebuildPollers() {
	rx := &l.rx
	rx.poll.reset()
	rx.rpoll.reset()
	if rx.subSoc == nil {
		return
	}
	rx.poll.set(pollMon, rx.monSoc)
	rx.poll.set(pollSub, rx.subSoc)
	if rx.dealer != nil {
		rx.rpoll.set(pollMon, rx.monSoc)
		rx.rpoll.set(pollSub, rx.subSoc)
		rx.rpoll.set(pollDealer, rx.dealer)
	}
	rx.check |= rx.poll.present | rx.rpoll.present // new sockets are asked once
}

// fail handles a socket-level failure: every socket but the wake pair is closed
// and rebuilt by run after the backoff.
func (l *listener) fail(err error) {
	rx := &l.rx
	l.closeSub()
	l.resetDealer()
	l.dropPending()
	l.setState(ListenerFailed)
	l.setErr(err.Error())
	l.log.Error("listener failed; retrying", "err", err, "backoff", rx.backoff)
}

func (l *listener) dropPending() {
	rx := &l.rx
	clear(rx.pending)
	rx.pending, rx.pendingHead = rx.pending[:0], 0
	l.g.releaseQueue(rx.pendingBytes)
	rx.pendingBytes = 0
	rx.tailDrop = false // a resume or reconnection replays from the baseline anyway
}

func (l *listener) closeAll() {
	if l.rx.timer != nil {
		l.rx.timer.Stop()
	}
	l.closeSub()
	l.resetDealer()
	l.dropPending()
	l.rx.reader.free()
	l.rx.monReader.free()
}

// limitErr marks a resource exhaustion (libzmq's socket cap, the fd limit, no
// memory) as a limit: a registration refused for it is answered 400
// limit_exceeded (ErrListenerLimit wraps core.ErrLimit in Register), not 500.
func limitErr(err error) error {
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOMEM) {
		return fmt.Errorf("%w: %w", err, ErrListenerLimit)
	}
	return err
}

func closeSocket(s *zsocket) { _ = s.close() }

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
