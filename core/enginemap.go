package core

// engineMap is a subscription context's map from an engine block hash to
// where the standard chain filed that block (subCtx.engine). Its slot holds
// the key and the count: 16 bytes beside the map's 8-byte key. The plain
// hash, the next block's parent, is the key itself in the unsalted
// namespace, where nearly every block is; only a salted entry keeps its
// plain hash, in a second map. A slot of key, plain and count took 32 bytes
// with the map's key: about a fifth more memory per block of a
// default-profile engine (TestEngineMapSlot, BENCHMARKS.md). The count stays
// in the slot: an offloading engine counts each hash once per tier, so a
// side map of counts would hold most entries. The zero value is empty. Not
// safe for concurrent use (the subscription's writer owns it).
type engineMap struct {
	m      map[uint64]engineSlot
	plains map[uint64]uint64 // the plain hashes of salted entries
}

type engineSlot struct {
	key    uint64
	n      uint32
	salted bool // the plain hash is in plains, not key
}

// engineRef is one entry as its users see it.
type engineRef struct {
	key   uint64 // index key (namespaced plain hash)
	plain uint64 // plain standard sequence hash, the parent of the next block
	n     uint32 // stores minus removes seen for this engine hash
}

func (e *engineMap) get(h uint64) (engineRef, bool) {
	s, ok := e.m[h]
	if !ok {
		return engineRef{}, false
	}
	r := engineRef{key: s.key, plain: s.key, n: s.n}
	if s.salted {
		r.plain = e.plains[h]
	}
	return r, true
}

func (e *engineMap) put(h uint64, r engineRef) {
	if e.m == nil {
		e.m = make(map[uint64]engineSlot)
	}
	salted := r.plain != r.key
	if salted {
		if e.plains == nil {
			e.plains = make(map[uint64]uint64)
		}
		e.plains[h] = r.plain
	} else if e.plains != nil {
		delete(e.plains, h)
	}
	e.m[h] = engineSlot{key: r.key, n: r.n, salted: salted}
}

func (e *engineMap) del(h uint64) {
	delete(e.m, h)
	if e.plains != nil {
		delete(e.plains, h)
	}
}

func (e *engineMap) len() int { return len(e.m) }

// each calls f for every entry until it returns false.
func (e *engineMap) each(f func(h uint64, r engineRef) bool) {
	for h, s := range e.m {
		r := engineRef{key: s.key, plain: s.key, n: s.n}
		if s.salted {
			r.plain = e.plains[h]
		}
		if !f(h, r) {
			return
		}
	}
}

// reset empties the map and releases its memory.
func (e *engineMap) reset() { *e = engineMap{} }
