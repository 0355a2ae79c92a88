package core

import (
	"bytes"
	"sync/atomic"
	"unsafe"
)

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
//
// The map stores a blockVal: one pointer to an immutable holdings, so an
// xsync entry (key and value) is 16 bytes. A block whose only word holds one
// copy, by far the most common kind, points to the process-wide holdings of
// that word (singleVal) and costs no allocation of its own.
type blockVal struct {
	h *holdings // nil: no owner
}

// holdings is the owner set of a block. Never modified once stored.
type holdings struct {
	w0   uint64
	rest []uint64 // the other words; nil while the block has one
}

// same reports whether h and o hold the same words in the same order (o may
// be nil). Long sets compare as bytes (the runtime's vectorised memequal).
func (h *holdings) same(o *holdings) bool {
	if h == o {
		return true
	}
	if o == nil || h.w0 != o.w0 || len(h.rest) != len(o.rest) {
		return false
	}
	if len(h.rest) == 0 {
		return true
	}
	return bytes.Equal(unsafe.Slice((*byte)(unsafe.Pointer(&h.rest[0])), 8*len(h.rest)),
		unsafe.Slice((*byte)(unsafe.Pointer(&o.rest[0])), 8*len(o.rest)))
}

// singles caches one holdings per single-copy word, shared by every block
// whose only word it is: 2,048 sets of 8 slots, a word looked up in the set
// its hash picks. A full set replaces one of its slots in turn: a word pushed
// out costs an allocation per block until it is cached again, never a wrong
// answer (a holdings is identified by its content, not its address). The
// cache holds at most 16,384 words (128 KiB of pointers) whatever the number
// of owners; with 8 slots a set overflows only when it draws more than 8 of
// the hot words (for 2,000 words, about one chance in a million per set).
var (
	singles    [singleSets * singleWays]atomic.Pointer[holdings]
	singleNext atomic.Uint32 // the slot a full set replaces next
)

const (
	singleSetBits = 11
	singleSets    = 1 << singleSetBits
	singleWays    = 8
)

// singleVal returns the value whose only word is w.
func singleVal(w uint64) blockVal {
	if wordCopies(w) != 1 {
		return blockVal{h: &holdings{w0: w}}
	}
	set := singles[((w*0x9E3779B97F4A7C15)>>(64-singleSetBits))*singleWays:][:singleWays]
	free := -1
	for i := range set {
		h := set[i].Load()
		if h == nil {
			if free < 0 {
				free = i
			}
			continue
		}
		if h.w0 == w {
			return blockVal{h: h}
		}
	}
	if free < 0 {
		free = int(singleNext.Add(1) % singleWays)
	}
	h := &holdings{w0: w}
	set[free].Store(h)
	return blockVal{h: h}
}

// makeVal returns the value holding w0 and then rest (rest is kept, not
// copied); w0 == 0 means none.
func makeVal(w0 uint64, rest []uint64) blockVal {
	switch {
	case w0 == 0:
		return blockVal{}
	case len(rest) == 0:
		return singleVal(w0)
	}
	return blockVal{h: &holdings{w0: w0, rest: rest}}
}

// first returns the block's first word (0 when it has none).
func (b blockVal) first() uint64 {
	if b.h == nil {
		return 0
	}
	return b.h.w0
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
func (b blockVal) empty() bool { return b.h == nil }

// forEach calls f for every owner word.
func (b blockVal) forEach(f func(w uint64)) {
	if b.h == nil {
		return
	}
	f(b.h.w0)
	for _, w := range b.h.rest {
		f(w)
	}
}

// withAdded returns b with n more copies held by (id, t), and whether that
// created a new holding (owner word).
func (b blockVal) withAdded(id ownerRef, t Tier, n uint32) (blockVal, bool) {
	key := ownerWord(id, t, 1)
	if b.h == nil {
		return singleVal(ownerWord(id, t, n)), true
	}
	w0, rest := b.h.w0, b.h.rest
	if sameSlot(w0, key) {
		return makeVal(ownerWord(id, t, wordCopies(w0)+n), rest), false
	}
	for i, w := range rest {
		if sameSlot(w, key) {
			nl := append([]uint64(nil), rest...)
			nl[i] = ownerWord(id, t, wordCopies(w)+n)
			return makeVal(w0, nl), false
		}
	}
	nl := make([]uint64, len(rest), len(rest)+1)
	copy(nl, rest)
	return makeVal(w0, append(nl, ownerWord(id, t, n))), true
}

// withRemoved returns b with n fewer copies held by (id, t), whether anything
// changed, and whether the holding was dropped (its last copy removed).
// Removing an absent holding is a no-op.
func (b blockVal) withRemoved(id ownerRef, t Tier, n uint32) (nb blockVal, changed, dropped bool) {
	if b.h == nil {
		return b, false, false
	}
	key := ownerWord(id, t, 1)
	w0, rest := b.h.w0, b.h.rest
	if sameSlot(w0, key) {
		if c := wordCopies(w0); c > n {
			return makeVal(ownerWord(id, t, c-n), rest), true, false
		}
		if len(rest) == 0 {
			return blockVal{}, true, true
		}
		return makeVal(rest[0], append([]uint64(nil), rest[1:]...)), true, true
	}
	for i, w := range rest {
		if !sameSlot(w, key) {
			continue
		}
		c := wordCopies(w)
		nl := make([]uint64, 0, len(rest))
		nl = append(nl, rest[:i]...)
		if c > n {
			nl = append(nl, ownerWord(id, t, c-n))
		}
		nl = append(nl, rest[i+1:]...)
		return makeVal(w0, nl), true, c <= n
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
	return makeVal(keep[0], keep[1:]), true
}

// holds reports whether any word of b belongs to owner id.
func (b blockVal) holds(id uint32) bool {
	if b.h == nil {
		return false
	}
	if wordOwner(b.h.w0) == id {
		return true
	}
	for _, w := range b.h.rest {
		if wordOwner(w) == id {
			return true
		}
	}
	return false
}
