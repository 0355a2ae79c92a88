package core

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/seed-c7a81618/conductor/hash"
	"github.com/zeebo/xxh3"
)

// ---- RFC #1527 standardized events (and Mooncake master events) -----------
//
// A stream is (model_name, block_size, additional_salt, lora_name, tenant_id,
// backend_id, medium, dp_rank). The first four with tenant_id resolve the
// context (envelope fields override the registration's); the salt, backend
// and medium make the stream tag that is part of the owner identity, so a
// `cleared` purges exactly its stream's blocks; the rank is the owner's rank.
// Events of one stream are applied in consecutive event_id order.

// streamKey identifies an RFC stream of one subscription. ctx is pinned by
// the subscription's reference (ctxState), so the pointer stays valid.
type streamKey struct {
	ctx  *context
	tag  uint64
	rank int32
}

// rfcStream tracks event_id order for one stream.
type rfcStream struct {
	key     streamKey
	last    uint64
	hasLast bool
	held    []heldEvent // sorted by event id
	touched uint64      // Subscription.rfcClock at the stream's last event
}

type heldEvent struct {
	ev     Event
	dpRank int32
}

// streamDims are an RFC owner's stream dimensions besides context and rank.
type streamDims struct {
	salt, backend, medium string // medium lower-cased
}

// streamTag hashes (salt, backend_id, medium lower-cased) into a non-zero
// tag (0 is the engine stream). Field lengths are part of the input, so
// adjacent fields cannot run into each other.
func streamTag(salt, backend, medium []byte) uint64 {
	var buf [128]byte
	b := buf[:0]
	for _, f := range [][]byte{salt, backend} {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(medium)))
	for _, c := range medium {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	return xxh3.Hash(b) | 1
}

func lowerString(b []byte) string { return string(bytes.ToLower(b)) }

// rfcSalt is the salt of an RFC event: its additional_salt when present
// (even empty), else the registration's additionalsalt.
func (s *Subscription) rfcSalt(ev *Event) []byte {
	if ev.AdditionalSalt != nil {
		return ev.AdditionalSalt
	}
	return s.regSalt
}

func (s *Subscription) rfcRank(b *Batch, ev *Event) (int32, bool) {
	switch {
	case ev.HasDPRank:
		return s.admitRank(ev.DPRank)
	case b.HasDPRank && !s.reg.Type.pool():
		return s.admitRank(b.DPRank)
	}
	return s.reg.DPRank, true
}

// admitRank checks a dp rank named by a publisher (which overrides the
// registered one): it must fit an int32, and a subscription may introduce at
// most Options.MaxRanksPerSubscription distinct ranks, so a garbage publisher
// cannot grow the owner table and every query of its context without bound.
func (s *Subscription) admitRank(r uint32) (int32, bool) {
	if r > math.MaxInt32 {
		s.ix.counters.RankRejects.Add(1)
		return 0, false
	}
	rank := int32(r)
	if rank == s.reg.DPRank {
		return rank, true
	}
	if _, ok := s.ranks[rank]; ok {
		return rank, true
	}
	if len(s.ranks) >= s.ix.opts.MaxRanksPerSubscription {
		s.ix.counters.RankRejects.Add(1)
		return 0, false
	}
	if s.ranks == nil {
		s.ranks = make(map[int32]struct{})
	}
	s.ranks[rank] = struct{}{}
	return rank, true
}

// rfcContext resolves the context of an RFC event: envelope fields override
// the registration's.
func (s *Subscription) rfcContext(ev *Event) ContextKey {
	k := s.reg.ContextKey()
	if len(ev.TenantID) > 0 {
		k.TenantID = string(ev.TenantID)
	}
	if len(ev.ModelName) > 0 {
		k.ModelName = string(ev.ModelName)
	}
	if ev.LoraName != nil {
		k.LoraName = string(ev.LoraName)
	}
	if ev.HasBlockSize && ev.BlockSize > 0 {
		k.BlockSize = ev.BlockSize
	}
	return k
}

// applyRFC applies one standardized (or Mooncake) event. The context is
// resolved first: an event for a context nobody registered creates no state
// (no stream cursor, no owner) and is dropped.
func (s *Subscription) applyRFC(b *Batch, ev *Event, st *ApplyStats) {
	rank, ok := s.rfcRank(b, ev)
	if !ok {
		s.drop(st, DropRank, "dp_rank", ev.DPRank)
		return
	}
	poolClear := ev.Kind == EventCleared && s.reg.Type.pool()
	key := s.rfcContext(ev)
	sc := s.ctxState(&key)
	if sc == nil && !poolClear {
		s.drop(st, DropUnknownContext, "tenant", key.TenantID, "model", clip([]byte(key.ModelName)),
			"lora", clip([]byte(key.LoraName)), "block_size", key.BlockSize)
		if ev.HasEventID {
			// The id is used all the same: a publisher with one counter
			// continues after it.
			s.notePubID(ev.EventID)
		}
		return
	}
	if !ev.HasEventID || sc == nil {
		s.applyRFCEvent(sc, ev, rank, st)
		return
	}
	sk := streamKey{ctx: sc.ctx, tag: streamTag(s.rfcSalt(ev), ev.BackendID, ev.Medium), rank: rank}
	rs := s.stream(sk)
	if rs == nil {
		s.drop(st, DropStreamLimit, "streams", len(s.rfc))
		return
	}
	s.rfcClock++
	rs.touched = s.rfcClock
	if s.hasPubLast && ev.EventID <= s.pubLast && !(rs.hasLast && ev.EventID <= rs.last) {
		// An id at or below the publisher's last that is no duplicate in
		// its own stream: this publisher numbers each stream on its own,
		// as the seed says, and nextInPublisher would take one stream's
		// next id for the continuation of another
		// (TestRFCPerStreamCounters).
		s.perStreamIDs = true
	}
	switch {
	case rs.hasLast && ev.EventID <= rs.last:
		s.ix.counters.DuplicateIDs.Add(1)
		s.drop(st, DropDuplicateID, "event_id", ev.EventID, "last", rs.last)
	case !rs.hasLast || ev.EventID == rs.last+1 || s.nextInPublisher(ev.EventID):
		s.applyRFCEvent(sc, ev, rank, st)
		rs.last, rs.hasLast = ev.EventID, true
		s.notePubID(ev.EventID)
		s.drainHeld(rs, st)
	default:
		if !s.hold(rs, ev, rank) {
			s.drop(st, DropDuplicateID, "event_id", ev.EventID, "held", true)
			return
		}
		if len(rs.held) > s.ix.opts.MaxHeldEvents || s.heldTotal > s.ix.opts.MaxHeldPerSubscription {
			s.resolveGap(rs, "held events over the limit", st)
		}
	}
}

// notePubID records that the publisher used event id (applied, or consumed
// by an event dropped for a context nobody registered): pubLast is the
// highest such id, whatever order held events of several streams are
// resolved in (TestRFCPublisherCounterSkipsDroppedIDs).
func (s *Subscription) notePubID(id uint64) {
	if !s.hasPubLast || id > s.pubLast {
		s.pubLast, s.hasPubLast = id, true
	}
}

// nextInPublisher reports whether id follows the last id this subscription
// applied on any stream. The seed scopes event_id by stream, but publishers
// in the wild (the Mooncake master among them) number all their events with
// one counter: such an event is in order although its own stream skipped
// the ids other streams used.
//
// A publisher that numbers each stream on its own shows it by an id at or
// below its last one on another stream (perStreamIDs); from then on only
// each stream's own order counts, until a clear or gap forgets the cursors.
func (s *Subscription) nextInPublisher(id uint64) bool {
	return s.hasPubLast && !s.perStreamIDs && id == s.pubLast+1
}

// stream returns the cursor of stream k, creating it; at the cap it evicts
// the least recently used stream that holds no events, or returns nil.
func (s *Subscription) stream(k streamKey) *rfcStream {
	if rs := s.rfc[k]; rs != nil {
		return rs
	}
	if s.rfc == nil {
		s.rfc = make(map[streamKey]*rfcStream)
	}
	if len(s.rfc) >= s.ix.opts.MaxStreamsPerSubscription {
		var victim *rfcStream
		for _, rs := range s.rfc {
			if len(rs.held) == 0 && (victim == nil || rs.touched < victim.touched) {
				victim = rs
			}
		}
		if victim == nil {
			return nil
		}
		delete(s.rfc, victim.key)
		s.ix.counters.StreamEvictions.Add(1)
	}
	rs := &rfcStream{key: k}
	s.rfc[k] = rs
	return rs
}

// hold keeps an early event until the missing ids arrive; false for a
// duplicate of a held event.
func (s *Subscription) hold(rs *rfcStream, ev *Event, rank int32) bool {
	i := sort.Search(len(rs.held), func(i int) bool { return rs.held[i].ev.EventID >= ev.EventID })
	if i < len(rs.held) && rs.held[i].ev.EventID == ev.EventID {
		s.ix.counters.DuplicateIDs.Add(1)
		return false
	}
	rs.held = slices.Insert(rs.held, i, heldEvent{ev: cloneEvent(ev), dpRank: rank})
	s.heldTotal++
	return true
}

// drainHeld applies held events that became consecutive.
func (s *Subscription) drainHeld(rs *rfcStream, st *ApplyStats) {
	for len(rs.held) > 0 && rs.held[0].ev.EventID <= rs.last {
		// Overtaken: an id ≤ last was applied meanwhile (publisher order).
		id := rs.held[0].ev.EventID
		rs.held = rs.held[1:]
		s.heldTotal--
		s.ix.counters.DuplicateIDs.Add(1)
		s.drop(st, DropDuplicateID, "event_id", id, "held", true)
	}
	for len(rs.held) > 0 && (rs.held[0].ev.EventID == rs.last+1 || s.nextInPublisher(rs.held[0].ev.EventID)) {
		h := rs.held[0]
		rs.held = rs.held[1:]
		s.heldTotal--
		s.applyHeld(rs, &h, st)
		rs.last = h.ev.EventID
		s.notePubID(h.ev.EventID)
	}
	if len(rs.held) == 0 {
		rs.held = nil
	}
}

func (s *Subscription) applyHeld(rs *rfcStream, h *heldEvent, st *ApplyStats) {
	sc := s.state[rs.key.ctx]
	if sc == nil {
		return
	}
	s.applyRFCEvent(sc, &h.ev, h.dpRank, st)
}

// resolveGap gives up waiting for missing event ids of rs: the index must
// not keep blocks whose removal may have been in the lost events, so the
// stream's blocks are cleared (counted, logged), then the held events are
// applied in order, clearing again at every further gap. Lost transport
// batches never get here: the listener heals those by replay (or clears the
// subscription) before later batches are applied.
func (s *Subscription) resolveGap(rs *rfcStream, why string, st *ApplyStats) {
	for len(rs.held) > 0 {
		h := rs.held[0]
		rs.held = rs.held[1:]
		s.heldTotal--
		if h.ev.EventID <= rs.last {
			continue // overtaken (see drainHeld)
		}
		if h.ev.EventID != rs.last+1 && !s.nextInPublisher(h.ev.EventID) {
			s.streamGap(rs, why, h.ev.EventID)
		}
		s.applyHeld(rs, &h, st)
		rs.last = h.ev.EventID
		s.notePubID(h.ev.EventID)
	}
	rs.held = nil
}

// streamGap applies the gap policy to the events of rs between its last id
// and id, which never came.
func (s *Subscription) streamGap(rs *rfcStream, why string, id uint64) {
	s.ix.counters.EventIDGaps.Add(1)
	sc := s.state[rs.key.ctx]
	p := s.gapPolicy()
	n := 0
	switch p {
	case GapClear:
		s.ix.counters.StreamGapClears.Add(1)
		s.ix.counters.GapClears.Add(1)
		if sc != nil {
			n = s.clearStream(sc, rs.key.tag, rs.key.rank)
		}
	case GapExpire:
		s.ix.counters.GapMarks.Add(1)
		if sc != nil {
			tag, rank := rs.key.tag, rs.key.rank
			n = s.markOwners(sc, func(o ownerInfo) bool { return o.stream == tag && (o.shared || o.rank == rank) },
				time.Now().Add(s.ix.opts.GapExpireAfter))
		}
	default:
		s.ix.counters.GapKeeps.Add(1)
	}
	s.ix.opts.Logger.Warn("RFC event_id gap not healed", "service", s.reg.Key().String(), "gap_policy", p.String(),
		"why", why, "missing_from", rs.last+1, "missing_to", id-1, "blocks", n)
}

// FlushHeld resolves every stream still waiting for missing event ids (the
// ingest loop calls it when the subscription has been idle for a while).
func (s *Subscription) FlushHeld() ApplyStats {
	var st ApplyStats
	s.waitGate()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		st.Closed = true
		return st
	}
	flushed := false
	for _, rs := range s.rfc {
		if len(rs.held) > 0 {
			s.resolveGap(rs, "stream idle", &st)
			flushed = true
		}
	}
	if o := s.ix.opts.Observer; flushed && o != nil {
		o.Flushed(s)
	}
	return st
}

func cloneEvent(ev *Event) Event {
	c := *ev
	c.Hashes = append([]uint64(nil), ev.Hashes...)
	c.Tokens = append([]int32(nil), ev.Tokens...)
	for _, f := range []*[]byte{&c.Medium, &c.LoraName, &c.SpecKind, &c.CacheSalt, &c.ModelName,
		&c.AdditionalSalt, &c.TenantID, &c.BackendID, &c.ObjectKey} {
		if *f != nil {
			*f = bytes.Clone(*f)
		}
	}
	return c
}

// clearStream purges exactly one stream's blocks: the subscription's owners
// in sc with that stream tag and rank (or shared).
func (s *Subscription) clearStream(sc *subCtx, tag uint64, rank int32) int {
	return s.clearOwners(sc, func(o ownerInfo) bool { return o.stream == tag && (o.shared || o.rank == rank) })
}

// clearPool applies a pool `cleared`: every object of that backend (every
// backend when none is named) in that tenant, restricted to the event's
// medium and salt when it names them, across all the contexts the pool filed
// objects in (reference §5.2: both tiers, all contexts), or those of the
// model (and LoRA and block size) the event names, when it names one
// (TestPoolClearNamingModel).
func (s *Subscription) clearPool(ev *Event, st *ApplyStats) {
	st.Cleared++
	s.ix.counters.Cleared.Add(1)
	tenant := s.reg.TenantID
	if len(ev.TenantID) > 0 {
		tenant = string(ev.TenantID)
	}
	backend := string(ev.BackendID)
	medium := ""
	if ev.Medium != nil {
		medium = lowerString(ev.Medium)
	}
	salt, hasSalt := string(ev.AdditionalSalt), ev.AdditionalSalt != nil
	for _, sc := range s.state {
		k := &sc.ctx.key
		if k.TenantID != tenant || (len(ev.ModelName) > 0 && k.ModelName != string(ev.ModelName)) ||
			(ev.LoraName != nil && k.LoraName != string(ev.LoraName)) || (ev.HasBlockSize && ev.BlockSize > 0 && k.BlockSize != ev.BlockSize) {
			continue
		}
		s.clearOwners(sc, func(o ownerInfo) bool {
			if !o.shared || (backend != "" && o.name != backend) {
				return false
			}
			if o.dims == nil {
				return medium == "" && !hasSalt
			}
			return (medium == "" || o.dims.medium == medium) && (!hasSalt || o.dims.salt == salt)
		})
	}
}

// applyRFCEvent applies one RFC event in order. sc is nil only for a pool
// clear.
func (s *Subscription) applyRFCEvent(sc *subCtx, ev *Event, rank int32, st *ApplyStats) {
	if ev.Kind == EventCleared && s.reg.Type.pool() {
		s.clearPool(ev, st)
		return
	}
	if sc == nil {
		return
	}
	s.rebind(sc)
	pool := s.reg.Type.pool()
	salt := s.rfcSalt(ev)
	tag := streamTag(salt, ev.BackendID, ev.Medium)
	if ev.Kind == EventCleared {
		st.Cleared++
		s.ix.counters.Cleared.Add(1)
		s.clearStream(sc, tag, rank)
		return
	}
	if ev.Kind != EventStored && ev.Kind != EventRemoved {
		s.drop(st, DropUnknownKind)
		return
	}
	if ev.Kind == EventStored {
		st.Stored++
		s.ix.counters.Stored.Add(1)
	} else {
		st.Removed++
		s.ix.counters.Removed.Add(1)
	}
	if ev.Medium == nil && pool {
		// A pool object without a medium cannot be filed (never device).
		s.drop(st, DropUnknownMedium, "medium", nil)
		return
	}
	p, ok := s.placement(ev.Medium, pool)
	if !ok {
		s.drop(st, DropUnknownMedium, "medium", clip(ev.Medium))
		return
	}
	ok_ := ownerKey{sub: s.id, shared: p.Shared, stream: tag}
	if p.Shared {
		ok_.name = string(ev.BackendID)
		if ok_.name == "" {
			ok_.name = s.reg.InstanceID
		}
	} else {
		ok_.name, ok_.rank = s.reg.InstanceID, rank
	}
	ns := saltNamespace(sc.ctx.profile(), salt)
	if ev.Kind == EventRemoved {
		if id, ok := sc.owners[ok_]; ok {
			s.removeBlocks(sc, ev.Hashes, id, p.Tier, removeRFC, ns, st)
		}
		return
	}
	keys, ok := s.rfcStoreKeys(sc, ev, ns, st)
	if !ok {
		return
	}
	var dims *streamDims
	if _, known := sc.owners[ok_]; !known {
		// Only a new owner records its dimensions (no allocation per event).
		dims = &streamDims{salt: string(salt), backend: string(ev.BackendID)}
		if ev.Medium != nil {
			dims.medium = lowerString(ev.Medium)
		}
	}
	id, ok := sc.ownerDims(ok_, dims, s.ix.opts.MaxStreamsPerSubscription)
	if !ok {
		s.drop(st, DropStreamLimit, "why", "stream owners at the limit", "backend_id", clip(ev.BackendID))
		return
	}
	if !sc.bind.bound && !slices.Equal(keys, ev.Hashes) {
		sc.markDerived(id.id())
	}
	s.addBlocks(sc, keys, id, p.Tier, 1, st)
}

// rfcStoreKeys returns the index keys of a stored RFC event. Under the xxh3
// profile, when the event carries token_ids covering its blocks, the
// standard hashes are recomputed from them: if they differ from seq_hashes
// (a publisher that does not follow the hashing standard), the recomputed
// ones are indexed and the publisher's are kept only to resolve later
// removes and parents. An event without seq_hashes is placed from its
// tokens when its position is known (parent_hash or base_block_idx 0).
func (s *Subscription) rfcStoreKeys(sc *subCtx, ev *Event, ns namespace, st *ApplyStats) ([]uint64, bool) {
	prof := sc.ctx.profile()
	hashes := ev.Hashes
	bs := sc.ctx.key.BlockSize
	if prof.Strategy != hash.StrategyXXH3 || !ev.HasTokens || ev.Bigram {
		if len(hashes) == 0 {
			s.drop(st, DropNoBlocks)
			return nil, false
		}
		return s.nsKeys(ns, s.resolveMapped(sc, hashes)), true
	}
	n := len(hashes)
	if n == 0 {
		n = len(ev.Tokens) / bs
	}
	if n == 0 || len(ev.Tokens) < n*bs {
		if len(hashes) == 0 {
			s.drop(st, DropNoBlocks)
			return nil, false
		}
		// Tokens do not cover the blocks: trust the seq_hashes.
		return s.nsKeys(ns, s.resolveMapped(sc, hashes)), true
	}
	if !ev.HasParent && ev.HasBaseIdx && ev.BaseBlockIdx > 0 && len(hashes) > 0 {
		// Located by base_block_idx alone (the seed allows it): the
		// tokens are not the sequence's start, and without the parent no
		// chain can be recomputed from them; the publisher's seq_hashes
		// stand (TestRFCBaseIdxContinuation).
		return s.nsKeys(ns, s.resolveMapped(sc, hashes)), true
	}
	var parent uint64
	parentKnown := !ev.HasParent
	if ev.HasParent {
		if ref, ok := sc.engine.get(ev.Parent); ok {
			parent, parentKnown = ref.plain, true
		} else {
			parent = ev.Parent // a standard publisher's parent is a standard hash
		}
	}
	if len(hashes) == 0 && !ev.HasParent && !(ev.HasBaseIdx && ev.BaseBlockIdx == 0) {
		s.ix.counters.UnknownParents.Add(1)
		s.drop(st, DropUnknownParent, "why", "no seq_hashes, no parent_hash, base_block_idx not 0")
		return nil, false
	}
	s.seqScratch = hash.AppendXXH3Chain(s.seqScratch[:0], prof.XXH3Seed, parent, ev.HasParent, ev.Tokens[:n*bs], bs)
	s.hashesKeyed()
	std := s.seqScratch
	if len(hashes) == 0 || slices.Equal(std, hashes) {
		return s.nsKeys(ns, std), true
	}
	if !parentKnown {
		// Non-standard hashes chained to a parent this publisher never
		// stored: the standard chain cannot be located.
		s.ix.counters.UnknownParents.Add(1)
		s.drop(st, DropUnknownParent, "parent_hash", ev.Parent)
		return nil, false
	}
	s.mapEngineHashes(sc, hashes, std, ns)
	return s.nsKeys(ns, std), true
}

// resolveMapped rewrites publisher hashes that were mapped to standard
// hashes by an earlier token recompute (a non-standard publisher storing
// more copies without tokens); others are taken as standard. The result is
// plain (un-namespaced) hashes in s.mapScratch, or hashes itself.
func (s *Subscription) resolveMapped(sc *subCtx, hashes []uint64) []uint64 {
	if sc.engine.len() == 0 {
		return hashes
	}
	out := s.mapScratch[:0]
	for _, h := range hashes {
		if ref, ok := sc.engine.get(h); ok {
			ref.n++
			sc.engine.put(h, ref)
			h = ref.plain
		}
		out = append(out, h)
	}
	s.mapScratch = out
	return out
}
