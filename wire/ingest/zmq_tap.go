package ingest

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/seed-c7a81618/conductor/wire"
)

// ErrTapTimeout: nothing arrived within a Tap call's timeout.
var ErrTapTimeout = errors.New("conductor: nothing received within the timeout")

// Tap is a bare subscriber for a one-off look at a publisher (conductor
// probe): a SUB socket subscribed to every topic, with its monitor, on a
// libzmq context of its own. It registers nothing, applies nothing and
// tracks no sequence: it hands over whole messages as received.
//
// It is bounded as a listener is, by the IngestOptions it is opened with
// (zero values: the defaults): a message above MaxMessageBytes ends the
// connection in libzmq (ZMQ_MAXMSGSIZE) or is refused by the frame reader
// before it is copied, and libzmq queues at most ReceiveQueueBytes ÷
// MaxMessageBytes messages (ZMQ_RCVHWM, at most RcvHWM). The other options do
// not apply.
//
// A Tap is not safe for concurrent use (one goroutine owns its sockets);
// Close releases everything.
type Tap struct {
	opts      IngestOptions
	ctx       *zcontext
	sub, mon  *zsocket
	reader    *frameReader
	monReader *frameReader
	poll      pollSet // mon, sub: Next polls both and then reads each until empty

	connected, everConnected bool
	lastEvent                string // the newest disconnection or handshake failure
	tooBig                   int
}

// OpenTap opens a Tap on endpoint (a connect address, as a registration's).
// It returns once the SUB is told to connect, which does not wait for the
// publisher: Connected says when it is there.
func OpenTap(endpoint string, opts IngestOptions) (*Tap, error) {
	opts.EnsureDefaults()
	if err := checkConnectEndpoint("endpoint", endpoint); err != nil {
		return nil, err
	}
	ctx, err := newZContext()
	if err != nil {
		return nil, fmt.Errorf("libzmq context: %w", err)
	}
	t := &Tap{opts: opts, ctx: ctx, reader: newFrameReader(initialFrameBuf), monReader: newFrameReader(monitorFrameBuf)}
	if opts.MaxMessageBytes > 0 {
		t.reader.max = int(min(opts.MaxMessageBytes, math.MaxInt))
	}
	const monAddr = "inproc://conductor-tap-mon" // the context is the Tap's own
	if t.sub, err = ctx.socket(zSUB); err == nil {
		err = firstErr(
			setInts(t.sub, optLinger, 0, optIPv6, 1,
				optReconnectIvl, ms(opts.ReconnectMin), optReconnectIvlMax, ms(opts.ReconnectMax)),
			setQueueLimits(t.sub, &t.opts, t.opts.queueHWM(0)),
			t.sub.subscribeAll(),
			t.sub.monitor(monAddr, monitorEvents),
		)
	}
	if err == nil {
		if t.mon, err = ctx.socket(zPAIR); err == nil {
			_ = t.mon.setInt(optLinger, 0)
			err = t.mon.connect(monAddr)
		}
	}
	if err == nil {
		if cerr := t.sub.connect(endpoint); cerr != nil {
			err = fmt.Errorf("connect endpoint=%q: %v: %w", endpoint, cerr, ErrBadEndpoint)
		}
	}
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("SUB socket: %w", err)
	}
	t.poll.add(t.mon)
	t.poll.add(t.sub)
	return t, nil
}

// Next waits up to timeout for one live message and returns its frames
// (at most 5 kept; the caller parses them with wire.ParseLive), valid until
// the next call. ok is false with a nil error when nothing arrived in time.
func (t *Tap) Next(timeout time.Duration) (frames [][]byte, ok bool, err error) {
	deadline := time.Now().Add(timeout)
	for {
		frames, err := t.reader.read(t.sub)
		switch {
		case err == nil:
			return frames, true, nil
		case errors.Is(err, ErrMessageTooBig):
			t.tooBig++
			continue
		case !isEAGAIN(err):
			return nil, false, fmt.Errorf("receive: %w", err)
		}
		t.drainMonitor()
		wait := time.Until(deadline)
		if wait <= 0 {
			return nil, false, nil
		}
		if _, err := t.poll.poll(max(wait, time.Millisecond)); err != nil {
			return nil, false, fmt.Errorf("poll: %w", err)
		}
	}
}

// drainMonitor reads the SUB's connection events.
func (t *Tap) drainMonitor() {
	for {
		frames, err := t.monReader.read(t.mon)
		if err != nil {
			return
		}
		ev, peer, ok := parseMonitorEvent(frames)
		switch {
		case !ok:
		case ev&evHandshakeSucceeded != 0:
			t.connected, t.everConnected = true, true
		case ev&evDisconnected != 0:
			t.connected, t.lastEvent = false, "disconnected from "+string(peer)
		default:
			t.lastEvent = fmt.Sprintf("%s with %s", eventName(ev), peer)
		}
	}
}

// Connected reports whether the SUB is connected now and whether it ever
// was, and the newest disconnection or handshake failure ("" if none).
func (t *Tap) Connected() (now, ever bool, last string) {
	t.drainMonitor()
	return t.connected, t.everConnected, t.lastEvent
}

// TooBig counts the messages refused for exceeding MaxMessageBytes.
func (t *Tap) TooBig() int { return t.tooBig }

// Replay sends one replay request from startSeq (wire.AppendReplayRequest)
// to the publisher's ROUTER at endpoint, on a DEALER of its own, and hands
// each reply's frames (valid during the call; wire.ParseReplayReply reads
// them) to each until each returns false. It fails with ErrTapTimeout when
// no reply follows the request, or the previous reply, within timeout. The
// DEALER is closed on return, so replies still on their way are discarded.
func (t *Tap) Replay(endpoint string, startSeq uint64, timeout time.Duration, each func(frames [][]byte) bool) error {
	if err := checkConnectEndpoint("replay_endpoint", endpoint); err != nil {
		return err
	}
	d, err := t.ctx.socket(zDEALER)
	if err != nil {
		return fmt.Errorf("DEALER socket: %w", err)
	}
	defer closeSocket(d)
	if err := firstErr(setInts(d, optLinger, 0, optIPv6, 1), setQueueLimits(d, &t.opts, t.opts.queueHWM(0))); err != nil {
		return fmt.Errorf("DEALER socket setup: %w", err)
	}
	if err := d.connect(endpoint); err != nil {
		return fmt.Errorf("connect replay_endpoint=%q: %v: %w", endpoint, err, ErrBadEndpoint)
	}
	if err := sendFrames(d, wire.AppendReplayRequest(nil, startSeq)); err != nil {
		return fmt.Errorf("send request: %w", err)
	}
	r := newFrameReader(initialFrameBuf)
	defer r.free()
	r.max = t.reader.max
	var p pollSet
	p.add(d)
	deadline := time.Now().Add(timeout)
	for {
		frames, err := r.read(d)
		switch {
		case err == nil:
			if !each(frames) {
				return nil
			}
			deadline = time.Now().Add(timeout)
			continue
		case !isEAGAIN(err):
			return fmt.Errorf("receive: %w", err)
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			return ErrTapTimeout
		}
		if _, err := p.poll(max(wait, time.Millisecond)); err != nil {
			return fmt.Errorf("poll: %w", err)
		}
	}
}

// Close closes the sockets and terminates the context. A second Close is a
// no-op.
func (t *Tap) Close() {
	if t.sub != nil {
		// Stop the monitor before the SUB closes (closeSub says why).
		_ = t.sub.monitor("", 0)
	}
	closeSocket(t.sub)
	closeSocket(t.mon)
	t.sub, t.mon = nil, nil
	if t.reader != nil {
		t.reader.free()
		t.monReader.free()
		t.reader, t.monReader = nil, nil
	}
	if t.ctx != nil {
		_ = t.ctx.term()
		t.ctx = nil
	}
}
