package core

import (
	"math/bits"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/seed-c7a81618/conductor/hash"
)

// ContextKey identifies a context: exactly these four fields participate in
// equality; instance, rank, endpoint and query salt live outside the key.
type ContextKey struct {
	TenantID  string
	ModelName string
	LoraName  string
	BlockSize int
}

// ownerInfo describes one interned owner of a context.
type ownerInfo struct {
	sub    uint32 // owning subscription id
	shared bool   // pool owner (visible to every rank) vs rank owner
	live   bool
	gen    uint8  // generation of this id (bumped when the id is released)
	rank   int32  // rank owners
	slot   int32  // index into ctxMeta.slots for live rank owners, else -1
	name   string // rank owners: instance id; shared owners: backend id
	// stream distinguishes owners of one (instance, rank) or pool backend by
	// RFC #1527 stream dimensions (salt, backend_id, medium; see streamTag),
	// so a `cleared` purges exactly its stream. 0 for engine events.
	stream uint64
	dims   *streamDims // RFC owners: the stream's salt, backend, medium
}

// slot is one query cursor: a (instance, rank) pair.
type slot struct {
	instance string
	rank     int32
}

// instanceSpan is one instance's contiguous run of slots.
type instanceSpan struct {
	id     string
	lo, hi int // slots[lo:hi]
}

// ctxMeta is an immutable snapshot of a context's owners and slots, swapped
// whole on change so queries read it without locks.
type ctxMeta struct {
	owners    []ownerInfo
	slots     []slot // sorted by (instance, rank)
	instances []instanceSpan
}

// context is one partition of a (tenant, model, lora, block_size) prefix
// index: the blocks filed under one hash profile (partition.go).
type context struct {
	key  ContextKey
	lora []byte // key.LoraName as bytes, for the hash chain
	// bind is the partition's hash profile and the identity that bound it.
	// It is replaced (once) when a pool-only partition is bound by its
	// first engine registration, while appliers and queries read it: hence
	// an atomic pointer.
	bind   atomic.Pointer[binding]
	blocks *blockMap // blockmap.go
	// next is the key's next partition, nil for the last. Written under
	// Index.mu, read lock-free by queries (partition.go).
	next atomic.Pointer[context]

	// meta is the snapshot readers use (snapshot): a change to the owners
	// or slots marks it stale under mu, and the next reader republishes it
	// once for every change since (publishLocked), so a registration storm
	// or a fleet's first stores copy the tables once per read, not once per
	// change.
	//
	// Protocol: a writer changes the tables and sets stale under mu, and
	// only then writes blocks that name a new owner; a reader loads stale
	// before meta, and republishes under mu when it is set. A reader that
	// begins after a change therefore sees it; one already past its load
	// sees the snapshot of its start, as it did when every change
	// republished at once (owners newer than it are skipped; query.go).
	meta  atomic.Pointer[ctxMeta]
	stale atomic.Bool

	// mu guards the owner table and slot registrations below and serialises
	// meta rebuilds. It is a plain mutex: it is held only for interning and
	// registration changes, never by queries or per-block updates.
	mu       sync.Mutex
	owners   []ownerInfo // a live rank owner's slot is its index in slots
	ownerIdx map[ownerKey]uint32
	freeIDs  []uint32
	// slotRefs counts, per (instance, rank), the registrations naming it
	// and the live rank owners on it; slots holds its keys sorted by
	// (instance, rank). A change moves the slots after it by one place
	// (refSlot), so a registration costs a copy of the slots and the
	// owners, not a rebuild and sort of both (TestSlotsAgreeWithRebuild).
	slotRefs  map[slot]int
	slots     []slot
	refs      int  // subscriptions referencing this context (Index.mu)
	reclaimed bool // removed from the index (Index.mu)
	// early are the subscriptions that took their reference while the
	// partition was unbound, until it is bound (Index.mu; rebind.go).
	early []*Subscription
}

type ownerKey struct {
	sub    uint32
	shared bool
	rank   int32
	name   string
	stream uint64
}

func newContext(key ContextKey, b *binding, sizeHint int) *context {
	c := &context{
		key:      key,
		lora:     []byte(key.LoraName),
		blocks:   newBlockMap(sizeHint),
		ownerIdx: make(map[ownerKey]uint32),
		slotRefs: make(map[slot]int),
	}
	c.meta.Store(&ctxMeta{})
	c.bind.Store(b)
	return c
}

// binding is a partition's hash profile. bound is false for a partition
// created only to hold pool blocks whose registration named no profile; the
// first engine (or explicit) registration binds it. owner is the
// Registration.Owner of the registration that bound it ("" while unbound).
type binding struct {
	profile hash.Profile
	bound   bool
	owner   string
}

// profile returns the partition's current hash profile (never nil).
func (c *context) profile() *hash.Profile { return &c.bind.Load().profile }

// internOwner returns the owner for k, creating it (and its slot) if new.
func (c *context) internOwner(k ownerKey, dims *streamDims) ownerRef {
	c.mu.Lock()
	defer c.mu.Unlock()
	if id, ok := c.ownerIdx[k]; ok {
		return makeRef(id, c.owners[id].gen)
	}
	info := ownerInfo{sub: k.sub, shared: k.shared, live: true, rank: k.rank, name: k.name, slot: -1, stream: k.stream, dims: dims}
	var id uint32
	if n := len(c.freeIDs); n > 0 {
		id = c.freeIDs[n-1]
		c.freeIDs = c.freeIDs[:n-1]
		info.gen = c.owners[id].gen
		c.owners[id] = info
	} else {
		id = uint32(len(c.owners))
		c.owners = append(c.owners, info)
	}
	c.ownerIdx[k] = id
	if !k.shared {
		c.refSlot(slot{k.name, k.rank}, 1)
		c.owners[id].slot = c.slotIndex(slot{k.name, k.rank})
	}
	c.stale.Store(true)
	return makeRef(id, info.gen)
}

// releaseOwners frees every owner of subscription sub (after its blocks were
// removed) and returns how many were freed.
func (c *context) releaseOwners(sub uint32) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for k, id := range c.ownerIdx {
		if k.sub != sub {
			continue
		}
		c.freeLocked(k, id)
		n++
	}
	if n > 0 {
		c.stale.Store(true)
	}
	return n
}

// freeLocked releases owner id of key k: its slot reference goes, and its
// table entry is free for reuse under the next generation.
func (c *context) freeLocked(k ownerKey, id uint32) {
	delete(c.ownerIdx, k)
	if o := c.owners[id]; o.live && !o.shared {
		c.owners[id].slot = -1
		c.refSlot(slot{o.name, o.rank}, -1)
	}
	c.owners[id] = ownerInfo{slot: -1, gen: c.owners[id].gen + 1}
	c.freeIDs = append(c.freeIDs, id)
}

// releaseOwner frees one owner that holds no block.
func (c *context) releaseOwner(k ownerKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id, ok := c.ownerIdx[k]
	if !ok {
		return
	}
	c.freeLocked(k, id)
	c.stale.Store(true)
}

// ownersOf returns the ids of every live owner of subscription sub matching keep.
func (c *context) ownersOf(sub uint32, keep func(ownerInfo) bool) map[uint32]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := make(map[uint32]bool)
	for k, id := range c.ownerIdx {
		if k.sub == sub && (keep == nil || keep(c.owners[id])) {
			ids[id] = true
		}
	}
	return ids
}

func (c *context) addRegSlot(s slot, delta int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refSlot(s, delta)
	c.stale.Store(true)
}

// slotLess orders slots by (instance, rank).
func slotLess(a, b slot) bool {
	if a.instance != b.instance {
		return a.instance < b.instance
	}
	return a.rank < b.rank
}

// slotIndex returns s's index in c.slots (-1 when it has none).
func (c *context) slotIndex(s slot) int32 {
	i := sort.Search(len(c.slots), func(i int) bool { return !slotLess(c.slots[i], s) })
	if i < len(c.slots) && c.slots[i] == s {
		return int32(i)
	}
	return -1
}

// refSlot adds delta to s's references: a slot that gains its first one is
// inserted in c.slots, one that loses its last is deleted, and the live rank
// owners on the slots after it move with them. The caller holds c.mu.
func (c *context) refSlot(s slot, delta int) {
	was := c.slotRefs[s]
	now := was + delta
	if now > 0 {
		c.slotRefs[s] = now
	} else {
		delete(c.slotRefs, s)
	}
	var at int32
	var shift int32
	switch {
	case was <= 0 && now > 0:
		at = int32(sort.Search(len(c.slots), func(i int) bool { return !slotLess(c.slots[i], s) }))
		c.slots = slices.Insert(c.slots, int(at), s)
		shift = 1
	case was > 0 && now <= 0:
		at = c.slotIndex(s)
		c.slots = slices.Delete(c.slots, int(at), int(at)+1)
		shift = -1
	default:
		return
	}
	for i := range c.owners {
		if o := &c.owners[i]; o.slot >= at && (shift > 0 || o.slot > at) {
			o.slot += shift
		}
	}
}

// snapshot returns the current meta snapshot, republished first if a change
// made it stale (see meta).
func (c *context) snapshot() *ctxMeta {
	if c.stale.Load() {
		c.mu.Lock()
		if c.stale.Load() {
			c.publishLocked()
		}
		c.mu.Unlock()
	}
	return c.meta.Load()
}

// publishLocked publishes a new meta snapshot of the slots and owners.
// Slots are the registered (instance, rank) pairs plus those of live rank
// owners (a batch dp rank may override the registered one; such ranks still
// appear in results).
func (c *context) publishLocked() {
	m := &ctxMeta{slots: slices.Clone(c.slots), owners: slices.Clone(c.owners)}
	for i, s := range m.slots {
		if n := len(m.instances); n == 0 || m.instances[n-1].id != s.instance {
			m.instances = append(m.instances, instanceSpan{id: s.instance, lo: i, hi: i + 1})
		} else {
			m.instances[n-1].hi = i + 1
		}
	}
	c.meta.Store(m)
	c.stale.Store(false)
}

// dropOwnerKeys drops every holding of owner id (any tier) from the blocks
// in keys, the owner's own key set. Cost is proportional to the owner's
// blocks, not to the context's. It returns the number of blocks changed.
func (c *context) dropOwnerKeys(id uint32, keys *keySet, holdings *[NumTiers]padI64) (blocks int) {
	keys.each(func(k uint64) {
		if c.dropOwnerKey(id, k, holdings) {
			blocks++
		}
	})
	return blocks
}

// dropOwnerKey drops every word of owner id from block k and reports whether
// the block changed.
func (c *context) dropOwnerKey(id uint32, k uint64, holdings *[NumTiers]padI64) (changed bool) {
	drop := func(o uint32) bool { return o == id }
	c.blocks.Compute(k, func(old blockVal, loaded bool) (blockVal, bool) {
		if !loaded {
			return old, true
		}
		var nv blockVal
		nv, changed = old.withoutOwners(drop)
		if changed {
			old.forEach(func(w uint64) {
				if wordOwner(w) == id {
					holdings[wordTier(w)].Add(-1)
				}
			})
		}
		return nv, nv.empty()
	})
	return changed
}

// hashBlockKey is the block map's hasher: a 64×64→128-bit multiply of the key
// with the map's random per-table seed folded in, hi^lo (the wyhash mix). It is
// several ns cheaper per probe than xsync's default (runtime typehash through
// an indirect call), and a query probes once per block. Keys are hash outputs
// already; the seed keeps a crafted /query_by_hash key set from clustering.
func hashBlockKey(k, seed uint64) uint64 {
	hi, lo := bits.Mul64(k^seed, 0x9e3779b97f4a7c15^seed<<1|1)
	return hi ^ lo
}
