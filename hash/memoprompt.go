package hash

import (
	"bytes"
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/zeebo/xxh3"
)

// DefaultMemoPromptBytes is the recent-prompt budget of a Memo when the caller
// has no better figure: 16 MiB, about 270 prompts of 8k tokens at B = 16.
const DefaultMemoPromptBytes = 16 << 20

// Recent-prompt geometry and policy.
const (
	promptWays = 4
	// promptBytesPerSlot sizes the slot array: one slot per 16 KiB of budget
	// (a 2k-token prompt at B = 16), at least one bucket.
	promptBytesPerSlot = 16 << 10
	// promptMinBlocks: shorter prompts are left to the digest table (an entry
	// would save a few lookups and cost an allocation).
	promptMinBlocks = 4
	// promptDoorSlots is the doorkeeper's size (8 bytes each).
	promptDoorSlots = 1 << 12
	// promptStateSize is the size of one promptState (pinned by a test).
	promptStateSize = 56
	// promptEntryOverhead is what an entry costs besides its arrays.
	promptEntryOverhead = int64(unsafe.Sizeof(promptEntry{}))
)

// promptState is the chain state after one block: its projected key, the
// rolling memo key of the prefix ending there, and its digest.
type promptState struct {
	key uint64
	mk  xxh3.Uint128
	d   [32]byte
}

// promptEntry is one recent prompt, immutable once published: the tokens its
// n stored blocks depend on and the chain state after each of them.
type promptEntry struct {
	k0     xxh3.Uint128 // rolling memo key after block 0: namespace and block 0 tokens
	tokens []int32      // tokens[:n*B+extra]
	states []promptState
	bytes  int64
}

// promptCache is the Memo's second level: whole recent prompts, so that a
// repeated prompt (or a prompt sharing a stored prompt's leading blocks) costs
// one token comparison per block instead of one memo probe per block.
//
// # Lookup
//
// At block 0 a chain computes k_0 (the memo key it needs anyway), reads the
// promptWays entries of bucket k_0, keeps those with its k_0, and compares
// tokens: the whole common span at once (one bytes.Equal), else block by
// block up to the first difference. The entry with the most matching blocks
// serves them: key, digest and memo key of each come from the entry, and the
// chain continues from the last served block's digest and memo key with the
// digest table and SHA-256. Tokens are compared verbatim, and k_0 is the
// memo's keyed 128-bit hash of everything else a digest depends on (the tag:
// namespace, profile, B, LoRA, salt), so a served block is exact under the
// same assumption as a digest-table hit.
//
// # Admission
//
// When a query ends (FlushMemoStats), its computed prefix of at least
// promptMinBlocks complete blocks is admitted if it is not already served in
// full and a doorkeeper (promptDoorSlots words of rolling memo keys) saw the
// same prefix before: only repeated prompts are stored, so a stream of new
// prompts allocates nothing here; a repeated prompt pays one allocation on its
// second sight and is served from its third.
//
// # Bound and concurrency protocol
//
// Entries are immutable and published with atomic.Pointer stores; readers
// load a pointer and read the entry with no further synchronisation. An
// admission CASes its way (an empty way, else the way the hint picks) from
// the pointer it read to the new entry (losing the race drops the admission),
// adds its size minus the replaced entry's to used, and, while used exceeds
// the budget, evicts other slots round-robin (CAS to nil, subtract). One entry
// holds at most a quarter of the budget (longer prompts store their leading
// blocks). used counts published entries; it may exceed the budget only by the
// entries of admissions in flight. Replaced entries are garbage for the GC.
type promptCache struct {
	budget int64
	mask   uint64 // buckets - 1
	slots  []atomic.Pointer[promptEntry]
	door   []atomic.Uint64
	used   atomic.Int64
	cursor atomic.Uint64

	hits, admissions, evictions paddedCounter
}

func newPromptCache(budget int) *promptCache {
	if budget <= 0 {
		return nil
	}
	buckets := floorPow2(max(budget/promptBytesPerSlot/promptWays, 1))
	return &promptCache{
		budget: int64(budget),
		mask:   uint64(buckets - 1),
		slots:  make([]atomic.Pointer[promptEntry], buckets*promptWays),
		door:   make([]atomic.Uint64, promptDoorSlots),
	}
}

func (pc *promptCache) bucket(k0 xxh3.Uint128) []atomic.Pointer[promptEntry] {
	i := (k0.Lo & pc.mask) * promptWays
	return pc.slots[i : i+promptWays : i+promptWays]
}

// maxBlocks is the most blocks one entry may hold at block size bs.
func (pc *promptCache) maxBlocks(bs, extra int) int {
	if int64(bs) > pc.budget {
		return 0 // not one block fits (and 4*bs could overflow)
	}
	return int((pc.budget/4 - promptEntryOverhead - 4*int64(extra)) / (4*int64(bs) + promptStateSize))
}

// lookup returns the entry with the most leading blocks equal to the prompt's
// (tokens, of which full blocks are complete) and that count; nil, 0 if none.
func (pc *promptCache) lookup(k0 xxh3.Uint128, tokens []int32, full, bs, extra int) (*promptEntry, int) {
	var best *promptEntry
	bestN := 0
	b := pc.bucket(k0)
	for w := range b {
		e := b[w].Load()
		if e == nil || e.k0 != k0 {
			continue
		}
		if n := commonBlocks(e, tokens, full, bs, extra); n > bestN {
			best, bestN = e, n
			if n == full {
				break
			}
		}
	}
	return best, bestN
}

// commonBlocks counts the leading blocks whose tokens (each block's span plus
// extra) are equal in the entry and the prompt.
func commonBlocks(e *promptEntry, tokens []int32, full, bs, extra int) int {
	m := min(len(e.states), full)
	if end := m*bs + extra; equalTokens(tokens[:end], e.tokens[:end]) {
		return m
	}
	n := 0
	for n < m && equalTokens(tokens[n*bs:(n+1)*bs+extra], e.tokens[n*bs:(n+1)*bs+extra]) {
		n++
	}
	return n
}

func equalTokens(a, b []int32) bool {
	if nativeLE {
		return bytes.Equal(tokenBytes(a), tokenBytes(b))
	}
	return slices.Equal(a, b)
}

// seen reports whether the doorkeeper saw key k before, and records it if not.
func (pc *promptCache) seen(k xxh3.Uint128) bool {
	s := &pc.door[k.Hi&(promptDoorSlots-1)]
	if s.Load() == k.Lo {
		return true
	}
	s.Store(k.Lo)
	return false
}

// admit publishes a new entry for tokens (the span its blocks depend on) and
// the states of its blocks, given as a served prefix (from another entry) and
// the states computed after it.
func (pc *promptCache) admit(tokens []int32, served, computed []promptState, hint uint32) {
	states := slices.Concat(served, computed)
	e := &promptEntry{k0: states[0].mk, tokens: slices.Clone(tokens), states: states}
	e.bytes = promptEntryOverhead + 4*int64(len(e.tokens)) + promptStateSize*int64(len(states))
	b := pc.bucket(e.k0)
	victim := int(hint % promptWays)
	for w := range b {
		if b[w].Load() == nil {
			victim = w
			break
		}
	}
	old := b[victim].Load()
	if !b[victim].CompareAndSwap(old, e) {
		return // a concurrent admission took the way
	}
	pc.admissions.Add(1)
	delta := e.bytes
	if old != nil {
		delta -= old.bytes
		pc.evictions.Add(1)
	}
	used := pc.used.Add(delta)
	for i := 0; used > pc.budget && i < len(pc.slots); i++ {
		s := &pc.slots[pc.cursor.Add(1)&uint64(len(pc.slots)-1)]
		if o := s.Load(); o != nil && o != e && s.CompareAndSwap(o, nil) {
			used = pc.used.Add(-o.bytes)
			pc.evictions.Add(1)
		}
	}
}

// Chain side: fields rOn, rE, rN, rMax and states (chain.go).

// promptStep is step with the recent-prompt level on: block 0 looks the
// prompt up; blocks an entry matches come from it; the rest are hashed and
// their states recorded for admission.
func (c *Chain) promptStep() uint64 {
	i := c.next
	if i == 0 {
		c.promptLookup()
	}
	if i < c.rN {
		c.next++ // counted as hits by promptEnd
		return c.rE.states[i].key
	}
	if i > 0 && i == c.rN { // leaving the entry: continue from its last served block
		s := &c.rE.states[i-1]
		c.parent, c.mKey = s.d, s.mk
	}
	k := c.hashStep()
	if len(c.states) < c.rMax {
		c.states = append(c.states, promptState{key: k, mk: c.mKey, d: c.parent})
	}
	return k
}

// fullBlocks is the number of complete blocks (the only ones entries hold).
func (c *Chain) fullBlocks() int { return c.logical / c.bs }

// promptExtra is how many tokens past its own span a block's digest reads.
func (c *Chain) promptExtra() int {
	if c.strategy == StrategySGLangBigram {
		return 1
	}
	return 0
}

func (c *Chain) promptLookup() {
	pc := c.memo.prompts
	full := c.fullBlocks()
	extra := c.promptExtra()
	c.rMax = min(full, pc.maxBlocks(c.bs, extra))
	if c.rMax < promptMinBlocks {
		c.rOn = false // never admitted: skip the bookkeeping
		return
	}
	k0 := memoRoll(c.buf[:cap(c.buf)], c.memo, c.mKey, c.memoTokens(0))
	c.rE, c.rN = pc.lookup(k0, c.tokens, full, c.bs, extra)
	if c.rN == 0 {
		c.rE = nil
		c.mAhead[0], c.mAt, c.mN, c.mHead = k0, 0, 1, 0 // memoGet of block 0 reuses it
	}
}

// promptEnd ends the level's part in the current prompt (FlushMemoStats): it
// offers the computed prefix for admission, counts the served blocks as hits
// (of the memo and of the level), and, when the walk stopped inside the
// stored prompt, leaves the chain at the last served block's state, so that
// later At calls continue without the level.
func (c *Chain) promptEnd() {
	c.rOn = false
	c.promptAdmit()
	if c.rE == nil {
		return
	}
	served := min(c.next, c.rN)
	if served > 0 && c.next <= c.rN {
		s := &c.rE.states[c.next-1]
		c.parent, c.mKey = s.d, s.mk
	}
	c.mHits += uint32(served)
	c.memo.prompts.hits.Add(uint64(served))
	c.rE, c.rN = nil, 0
}

// promptAdmit offers the chain's computed prefix to the recent-prompt level.
func (c *Chain) promptAdmit() {
	pc := c.memo.prompts
	served := min(c.next, c.rN)
	n := min(c.next, c.fullBlocks(), served+len(c.states), c.rMax)
	if n < promptMinBlocks || n <= served {
		return // too short, or the entry served all of it
	}
	computed := c.states[:n-served]
	if !pc.seen(computed[len(computed)-1].mk) {
		return
	}
	var prefix []promptState
	if served > 0 {
		prefix = c.rE.states[:served]
	}
	pc.admit(c.tokens[:n*c.bs+c.promptExtra()], prefix, computed, c.mMiss+uint32(n))
}
