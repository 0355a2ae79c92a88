package core

import (
	"fmt"
	"strings"
	"time"
)

// GapPolicy says what a subscription does when events of its stream are lost
// for good: a transport gap no replay could heal (no replay endpoint, or a
// ring that no longer holds it), an RFC #1527 event_id gap that never filled,
// or batches lost between a restored dump and the live stream. What the lost
// events stored is missing from the index and what they removed is still in
// it; the policies trade the two.
type GapPolicy uint8

const (
	// GapDefault: the registration names none; Options.GapPolicy applies.
	GapDefault GapPolicy = iota
	// GapKeep keeps what is indexed: the blocks the lost events stored stay
	// missing (under-reported) and the blocks they removed stay held
	// (over-reported) until the publisher stores or removes them again.
	GapKeep
	// GapClear drops every block the stream contributed (the RFC stream's
	// only, for an event_id gap): what stays is true, and everything the
	// publisher does not announce again is under-reported.
	GapClear
	// GapExpire keeps what is indexed for Options.GapExpireAfter, then drops
	// the blocks the stream held at the gap and has not announced again
	// since (a store of a block it holds announces it again).
	GapExpire
	numGapPolicies
)

var gapPolicyNames = [numGapPolicies]string{"", "keep", "clear", "expire"}

func (p GapPolicy) String() string {
	if p < numGapPolicies {
		if p == GapDefault {
			return "default"
		}
		return gapPolicyNames[p]
	}
	return fmt.Sprintf("GapPolicy(%d)", uint8(p))
}

// GapPolicyNames lists the policies' names, as ParseGapPolicy takes them.
func GapPolicyNames() []string { return append([]string(nil), gapPolicyNames[1:]...) }

// ParseGapPolicy parses a policy name (any case; "" is GapDefault). An
// unknown name is a *FieldError for field gap_policy wrapping ErrInvalid.
func ParseGapPolicy(s string) (GapPolicy, error) {
	for p, name := range gapPolicyNames {
		if strings.EqualFold(s, name) {
			return GapPolicy(p), nil
		}
	}
	return GapDefault, &FieldError{Field: "gap_policy", Err: fmt.Errorf("gap_policy %q: want one of %s: %w",
		s, strings.Join(GapPolicyNames(), ", "), ErrInvalid)}
}

// Defaults of the gap policy options (Options.GapPolicy, GapExpireAfter).
const (
	// DefaultGapPolicy: keeping what is indexed gave the most exact answers
	// on the Mooncake conversation trace under every loss rate measured,
	// on the store master's stream and on engine streams without replay,
	// and after a crash with the default snapshot interval
	// (docs/operations.md, "Gaps that cannot be replayed").
	DefaultGapPolicy = GapKeep
	// DefaultGapExpireAfter is how long GapExpire keeps the blocks held at
	// a gap.
	DefaultGapExpireAfter = time.Minute
)

// DefaultMaxBlocksPerRegistration is Options.MaxBlocksPerRegistration's
// default: 16M blocks, about 1 GB of index, more than the KV cache of any one
// engine and the pool of a large store master hold.
const DefaultMaxBlocksPerRegistration = 1 << 24

// gapMark is a pending expiry of GapExpire: the keys that precede mark id in
// the subscription's owner key sets are dropped at at.
type gapMark struct {
	id uint64
	at time.Time
}

// GapResult says what Gap did.
type GapResult struct {
	Policy GapPolicy // the policy applied (never GapDefault)
	// Blocks is the number of block entries the policy dropped (GapClear)
	// or marked to expire (GapExpire).
	Blocks int
	// Deferred: a GapClear on a subscription restored from a dump and still
	// below its watermark waits for the next batch (Clear).
	Deferred bool
	// Applied counts the RFC events held for missing event_ids that the gap
	// released: the gap explains their ids, so they are applied in order.
	Applied ApplyStats
}

// GapPolicy returns the gap policy in force: the registration's, else
// Options.GapPolicy.
func (s *Subscription) GapPolicy() GapPolicy { return s.gapPolicy() }

// BlockBound returns the bound on held (owner, block) pairs in force (0:
// none): the registration's MaxBlocks, else Options.MaxBlocksPerRegistration.
func (s *Subscription) BlockBound() int { return s.blockBound() }

// gapPolicy resolves the registration's policy.
func (s *Subscription) gapPolicy() GapPolicy {
	if p := s.reg.GapPolicy; p != GapDefault {
		return p
	}
	return s.ix.opts.GapPolicy
}

// Gap applies the subscription's gap policy to events its transport lost
// for good (a sequence gap no replay could heal). Then the stream's RFC
// event_id cursors start afresh: the lost batches explain a jump of the ids,
// and events held for ids that will never come are applied in order. Like
// Clear, it is called by the subscription's single writer.
func (s *Subscription) Gap(reason string) GapResult {
	s.waitGate()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return GapResult{Policy: s.gapPolicy()}
	}
	return s.gapLocked(s.gapPolicy(), reason)
}

// GapWith is Gap with policy p whatever the registration's (a replica
// repeats the relay's gaps with the policy the relay applied).
func (s *Subscription) GapWith(p GapPolicy, reason string) GapResult {
	s.waitGate()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return GapResult{Policy: p}
	}
	return s.gapLocked(p, reason)
}

// gapLocked is Gap's body; the caller holds s.mu.
func (s *Subscription) gapLocked(p GapPolicy, reason string) GapResult {
	if p == GapDefault {
		p = s.gapPolicy()
	}
	r := GapResult{Policy: p}
	if o := s.ix.opts.Observer; o != nil {
		o.Gapped(s, p)
	}
	log := s.ix.opts.Logger
	switch p {
	case GapClear:
		if s.skipping {
			s.clearDeferred = true
			r.Deferred = true
			log.Info("gap: clear deferred to the next batch (restored dump, below its watermark)",
				"service", s.reg.Key().String(), "reason", reason, "dump_seq", s.skipThrough)
			return r
		}
		r.Blocks = s.clearAll()
		s.ix.counters.GapClears.Add(1)
		log.Warn("events lost for good; cleared the stream's blocks (gap_policy clear)",
			"service", s.reg.Key().String(), "reason", reason, "cleared_blocks", r.Blocks)
		return r
	case GapExpire:
		r.Blocks = s.markAll(time.Now().Add(s.ix.opts.GapExpireAfter))
		s.ix.counters.GapMarks.Add(1)
		log.Warn("events lost for good; the stream's blocks expire unless announced again (gap_policy expire)",
			"service", s.reg.Key().String(), "reason", reason, "marked_blocks", r.Blocks,
			"expire_after", s.ix.opts.GapExpireAfter)
	default:
		s.ix.counters.GapKeeps.Add(1)
		log.Warn("events lost for good; kept the stream's blocks (gap_policy keep)",
			"service", s.reg.Key().String(), "reason", reason, "held_blocks", s.heldKeys)
	}
	s.releaseHeld(&r.Applied)
	return r
}

// releaseHeld applies every RFC event held for missing event_ids, stream by
// stream in id order, and forgets the cursors.
func (s *Subscription) releaseHeld(st *ApplyStats) {
	for _, rs := range s.rfc {
		for _, h := range rs.held {
			s.applyHeld(rs, &h, st)
		}
	}
	s.rfc, s.heldTotal, s.hasPubLast, s.perStreamIDs = nil, 0, false, false
}

// markAll marks every key set of the subscription (GapExpire) to expire at
// at, and returns the number of keys marked.
func (s *Subscription) markAll(at time.Time) int {
	id := s.newMark(at)
	n := 0
	for _, sc := range s.state {
		for _, set := range sc.keys {
			if set.Len() > 0 {
				set.mark(id)
				n += set.Len()
			}
		}
	}
	return n
}

// markOwners marks the key sets of sc's owners that match keep.
func (s *Subscription) markOwners(sc *subCtx, keep func(ownerInfo) bool, at time.Time) int {
	id := s.newMark(at)
	n := 0
	for oid := range sc.ctx.ownersOf(s.id, keep) {
		if set := sc.keys[oid]; set != nil && set.Len() > 0 {
			set.mark(id)
			n += set.Len()
		}
	}
	return n
}

func (s *Subscription) newMark(at time.Time) uint64 {
	s.markSeq++
	s.marks = append(s.marks, gapMark{id: s.markSeq, at: at})
	s.publishExpiry()
	return s.markSeq
}

// publishExpiry stores the oldest mark's deadline in nextExpiry (the
// caller holds s.mu).
func (s *Subscription) publishExpiry() {
	if len(s.marks) == 0 {
		s.nextExpiry.Store(0)
		return
	}
	at := s.marks[0].at.UnixNano()
	if old := s.nextExpiry.Swap(at); old == 0 || at < old {
		if f := s.expiryWake.Load(); f != nil {
			(*f)()
		}
	}
}

// SetExpiryWake sets f to be called, under the subscription's lock, when
// its next gap expiry becomes earlier than the transport last read with
// NextExpiry: a transport that waits without a timeout (nothing due) learns
// of a mark made outside its own calls, such as a snapshot's restored ones
// (TestRestoredMarksExpireOnIdleListener). f must not block nor call into
// the subscription.
func (s *Subscription) SetExpiryWake(f func()) {
	if f == nil {
		s.expiryWake.Store(nil)
		return
	}
	s.expiryWake.Store(&f)
}

// NextExpiry reports when the oldest pending GapExpire mark is due, if any,
// without a lock (one atomic load: the transport asks after every batch).
// The transport calls ExpireDue then, from the subscription's single writer.
func (s *Subscription) NextExpiry() (time.Time, bool) {
	ns := s.nextExpiry.Load()
	if ns == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}

// ExpireDue drops, for every GapExpire mark due at now, the blocks the
// subscription held at its gap and has not announced again since, and
// returns the number of block entries changed.
func (s *Subscription) ExpireDue(now time.Time) int {
	s.waitGate()
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for !s.closed && len(s.marks) > 0 && !now.Before(s.marks[0].at) {
		n += s.expireOldest()
		if o := s.ix.opts.Observer; o != nil {
			o.Expired(s)
		}
	}
	return n
}

// ExpireOldest drops the blocks of the oldest pending GapExpire mark now,
// due or not (a replica repeats the relay's expiries, in stream order).
func (s *Subscription) ExpireOldest() int {
	s.waitGate()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || len(s.marks) == 0 {
		return 0
	}
	return s.expireOldest()
}

// expireOldest drops the keys before the oldest mark in every key set and
// forgets the mark; the caller holds s.mu.
func (s *Subscription) expireOldest() int {
	id := s.marks[0].id
	s.marks = s.marks[1:]
	if len(s.marks) == 0 {
		s.marks = nil
	}
	s.publishExpiry()
	n, keys := 0, 0
	for _, sc := range s.state {
		for oid, set := range sc.keys {
			s.keyScratch = set.takeMark(id, s.keyScratch[:0])
			n += s.dropKeys(sc, oid, set, s.keyScratch)
			keys += len(s.keyScratch)
		}
		sc.pruneEngine()
	}
	s.ix.counters.ExpiredBlocks.Add(uint64(n))
	s.ix.opts.Logger.Info("gap expiry: dropped the blocks held at the gap and not announced again",
		"service", s.reg.Key().String(), "blocks", n, "keys", keys)
	return n
}

// dropKeys drops every holding of owner oid at keys (which are in its key
// set) and removes them from the set; it returns the block entries changed.
func (s *Subscription) dropKeys(sc *subCtx, oid uint32, set *keySet, keys []uint64) int {
	n := 0
	for _, k := range keys {
		if sc.ctx.dropOwnerKey(oid, k, &s.ix.holdings) {
			n++
		}
		set.remove(k)
	}
	s.heldKeys -= len(keys)
	return n
}

// blockBound is the registration's bound on held keys (0: none).
func (s *Subscription) blockBound() int {
	switch b := s.reg.MaxBlocks; {
	case b > 0:
		return b
	case b < 0:
		return 0
	}
	return max(s.ix.opts.MaxBlocksPerRegistration, 0)
}

// evictOver drops the oldest keys of the subscription's owners until it
// holds at most bound, each owner giving up its share of the excess, and
// returns the block entries changed (Options.MaxBlocksPerRegistration).
func (s *Subscription) evictOver(bound int) int {
	excess, total := s.heldKeys-bound, s.heldKeys
	keys := 0
	for _, sc := range s.state {
		for oid, set := range sc.keys {
			if set.Len() == 0 {
				continue
			}
			share := (excess*set.Len() + total - 1) / total // ⌈excess × share⌉
			keys += set.evict(share, func(k uint64) bool { return sc.ctx.dropOwnerKey(oid, k, &s.ix.holdings) })
		}
		sc.pruneEngine()
	}
	s.heldKeys -= keys
	s.ix.counters.EvictedBlocks.Add(uint64(keys))
	now := time.Now()
	if now.After(s.evictLogNext) {
		s.ix.opts.Logger.Warn("registration over its block bound: evicted its oldest blocks (a publisher that never removes blocks?); raise --max-blocks-per-registration or the registration's max_blocks if it really holds more",
			"service", s.reg.Key().String(), "bound", bound, "evicted", keys, "evicted_since_last_log", s.evictedQuiet+keys)
		s.evictLogNext, s.evictedQuiet = now.Add(s.ix.opts.DropLogInterval), 0
	} else {
		s.evictedQuiet += keys
	}
	return keys
}

// HeldBlocks returns the number of (owner, block) pairs the subscription
// holds: what Options.MaxBlocksPerRegistration bounds.
func (s *Subscription) HeldBlocks() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heldKeys
}
