package core

import "math/bits"

// keySet is an owner's set of block keys: an open-addressing hash set of
// uint64 with linear probing and backward-shift deletion (no tombstones), so
// inserts and deletes on the apply path cost a few nanoseconds and iteration
// visits only the table. The zero value is an empty set. Not safe for
// concurrent use (one subscription writer owns it).
type keySet struct {
	slots []uint64 // 0 = empty; the key 0 is kept in hasZero
	n     int      // keys in slots
	shift uint8    // 64 - log2(len(slots))
	// hasZero records the key 0, which cannot live in a slot.
	hasZero bool
}

const keySetMinSlots = 16

func (s *keySet) home(k uint64) int {
	return int((k * 0x9E3779B97F4A7C15) >> s.shift)
}

// Len returns the number of keys.
func (s *keySet) Len() int {
	if s.hasZero {
		return s.n + 1
	}
	return s.n
}

// add inserts k (idempotent).
func (s *keySet) add(k uint64) {
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
func (s *keySet) remove(k uint64) {
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

func (s *keySet) grow() {
	if len(s.slots) == 0 {
		s.resize(keySetMinSlots)
		return
	}
	s.resize(len(s.slots) * 2)
}

func (s *keySet) resize(size int) {
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
func (s *keySet) each(f func(k uint64)) {
	if s.hasZero {
		f(0)
	}
	for _, k := range s.slots {
		if k != 0 {
			f(k)
		}
	}
}

// reset empties the set and releases its table.
func (s *keySet) reset() { *s = keySet{} }
