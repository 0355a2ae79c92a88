package sim

// lru is a fixed-capacity set of block keys in least-recently-used order. A
// key touched during the current request (pin epoch) is never evicted, as an
// engine never frees blocks a running request holds.
type lru struct {
	cap   int
	nodes map[uint64]*lruNode
	head  lruNode // sentinel: head.next is the most recent, head.prev the least
	epoch uint64
}

type lruNode struct {
	key        uint64
	pin        uint64
	prev, next *lruNode
}

func newLRU(capacity int) *lru {
	l := &lru{cap: capacity, nodes: make(map[uint64]*lruNode)}
	l.head.prev, l.head.next = &l.head, &l.head
	return l
}

func (l *lru) len() int          { return len(l.nodes) }
func (l *lru) has(k uint64) bool { _, ok := l.nodes[k]; return ok }
func (l *lru) startRequest()     { l.epoch++ }
func (l *lru) unlink(n *lruNode) { n.prev.next, n.next.prev = n.next, n.prev }
func (l *lru) pushFront(n *lruNode) {
	n.prev, n.next = &l.head, l.head.next
	l.head.next.prev = n
	l.head.next = n
}
func (l *lru) pinned(n *lruNode) bool { return n.pin == l.epoch && l.epoch != 0 }
func (l *lru) remove(k uint64) bool {
	n, ok := l.nodes[k]
	if ok {
		l.unlink(n)
		delete(l.nodes, k)
	}
	return ok
}

// touch marks k most recently used (and pinned for this request) if present.
func (l *lru) touch(k uint64) bool {
	n, ok := l.nodes[k]
	if ok {
		l.unlink(n)
		l.pushFront(n)
		n.pin = l.epoch
	}
	return ok
}

// add inserts k (which must be absent) as most recent and pinned. When full it
// first evicts the least recently used unpinned key, appended to evicted. ok
// is false when every key is pinned: k is then not added.
func (l *lru) add(k uint64, evicted []uint64) (_ []uint64, ok bool) {
	if l.cap <= 0 {
		return evicted, false
	}
	if len(l.nodes) >= l.cap {
		n := l.head.prev
		for n != &l.head && l.pinned(n) {
			n = n.prev
		}
		if n == &l.head {
			return evicted, false
		}
		l.unlink(n)
		delete(l.nodes, n.key)
		evicted = append(evicted, n.key)
	}
	n := &lruNode{key: k, pin: l.epoch}
	l.nodes[k] = n
	l.pushFront(n)
	return evicted, true
}

// keys appends every key, most recent first.
func (l *lru) keys(dst []uint64) []uint64 {
	for n := l.head.next; n != &l.head; n = n.next {
		dst = append(dst, n.key)
	}
	return dst
}
