package core

import (
	"github.com/seed-c7a81618/conductor/hash"
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
	// Evicted counts (owner, block) pairs evicted because the subscription
	// went over its block bound (Registration.MaxBlocks).
	Evicted int
	// Held: RFC events wait for missing event ids after this batch; the
	// transport calls FlushHeld once the stream goes idle.
	Held bool
}

// subCtx is a subscription's private state in one context; only the
// subscription's single writer touches it.
type subCtx struct {
	ctx    *context
	owners map[ownerKey]ownerRef
	// streamOwners counts owners with a non-zero stream tag (capped).
	streamOwners int
	// keys is each owner's key set: every block key in which the owner holds
	// at least one tier. Clearing an owner visits only these (cost
	// proportional to the owner's blocks, not to the context's).
	keys map[uint32]*keySet
	// engine maps an engine block hash to the prefix key it was filed under
	// (xxh3 profile only), so removes and parent links from engines that hash
	// differently resolve to the standard chain.
	engine engineMap
	// bind is the partition's binding the blocks here were filed under;
	// derived are the owners (by id) that filed, while it was unbound, a
	// block under a key other than the publisher's hash. rebind.go.
	bind    *binding
	derived map[uint32]bool
}

func (s *Subscription) newSubCtx(c *context) *subCtx {
	return &subCtx{ctx: c, owners: make(map[ownerKey]ownerRef), keys: make(map[uint32]*keySet), bind: c.bind.Load()}
}

// ctxState returns the subscription's state for context k (in the
// partition partitionFor chooses), or nil when the context does not exist
// or no partition of it fits (events for unknown contexts are dropped, never
// create state).
func (s *Subscription) ctxState(k *ContextKey) *subCtx {
	if s.home.key == *k {
		return s.state[s.home]
	}
	head := s.ix.lookupContext(*k)
	if head == nil {
		return nil
	}
	c, sc := s.partitionFor(head)
	if sc != nil || c == nil {
		return sc
	}
	ix := s.ix
	ix.mu.Lock()
	// Choose again under the lock: the lock-free walk may have raced a
	// partition being linked or reclaimed.
	c = nil
	if head = ix.lookupContext(*k); head != nil {
		c, sc = s.partitionFor(head)
	}
	if sc != nil || c == nil {
		ix.mu.Unlock()
		return sc
	}
	c.refs++
	c.addEarly(s)
	ix.mu.Unlock()
	sc = s.newSubCtx(c)
	s.state[c] = sc
	return sc
}

func (sc *subCtx) owner(k ownerKey) ownerRef {
	id, _ := sc.ownerDims(k, nil, 0)
	return id
}

// ownerDims is owner for an RFC stream owner, recording its stream
// dimensions on first use. Stream owners of one subscription in one context
// are capped at limit (> 0): at the cap, owners that hold no block are
// released first; if none is free it reports false.
func (sc *subCtx) ownerDims(k ownerKey, dims *streamDims, limit int) (ownerRef, bool) {
	if id, ok := sc.owners[k]; ok {
		return id, true
	}
	if k.stream != 0 && limit > 0 && sc.streamOwners >= limit {
		for ok, ref := range sc.owners {
			if ok.stream != 0 && sc.keys[ref.id()].Len() == 0 {
				delete(sc.owners, ok)
				delete(sc.keys, ref.id())
				delete(sc.derived, ref.id())
				sc.ctx.releaseOwner(ok)
				sc.streamOwners--
			}
		}
		if sc.streamOwners >= limit {
			return 0, false
		}
	}
	id := sc.ctx.internOwner(k, dims)
	sc.owners[k] = id
	sc.keys[id.id()] = &keySet{}
	if k.stream != 0 {
		sc.streamOwners++
	}
	return id, true
}

// Apply applies one decoded batch in order. It is called by the subscription's
// single writer; the batch may be reused after Apply returns. After the
// subscription is unregistered Apply does nothing and reports Closed.
func (s *Subscription) Apply(b *Batch) ApplyStats {
	var st ApplyStats
	s.waitGate()
	defer s.runRebinds() // after the unlock below (adapter.go)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		st.Closed = true
		return st
	}
	if b.Skipped > 0 {
		// Events the decoder dropped on their own (malformed): counted by
		// the caller, logged here with the first error as the reason.
		var first any
		if len(b.Errors) > 0 {
			first = b.Errors[0].Error()
		}
		s.ix.noteDrop(s, DropDecode, uint64(b.Skipped), "error", first)
	}
	if s.recoveredSkip(b) {
		st.Recovered = true
		return st
	}
	s.run.start()
	for i := range b.Events {
		s.run.tick()
		ev := &b.Events[i]
		st.Events++
		// Standardized event maps are recognised on every registration
		// type (by their event_type key); engine events only on engine ones.
		if ev.Standard || !(s.reg.Type == PublisherVLLM || s.reg.Type == PublisherSGLang) {
			s.applyRFC(b, ev, &st)
			continue
		}
		rank := s.reg.DPRank
		if b.HasDPRank {
			r, ok := s.admitRank(b.DPRank)
			if !ok {
				s.drop(&st, DropRank, "dp_rank", b.DPRank)
				continue
			}
			rank = r
		}
		sc := s.state[s.home]
		if s.reg.AdaptersFromEvents && len(ev.LoraName) > 0 {
			if sc = s.engineTarget(sc, ev, &st); sc == nil {
				continue
			}
		}
		s.applyEngine(sc, ev, rank, &st)
	}
	s.run.end()
	if b := s.blockBound(); b > 0 && s.heldKeys > b {
		st.Evicted += s.evictOver(b)
	}
	c := &s.ix.counters
	c.Events.Add(uint64(st.Events))
	c.Dropped.Add(uint64(st.Dropped))
	if o := s.ix.opts.Observer; o != nil {
		o.Applied(s, b)
	}
	st.Held = s.heldTotal > 0
	return st
}

// engineEventOK applies the admission rules common to engine events: only the
// main full-attention group is a prefix-cache event for this context, and the
// event's LoRA must be the context's. It returns the drop reason otherwise.
func (s *Subscription) engineEventOK(sc *subCtx, ev *Event) (DropReason, bool) {
	if !ev.FullAttention() {
		return DropNotFullAttention, false
	}
	lora := sc.ctx.key.LoraName
	switch {
	case ev.LoraName != nil:
		if string(ev.LoraName) != lora {
			return DropWrongLora, false
		}
	case ev.HasLoraID:
		if lora == "" {
			// A numeric LoRA id without a name cannot be checked against the
			// registration: filing it under the base model would fabricate hits.
			return DropWrongLora, false
		}
		// A bare id on an adapter's registration: a vLLM release before
		// lora_name, which sent the id for LoRA requests only.
	case lora != "" && s.reg.Type == PublisherVLLM && ev.Kind == EventStored:
		// vLLM's BlockStored names the adapter of every LoRA request: no
		// name and no id is a base-model block, computed without the
		// registration's adapter (TestEngineBaseBlocksOnLoraRegistration).
		// BlockRemoved names no adapter, and SGLang events none at all:
		// theirs are the registration's.
		return DropWrongLora, false
	}
	return 0, true
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
		// The caller drops the event (reason unknown_medium, logged
		// rate-limited with the medium): no per-name state is kept.
		s.ix.counters.UnknownMedia.Add(1)
	}
	return p, ok
}

// applyEngine applies a vLLM or SGLang event to sc: the subscription's home
// context, or for an AdaptersFromEvents registration the one engineTarget
// chose (a remove or clear on home reaches the adapter contexts too).
func (s *Subscription) applyEngine(sc *subCtx, ev *Event, rank int32, st *ApplyStats) {
	switch ev.Kind {
	case EventCleared:
		// AllBlocksCleared purges the engine stream: every block this
		// engine filed through its own events (not standardized streams).
		st.Cleared++
		s.ix.counters.Cleared.Add(1)
		s.clearEngineStream(sc)
		if sc.ctx == s.home {
			for _, a := range s.adapterList { // adapter.go
				s.clearEngineStream(a)
			}
		}
		return
	case EventStored, EventRemoved:
	default:
		s.drop(st, DropUnknownKind)
		return
	}
	if why, ok := s.engineEventOK(sc, ev); !ok {
		s.drop(st, why, "lora_name", clip(ev.LoraName), "registered_lora_name", sc.ctx.key.LoraName, "group_idx", ev.GroupIdx)
		return
	}
	if ev.HasLoraID && ev.LoraName != nil {
		s.ix.learnLoraID(sc.ctx, ev.LoraID, ev.LoraName)
	}
	p, ok := s.placement(ev.Medium, false)
	if !ok {
		s.drop(st, DropUnknownMedium, "medium", clip(ev.Medium))
		return
	}
	okey := ownerKey{sub: s.id, shared: p.Shared, name: s.reg.InstanceID}
	if !p.Shared {
		okey.rank = rank
	}
	if ev.Kind == EventStored {
		st.Stored++
		s.ix.counters.Stored.Add(1)
		if ev.BlockSize != 0 && ev.BlockSize != sc.ctx.key.BlockSize && !partialPageOK(sc.ctx, ev) {
			// A finer hash granularity, or a partial page under a profile whose
			// chain has no partial blocks: not a block of this context.
			s.ix.counters.PartialBlocks.Add(uint64(len(ev.Hashes)))
			s.drop(st, DropBlockSize, "event_block_size", ev.BlockSize, "block_size", sc.ctx.key.BlockSize)
			return
		}
		s.sampleHashes(sc, ev)
		keys, ok := s.storeKeys(sc, ev, s.regSalt)
		if !ok {
			if ev.HasParent && ev.HasTokens {
				s.drop(st, DropUnknownParent, "parent", ev.Parent)
			} else {
				s.drop(st, DropNoBlocks, "why", "no token_ids and no block hash known from this engine")
			}
			return
		}
		// The owner only now: a dropped event must not make one, which
		// would show its rank as a row of zeros (TestDroppedStoreMakesNoRow).
		s.addBlocks(sc, keys, sc.owner(okey), p.Tier, 1, st)
		return
	}
	st.Removed++
	s.ix.counters.Removed.Add(1)
	s.removeEngineHashes(sc, ev.Hashes, okey, p.Tier, st)
}

// clearEngineStream purges sc of the engine stream (stream tag 0): every
// block the engine filed there through its own events, and its engine map.
func (s *Subscription) clearEngineStream(sc *subCtx) {
	s.clearOwners(sc, func(o ownerInfo) bool { return o.stream == 0 })
	sc.engine.reset()
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
func (s *Subscription) storeKeys(sc *subCtx, ev *Event, salt []byte) ([]uint64, bool) {
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
			ref, ok := sc.engine.get(ev.Parent)
			if !ok {
				s.ix.counters.UnknownParents.Add(1)
				return nil, false
			}
			parent = ref.plain
		}
		ns := saltNamespace(prof, saltBytes(salt, ev.CacheSalt))
		s.seqScratch = hash.AppendXXH3Chain(s.seqScratch[:0], prof.XXH3Seed, parent, ev.HasParent, ev.Tokens[:len(hashes)*bs], bs)
		s.hashesKeyed()
		s.mapEngineHashes(sc, hashes, s.seqScratch, ns)
		return s.nsKeys(ns, s.seqScratch), true
	}
	// No tokens (e.g. an offload placeholder): only blocks already known from
	// this engine's own stores can be located.
	keys := s.seqScratch[:0]
	for _, h := range hashes {
		if ref, ok := sc.engine.get(h); ok {
			keys = append(keys, ref.key)
			ref.n++
			sc.engine.put(h, ref)
		}
	}
	s.seqScratch = keys
	return keys, len(keys) > 0 || len(hashes) == 0
}

// mapEngineHashes records, for each publisher hash, the plain standard hash it
// was re-computed as and its key in namespace ns, so that later removes and
// parent links by publisher hash resolve.
func (s *Subscription) mapEngineHashes(sc *subCtx, pub, plain []uint64, ns namespace) {
	for i, h := range pub {
		ref, _ := sc.engine.get(h)
		ref.plain = plain[i]
		ref.key = ns.key(plain[i])
		ref.n++
		sc.engine.put(h, ref)
	}
}

// nsKeys returns plain sequence hashes as keys of namespace ns (src itself in
// the unsalted namespace; otherwise a scratch slice valid until the next call).
func (s *Subscription) nsKeys(ns namespace, src []uint64) []uint64 {
	if ns.tag == 0 {
		return src
	}
	out := s.keyScratch[:0]
	for _, h := range src {
		out = append(out, ns.key(h))
	}
	s.keyScratch = out
	return out
}

func saltBytes(reg []byte, ev []byte) []byte {
	if len(ev) > 0 {
		return ev
	}
	return reg
}

func (s *Subscription) addBlocks(sc *subCtx, keys []uint64, id ownerRef, t Tier, n uint32, st *ApplyStats) {
	// The update function is bound once per subscription (s.addFn) and reads
	// its operands from s: a fresh closure per block would escape to the heap.
	c := sc.ctx
	s.opID, s.opTier, s.opCopies = id, t, n
	if s.addFn == nil {
		s.addFn = s.addOne
	}
	set := sc.keys[id.id()]
	s.opHoldings = 0
	if s.ix.large() {
		c.blocks.Prefetch(keys)
	}
	marked := len(s.marks) > 0
	for _, k := range keys {
		s.run.tick()
		s.opNew, s.opHeld = false, false
		c.blocks.Compute(k, s.addFn)
		switch {
		case s.opNew:
			set.add(k)
			s.heldKeys++
		case marked && s.opHeld:
			set.refresh(k) // announced again: behind any gap's mark
		}
	}
	s.ix.holdings[t].Add(s.opHoldings)
	st.Blocks += len(keys)
	s.ix.counters.BlocksStored.Add(uint64(len(keys)))
}

// addOne and removeOne run under the key's bucket lock; xsync calls them
// exactly once per Compute. opHoldings counts holdings (owner words) created
// minus dropped, for the per-tier gauges.
func (s *Subscription) addOne(old blockVal, _ bool) (blockVal, bool) {
	nv, created := old.withAdded(s.opID, s.opTier, s.opCopies)
	held := old.holds(s.opID.id())
	if created {
		s.opHoldings++
		s.opNew = !held
	}
	s.opHeld = held
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
		s.opGone = !nv.holds(s.opID.id())
	}
	return nv, nv.empty()
}

// removeMode says how removeBlocks resolves publisher hashes to index keys.
type removeMode uint8

const (
	// removeEngine: under the xxh3 profile through the subscription's engine
	// map (hashes never stored are skipped); otherwise as they are.
	removeEngine removeMode = iota
	// removeRFC: a hash mapped by a token recompute resolves through the
	// engine map; any other is a standard hash placed in namespace ns.
	removeRFC
)

// removeBlocks removes one copy per hash.
func (s *Subscription) removeBlocks(sc *subCtx, hashes []uint64, id ownerRef, t Tier, mode removeMode, ns namespace, st *ApplyStats) {
	c := sc.ctx
	viaMap := c.profile().Strategy == hash.StrategyXXH3
	set := sc.keys[id.id()]
	s.opHoldings = 0
	if !viaMap && mode != removeRFC && s.ix.large() {
		c.blocks.Prefetch(hashes) // the hashes are the keys
	}
	for _, h := range hashes {
		s.run.tick()
		k := h
		ref, mapped := engineRef{}, false
		if viaMap {
			ref, mapped = sc.engine.get(h)
		}
		switch {
		case mapped:
			k = ref.key
			if ref.n <= 1 {
				sc.engine.del(h)
			} else {
				ref.n--
				sc.engine.put(h, ref)
			}
		case mode == removeEngine && viaMap:
			continue
		case mode == removeRFC:
			k = ns.key(h)
		}
		s.opID, s.opTier, s.opChanged, s.opGone = id, t, false, false
		if s.removeFn == nil {
			s.removeFn = s.removeOne
		}
		c.blocks.Compute(k, s.removeFn)
		if s.opGone {
			set.remove(k)
			s.heldKeys--
		}
		if s.opChanged {
			st.Blocks++
			s.ix.counters.BlocksRemoved.Add(1)
		}
	}
	s.ix.holdings[t].Add(s.opHoldings)
}

// clearOwners removes every holding of this subscription's owners in sc that
// match keep, and returns the number of blocks changed. The cost is
// proportional to those owners' blocks (their key sets).
func (s *Subscription) clearOwners(sc *subCtx, keep func(ownerInfo) bool) int {
	ids := sc.ctx.ownersOf(s.id, keep)
	n := 0
	for id := range ids {
		keys := sc.keys[id]
		n += sc.ctx.dropOwnerKeys(id, keys, &s.ix.holdings)
		s.heldKeys -= keys.Len()
		keys.reset()
	}
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
	if s.skipping {
		// Restored from a peer's dump and not yet past its watermark: what
		// the transport lost or replaced may all be in the dump. The next
		// batch decides (recoveredSkip): a sequence that went back (a
		// publisher restart) or none clears then; a gap ahead clears only
		// if it passes the watermark.
		s.clearDeferred = true
		s.ix.opts.Logger.Info("clear deferred to the next batch (restored dump, below its watermark)",
			"service", s.reg.Key().String(), "reason", reason, "dump_seq", s.skipThrough)
		return 0
	}
	n := s.clearLocked()
	s.ix.opts.Logger.Info("cleared subscription blocks", "service", s.reg.Key().String(), "reason", reason, "blocks", n)
	return n
}

// clearLocked is Clear's body; the caller holds s.mu.
func (s *Subscription) clearLocked() int {
	if o := s.ix.opts.Observer; o != nil {
		o.Cleared(s)
	}
	return s.clearAll()
}

// clearAll drops every block of the subscription and its RFC cursors and
// pending expiries; the caller holds s.mu.
func (s *Subscription) clearAll() int {
	n := 0
	for _, sc := range s.state {
		n += s.clearOwners(sc, func(ownerInfo) bool { return true })
		sc.engine.reset()
	}
	s.rfc, s.heldTotal, s.hasPubLast, s.perStreamIDs = nil, 0, false, false
	s.marks = nil
	s.publishExpiry()
	return n
}
