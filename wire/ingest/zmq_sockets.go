package ingest

import (
	"errors"
	"fmt"
	"syscall"

	zmq "github.com/pebbe/zmq4"

	"github.com/seed-c7a81618/conductor/core"
)

// Socket life cycle of a listener: every function here runs on the listener's
// goroutine, which owns the sockets.

// recv reads one whole multipart message from s without blocking, through the
// frame reader (every socket passed checkHandle when it was opened). The frames
// are valid until the next recv.
func (l *listener) recv(s *zmq.Socket) ([][]byte, error) {
	if pebbeRecv {
		frames, err := s.RecvMessageBytes(zmq.DONTWAIT)
		if err != nil {
			return nil, err
		}
		frames = frames[:min(len(frames), maxKeptFrames)]
		total := 0
		for _, f := range frames {
			total += len(f)
		}
		if m := l.rx.reader.max; m > 0 && total > m {
			return nil, ErrMessageTooBig
		}
		return frames, nil
	}
	return l.rx.reader.read(s)
}

func isEAGAIN(err error) bool { return zmq.AsErrno(err) == zmq.Errno(syscall.EAGAIN) }

// openSub creates the SUB socket and its monitor and starts connecting. A connect
// error means libzmq refuses the endpoint (ErrBadEndpoint).
func (l *listener) openSub() error {
	rx := &l.rx
	rx.gen++
	monAddr := fmt.Sprintf("inproc://conductor-ingest-mon-%d-%d", l.id, rx.gen)
	s, err := l.g.zctx.NewSocket(zmq.SUB)
	if err != nil {
		return fmt.Errorf("SUB socket: %w", limitErr(err))
	}
	var mon *zmq.Socket
	err = firstErr(
		s.SetLinger(0),
		s.SetIpv6(true),
		s.SetRcvhwm(l.opts.RcvHWM),
		s.SetReconnectIvl(l.opts.ReconnectMin),
		s.SetReconnectIvlMax(l.opts.ReconnectMax),
		s.SetSubscribe(""),
		s.Monitor(monAddr, monitorEvents),
	)
	if err == nil {
		mon, err = l.g.zctx.NewSocket(zmq.PAIR)
		if err == nil {
			_ = mon.SetLinger(0)
			err = mon.Connect(monAddr)
		}
	}
	if err == nil {
		err = firstErr(checkHandle(s), checkHandle(mon))
	}
	if err != nil {
		closeSocket(s)
		closeSocket(mon)
		return fmt.Errorf("SUB socket setup: %w", limitErr(err))
	}
	if err := s.Connect(l.reg.Endpoint); err != nil {
		closeSocket(s)
		closeSocket(mon)
		return &core.FieldError{Field: "endpoint", Err: fmt.Errorf("connect endpoint=%q: %v: %w", l.reg.Endpoint, err, ErrBadEndpoint)}
	}
	rx.subSoc, rx.monSoc, rx.connected = s, mon, false
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
		_ = rx.subSoc.Monitor("", 0)
	}
	if rx.subSoc != nil {
		rx.epoch++
	}
	closeSocket(rx.subSoc)
	closeSocket(rx.monSoc)
	rx.subSoc, rx.monSoc, rx.connected, rx.connectReplay = nil, nil, false, false
	l.rebuildPollers()
}

// ensureDealer opens the replay DEALER if it is not open.
func (l *listener) ensureDealer() error {
	rx := &l.rx
	if rx.dealer != nil {
		return nil
	}
	d, err := l.g.zctx.NewSocket(zmq.DEALER)
	if err != nil {
		return fmt.Errorf("DEALER socket: %w", limitErr(err))
	}
	// RCVHWM 0: a replay of a whole ring must not be cut by the pipe's HWM
	// (a ROUTER drops what does not fit).
	if err = firstErr(d.SetLinger(0), d.SetIpv6(true), d.SetRcvhwm(0), checkHandle(d)); err != nil {
		closeSocket(d)
		return fmt.Errorf("DEALER socket setup: %w", err)
	}
	if err = d.Connect(l.reg.ReplayEndpoint); err != nil {
		closeSocket(d)
		return &core.FieldError{Field: "replay_endpoint", Err: fmt.Errorf("connect replay_endpoint=%q: %v: %w", l.reg.ReplayEndpoint, err, ErrBadEndpoint)}
	}
	rx.dealer = d
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
	closeSocket(rx.dealer)
	rx.dealer = nil
	l.rebuildPollers()
}

// rebuildPollers lays out the poll sets for the open sockets (their handles
// were checked when they were opened: checkHandle).
func (l *listener) rebuildPollers() {
	rx := &l.rx
	rx.poll.n, rx.rpoll.n = 0, 0
	if rx.subSoc == nil {
		return
	}
	rx.poll.reset(l.wake)
	rx.poll.add(rx.monSoc)
	rx.poll.add(rx.subSoc)
	if rx.dealer != nil {
		rx.rpoll.reset(l.wake)
		rx.rpoll.add(rx.monSoc)
		rx.rpoll.add(rx.subSoc)
		rx.rpoll.add(rx.dealer)
	}
}

// checkHandle fails when socketHandle cannot read s's libzmq handle (a
// pebbe/zmq4 layout other than the pinned one): such a socket cannot be polled.
func checkHandle(s *zmq.Socket) error {
	if !handleMatches(s) {
		return fmt.Errorf("cannot read the libzmq handle of %v (pebbe/zmq4 layout changed?)", s)
	}
	return nil
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
}

func (l *listener) closeAll() {
	l.closeSub()
	l.resetDealer()
	l.dropPending()
	l.rx.reader.free()
}

// limitErr marks a resource exhaustion (libzmq's socket cap, the fd limit, no
// memory) as a limit: a registration refused for it is answered 400
// limit_exceeded (ErrListenerLimit wraps core.ErrLimit in Register), not 500.
func limitErr(err error) error {
	switch zmq.AsErrno(err) {
	case zmq.Errno(syscall.EMFILE), zmq.Errno(syscall.ENFILE), zmq.Errno(syscall.ENOMEM):
		return fmt.Errorf("%w: %w", err, ErrListenerLimit)
	}
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOMEM) {
		return fmt.Errorf("%w: %w", err, ErrListenerLimit)
	}
	return err
}

func closeSocket(s *zmq.Socket) {
	if s != nil {
		_ = s.Close()
	}
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
