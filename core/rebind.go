package core

import "github.com/seed-c7a81618/conductor/hash"

// Binding a pool-only partition. A pool registration without a profile that
// comes before every engine of its context starts a pool-only partition
// (partition.go), which runs under the xxh3 default until the first engine
// or explicit-profile registration binds it to that registration's profile.
// Until then a pool files a block under a key other than the hash it
// published when the event or registration names a salt (the salt
// namespace) or carries token_ids that the standard chain re-hashes to other
// values (kept in the engine map). No other profile computes those keys: a
// query never finds such a block, a remove under the new profile does not
// reach it, and a later store of the same object through the engine map
// would file it there again.
//
// So each subscription context remembers the binding it filed under
// (subCtx.bind) and which of its owners filed such a key while the
// partition was unbound (subCtx.derived). When the binding changes to
// another profile, those owners' blocks are cleared (counted in
// Counters.RebindClears and ClearedBlocks, logged) and the engine map is
// reset; blocks filed under the publisher's own hashes stay, as the new
// profile would file them (TestPoolFirstDoesNotReserveProfile). A new xxh3
// seed re-hashes every standard chain: then every block of the context
// goes. The dropped blocks come back when the pool stores them again.
//
// Who clears: the subscription's single writer, under s.mu, at its next
// event in the context (applyRFCEvent; restore and dump do the same), and
// Register, which brings every early subscription of the partition up to
// the binding as soon as it has released ix.mu (rebindEarly: s.mu is taken
// before ix.mu elsewhere, so not under it). Whichever comes first clears;
// the other finds sc.bind current. An event whose profile reads straddle
// the binding was checked before it, so what it filed is cleared by the
// next check (TestPoolBindingConcurrentApply).

// addEarly records s as a subscription of c while c is unbound. Caller
// holds ix.mu.
func (c *context) addEarly(s *Subscription) {
	if !c.bind.Load().bound {
		c.early = append(c.early, s)
	}
}

// dropEarly forgets s (unregistered). Caller holds ix.mu.
func (c *context) dropEarly(s *Subscription) {
	for i, e := range c.early {
		if e == s {
			c.early = append(c.early[:i], c.early[i+1:]...)
			return
		}
	}
}

// markDerived records that owner id filed a block under a key other than
// the publisher's hash while the partition was unbound.
func (sc *subCtx) markDerived(id uint32) {
	if sc.derived == nil {
		sc.derived = make(map[uint32]bool)
	}
	sc.derived[id] = true
}

// rebindEarly brings the subscriptions that held state in pool-only
// partition c before it was bound up to the binding. The caller holds no
// lock.
func (ix *Index) rebindEarly(c *context, subs []*Subscription) {
	for _, s := range subs {
		s.mu.Lock()
		if sc := s.state[c]; sc != nil && !s.closed {
			s.rebind(sc)
		}
		s.mu.Unlock()
	}
}

// rebind clears, when sc's partition was bound to another profile since sc
// last looked, the blocks sc filed under keys of the xxh3 default that the
// new profile does not compute, and resets sc's engine map. The caller
// holds s.mu.
func (s *Subscription) rebind(sc *subCtx) {
	b := sc.ctx.bind.Load()
	if b == sc.bind {
		return
	}
	old, derived := sc.bind, sc.derived
	sc.bind, sc.derived = b, nil
	if old.profile == b.profile {
		return // the default itself was bound: every key stands
	}
	all := b.profile.Strategy == hash.StrategyXXH3
	blocks, keys := 0, 0
	for id, set := range sc.keys {
		if set.Len() == 0 || !(all || derived[id]) {
			continue
		}
		keys += set.Len()
		blocks += sc.ctx.dropOwnerKeys(id, set, &s.ix.holdings)
		s.heldKeys -= set.Len()
		set.reset()
	}
	mapped := sc.engine.len()
	sc.engine.reset()
	if keys == 0 && mapped == 0 {
		return
	}
	s.ix.counters.ClearedBlocks.Add(uint64(blocks))
	s.ix.counters.RebindClears.Add(1)
	k, sp := &sc.ctx.key, b.profile.Spec
	s.ix.opts.Logger.Warn("blocks filed before the context's hash profile was bound cleared: their keys (a salt namespace or re-hashed token_ids under the xxh3 default) are not the profile's; they return when the publisher stores them again. Register the pool with the engines' hash_profile, or after them, to keep them",
		"service", s.reg.Key().String(), "context", k.TenantID+"/"+k.ModelName+"/"+k.LoraName,
		"block_size", k.BlockSize, "profile", sp.Describe(), "cleared_blocks", blocks, "engine_hashes", mapped)
}
