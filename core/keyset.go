package core

import "math/bits"

// keySet is an owner's set of block keys. Small, it is one keyTable; past
// keySetSplit keys it becomes keySubs tables chosen by bits of the key (a mix
// independent of the tables' own), each growing and shrinking on its own, so
// that no insert or remove of a large owner copies the whole set at once (one
// 10M-key table stalls the applier ~0.2 s when it doubles).
// TestKeySetSplitAgreesWithMap checks the split set against a map. The zero value is an empty set. Not safe for
// concurrent use (one subscription writer owns it).
type keySet struct {
	t    keyTable
	subs []keyTable // nil until the split
}

const (
	keySetSplit = 1 << 16
	keySubBits  = 6
	keySubs     = 1 << keySubBits
)

// keySub picks a key's table after the split: the top bits of a multiply by a
// constant other than keyTable.home's, so the keys of one table still spread
// over all of its slots.
func keySub(k uint64) uint64 { return (k * 0xD6E8FEB86659FD93) >> (64 - keySubBits) }

// Len returns the number of keys.
func (s *keySet) Len() int {
	if s.subs == nil {
		return s.t.Len()
	}
	n := 0
	for i := range s.subs {
		n += s.subs[i].Len()
	}
	return n
}

// add inserts k (idempotent).
func (s *keySet) add(k uint64) {
	if s.subs != nil {
		s.subs[keySub(k)].add(k)
		return
	}
	s.t.add(k)
	if s.t.n > keySetSplit {
		subs := make([]keyTable, keySubs)
		s.t.each(func(k uint64) { subs[keySub(k)].add(k) })
		s.subs, s.t = subs, keyTable{}
	}
}

// remove deletes k if present.
func (s *keySet) remove(k uint64) {
	if s.subs != nil {
		s.subs[keySub(k)].remove(k)
		return
	}
	s.t.remove(k)
}

// each calls f for every key. f must not modify the set.
func (s *keySet) each(f func(k uint64)) {
	if s.subs == nil {
		s.t.each(f)
		return
	}
	for i := range s.subs {
		s.subs[i].each(f)
	}
}

// reset empties the set and releases its tables.
func (s *keySet) reset() { *s = keySet{} }

// keyTable is an open-addressing hash set of uint64 with linear probing and
// backward-shift deletion (no tombstones), so inserts and deletes on the
// apply path cost a few nanoseconds and iteration visits only the table. The
// zero value is an empty table.
type keyTable struct {
	slots []uint64 // 0 = empty; the key 0 is kept in hasZero
	n     int      // keys in slots
	shift uint8    // 64 - log2(len(slots))
	// hasZero records the key 0, which cannot live in a slot.
	hasZero bool
}

const keySetMinSlots = 16

func (s *keyTable) home(k uint64) int {
	return int((k * 0x9E3779B97F4A7C15) >> s.shift)
}

// Len returns the number of keys.
func (s *keyTable) Len() int {
	if s.hasZero {
		return s.n + 1
	}
	return s.n
}

// add inserts k (idempotent).
func (s *keyTable) add(k uint64) {
	if k == 0 {
		s.hasZero = true
		return
	}
	if (s.n+1)*8 > len(s.slots)*7 {
		s.grow()
	}
	mask := len(s.slots) - 1
	for i := s.home(k); ; i = (i + 1) & mask {
		switch s.slots[i] {
		case k:
			return
		case 0:
			s.slots[i] = k
			s.n++
			return
		}
	}
}

// remove deletes k if present.
func (s *keyTable) remove(k uint64) {
	if k == 0 {
		s.hasZero = false
		return
	}
	if s.n == 0 {
		return
	}
	mask := len(s.slots) - 1
	i := s.home(k)
	for s.slots[i] != k {
		if s.slots[i] == 0 {
			return
		}
		i = (i + 1) & mask
	}
	// Backward-shift: move later entries of the probe run into the hole when
	// their home is not between the hole and their slot.
	j := i
	for {
		j = (j + 1) & mask
		v := s.slots[j]
		if v == 0 {
			break
		}
		h := s.home(v)
		if (j > i && (h <= i || h > j)) || (j < i && (h <= i && h > j)) {
			s.slots[i] = v
			i = j
		}
	}
	s.slots[i] = 0
	s.n--
	if len(s.slots) > keySetMinSlots && s.n*8 < len(s.slots) {
		s.resize(len(s.slots) / 2)
	}
}

func (s *keyTable) grow() {
	if len(s.slots) == 0 {
		s.resize(keySetMinSlots)
		return
	}
	s.resize(len(s.slots) * 2)
}

func (s *keyTable) resize(size int) {
	old := s.slots
	s.slots = make([]uint64, size)
	s.shift = uint8(64 - bits.TrailingZeros(uint(size)))
	s.n = 0
	mask := size - 1
	for _, k := range old {
		if k == 0 {
			continue
		}
		i := s.home(k)
		for s.slots[i] != 0 {
			i = (i + 1) & mask
		}
		s.slots[i] = k
		s.n++
	}
}

// each calls f for every key. f must not modify the set.
func (s *keyTable) each(f func(k uint64)) {
	if s.hasZero {
		f(0)
	}
	for _, k := range s.slots {
		if k != 0 {
			f(k)
		}
	}
}
