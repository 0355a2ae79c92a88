package core

import (
	"math/bits"
	"sync"
)

// keySet is an owner's set of block keys: every block key in which the owner
// holds at least one tier. Clearing an owner visits only these.
//
// The caller keeps one contract, which the apply path reads off the block
// under its bucket lock: add(k) only when the owner did not hold block k
// before, remove(k) only when it holds it no longer. So for each key the
// calls alternate, add first, and the set is exact without ever looking a key
// up: add appends k to a log of adds, remove appends k to a log of removes,
// and Len is adds minus removes. Storing a new block costs an append, not a
// write at a random slot of a table as large as the owner's blocks (a cache
// miss per block: about a fifth of conductor's CPU while a 10M-block index
// grew).
//
// A key is in the set when it appears more often among the adds than among
// the removes. Once the removes number half the keys in the set, compact
// cancels each remove against one add of its key (so the adds hold at most
// 1.5 times the set's keys and the removes half; an owner that holds no
// block keeps no log). each compacts first and visits exactly the set.
//
// Past keySetSplit keys the set becomes keySubs logs chosen by bits of the
// key, each compacting on its own, so that no remove of a large owner
// compacts the whole set at once.
//
// The adds keep the order keys entered the set (compaction cancels a
// key's oldest add, keeping its newest), which serves two bounds:
//
//   - evict drops the keys that entered the set first (a registration's
//     block bound, Subscription.evictOver). It takes adds from the front of
//     the log without compacting (a bound reached evicts on every batch, and
//     a compaction per batch would cost the whole set each time): the
//     caller's drop says whether the owner held the key, and an add whose
//     key had left the set is kept aside for the compaction to cancel
//     against its pending remove. So evict costs the adds it takes. Its
//     order is the adds' order: a key removed and stored again since the
//     log's last compaction leaves in the place of its first add;
//   - a mark records, at a gap the transport could not heal, how many keys
//     the set holds: they precede the mark in add order, and every later
//     add follows it. Compaction keeps the mark in place as cancelled adds
//     before it go; refresh moves a key re-announced after the mark behind
//     it; takeMark returns the keys still before it (Subscription.expire
//     drops them: the gap policy "expire").
//
// After the split each log holds its own marks; evict takes from every log
// in proportion to its size, so it drops the oldest keys of each log,
// which are the set's oldest to within the spread of keys over the logs.
// TestKeySetAgreesWithMap and TestKeySetSplitAgreesWithMap check it against
// a map; TestTierBlocksMatchesIndex checks every owner's set against a walk
// of the index. The zero value is an empty set. Not safe for concurrent use
// (one subscription writer owns it).
type keySet struct {
	l    keyLog
	subs []keyLog // nil until the split
	n    int      // keys in the set
}

const (
	keySetSplit = 1 << 16
	keySubBits  = 6
	keySubs     = 1 << keySubBits
)

// keySub picks a key's log after the split: the top bits of a multiply (keys
// are hash outputs; a crafted set only makes one log long).
func keySub(k uint64) uint64 { return (k * 0xD6E8FEB86659FD93) >> (64 - keySubBits) }

// Len returns the number of keys.
func (s *keySet) Len() int { return s.n }

// add inserts k, which must not be in the set.
func (s *keySet) add(k uint64) {
	s.n++
	if s.subs != nil {
		s.subs[keySub(k)].add(k)
		return
	}
	s.l.add(k)
	if s.l.added() > keySetSplit {
		s.split()
	}
}

// remove deletes k, which must be in the set.
func (s *keySet) remove(k uint64) {
	s.n--
	if s.subs != nil {
		s.subs[keySub(k)].remove(k)
		return
	}
	s.l.remove(k)
}

// refresh moves k, which must be in the set, behind every mark and to the
// newest place in add order.
func (s *keySet) refresh(k uint64) {
	s.remove(k)
	s.add(k)
}

// mark records mark id behind every key now in the set.
func (s *keySet) mark(id uint64) {
	if s.subs == nil {
		s.l.mark(id)
		return
	}
	for i := range s.subs {
		s.subs[i].mark(id)
	}
}

// takeMark appends to dst the keys before mark id and forgets the mark.
// The keys stay in the set: the caller removes each once it dropped it.
func (s *keySet) takeMark(id uint64, dst []uint64) []uint64 {
	if s.subs == nil {
		return s.l.takeMark(id, dst)
	}
	for i := range s.subs {
		dst = s.subs[i].takeMark(id, dst)
	}
	return dst
}

// evict drops about n of the keys that entered the set first (exactly n
// before the split, from n to n+keySubs after it; all of them when n ≥ Len):
// drop is called with candidate keys, oldest first in each log, drops the
// owner's holdings at the key and reports whether it held any (the key was
// in the set). It returns the number of keys dropped, which left the set.
func (s *keySet) evict(n int, drop func(k uint64) bool) int {
	if n <= 0 || s.n == 0 {
		return 0
	}
	done := 0
	if s.subs == nil {
		done = s.l.evict(n, drop)
	} else {
		total := s.n
		for i := range s.subs {
			if l := &s.subs[i]; l.n > 0 {
				done += l.evict((n*l.n+total-1)/total, drop) // ⌈n × share⌉
			}
		}
	}
	s.n -= done
	return done
}

// each calls f once for every key. f must not modify the set.
func (s *keySet) each(f func(k uint64)) {
	if s.subs == nil {
		s.l.each(f)
		return
	}
	for i := range s.subs {
		s.subs[i].each(f)
	}
}

// eachMarked calls f once for every key with the id of the oldest mark the
// key precedes (0: none), for a dump of pending gap marks.
func (s *keySet) eachMarked(f func(k, mark uint64)) {
	if s.subs == nil {
		s.l.eachMarked(f)
		return
	}
	for i := range s.subs {
		s.subs[i].eachMarked(f)
	}
}

// eachMarked is keySet.eachMarked for one log: the key at index p of the
// compacted adds precedes every mark at a position above p.
func (l *keyLog) eachMarked(f func(k, mark uint64)) {
	l.compact()
	p, mi := 0, 0
	for _, c := range l.chunks {
		for _, k := range c {
			for mi < len(l.marks) && l.marks[mi].pos <= p {
				mi++
			}
			id := uint64(0)
			if mi < len(l.marks) {
				id = l.marks[mi].id
			}
			f(k, id)
			p++
		}
	}
}

// split spreads the log over keySubs logs in add order; each mark lands in
// every log behind the keys that preceded it.
func (s *keySet) split() {
	subs := make([]keyLog, keySubs)
	marks := s.l.marks
	i, mi := 0, 0
	place := func() {
		for ; mi < len(marks) && marks[mi].pos == i; mi++ {
			for j := range subs {
				subs[j].marks = append(subs[j].marks, keyMark{id: marks[mi].id, pos: subs[j].n})
			}
		}
	}
	s.l.each(func(k uint64) {
		place()
		subs[keySub(k)].add(k)
		i++
	})
	place()
	s.subs, s.l = subs, keyLog{}
}

// reset empties the set and releases its logs.
func (s *keySet) reset() { *s = keySet{} }

// keyLog is one log pair of a keySet (see there). The adds are kept in
// chunks of keyChunk keys (the first one grows by append up to that, so a
// small owner costs no more than its keys): a large log grows without ever
// copying itself, and allocates 8 bytes per key it receives.
type keyLog struct {
	chunks  [][]uint64 // the adds; every chunk but the last holds keyChunk keys
	removes []uint64
	// head counts the adds at the front of chunks[0] that evict took.
	// skipped holds those of them whose key had left the set: each is its
	// key's oldest add, which the key's oldest pending remove cancels.
	head    int
	skipped []uint64
	n       int // adds (after head, and skipped) minus removes: keys in the set
	// marks, oldest first: each stands before the add at index pos (so
	// their positions never decrease along the slice).
	marks []keyMark
}

// keyMark is a mark of a keyLog (see keySet): id is the caller's, pos the
// number of adds before it.
type keyMark struct {
	id  uint64
	pos int
}

const (
	keyChunk = 256
	// keyLogMinCompact is the fewest removes a compaction runs for, so a
	// small log does not compact on every few removes.
	keyLogMinCompact = 64
)

// added returns the number of adds in the log.
func (l *keyLog) added() int {
	if len(l.chunks) == 0 {
		return 0
	}
	return (len(l.chunks)-1)*keyChunk + len(l.chunks[len(l.chunks)-1])
}

func (l *keyLog) add(k uint64) {
	last := len(l.chunks) - 1
	switch {
	case last < 0:
		l.chunks = append(l.chunks, make([]uint64, 0, 4))
		last = 0
	case len(l.chunks[last]) == keyChunk:
		l.chunks = append(l.chunks, make([]uint64, 0, keyChunk))
		last++
	}
	l.chunks[last] = append(l.chunks[last], k)
	l.n++
}

func (l *keyLog) remove(k uint64) {
	l.n--
	if l.n == 0 {
		l.emptied()
		return
	}
	l.removes = append(l.removes, k)
	if len(l.removes) >= max(l.n/2, keyLogMinCompact) {
		l.compact()
	}
}

// emptied resets a log whose last key left: every add has met its remove or
// was evicted, and no key precedes any mark.
func (l *keyLog) emptied() {
	marks := l.marks
	*l = keyLog{marks: marks[:0]}
	for _, m := range marks {
		l.marks = append(l.marks, keyMark{id: m.id})
	}
	if len(l.marks) == 0 {
		l.marks = nil
	}
}

// evict takes adds from the front of the log and calls drop with each key
// until drop has returned true n times or the log is empty, and returns how
// many times it did. A key drop did not hold had left the set (its add
// awaits a pending remove): the add goes to skipped. A key whose first add
// was cancelled but which is in the set again (removed and stored since the
// last compaction) is dropped there: its newer add then meets the pending
// remove. A chunk whose adds were all taken is released.
func (l *keyLog) evict(n int, drop func(k uint64) bool) int {
	done := 0
	for done < n && l.n > 0 {
		// n > 0 leaves at least n adds after head (the skipped ones cancel
		// as many removes), so chunks[0] has one at head.
		k := l.chunks[0][l.head]
		l.head++
		if drop(k) {
			done++
			l.n--
		} else {
			l.skipped = append(l.skipped, k)
		}
		if l.head == keyChunk {
			l.chunks[0] = nil
			l.chunks = l.chunks[1:]
			l.head = 0
			for i := range l.marks {
				l.marks[i].pos = max(l.marks[i].pos-keyChunk, 0)
			}
		}
	}
	if l.n == 0 {
		l.emptied()
	}
	return done
}

// compact cancels each remove against one add of its key, leaving the adds
// holding the set's keys once each and removes empty. The removes go into a
// scratch multiset (a table of twice their number, so it stays in cache for
// logs of a keySubs-th of a large owner), then one pass over the adds drops
// each add that meets a remove, moving the kept ones down in place.
func (l *keyLog) compact() {
	if len(l.removes) == 0 && l.head == 0 {
		return
	}
	var t *cancelTable
	if len(l.removes) > 0 {
		t = newCancelTable(len(l.removes))
		for _, k := range l.removes {
			t.put(k)
		}
		for _, k := range l.skipped {
			t.take(k) // the oldest add of its key: its oldest remove
		}
	}
	wc, wj := 0, 0 // where the next kept key goes; never past the one read
	// i counts the adds read and kept those written: a mark before add i
	// moves to stand before kept add kept.
	i, kept, mi := 0, 0, 0
	for _, c := range l.chunks {
		for _, k := range c {
			for ; mi < len(l.marks) && l.marks[mi].pos == i; mi++ {
				l.marks[mi].pos = kept
			}
			i++
			if i <= l.head || (t != nil && t.take(k)) { // taken by evict, or cancelled
				continue
			}
			kept++
			l.chunks[wc][wj] = k
			if wj++; wj == keyChunk {
				wc, wj = wc+1, 0
			}
		}
	}
	for ; mi < len(l.marks); mi++ {
		l.marks[mi].pos = kept
	}
	if t != nil {
		t.release()
	}
	if wj > 0 {
		l.chunks[wc] = l.chunks[wc][:wj]
		wc++
	}
	clear(l.chunks[wc:]) // the emptied chunks go to the collector
	l.chunks = l.chunks[:wc]
	if len(l.chunks) == 0 {
		l.chunks = nil
	}
	l.removes = l.removes[:0]
	if cap(l.removes) > l.n+keyLogMinCompact {
		l.removes = nil
	}
	l.head, l.skipped = 0, nil
}

func (l *keyLog) each(f func(k uint64)) {
	l.compact()
	for _, c := range l.chunks {
		for _, k := range c {
			f(k)
		}
	}
}

// first appends the n oldest keys (all when n ≥ the log's) to dst.
func (l *keyLog) first(n int, dst []uint64) []uint64 {
	l.compact()
	for _, c := range l.chunks {
		if n <= 0 {
			break
		}
		c = c[:min(n, len(c))]
		dst = append(dst, c...)
		n -= len(c)
	}
	return dst
}

// mark records mark id behind every key now in the log.
func (l *keyLog) mark(id uint64) {
	l.compact()
	l.marks = append(l.marks, keyMark{id: id, pos: l.n})
}

// takeMark appends the keys before mark id to dst and forgets the mark (a
// log without it appends nothing).
func (l *keyLog) takeMark(id uint64, dst []uint64) []uint64 {
	l.compact() // places the marks among the kept adds
	for i, m := range l.marks {
		if m.id != id {
			continue
		}
		l.marks = append(l.marks[:i], l.marks[i+1:]...)
		if len(l.marks) == 0 {
			l.marks = nil
		}
		return l.first(m.pos, dst)
	}
	return dst
}

// cancelTable is compact's multiset of removes: open addressing with linear
// probing; a key put twice fills two slots, and take consumes one. Tables
// are pooled (each compaction would otherwise allocate one).
type cancelTable struct {
	keys  []uint64
	state []uint8 // slotEmpty, slotFull or slotTaken
	shift uint8
}

const (
	slotEmpty uint8 = iota
	slotFull
	slotTaken
)

var cancelTables = sync.Pool{New: func() any { return new(cancelTable) }}

func newCancelTable(n int) *cancelTable {
	t := cancelTables.Get().(*cancelTable)
	size := 1 << bits.Len(uint(2*n-1)) // ≥ 2n, a power of two
	if cap(t.keys) < size {
		t.keys, t.state = make([]uint64, size), make([]uint8, size)
	}
	t.keys, t.state = t.keys[:size], t.state[:size]
	clear(t.state)
	t.shift = uint8(64 - bits.TrailingZeros(uint(size)))
	return t
}

func (t *cancelTable) release() { cancelTables.Put(t) }

func (t *cancelTable) home(k uint64) int { return int((k * 0x9E3779B97F4A7C15) >> t.shift) }

func (t *cancelTable) put(k uint64) {
	mask := len(t.keys) - 1
	i := t.home(k)
	for t.state[i] != slotEmpty {
		i = (i + 1) & mask
	}
	t.keys[i], t.state[i] = k, slotFull
}

// take consumes one copy of k and reports whether there was one.
func (t *cancelTable) take(k uint64) bool {
	mask := len(t.keys) - 1
	for i := t.home(k); t.state[i] != slotEmpty; i = (i + 1) & mask {
		if t.state[i] == slotFull && t.keys[i] == k {
			t.state[i] = slotTaken
			return true
		}
	}
	return false
}
