package core

import (
	"bytes"
	"encoding/binary"
	"math"
	"sort"

	"github.com/seed-c7a81618/conductor/hash"
	"github.com/zeebo/xxh3"
)

// ApplyStats counts what one Apply did.
type ApplyStats struct {
	Events, Stored, Removed, Cleared int
	// Blocks is the number of block holdings added or removed.
	Blocks int
	// Dropped counts events (or blocks of events) that could not be applied.
	Dropped int
	// Closed is set when the subscription was unregistered: nothing was applied.
	Closed bool
	// Recovered is set when the batch was skipped because a restored dump
	// already contains it (its Seq is at or below the dumped watermark).
	Recovered bool
}

// subCtx is a subscription's private state in one context; only the
// subscription's single writer touches it.
type subCtx struct {
	ctx    *context
	owners map[ownerKey]ownerRef
	// engine maps an engine block hash to the prefix key it was filed under
	// (xxh3 profile only), so removes and parent links from engines that hash
	// differently resolve to the standard chain.
	engine map[uint64]engineRef
}

type engineRef struct {
	key uint64
	n   uint32 // stores minus removes seen for this engine hash
}

func (s *Subscription) newSubCtx(c *context) *subCtx {
	return &subCtx{ctx: c, owners: make(map[ownerKey]ownerRef)}
}

// ctxState returns the subscription's state for context k, or nil when the
// context does not exist (events for unknown contexts are dropped, never
// create state).
func (s *Subscription) ctxState(k *ContextKey) *subCtx {
	if s.home.key == *k {
		return s.state[s.home]
	}
	c := s.ix.lookupContext(*k)
	if c == nil {
		return nil
	}
	if sc, ok := s.state[c]; ok {
		return sc
	}
	ix := s.ix
	ix.mu.Lock()
	if c.reclaimed {
		// Reclaimed since the lock-free lookup; a new context may have
		// taken its key meanwhile.
		if c = ix.lookupContext(*k); c == nil {
			ix.mu.Unlock()
			return nil
		}
		if sc, ok := s.state[c]; ok {
			ix.mu.Unlock()
			return sc
		}
	}
	c.refs++
	ix.mu.Unlock()
	sc := s.newSubCtx(c)
	s.state[c] = sc
	return sc
}

func (sc *subCtx) owner(k ownerKey) ownerRef {
	if id, ok := sc.owners[k]; ok {
		return id
	}
	id := sc.ctx.internOwner(k)
	sc.owners[k] = id
	return id
}

// Apply applies one decoded batch in order. It is called by the subscription's
// single writer; the batch may be reused after Apply returns. After the
// subscription is unregistered Apply does nothing and reports Closed.
func (s *Subscription) Apply(b *Batch) ApplyStats {
	var st ApplyStats
	s.waitGate()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		st.Closed = true
		return st
	}
	if s.recoveredSkip(b) {
		st.Recovered = true
		return st
	}
	for i := range b.Events {
		ev := &b.Events[i]
		st.Events++
		switch s.reg.Type {
		case PublisherVLLM, PublisherSGLang:
			rank := s.reg.DPRank
			if b.HasDPRank {
				r, ok := s.admitRank(b.DPRank)
				if !ok {
					st.Dropped++
					continue
				}
				rank = r
			}
			s.applyEngine(s.state[s.home], ev, rank, &st)
		default:
			s.applyRFC(b, ev, &st)
		}
	}
	c := &s.ix.counters
	c.Events.Add(uint64(st.Events))
	c.Dropped.Add(uint64(st.Dropped))
	return st
}

// engineEventOK applies the admission rules common to engine events: only the
// main full-attention group is a prefix-cache event for this context, and the
// event's LoRA must be the context's.
func (s *Subscription) engineEventOK(sc *subCtx, ev *Event) bool {
	if ev.HasGroupIdx && ev.GroupIdx != 0 {
		return false
	}
	if len(ev.SpecKind) > 0 && !fullAttention(ev.SpecKind) {
		return false
	}
	if ev.HasSlidingWindow {
		return false
	}
	if ev.LoraName != nil {
		if string(ev.LoraName) != sc.ctx.key.LoraName {
			return false
		}
	} else if ev.HasLoraID && sc.ctx.key.LoraName == "" {
		// A numeric LoRA id without a name cannot be checked against the
		// registration: filing it under the base model would fabricate hits.
		return false
	}
	return true
}

func fullAttention(kind []byte) bool {
	switch string(kind) {
	case "full_attention", "mla_attention", "sink_full_attention":
		return true
	}
	return false
}

func (s *Subscription) placement(medium []byte, pool bool) (Placement, bool) {
	m := s.ix.opts.EngineMedia
	if pool {
		m = s.ix.opts.PoolMedia
	}
	if medium == nil {
		if pool {
			return Placement{}, false
		}
		return Placement{Tier: TierDevice}, true
	}
	p, ok := m.lookup(medium)
	if !ok {
		s.ix.counters.UnknownMedia.Add(1)
		if _, seen := s.ix.warned.LoadOrStore(string(medium), struct{}{}); !seen {
			s.ix.opts.Logger.Warn("unknown KV-event medium; events dropped", "medium", string(medium),
				"service", s.reg.Key().String())
		}
	}
	return p, ok
}

// applyEngine applies a vLLM or SGLang event to the subscription's home context.
func (s *Subscription) applyEngine(sc *subCtx, ev *Event, rank int32, st *ApplyStats) {
	switch ev.Kind {
	case EventCleared:
		st.Cleared++
		s.ix.counters.Cleared.Add(1)
		s.clearOwners(sc, func(o ownerInfo) bool { return true })
		sc.engine = nil
		return
	case EventStored, EventRemoved:
	default:
		st.Dropped++
		return
	}
	if !s.engineEventOK(sc, ev) {
		st.Dropped++
		return
	}
	p, ok := s.placement(ev.Medium, false)
	if !ok {
		st.Dropped++
		return
	}
	okey := ownerKey{sub: s.id, shared: p.Shared, name: s.reg.InstanceID}
	if !p.Shared {
		okey.rank = rank
	}
	if ev.Kind == EventStored {
		id := sc.owner(okey)
		st.Stored++
		s.ix.counters.Stored.Add(1)
		if ev.BlockSize != 0 && ev.BlockSize != sc.ctx.key.BlockSize && !partialPageOK(sc.ctx, ev) {
			// A finer hash granularity, or a partial page under a profile whose
			// chain has no partial blocks: not a block of this context.
			s.ix.counters.PartialBlocks.Add(uint64(len(ev.Hashes)))
			st.Dropped++
			return
		}
		keys, ok := s.storeKeys(sc, ev, s.reg.AdditionalSalt)
		if !ok {
			st.Dropped++
			return
		}
		s.addBlocks(sc.ctx, keys, id, p.Tier, st)
		return
	}
	st.Removed++
	s.ix.counters.Removed.Add(1)
	if id, ok := sc.owners[okey]; ok {
		s.removeBlocks(sc, ev.Hashes, id, p.Tier, true, st)
	}
}

// partialPageOK reports whether a stored event with a block size smaller than
// the context's is SGLang's final partial page under an SGLang profile: the
// SGLang chain hashes a trailing partial block too, so a query whose prompt
// ends inside that page finds it by its hash.
func partialPageOK(c *context, ev *Event) bool {
	st := c.profile().Strategy
	return (st == hash.StrategySGLang || st == hash.StrategySGLangBigram) &&
		ev.BlockSize > 0 && ev.BlockSize < c.key.BlockSize && len(ev.Hashes) == 1
}

// storeKeys returns the prefix keys for a stored event's blocks.
func (s *Subscription) storeKeys(sc *subCtx, ev *Event, salt string) ([]uint64, bool) {
	prof := sc.ctx.profile()
	if prof.Strategy != hash.StrategyXXH3 {
		return ev.Hashes, true
	}
	bs := sc.ctx.key.BlockSize
	hashes := ev.Hashes
	if ev.Partial && len(hashes) > 0 {
		// The standard chain has complete blocks only: the short last page
		// has no standard key.
		s.ix.counters.PartialBlocks.Add(1)
		hashes = hashes[:len(hashes)-1]
	}
	if ev.HasTokens && len(ev.Tokens) > 0 && !ev.Bigram && len(ev.Tokens) >= len(hashes)*bs && len(hashes) > 0 {
		var parent uint64
		if ev.HasParent {
			ref, ok := sc.engine[ev.Parent]
			if !ok {
				s.ix.counters.UnknownParents.Add(1)
				return nil, false
			}
			parent = ref.key
		}
		local, seqSeed := prof.XXH3Seeds(sc.ctx.lora, saltBytes(salt, ev.CacheSalt))
		s.seqScratch = hash.AppendXXH3ChainSeeds(s.seqScratch[:0], local, seqSeed, parent, ev.HasParent, ev.Tokens[:len(hashes)*bs], bs)
		if sc.engine == nil {
			sc.engine = make(map[uint64]engineRef)
		}
		for i, h := range hashes {
			ref := sc.engine[h]
			ref.key = s.seqScratch[i]
			ref.n++
			sc.engine[h] = ref
		}
		return s.seqScratch, true
	}
	// No tokens (e.g. an offload placeholder): only blocks already known from
	// this engine's own stores can be located.
	keys := s.seqScratch[:0]
	for _, h := range hashes {
		if ref, ok := sc.engine[h]; ok {
			keys = append(keys, ref.key)
			ref.n++
			sc.engine[h] = ref
		}
	}
	s.seqScratch = keys
	return keys, len(keys) > 0 || len(hashes) == 0
}

func saltBytes(reg string, ev []byte) []byte {
	if len(ev) > 0 {
		return ev
	}
	if reg == "" {
		return nil
	}
	return []byte(reg)
}

func (s *Subscription) addBlocks(c *context, keys []uint64, id ownerRef, t Tier, st *ApplyStats) {
	// The update function is bound once per subscription (s.addFn) and reads
	// its operands from s: a fresh closure per block would escape to the heap.
	s.opID, s.opTier = id, t
	if s.addFn == nil {
		s.addFn = s.addOne
	}
	s.opHoldings = 0
	for _, k := range keys {
		c.blocks.Compute(k, s.addFn)
	}
	s.ix.holdings[t].Add(s.opHoldings)
	st.Blocks += len(keys)
	s.ix.counters.BlocksStored.Add(uint64(len(keys)))
}

// addOne and removeOne run under the key's bucket lock; xsync calls them
// exactly once per Compute. opHoldings counts holdings (owner words) created
// minus dropped, for the per-tier gauges.
func (s *Subscription) addOne(old blockVal, _ bool) (blockVal, bool) {
	nv, created := old.withAdded(s.opID, s.opTier, 1)
	if created {
		s.opHoldings++
	}
	return nv, false
}

func (s *Subscription) removeOne(old blockVal, loaded bool) (blockVal, bool) {
	if !loaded {
		return old, true
	}
	nv, changed, dropped := old.withRemoved(s.opID, s.opTier, 1)
	s.opChanged = changed
	if dropped {
		s.opHoldings--
	}
	return nv, nv.empty()
}

// removeBlocks removes one copy per hash. viaEngine resolves engine hashes
// through the subscription's map under the xxh3 profile.
func (s *Subscription) removeBlocks(sc *subCtx, hashes []uint64, id ownerRef, t Tier, viaEngine bool, st *ApplyStats) {
	c := sc.ctx
	rehashed := viaEngine && c.profile().Strategy == hash.StrategyXXH3
	s.opHoldings = 0
	for _, h := range hashes {
		k := h
		if rehashed {
			ref, ok := sc.engine[h]
			if !ok {
				continue
			}
			k = ref.key
			if ref.n <= 1 {
				delete(sc.engine, h)
			} else {
				ref.n--
				sc.engine[h] = ref
			}
		}
		s.opID, s.opTier, s.opChanged = id, t, false
		if s.removeFn == nil {
			s.removeFn = s.removeOne
		}
		c.blocks.Compute(k, s.removeFn)
		if s.opChanged {
			st.Blocks++
			s.ix.counters.BlocksRemoved.Add(1)
		}
	}
	s.ix.holdings[t].Add(s.opHoldings)
}

// clearOwners removes every holding of this subscription's owners in sc that
// match keep, and returns the number of blocks changed.
func (s *Subscription) clearOwners(sc *subCtx, keep func(ownerInfo) bool) int {
	ids := sc.ctx.ownersOf(s.id, keep)
	n := sc.ctx.removeOwnersFromBlocks(ids, &s.ix.holdings)
	s.ix.counters.ClearedBlocks.Add(uint64(n))
	return n
}

// Clear drops every block this subscription contributed, in every context
// (used when its stream went stale or its publisher restarted). It returns the
// number of block entries changed.
func (s *Subscription) Clear(reason string) int {
	s.waitGate()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0
	}
	n := s.clearLocked()
	s.ix.opts.Logger.Info("cleared subscription blocks", "service", s.reg.Key().String(), "reason", reason, "blocks", n)
	return n
}

// clearLocked is Clear's body; the caller holds s.mu.
func (s *Subscription) clearLocked() int {
	n := 0
	for _, sc := range s.state {
		n += s.clearOwners(sc, func(ownerInfo) bool { return true })
		sc.engine = nil
	}
	s.rfc = nil
	return n
}

// ---- RFC #1527 / Mooncake events ------------------------------------------

// rfcStream tracks event_id order for one RFC stream key.
type rfcStream struct {
	last    uint64
	hasLast bool
	held    []heldEvent // sorted by event id
}

type heldEvent struct {
	ev     Event
	dpRank int32
}

// rfcStreamID hashes the RFC stream dimensions (model, block_size, salt, lora,
// tenant, backend, medium, dp_rank) of an event.
func rfcStreamID(ev *Event, rank int32) uint64 {
	h := xxh3.New()
	var n [8]byte
	for _, f := range [][]byte{ev.ModelName, ev.AdditionalSalt, ev.LoraName, ev.TenantID, ev.BackendID, ev.Medium} {
		binary.LittleEndian.PutUint32(n[:4], uint32(len(f)))
		_, _ = h.Write(n[:4])
		_, _ = h.Write(f)
	}
	binary.LittleEndian.PutUint64(n[:], uint64(ev.BlockSize)<<32|uint64(uint32(rank)))
	_, _ = h.Write(n[:])
	return h.Sum64()
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

func (s *Subscription) applyRFC(b *Batch, ev *Event, st *ApplyStats) {
	rank, ok := s.rfcRank(b, ev)
	if !ok {
		st.Dropped++
		return
	}
	if !ev.HasEventID {
		s.applyRFCEvent(ev, rank, st)
		return
	}
	if s.rfc == nil {
		s.rfc = make(map[uint64]*rfcStream)
	}
	id := rfcStreamID(ev, rank)
	rs := s.rfc[id]
	if rs == nil {
		rs = &rfcStream{}
		s.rfc[id] = rs
	}
	switch {
	case !rs.hasLast || ev.EventID == rs.last+1:
		s.applyRFCEvent(ev, rank, st)
		rs.last, rs.hasLast = ev.EventID, true
		s.drainHeld(rs, st)
	case ev.EventID <= rs.last:
		s.ix.counters.DuplicateIDs.Add(1)
		st.Dropped++
	default:
		s.hold(rs, ev, rank)
		if len(rs.held) > s.ix.opts.MaxHeldEvents {
			s.flushHeld(rs, st)
		}
	}
}

func (s *Subscription) hold(rs *rfcStream, ev *Event, rank int32) {
	i := sort.Search(len(rs.held), func(i int) bool { return rs.held[i].ev.EventID >= ev.EventID })
	if i < len(rs.held) && rs.held[i].ev.EventID == ev.EventID {
		s.ix.counters.DuplicateIDs.Add(1)
		return
	}
	rs.held = append(rs.held, heldEvent{})
	copy(rs.held[i+1:], rs.held[i:])
	rs.held[i] = heldEvent{ev: cloneEvent(ev), dpRank: rank}
}

// drainHeld applies held events that became consecutive.
func (s *Subscription) drainHeld(rs *rfcStream, st *ApplyStats) {
	for len(rs.held) > 0 && rs.held[0].ev.EventID == rs.last+1 {
		h := rs.held[0]
		rs.held = rs.held[1:]
		s.applyRFCEvent(&h.ev, h.dpRank, st)
		rs.last = h.ev.EventID
	}
	if len(rs.held) == 0 {
		rs.held = nil
	}
}

// flushHeld gives up on the missing event ids: the gap is counted and held
// events are applied in order.
func (s *Subscription) flushHeld(rs *rfcStream, st *ApplyStats) {
	for len(rs.held) > 0 {
		h := rs.held[0]
		rs.held = rs.held[1:]
		if h.ev.EventID != rs.last+1 {
			s.ix.counters.EventIDGaps.Add(1)
			s.ix.opts.Logger.Warn("RFC event_id gap accepted", "service", s.reg.Key().String(),
				"from", rs.last+1, "to", h.ev.EventID-1)
		}
		s.applyRFCEvent(&h.ev, h.dpRank, st)
		rs.last = h.ev.EventID
	}
	rs.held = nil
}

// FlushHeld applies every held out-of-order RFC event, accepting the gaps.
// The ingest loop calls it when a stream has been idle for a while.
func (s *Subscription) FlushHeld() ApplyStats {
	var st ApplyStats
	s.waitGate()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		st.Closed = true
		return st
	}
	for _, rs := range s.rfc {
		s.flushHeld(rs, &st)
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

// clearPool applies a pool's cleared event: every object of that backend
// (every backend when none is named) in that tenant, across all the contexts
// the pool filed objects in (reference §5.2). A pool event names no model, so
// one clear spans contexts.
func (s *Subscription) clearPool(ev *Event, st *ApplyStats) {
	st.Cleared++
	s.ix.counters.Cleared.Add(1)
	tenant := s.reg.TenantID
	if len(ev.TenantID) > 0 {
		tenant = string(ev.TenantID)
	}
	backend := string(ev.BackendID)
	for _, sc := range s.state {
		if sc.ctx.key.TenantID != tenant {
			continue
		}
		s.clearOwners(sc, func(o ownerInfo) bool { return o.shared && (backend == "" || o.name == backend) })
	}
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

func (s *Subscription) applyRFCEvent(ev *Event, rank int32, st *ApplyStats) {
	if ev.Kind == EventCleared && s.reg.Type.pool() {
		s.clearPool(ev, st)
		return
	}
	key := s.rfcContext(ev)
	sc := s.ctxState(&key)
	if sc == nil {
		st.Dropped++
		return
	}
	pool := s.reg.Type.pool()
	p, havePlacement := Placement{}, false
	if ev.Medium != nil || !pool {
		p, havePlacement = s.placement(ev.Medium, pool)
	}
	ownerKeyOf := func() ownerKey {
		k := ownerKey{sub: s.id, shared: p.Shared}
		if p.Shared {
			k.name = string(ev.BackendID)
			if k.name == "" {
				k.name = s.reg.InstanceID
			}
		} else {
			k.name, k.rank = s.reg.InstanceID, rank
		}
		return k
	}
	switch ev.Kind {
	case EventCleared:
		st.Cleared++
		s.ix.counters.Cleared.Add(1)
		s.clearOwners(sc, func(o ownerInfo) bool { return o.shared || o.rank == rank })
		sc.engine = nil
	case EventStored:
		st.Stored++
		s.ix.counters.Stored.Add(1)
		if !havePlacement {
			st.Dropped++
			return
		}
		keys := ev.Hashes
		prof := sc.ctx.profile()
		if len(keys) == 0 && ev.HasTokens && len(ev.Tokens) > 0 && prof.Strategy == hash.StrategyXXH3 {
			bs := sc.ctx.key.BlockSize
			if ev.HasParent || (ev.HasBaseIdx && ev.BaseBlockIdx == 0) {
				local, seqSeed := prof.XXH3Seeds(sc.ctx.lora, ev.AdditionalSalt)
				s.seqScratch = hash.AppendXXH3ChainSeeds(s.seqScratch[:0], local, seqSeed, ev.Parent, ev.HasParent, ev.Tokens, bs)
				keys = s.seqScratch
			} else {
				s.ix.counters.UnknownParents.Add(1)
			}
		}
		if len(keys) == 0 {
			st.Dropped++
			return
		}
		s.addBlocks(sc.ctx, keys, sc.owner(ownerKeyOf()), p.Tier, st)
	case EventRemoved:
		st.Removed++
		s.ix.counters.Removed.Add(1)
		if !havePlacement {
			st.Dropped++
			return
		}
		if id, ok := sc.owners[ownerKeyOf()]; ok {
			s.removeBlocks(sc, ev.Hashes, id, p.Tier, false, st)
		}
	default:
		st.Dropped++
	}
}
