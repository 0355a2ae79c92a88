package core

// A block entry is the immutable value stored per prefix key in a context's
// concurrent map. Writers replace it whole (xsync.MapOf.Compute runs the update
// under the key's bucket lock), readers Load a consistent copy: a query never
// sees a torn owner set.
//
// Each owner word packs one (owner, tier) holding:
//
//	bits 63..32  owner id (interned per context)
//	bits 31..24  owner generation: ids are reused after an owner is released,
//	             and a query holding an older snapshot of the owner table must
//	             not credit a new owner's blocks to the old one
//	             (TestOwnerIDReuseDuringQuery)
//	bits 23..16  tier
//	bits 15..0   copies (saturating): vLLM may cache one hash in several
//	             physical blocks and removes each copy separately.
//
// A zero word means "no owner": copies is never 0 in a stored word.
type blockVal struct {
	w0   uint64
	rest *ownerList // nil while the block has at most one owner word
}

type ownerList struct {
	words []uint64
}

// ownerRef names one incarnation of an interned owner: id<<32 | gen<<24.
type ownerRef uint64

func makeRef(id uint32, gen uint8) ownerRef { return ownerRef(uint64(id)<<32 | uint64(gen)<<24) }

func (r ownerRef) id() uint32 { return uint32(r >> 32) }

const (
	copiesMask = 1<<16 - 1
	tierShift  = 16
)

func ownerWord(r ownerRef, t Tier, copies uint32) uint64 {
	if copies > copiesMask {
		copies = copiesMask
	}
	return uint64(r) | uint64(t)<<tierShift | uint64(copies)
}

func wordOwner(w uint64) uint32  { return uint32(w >> 32) }
func wordGen(w uint64) uint8     { return uint8(w >> 24) }
func wordTier(w uint64) Tier     { return Tier(w >> tierShift & 0xff) }
func wordCopies(w uint64) uint32 { return uint32(w & copiesMask) }

// sameSlot reports whether two words are the same (owner, tier) holding.
func sameSlot(a, b uint64) bool { return a>>tierShift == b>>tierShift }

// empty reports whether the block has no owner.
func (b blockVal) empty() bool { return b.w0 == 0 }

// forEach calls f for every owner word.
func (b blockVal) forEach(f func(w uint64)) {
	if b.w0 != 0 {
		f(b.w0)
	}
	if b.rest != nil {
		for _, w := range b.rest.words {
			f(w)
		}
	}
}

// withAdded returns b with n more copies held by (id, t), and whether that
// created a new holding (owner word).
func (b blockVal) withAdded(id ownerRef, t Tier, n uint32) (blockVal, bool) {
	key := ownerWord(id, t, 1)
	if b.w0 == 0 && b.rest == nil {
		return blockVal{w0: ownerWord(id, t, n)}, true
	}
	if b.w0 != 0 && sameSlot(b.w0, key) {
		return blockVal{w0: ownerWord(id, t, wordCopies(b.w0)+n), rest: b.rest}, false
	}
	if b.rest != nil {
		for i, w := range b.rest.words {
			if sameSlot(w, key) {
				nl := &ownerList{words: append([]uint64(nil), b.rest.words...)}
				nl.words[i] = ownerWord(id, t, wordCopies(w)+n)
				return blockVal{w0: b.w0, rest: nl}, false
			}
		}
	}
	if b.w0 == 0 {
		return blockVal{w0: ownerWord(id, t, n), rest: b.rest}, true
	}
	var words []uint64
	if b.rest != nil {
		words = make([]uint64, len(b.rest.words), len(b.rest.words)+1)
		copy(words, b.rest.words)
	}
	words = append(words, ownerWord(id, t, n))
	return blockVal{w0: b.w0, rest: &ownerList{words: words}}, true
}

// withRemoved returns b with n fewer copies held by (id, t), whether anything
// changed, and whether the holding was dropped (its last copy removed).
// Removing an absent holding is a no-op.
func (b blockVal) withRemoved(id ownerRef, t Tier, n uint32) (nb blockVal, changed, dropped bool) {
	key := ownerWord(id, t, 1)
	if b.w0 != 0 && sameSlot(b.w0, key) {
		c := wordCopies(b.w0)
		if c > n {
			return blockVal{w0: ownerWord(id, t, c-n), rest: b.rest}, true, false
		}
		return b.promote(), true, true
	}
	if b.rest != nil {
		for i, w := range b.rest.words {
			if !sameSlot(w, key) {
				continue
			}
			c := wordCopies(w)
			nl := make([]uint64, 0, len(b.rest.words))
			nl = append(nl, b.rest.words[:i]...)
			if c > n {
				nl = append(nl, ownerWord(id, t, c-n))
			}
			nl = append(nl, b.rest.words[i+1:]...)
			return blockVal{w0: b.w0, rest: listOrNil(nl)}.normal(), true, c <= n
		}
	}
	return b, false, false
}

// withoutOwners returns b minus every word whose owner satisfies drop.
func (b blockVal) withoutOwners(drop func(id uint32) bool) (blockVal, bool) {
	changed := false
	var keep []uint64
	b.forEach(func(w uint64) {
		if drop(wordOwner(w)) {
			changed = true
			return
		}
		keep = append(keep, w)
	})
	if !changed {
		return b, false
	}
	if len(keep) == 0 {
		return blockVal{}, true
	}
	return blockVal{w0: keep[0], rest: listOrNil(keep[1:])}, true
}

// promote drops w0, moving the first overflow word into its place.
func (b blockVal) promote() blockVal {
	if b.rest == nil || len(b.rest.words) == 0 {
		return blockVal{}
	}
	words := b.rest.words
	return blockVal{w0: words[0], rest: listOrNil(append([]uint64(nil), words[1:]...))}
}

// normal keeps the invariant that w0 is set whenever any word exists.
func (b blockVal) normal() blockVal {
	if b.w0 == 0 {
		return blockVal{rest: b.rest}.promote()
	}
	return b
}

func listOrNil(words []uint64) *ownerList {
	if len(words) == 0 {
		return nil
	}
	return &ownerList{words: words}
}

// holds reports whether any word of b belongs to owner id.
func (b blockVal) holds(id uint32) bool {
	if b.w0 != 0 && wordOwner(b.w0) == id {
		return true
	}
	if b.rest != nil {
		for _, w := range b.rest.words {
			if wordOwner(w) == id {
				return true
			}
		}
	}
	return false
}
