package ingest

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/seed-c7a81618/conductor/wire"
)

// replayOutcome is how one replay ended.
type replayOutcome uint8

const (
	// replayOK: the end marker arrived and the ring covered what was needed.
	replayOK replayOutcome = iota + 1
	// replayShort: the ring no longer held part of what was needed; the stream
	// was (or, for the caller's live message, will be) marked stale.
	replayShort
	// replayFailed: timeout, malformed reply or socket error; nothing was judged.
	replayFailed
	// replayInterrupted: a pause or stop arrived; abandoned without counting.
	replayInterrupted
	// replaySkipped: no replay endpoint, or replay is backing off after a failure.
	replaySkipped
	// replayRestart: the reply at the baseline sequence carries another payload.
	replayRestart
)

// errReplayTimeout and errReplayTotal are preallocated causes (wrapped in
// ErrReplay when reported).
var (
	errReplayTimeout = errors.New("no reply within the replay timeout")
	errReplayTotal   = errors.New("replay exceeded its total timeout")
	errNoDealer      = errors.New("replay socket closed")
)

// replay recovers what the publisher's ring holds after the baseline (or from 0
// without one). With bounded, the caller holds the live message until and needs
// everything before it. A restart proven by the checksum of the baseline's reply
// clears the stream and replays once more, from 0.
func (l *listener) replay(until uint64, bounded bool) replayOutcome {
	out := l.replayOnce(until, bounded)
	if out == replayRestart {
		l.restart("replayed payload at the last applied sequence differs")
		out = l.replayOnce(until, bounded)
		if out == replayRestart { // impossible without a baseline; be safe
			out = replayFailed
		}
	}
	return out
}

// replayOnce runs one replay request and, when the publisher dropped replies
// on the way (see below), the requests that continue it.
//
// A publisher's ROUTER drops replies that do not fit its send high-water mark
// while this DEALER pushes back (IngestOptions.RcvHWM), which a ring of many
// small replies can reach when they are applied slower than sent. The ring
// is contiguous, so once a reply at or after the start arrived, a later
// sequence gap is such a loss and not the ring's; so is a reply timeout after
// replies were applied. Either way the replay is requested again from the
// last applied sequence, on a new DEALER (the rest of the old stream is
// discarded with the old one), within ReplayTotalTimeout.
func (l *listener) replayOnce(until uint64, bounded bool) replayOutcome {
	rx := &l.rx
	if !l.canReplay() {
		return replaySkipped
	}
	now := time.Now()
	if now.Before(rx.replayNotBefore) {
		return replaySkipped
	}
	epoch := rx.epoch
	deadline := now.Add(l.opts.ReplayTotalTimeout)
	staleSeen := false
	l.m.replaysRequested.Inc()
	for round := 0; ; round++ {
		out, again := l.replayRound(until, bounded, epoch, deadline, round, &staleSeen)
		if !again {
			return out
		}
	}
}

// replayRound sends one replay request (from the baseline, or 0 without one)
// and handles its replies. again: the publisher dropped replies after some
// were applied, so the caller requests the rest.
func (l *listener) replayRound(until uint64, bounded bool, epoch uint64, deadline time.Time, round int,
	staleSeen *bool) (_ replayOutcome, again bool) {
	rx := &l.rx
	from, verify := uint64(0), rx.seq.has
	if verify {
		from = rx.seq.last
	}
	if round > 0 {
		l.resetDealer()
	}
	if err := l.ensureDealer(); err != nil {
		return l.replayFailure(err), false
	}
	rx.req = wire.AppendReplayRequest(rx.req[:0], from)
	if err := sendFrames(rx.dealer, rx.req); err != nil {
		return l.replayFailure(fmt.Errorf("send request: %w", err)), false
	}
	if round > 0 {
		l.log.Info("replay replies were dropped on the way; requesting the rest", "from", from, "round", round)
	} else {
		l.log.Debug("replay requested", "from", from, "until", until, "bounded", bounded)
	}

	recvDeadline := time.Now().Add(l.opts.ReplayTimeout)
	// below: a reply before from arrived; started: one at or after it did, so
	// the ring holds everything from there on; applied: this round applied a
	// reply.
	below, started, applied := false, false, false
	for {
		now := time.Now()
		wait := min(l.opts.PollInterval, recvDeadline.Sub(now), deadline.Sub(now))
		if wait <= 0 {
			if now.After(deadline) {
				return l.replayFailure(errReplayTotal), false
			}
			if applied {
				return 0, true // the rest, end marker included, was dropped
			}
			return l.replayFailure(errReplayTimeout), false
		}
		if wait < time.Millisecond {
			wait = time.Millisecond // zmq_poll counts milliseconds; 0 would not wait
		}
		if rx.rpoll.n == 0 { // no DEALER: cannot happen while the epoch holds
			return l.replayFailure(errNoDealer), false
		}
		if _, err := rx.rpoll.poll(l, wait); err != nil {
			return l.replayFailure(fmt.Errorf("poll: %w", err)), false
		}
		if rx.rpoll.ready(pollWake) {
			l.pollCmds()
			// Re-check after every batch of commands: a Pause and a Resume
			// handled together leave new sockets and no DEALER (nor rpoll).
			if l.changed(epoch) {
				l.resetDealer()
				return replayInterrupted, false
			}
		}
		if rx.rpoll.ready(pollMon) {
			l.drainMonitor() // a reconnection's replay runs after this one
		}
		if rx.rpoll.ready(pollSub) {
			if err := l.bufferLive(); err != nil {
				l.fail(err)
				return replayInterrupted, false
			}
		}
		if !rx.rpoll.ready(pollDealer) {
			continue
		}
		for {
			frames, err := l.recv(rx.dealer)
			var refused refusal
			if errors.Is(err, ErrMessageTooBig) {
				refused, err = rx.reader.refusal(), nil // placed, then dropped by consume
			}
			if err != nil {
				if isEAGAIN(err) {
					break
				}
				return l.replayFailure(fmt.Errorf("receive: %w", err)), false
			}
			recvDeadline = time.Now().Add(l.opts.ReplayTimeout)
			seq, payload, end, err := wire.ParseReplayReply(frames)
			if err != nil {
				return l.replayFailure(fmt.Errorf("reply: %w", err)), false
			}
			if end {
				if verify && below {
					// The ring ends before our baseline: the same
					// incarnation's ring would hold it (it holds the
					// newest batches), so this is a new one.
					return replayRestart, false
				}
				return l.replayEnded(until, bounded, *staleSeen), false
			}
			if seq > math.MaxInt64 {
				return l.replayFailure(fmt.Errorf("reply seq=%d: %w", seq, ErrSeqRange)), false
			}
			if seq < from {
				below = true
				continue // not asked for
			}
			if verify {
				verify = false
				if seq == from {
					started = true
					if !l.payloadSum(payload, refused).same(rx.seq.lastSum) {
						l.resetDealer() // the rest of this reply is the wrong incarnation's
						return replayRestart, false
					}
					continue // the baseline itself: same incarnation
				}
				// The ring no longer holds the baseline: nothing to compare.
			}
			switch v := rx.seq.replayed(seq); v {
			case seqFirst, seqNext:
				if v == seqFirst && bounded && seq > until {
					// No baseline, and the ring starts after the live
					// message the caller holds: applying it first would
					// make that message, and the live ones between it and
					// seq, duplicates. Nothing before the held message can
					// be recovered, which without a baseline is no gap: the
					// caller places its message as the first, and the live
					// ones follow (TestZMQReplayRingPastFirstMessage).
					l.resetDealer()
					return l.replayEnded(until, bounded, *staleSeen), false
				}
				l.consume(seq, payload, refused)
				applied = true
			case seqDuplicate:
			case seqGap:
				if started {
					return 0, true // replies were dropped: the ring holds the gap
				}
				if bounded && seq > until {
					// The ring starts after the live message the caller
					// holds: it cannot fill the gap, and applying it would
					// skip the live batches between until and seq, which
					// wait on the live socket. The caller marks the gap
					// stale and places its message; the rest of this
					// reply is discarded with the DEALER.
					l.resetDealer()
					return l.replayEnded(until, bounded, true), false
				}
				*staleSeen = true
				l.stale(fmt.Sprintf("replay ring starts at seq %d, after seq %d", seq, rx.seq.last+1))
				l.consume(seq, payload, refused)
				applied = true
			}
			started = true
		}
	}
}

// replayEnded judges a replay that reached its end marker.
func (l *listener) replayEnded(until uint64, bounded, staleSeen bool) replayOutcome {
	rx := &l.rx
	short := staleSeen || (bounded && rx.seq.has && rx.seq.last+1 < until)
	if short {
		// The caller places its live message after this: a gap, hence stale.
		l.m.replaysFailed.Inc()
		l.log.Warn("replay could not recover the whole gap", "last", rx.seq.last, "until", until)
		return replayShort
	}
	l.m.replaysSucceeded.Inc()
	rx.replayBackoff = l.opts.ReconnectMin
	l.log.Debug("replay done", "last", rx.seq.last, "has", rx.seq.has)
	return replayOK
}

// replayFailure counts a failed replay, closes the DEALER and backs off.
func (l *listener) replayFailure(err error) replayOutcome {
	rx := &l.rx
	l.resetDealer()
	l.m.replaysFailed.Inc()
	err = fmt.Errorf("replay_endpoint=%q: %w: %w", l.reg.ReplayEndpoint, ErrReplay, err)
	l.setErr(err.Error())
	now := time.Now()
	rx.replayNotBefore = now.Add(rx.replayBackoff)
	l.log.Warn("replay failed", "err", err, "next_attempt_in", rx.replayBackoff)
	rx.replayBackoff = min(2*rx.replayBackoff, l.opts.ReconnectMax)
	return replayFailed
}

// bufferLive moves up to drainMax live messages from the SUB socket into the
// receive queue (pending) while a replay runs. A message that does not fit the
// queue's bounds (ReplayMaxBuffered messages, ReceiveQueueBytes, the Ingester's
// MaxQueuedBytes) is dropped and counted; the next message kept shows the gap.
func (l *listener) bufferLive() error {
	rx := &l.rx
	for i := 0; i < drainMax; i++ {
		frames, err := l.recv(rx.subSoc)
		var refused refusal
		switch {
		case errors.Is(err, ErrMessageTooBig):
			refused = rx.reader.refusal() // queued without its payload
		case isEAGAIN(err):
			return nil
		case err != nil:
			return fmt.Errorf("receive: %w", err)
		}
		n := framesSize(frames)
		if len(rx.pending)-rx.pendingHead >= l.opts.ReplayMaxBuffered ||
			rx.pendingBytes+n > l.opts.ReceiveQueueBytes || !l.g.reserveQueue(n) {
			l.queueDrop(n)
			rx.tailDrop = true
			continue
		}
		rx.tailDrop = false // this message shows the gap of any drop before it
		rx.pending = append(rx.pending, pendingMsg{copyFrames(frames), refused})
		rx.pendingBytes += n
		if int64(rx.pendingBytes) > l.queuePeak.Load() {
			l.queuePeak.Store(int64(rx.pendingBytes))
		}
	}
	return nil
}

// queueDrop counts a live message dropped because the receive queue was full,
// and logs it at most once per errLogEvery.
func (l *listener) queueDrop(n int) {
	rx := &l.rx
	l.m.queueDrops.Inc()
	now := time.Now()
	if now.Before(rx.dropLogNext) {
		rx.dropLogSuppressed++
		return
	}
	l.log.Warn("receive queue full: dropped a live message; the gap will be replayed",
		"bytes", n, "queued", len(rx.pending)-rx.pendingHead, "queued_bytes", rx.pendingBytes,
		"suppressed", rx.dropLogSuppressed)
	rx.dropLogNext, rx.dropLogSuppressed = now.Add(errLogEvery), 0
}

// pendingMsg is a live message in the receive queue: its own copy of the
// frames, and for one above MaxMessageBytes (kept without its payload, see
// handleLive) its refusal.
type pendingMsg struct {
	frames  [][]byte
	refused refusal
}

// popPending takes the oldest queued message and releases its bytes.
func (l *listener) popPending() pendingMsg {
	rx := &l.rx
	m := rx.pending[rx.pendingHead]
	rx.pending[rx.pendingHead] = pendingMsg{}
	rx.pendingHead++
	n := framesSize(m.frames)
	rx.pendingBytes -= n
	l.g.releaseQueue(n)
	return m
}

func framesSize(frames [][]byte) int {
	n := 0
	for _, f := range frames {
		n += len(f)
	}
	return n
}

// copyFrames deep-copies a message (one allocation for the bytes, one for the
// frame headers): received frames alias a reused buffer.
func copyFrames(frames [][]byte) [][]byte {
	n := 0
	for _, f := range frames {
		n += len(f)
	}
	buf := make([]byte, 0, n)
	out := make([][]byte, len(frames))
	for i, f := range frames {
		buf = append(buf, f...)
		out[i] = buf[len(buf)-len(f) : len(buf) : len(buf)]
	}
	return out
}

// sendFrames sends one multipart message without blocking (a DEALER queues to
// its connecting peer, so this fails only on a real error).
func sendFrames(s *zsocket, frames [][]byte) error {
	for i, f := range frames {
		flags := zDONTWAIT
		if i < len(frames)-1 {
			flags |= zSNDMORE
		}
		if err := s.send(f, flags); err != nil {
			return err
		}
	}
	return nil
}
