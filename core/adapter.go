package core

import (
	"fmt"
	"slices"

	"github.com/seed-c7a81618/conductor/hash"
)

// LoRA adapters from events. A registration with
// Registration.AdaptersFromEvents (the Dynamo surface's) indexes every
// adapter its engine serves, as Dynamo does in its one radix tree per
// (model, group): a vLLM or SGLang stored event whose lora_name names an
// adapter is filed under the adapter's context, the home context's key with
// LoraName = that name, found or created on first use by the partition
// rules a registration of that context would follow (acquireContextLocked:
// the same profile and binding identity). The subscription holds a
// reference on it and keeps its state there like in any context it touched
// (subCtx), so Unregister, Clear, gap policies, the block bound and dumps
// treat it as they treat every other; a restored dump re-creates it
// (restoreCtx).
//
// Removes: vLLM's BlockRemoved names no adapter (docs/engines.md). A remove
// of such a registration resolves each engine hash to the first of its
// contexts that holds it, the home context first, then the adapters' in the
// order they were made: under the xxh3 profile the context whose engine map
// has the hash, under an engine profile the one where the publishing owner
// holds the block (an adapter's hashes differ from the base model's: the
// engine hashes the adapter into its chain). An AllBlocksCleared clears the
// engine stream in every one of them.
//
// Bounds: at most Options.MaxAdaptersPerRegistration adapter contexts at a
// time. At the bound, one where the subscription holds no block, no engine
// hash and no RFC stream cursor is given up (its reference released, the
// context reclaimed when nothing else holds it) for the new adapter; when
// none is, the event is dropped (DropAdapterLimit). An adapter name must be
// an identity a registration's lora_name could be (at most MaxIdentityBytes
// of printable text); other names are dropped as wrong_lora.
//
// Locks: the applier holds s.mu and takes ix.mu to acquire the context, the
// package's order (Subscription.mu → Index.mu), as ctxState does. Queries
// find the context lock-free once it is stored in Index.contexts. An
// Unregister that began meanwhile waits for this Apply (close), then reads
// s.state, which holds the new context: its reference is released there.
// When acquiring binds a pool-only partition, its early subscriptions are
// brought up to the binding after s.mu is released (runRebinds), as
// Register does after ix.mu: an applier must not take another
// subscription's lock while holding its own.

// DefaultMaxAdaptersPerRegistration is Options.MaxAdaptersPerRegistration's
// default.
const DefaultMaxAdaptersPerRegistration = 64

// pendingRebind is a pool-only partition an applier bound, with the
// subscriptions that held state in it before (rebindEarly).
type pendingRebind struct {
	c     *context
	early []*Subscription
}

// engineTarget returns the state an engine event naming a LoRA adapter
// applies to on an AdaptersFromEvents registration whose home state is
// home: for a stored event the adapter's (created on first use), for a
// remove the adapter's when there is one, else home. nil: the event was
// counted (dropped, or a remove of an adapter the subscription holds
// nothing of). The caller holds s.mu.
func (s *Subscription) engineTarget(home *subCtx, ev *Event, st *ApplyStats) *subCtx {
	if len(ev.LoraName) == 0 || !ev.FullAttention() {
		// The base model's, or not a prefix-cache event (applyEngine drops it).
		return home
	}
	switch ev.Kind {
	case EventStored:
		sc, why, detail := s.adapterState(ev.LoraName)
		if sc == nil {
			s.drop(st, why, "lora_name", clip(ev.LoraName), "why", detail,
				"adapters", len(s.adapterList), "limit", s.ix.opts.MaxAdaptersPerRegistration)
		}
		return sc
	case EventRemoved:
		if sc := s.adapters[string(ev.LoraName)]; sc != nil {
			return sc
		}
		st.Removed++
		s.ix.counters.Removed.Add(1)
		return nil
	}
	return home
}

// adapterState returns the subscription's state in the context of adapter
// name, acquiring the context when the subscription has none yet. On
// failure it returns the drop reason and why. The caller holds s.mu.
func (s *Subscription) adapterState(name []byte) (*subCtx, DropReason, string) {
	if sc := s.adapters[string(name)]; sc != nil {
		return sc, 0, ""
	}
	if len(name) > MaxIdentityBytes {
		return nil, DropWrongLora, fmt.Sprintf("lora_name is %d bytes, longer than the limit of %d", len(name), MaxIdentityBytes)
	}
	if why := notText(string(name)); why != "" {
		return nil, DropWrongLora, "lora_name " + why
	}
	if len(s.adapterList) >= s.ix.opts.MaxAdaptersPerRegistration && !s.releaseIdleAdapter() {
		return nil, DropAdapterLimit, "every adapter context of the registration holds blocks"
	}
	r := s.reg
	r.LoraName = string(name)
	ix := s.ix
	ix.mu.Lock()
	c, early, err := ix.acquireContextLocked(&r, !r.Type.pool() || r.ProfileExplicit)
	if err != nil {
		ix.mu.Unlock()
		return nil, DropWrongLora, err.Error()
	}
	sc := s.state[c]
	if sc != nil {
		// State from an RFC event naming this context (ctxState) holds
		// the subscription's reference already.
		c.refs--
	} else {
		c.addEarly(s)
	}
	ix.mu.Unlock()
	if sc == nil {
		sc = s.newSubCtx(c)
		s.state[c] = sc
	} else {
		// Acquiring may have bound the partition sc's blocks were filed in:
		// clear what the binding invalidates now, before this event files
		// blocks under the new profile (runRebinds would clear those too;
		// TestAdapterBindingKeepsItsFirstBlocks).
		s.rebind(sc)
	}
	if len(early) > 0 {
		s.rebinds = append(s.rebinds, pendingRebind{c: c, early: early})
		s.hasRebinds.Store(true)
	}
	if s.adapters == nil {
		s.adapters = make(map[string]*subCtx)
	}
	s.adapters[r.LoraName] = sc
	s.adapterList = append(s.adapterList, sc)
	return sc, 0, ""
}

// releaseIdleAdapter gives up the first adapter context in which the
// subscription holds no block, no engine hash and no RFC stream cursor,
// and reports whether there was one. The caller holds s.mu.
func (s *Subscription) releaseIdleAdapter() bool {
	for i, sc := range s.adapterList {
		if !s.idle(sc) {
			continue
		}
		s.adapterList = slices.Delete(s.adapterList, i, i+1)
		delete(s.adapters, sc.ctx.key.LoraName)
		delete(s.state, sc.ctx)
		sc.ctx.releaseOwners(s.id)
		ix := s.ix
		ix.mu.Lock()
		sc.ctx.dropEarly(s)
		ix.releaseContextLocked(sc.ctx)
		ix.mu.Unlock()
		return true
	}
	return false
}

// idle reports whether the subscription holds nothing in sc.
func (s *Subscription) idle(sc *subCtx) bool {
	if sc.engine.len() > 0 {
		return false
	}
	for _, set := range sc.keys {
		if set.Len() > 0 {
			return false
		}
	}
	for k := range s.rfc {
		if k.ctx == sc.ctx {
			return false
		}
	}
	return true
}

// adapterKey reports whether k is the context of an adapter of the
// subscription's registration: its home key with another, non-empty LoRA.
func (s *Subscription) adapterKey(k *ContextKey) bool {
	h := &s.home.key
	return s.reg.AdaptersFromEvents && k.LoraName != "" && k.LoraName != h.LoraName &&
		k.TenantID == h.TenantID && k.ModelName == h.ModelName && k.BlockSize == h.BlockSize
}

// runRebinds brings the early subscriptions of the pool-only partitions
// this subscription's applier bound up to their binding (rebindEarly). The
// caller holds no lock: it runs after s.mu is released.
func (s *Subscription) runRebinds() {
	if !s.hasRebinds.Load() {
		return
	}
	s.mu.Lock()
	todo := s.rebinds
	s.rebinds = nil
	s.hasRebinds.Store(false)
	s.mu.Unlock()
	for _, p := range todo {
		s.ix.rebindEarly(p.c, p.early)
	}
}

// removeEngineHashes removes one copy of each hash of an engine BlockRemoved that
// owner okey published, from sc; on the home context of a registration with
// adapter contexts, each hash from the first of its contexts that holds it
// (removeTarget). Runs of hashes with one target go in one call.
func (s *Subscription) removeEngineHashes(sc *subCtx, hashes []uint64, okey ownerKey, t Tier, st *ApplyStats) {
	if len(s.adapterList) == 0 || sc.ctx != s.home {
		s.removeIn(sc, hashes, okey, t, st)
		return
	}
	start := 0
	var cur *subCtx
	for i, h := range hashes {
		to := s.removeTarget(sc, h, okey)
		if i > 0 && to != cur {
			s.removeIn(cur, hashes[start:i], okey, t, st)
			start = i
		}
		cur = to
	}
	if cur != nil {
		s.removeIn(cur, hashes[start:], okey, t, st)
	}
}

func (s *Subscription) removeIn(sc *subCtx, hashes []uint64, okey ownerKey, t Tier, st *ApplyStats) {
	if id, ok := sc.owners[okey]; ok {
		s.removeBlocks(sc, hashes, id, t, removeEngine, namespace{}, st)
	}
}

// removeTarget is the context a remove of engine hash h reaches: the first
// of home and the adapter contexts, in order, that holds h; home when none
// does (the remove then changes nothing).
func (s *Subscription) removeTarget(home *subCtx, h uint64, okey ownerKey) *subCtx {
	if holdsEngineHash(home, h, okey) {
		return home
	}
	for _, sc := range s.adapterList {
		if holdsEngineHash(sc, h, okey) {
			return sc
		}
	}
	return home
}

// holdsEngineHash reports whether engine hash h is held in sc: under the
// xxh3 profile it is in sc's engine map; under an engine profile (where the
// hash is the key) owner okey holds that block.
func holdsEngineHash(sc *subCtx, h uint64, okey ownerKey) bool {
	if sc.ctx.profile().Strategy == hash.StrategyXXH3 {
		_, ok := sc.engine.get(h)
		return ok
	}
	id, ok := sc.owners[okey]
	if !ok {
		return false
	}
	v, ok := sc.ctx.blocks.Load(h)
	return ok && v.holds(id.id())
}
