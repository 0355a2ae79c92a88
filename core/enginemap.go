package core

// engineMap is a subscription context's map from an engine block hash to
// where the standard chain filed that block (subCtx.engine). Its main map
// holds only the key, 16 bytes a slot with the map's own key; what most
// entries share is left out. The count (stores minus removes of the engine
// hash) is 1 unless the engine cached the hash in more than one block, and
// the plain hash, the next block's parent, is the key itself in the
// unsalted namespace: an entry that differs keeps its count or plain hash
// in a map of its own, looked up only while that map holds any. A slot of
// key, plain hash and count took 32 bytes with the map's key
// (TestEngineMapSlot, BENCHMARKS.md). The zero value is empty. Not safe for
// concurrent use (the subscription's writer owns it).
type engineMap struct {
	keys   map[uint64]uint64
	counts map[uint64]uint32 // entries whose count is not 1
	plains map[uint64]uint64 // entries whose plain hash is not their key (salted)
}

// engineRef is one entry as its users see it.
type engineRef struct {
	key   uint64 // index key (namespaced plain hash)
	plain uint64 // plain standard sequence hash, the parent of the next block
	n     uint32 // stores minus removes seen for this engine hash
}

func (e *engineMap) get(h uint64) (engineRef, bool) {
	k, ok := e.keys[h]
	if !ok {
		return engineRef{}, false
	}
	return e.ref(h, k), true
}

// ref completes the entry of engine hash h, whose key is k.
func (e *engineMap) ref(h, k uint64) engineRef {
	r := engineRef{key: k, plain: k, n: 1}
	if len(e.counts) > 0 {
		if n, ok := e.counts[h]; ok {
			r.n = n
		}
	}
	if len(e.plains) > 0 {
		if p, ok := e.plains[h]; ok {
			r.plain = p
		}
	}
	return r
}

func (e *engineMap) put(h uint64, r engineRef) {
	if e.keys == nil {
		e.keys = make(map[uint64]uint64)
	}
	e.keys[h] = r.key
	switch {
	case r.n != 1:
		if e.counts == nil {
			e.counts = make(map[uint64]uint32)
		}
		e.counts[h] = r.n
	case len(e.counts) > 0:
		delete(e.counts, h)
	}
	switch {
	case r.plain != r.key:
		if e.plains == nil {
			e.plains = make(map[uint64]uint64)
		}
		e.plains[h] = r.plain
	case len(e.plains) > 0:
		delete(e.plains, h)
	}
}

func (e *engineMap) del(h uint64) {
	delete(e.keys, h)
	if len(e.counts) > 0 {
		delete(e.counts, h)
	}
	if len(e.plains) > 0 {
		delete(e.plains, h)
	}
}

func (e *engineMap) len() int { return len(e.keys) }

// each calls f for every entry until it returns false.
func (e *engineMap) each(f func(h uint64, r engineRef) bool) {
	for h, k := range e.keys {
		if !f(h, e.ref(h, k)) {
			return
		}
	}
}

// reset empties the map and releases its memory.
func (e *engineMap) reset() { *e = engineMap{} }
