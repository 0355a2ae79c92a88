package core

import "iter"

// engineMap is a subscription context's map from an engine block hash to
// where the standard chain filed that block (subCtx.engine). The plain
// hash, the next block's parent, is the key itself in the unsalted
// namespace, where nearly every block is: such an entry keeps the key and
// the count only, 16 bytes beside the map's 8-byte key; an entry of a
// salted namespace keeps all three, in a map of its own (a lookup in an
// empty map returns before hashing). One map of key, plain and count slots took 32
// bytes a slot with the map's key: about a fifth more memory per block of a
// default-profile engine (TestEngineMapSlot, BENCHMARKS.md). The count stays
// in the slot: an offloading engine counts each hash once per tier, so a
// side map of counts would hold most entries. The zero value is empty. Not
// safe for concurrent use (the subscription's writer owns it).
type engineMap struct {
	plain  map[uint64]engineSlot // entries whose plain hash is their key
	salted map[uint64]engineRef  // the others
}

type engineSlot struct {
	key uint64
	n   uint32
}

// engineRef is one entry as its users see it.
type engineRef struct {
	key   uint64 // index key (namespaced plain hash)
	plain uint64 // plain standard sequence hash, the parent of the next block
	n     uint32 // stores minus removes seen for this engine hash
}

func (e *engineMap) get(h uint64) (engineRef, bool) {
	if s, ok := e.plain[h]; ok {
		return engineRef{key: s.key, plain: s.key, n: s.n}, true
	}
	r, ok := e.salted[h]
	return r, ok
}

func (e *engineMap) put(h uint64, r engineRef) {
	if r.plain == r.key {
		if e.plain == nil {
			e.plain = make(map[uint64]engineSlot)
		}
		e.plain[h] = engineSlot{key: r.key, n: r.n}
		delete(e.salted, h)
		return
	}
	if e.salted == nil {
		e.salted = make(map[uint64]engineRef)
	}
	e.salted[h] = r
	delete(e.plain, h)
}

func (e *engineMap) del(h uint64) {
	delete(e.plain, h)
	delete(e.salted, h)
}

func (e *engineMap) len() int { return len(e.plain) + len(e.salted) }

// all iterates over every entry.
func (e *engineMap) all() iter.Seq2[uint64, engineRef] {
	return func(yield func(uint64, engineRef) bool) {
		for h, s := range e.plain {
			if !yield(h, engineRef{key: s.key, plain: s.key, n: s.n}) {
				return
			}
		}
		for h, r := range e.salted {
			if !yield(h, r) {
				return
			}
		}
	}
}

// reset empties the map and releases its memory.
func (e *engineMap) reset() { *e = engineMap{} }

// engineSlack is how far a context's engine map may outgrow twice the blocks
// its subscription holds there before pruneEngine walks it.
const engineSlack = 4096

// pruneEngine drops sc's engine map entries whose block is no longer in the
// context at all, once the map holds more than twice as many entries as sc
// has held blocks (plus engineSlack). A block bound or a gap expiry drops
// blocks without the engine's removes, so without it the map of a
// publisher that never removes would grow past the bound that limits its
// blocks (TestEngineMapBoundedByBlockBound). An entry whose block another
// owner still holds stays: a shared pool's copy extends this engine's
// cpu_share and disk prefixes through it, so it is still the parent of the
// engine's next blocks (TestEngineMapPruneKeepsPoolHeldParents); the map
// stays bounded by the context's blocks. Caller holds s.mu.
func (sc *subCtx) pruneEngine() {
	held := 0
	for _, set := range sc.keys {
		held += set.Len()
	}
	if sc.engine.len() <= 2*held+engineSlack {
		return
	}
	for h, r := range sc.engine.all() {
		if !sc.holds(r.key) {
			sc.engine.del(h)
		}
	}
}

// holds reports whether some owner holds block k in sc's context.
func (sc *subCtx) holds(k uint64) bool {
	_, ok := sc.ctx.blocks.Load(k)
	return ok
}
