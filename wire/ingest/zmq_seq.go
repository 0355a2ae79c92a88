package ingest

// seqTracker is a subscriber's view of one publisher's sequence numbers. It is a
// pure state machine (no I/O) so that every decision of the receive loop is
// table-tested in zmq_seq_test.go. It is owned by the receive goroutine.
//
// Two cursors are kept:
//
//   - last: the newest sequence consumed (applied, or dropped as undecodable) from
//     either path, live or replay; has is false until a baseline exists and again
//     after a stale or restart clear.
//   - liveLast: the newest sequence seen on the live SUB socket. One publisher
//     incarnation sends strictly increasing sequences on its PUB socket, so a live
//     sequence at or below liveLast can only come from a new incarnation: that is
//     the restart signal that needs no threshold. liveLast survives reconnects and
//     pauses (the publisher may well not have restarted) and clears.
//
// A live sequence s at or below last that is not a live regression is either a
// late duplicate of a message a replay delivered first (the replay reply overtook
// the live copy) or a restart noticed only now (every message since the restart
// arrived through replay); the two are told apart by RestartThreshold: a duplicate
// is within one replay ring of last.
type seqTracker struct {
	has     bool
	last    uint64
	lastSum msgSum // fingerprint of the message consumed at last (see payloadSum)

	hasLive  bool
	liveLast uint64

	threshold uint64

	// recent remembers the payload checksum of the last sumRing consumed
	// sequences, so that a live sequence at or below last can be told apart:
	// the same payload is a late duplicate, another payload a new incarnation
	// whose messages so far all came through replay (TestZMQRestartAfterReplayOnlyJoin).
	recent [sumRing]seqSum
}

const sumRing = 256

type seqSum struct {
	seq uint64
	sum msgSum
	ok  bool
}

// msgSum fingerprints a consumed message (listener.payloadSum) so that a copy
// of it under the same sequence, live or replayed, can be told from another
// incarnation's message: its payload's length and a hash of the payload. A
// message refused for its size was read without its payload and has only
// the length (hashed false). The two copies of one message may differ in
// that respect: the limit counts every frame, and a live message carries its
// topic where a 3-frame replay reply does not. So a copy without a hash is
// the same message as any copy of its length.
type msgSum struct {
	hash   uint64
	n      int
	hashed bool
}

// same reports whether a and b may fingerprint the same message.
func (a msgSum) same(b msgSum) bool {
	return a.n == b.n && (a.hash == b.hash || !a.hashed || !b.hashed)
}

// seqVerdict is what the receive loop must do with a sequence.
type seqVerdict uint8

const (
	// seqFirst: no baseline yet; the message starts one (after an optional replay
	// of what came before it).
	seqFirst seqVerdict = iota + 1
	// seqNext: s == last+1, apply.
	seqNext
	// seqGap: s > last+1; last+1 … s−1 are missing.
	seqGap
	// seqDuplicate: already consumed; drop.
	seqDuplicate
	// seqRestart: the publisher restarted; clear the stream and start over.
	seqRestart
)

func (v seqVerdict) String() string {
	switch v {
	case seqFirst:
		return "first"
	case seqNext:
		return "next"
	case seqGap:
		return "gap"
	case seqDuplicate:
		return "duplicate"
	case seqRestart:
		return "restart"
	}
	return "invalid"
}

// live classifies a sequence received on the SUB socket and records it as the
// newest live sequence.
func (t *seqTracker) live(s uint64) seqVerdict {
	regressed := t.hasLive && s <= t.liveLast
	t.hasLive, t.liveLast = true, s
	if !t.has {
		return seqFirst
	}
	if regressed {
		return seqRestart
	}
	return t.place(s)
}

// replayed classifies a sequence delivered by a replay. Replies never prove a
// restart by their sequence alone (see listener.replayOnce for the checksum test).
func (t *seqTracker) replayed(s uint64) seqVerdict {
	if !t.has {
		return seqFirst
	}
	v := t.place(s)
	if v == seqRestart {
		// A replay of an old ring after a restart: not ours to judge; the live
		// stream will tell. Treat as already consumed.
		return seqDuplicate
	}
	return v
}

func (t *seqTracker) place(s uint64) seqVerdict {
	switch {
	case s == t.last+1:
		return seqNext
	case s > t.last:
		return seqGap
	case t.last-s > t.threshold:
		return seqRestart
	}
	return seqDuplicate
}

// consumed records that s (with fingerprint sum) was applied or dropped.
func (t *seqTracker) consumed(s uint64, sum msgSum) {
	t.has, t.last, t.lastSum = true, s, sum
	t.recent[s%sumRing] = seqSum{seq: s, sum: sum, ok: true}
}

// conflicts reports whether s was consumed with a payload other than the one
// fingerprinted by sum (unknown sequences never conflict).
func (t *seqTracker) conflicts(s uint64, sum msgSum) bool {
	r := t.recent[s%sumRing]
	return r.ok && r.seq == s && !r.sum.same(sum)
}

// rebase forgets the baseline (after a stale or restart clear): the next consumed
// sequence starts a new one. liveLast is kept.
func (t *seqTracker) rebase() {
	t.has, t.last, t.lastSum = false, 0, msgSum{}
	t.recent = [sumRing]seqSum{}
}
