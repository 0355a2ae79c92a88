package core

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"
)

// Stream dumps: the exact state of each subscription, for a replica to start
// from (GET /dump, peer recovery).
//
// A subscription's section is written under the subscription's lock, so it is
// consistent with its watermark: every batch up to Seq is in it, none after.
// The recovering replica restores the section, then its own listener (which
// has been buffering since before the dump was taken, behind the apply gate)
// skips batches at or below Seq and applies the rest. So nothing from the dump
// overrides a newer live event of the same stream — a block removed after the
// dump was taken is removed again by the buffered event, and a batch both in
// the dump and in the buffer is not counted twice
// (TestRestoreStreamSkipsDumpedBatches).
//
// Cost: a section costs the blocks of its own owners in each context the
// subscription touched, looked up through their key sets, or one walk of the
// context when that visits fewer (dumpSection.byKeys); so a dump of S subscriptions
// sharing a context costs about one walk of it, not S. The stream's ingest
// waits while its section is written (the events queue in the transport
// meanwhile).

// StreamInfo heads one subscription's section of a dump.
type StreamInfo struct {
	Reg Registration
	// Seq is the sequence of the last batch applied (HasSeq false when the
	// transport never set one).
	Seq    uint64
	HasSeq bool
	// Prior: the dump predates every message the transport will receive (a
	// snapshot an earlier run of this process wrote), so the first live
	// message of the incarnation the dump holds is above Seq, and one at or
	// below it proves that the publisher restarted meanwhile
	// (Subscription.FirstLive). False for a peer's dump, taken while this
	// index's transports were already receiving.
	Prior bool
	// Marks are the deadlines (Unix ns) of the subscription's pending gap
	// marks of the policy expire, in the order they were made (which a
	// replica's, whose own gaps follow its own clock, need not keep in
	// time), including marks no block is held at any more: a replica
	// repeats the relay's expiries one mark at a time, so both must hold the
	// same marks (StreamRestorer.End). Readers of a dump take at most
	// MaxGapMarks.
	Marks []int64
}

// MaxGapMarks bounds the pending gap marks a dump's section may list: one
// is made per unhealable gap, and each expires GapExpireAfter later.
const MaxGapMarks = 1024

// Holding is one (block, owner, tier) of a subscription.
type Holding struct {
	Context ContextKey
	// Shared holdings belong to a pool backend (Name); rank holdings to the
	// subscription's instance at Rank.
	Shared bool
	Name   string
	Rank   int32
	// Stream is set for holdings of an RFC #1527 stream owner: the stream's
	// salt, backend_id and medium (as the publisher named them, medium
	// lower-cased), so a restored index re-creates the same owner and a
	// later `cleared` of that stream purges exactly its blocks. nil for
	// engine-event owners (stream tag 0).
	Stream *StreamDims
	Tier   Tier
	Key    uint64
	Copies uint32
	// Expires is when the gap policy "expire" drops the holding unless its
	// owner announces the block again: the deadline, in Unix nanoseconds, of
	// the oldest pending gap mark the block was held at (0: none). A restore
	// re-creates the marks (StreamRestorer.End).
	Expires int64
}

// StreamDims are an RFC stream owner's dimensions besides context and rank.
type StreamDims struct {
	Salt, BackendID, Medium string
}

// Same reports whether a and b name the same stream (both nil: the engine
// stream).
func (a *StreamDims) Same(b *StreamDims) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// EngineEntry maps an engine's block hash to the prefix key it was filed
// under (xxh3 contexts fed by engines that hash differently) and to the plain
// standard sequence hash behind that key (the parent of the engine's next
// block; Key is Plain in the block's salt namespace), with the number of
// stores not yet removed.
type EngineEntry struct {
	Context ContextKey
	Hash    uint64
	Key     uint64
	Plain   uint64
	Count   uint32
}

// StreamVisitor receives a dump. Its methods run under the subscription's
// lock: they must not call back into the index for that subscription.
type StreamVisitor interface {
	Stream(*StreamInfo) error
	Holding(*Holding) error
	Engine(*EngineEntry) error
	EndStream(*StreamInfo) error
}

// DumpStreams writes the section of every subscription that keep accepts (nil
// = all), in service-key order. It stops at the first error of v.
func (ix *Index) DumpStreams(keep func(*Registration) bool, v StreamVisitor) error {
	ix.mu.Lock()
	subs := make([]*Subscription, 0, len(ix.subs))
	for _, s := range ix.subs {
		if keep == nil || keep(&s.reg) {
			subs = append(subs, s)
		}
	}
	ix.mu.Unlock()
	sort.Slice(subs, func(i, j int) bool { return keyLess(subs[i].reg.Key(), subs[j].reg.Key()) })
	for _, s := range subs {
		if err := s.dump(v); err != nil {
			return err
		}
	}
	return nil
}

func (s *Subscription) dump(v StreamVisitor) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	info := StreamInfo{Reg: s.reg, Seq: s.lastSeq, HasSeq: s.hasSeq}
	for _, m := range s.marks {
		info.Marks = append(info.Marks, m.at.UnixNano())
	}
	if err := v.Stream(&info); err != nil {
		return err
	}
	// Contexts in key order for a deterministic dump.
	scs := make([]*subCtx, 0, len(s.state))
	for _, sc := range s.state {
		scs = append(scs, sc)
	}
	sort.Slice(scs, func(i, j int) bool { return ctxLess(scs[i].ctx.key, scs[j].ctx.key) })
	for _, sc := range scs {
		if err := s.dumpCtx(sc, v); err != nil {
			return err
		}
	}
	return v.EndStream(&info)
}

func (s *Subscription) dumpCtx(sc *subCtx, v StreamVisitor) error {
	// A binding since the last event: its clear first, so that no key the
	// partition's profile does not compute is dumped.
	s.rebind(sc)
	mine := make(map[uint32]ownerKey, len(sc.owners))
	refs := make(map[uint32]ownerRef, len(sc.owners))
	var dims map[uint32]*StreamDims
	m := sc.ctx.snapshot()
	for k, r := range sc.owners {
		mine[r.id()] = k
		refs[r.id()] = r
		if k.stream == 0 {
			continue
		}
		// The subscription's own owners are interned under s.mu (held),
		// so the snapshot has them.
		d := &StreamDims{}
		if id := int(r.id()); id < len(m.owners) && m.owners[id].dims != nil {
			od := m.owners[id].dims
			d.Salt, d.BackendID, d.Medium = od.salt, od.backend, od.medium
		}
		if dims == nil {
			dims = make(map[uint32]*StreamDims)
		}
		dims[r.id()] = d
	}
	if len(mine) > 0 {
		d := dumpSection{sc: sc, mine: mine, refs: refs, dims: dims, v: v, h: Holding{Context: sc.ctx.key}}
		if len(s.marks) > 0 {
			d.expires = s.markedKeys(sc)
		}
		var err error
		if d.byKeys() {
			err = d.keys()
		} else {
			err = d.walk()
		}
		if err != nil {
			return err
		}
	}
	e := EngineEntry{Context: sc.ctx.key}
	for hash, ref := range sc.engine.all() {
		e.Hash, e.Key, e.Plain, e.Count = hash, ref.key, ref.plain, ref.n
		if err := v.Engine(&e); err != nil {
			return err
		}
	}
	return nil
}

// dumpSection writes the holdings of one subscription's owners in one
// context: mine are the owners by id, refs their current generations (a word
// of an older one is not theirs), dims the stream dimensions of stream
// owners.
type dumpSection struct {
	sc   *subCtx
	mine map[uint32]ownerKey
	refs map[uint32]ownerRef
	dims map[uint32]*StreamDims
	// expires: each owner's keys held at a pending gap mark, with its
	// deadline (nil without marks).
	expires map[uint32]map[uint64]int64
	v       StreamVisitor
	h       Holding
}

// markedKeys maps each owner of sc (by id) to its keys that precede a
// pending gap mark, with the deadline of the oldest such mark. Built only
// while marks are pending (GapExpireAfter after a gap): it costs a map entry
// per marked key.
func (s *Subscription) markedKeys(sc *subCtx) map[uint32]map[uint64]int64 {
	at := make(map[uint64]int64, len(s.marks))
	for _, m := range s.marks {
		at[m.id] = m.at.UnixNano()
	}
	out := make(map[uint32]map[uint64]int64)
	for oid, set := range sc.keys {
		set.eachMarked(func(k, mark uint64) {
			if t, ok := at[mark]; ok {
				if out[oid] == nil {
					out[oid] = make(map[uint64]int64)
				}
				out[oid][k] = t
			}
		})
	}
	return out
}

// holding hands the visitor word w of owner id in block key.
func (d *dumpSection) holding(id uint32, key, w uint64) error {
	ok := d.mine[id]
	d.h.Shared, d.h.Name, d.h.Rank, d.h.Stream = ok.shared, ok.name, ok.rank, d.dims[id]
	d.h.Tier, d.h.Key, d.h.Copies = wordTier(w), key, wordCopies(w)
	d.h.Expires = d.expires[id][key]
	return d.v.Holding(&d.h)
}

// dumpWalk forces one way of writing a section in tests: dumpWalkAuto picks
// by dumpSection.byKeys.
var dumpWalk = dumpWalkAuto

const (
	dumpWalkAuto = iota
	dumpWalkRange
	dumpWalkKeys
)

// dumpChunk is how many keys dumpSection.keys looks up before visiting them:
// the lookups do not depend on each other, so their cache misses overlap.
const dumpChunk = 64

// byKeys reports whether the section looks up the keys of its owners' key
// sets instead of walking every block of the context: whichever visits
// fewer. A looked-up key costs about what a walked block does (a random
// bucket and a random entry either way; the lookups overlap dumpChunk at a
// time): for one engine holding a whole context of 10M blocks, 133 ns per
// holding by its keys against 129 by the walk (BenchmarkDumpWalk,
// CONDUCTOR_BENCH_CONTEXT_BLOCKS=10000000). In a context that many streams
// share, a walk per section costs the streams times the blocks, and each
// stream's applies wait while its section is written: 256 engines sharing
// those 10M blocks, 300 s for a dump by walks against 1.1 s by keys.
func (d *dumpSection) byKeys() bool {
	switch dumpWalk {
	case dumpWalkRange:
		return false
	case dumpWalkKeys:
		return true
	}
	own := 0
	for id := range d.mine {
		if ks := d.sc.keys[id]; ks != nil {
			own += ks.Len()
		}
	}
	return own < d.sc.ctx.blocks.Size()
}

// walk visits the owners' holdings in every block of the context.
func (d *dumpSection) walk() error {
	var err error
	d.sc.ctx.blocks.Range(func(key uint64, b blockVal) bool {
		b.forEach(func(w uint64) {
			id := wordOwner(w)
			if ref, mine := d.refs[id]; err == nil && mine && ref == makeRef(id, wordGen(w)) {
				err = d.holding(id, key, w)
			}
		})
		return err == nil
	})
	return err
}

// keys visits the owners' holdings owner by owner, in id order, in the
// blocks of each one's key set (which holds exactly the keys of the blocks
// carrying one of its words).
func (d *dumpSection) keys() error {
	ids := make([]uint32, 0, len(d.mine))
	for id := range d.mine {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var (
		keys [dumpChunk]uint64
		vals [dumpChunk]blockVal
		n    int
		err  error
	)
	for _, id := range ids {
		ks := d.sc.keys[id]
		if ks == nil {
			continue
		}
		ref := d.refs[id]
		visit := func() {
			for i := range n {
				vals[i], _ = d.sc.ctx.blocks.Load(keys[i])
			}
			for i := 0; i < n && err == nil; i++ {
				vals[i].forEach(func(w uint64) {
					if err == nil && makeRef(wordOwner(w), wordGen(w)) == ref {
						err = d.holding(id, keys[i], w)
					}
				})
			}
			n = 0
		}
		ks.each(func(k uint64) {
			if err != nil {
				return
			}
			keys[n] = k
			if n++; n == dumpChunk {
				visit()
			}
		})
		visit()
		if err != nil {
			return err
		}
	}
	return nil
}

// StreamRestorer applies one dumped section to the matching subscription of
// this index. It is not safe for concurrent use.
type StreamRestorer struct {
	s                *Subscription
	Applied, Skipped int
	// marks: the section's pending gap marks (StreamInfo.Marks); marked:
	// the restored keys held at one, by deadline (End).
	marks  []int64
	marked []restoredMark
}

// restoredMark is a restored key held at a gap mark until at (Unix ns).
type restoredMark struct {
	sc  *subCtx
	oid uint32
	key uint64
	at  int64
}

// RestoreStream starts restoring a section: the registration with the same
// service key and home context must exist here (else an error wrapping
// ErrNotFound). The subscription then skips live batches whose Seq is at or
// below info.Seq: the dump already holds their effect.
func (ix *Index) RestoreStream(info *StreamInfo) (*StreamRestorer, error) {
	k := info.Reg.Key()
	if k.TenantID == "" {
		k.TenantID = "default"
	}
	ix.mu.Lock()
	s := ix.subs[k]
	ix.mu.Unlock()
	want := info.Reg.ContextKey()
	if want.TenantID == "" {
		want.TenantID = "default"
	}
	if s == nil || s.reg.ContextKey() != want {
		return nil, fmt.Errorf("restore %s: no such registration in context %s/%s/%q/%d: %w",
			k, want.TenantID, want.ModelName, want.LoraName, want.BlockSize, ErrNotFound)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if info.HasSeq && !s.hasSeq {
		s.skipThrough, s.skipping, s.prior = info.Seq, true, info.Prior
		s.lastSeq, s.hasSeq = info.Seq, true
	}
	return &StreamRestorer{s: s, marks: slices.Clone(info.Marks)}, nil
}

// FirstLive is called by the transport with the sequence of the first live
// message it received without a baseline (before it replays what came
// before it). On a subscription restored from a prior dump
// (StreamInfo.Prior) and still skipping, a sequence at or below the dump's
// watermark proves that the publisher restarted while this process was
// down: the restored blocks are the old incarnation's, and the new one's
// batches at or below the watermark must not be skipped. So the
// subscription is cleared and skipping ends; it reports the blocks cleared
// and whether it did (TestFirstLiveAfterPriorRestore). A publisher that
// restarted and sent more messages than the watermark before this process
// came back passes for the same incarnation. Only the first call after a
// restore can clear.
func (s *Subscription) FirstLive(seq uint64) (cleared int, restarted bool) {
	s.waitGate()
	s.mu.Lock()
	defer s.mu.Unlock()
	prior := s.prior
	s.prior = false
	if s.closed || !prior || !s.skipping || seq > s.skipThrough {
		return 0, false
	}
	s.skipping, s.clearDeferred = false, false
	n := s.clearLocked()
	s.lastSeq, s.hasSeq = 0, false
	s.ix.opts.Logger.Info("cleared subscription blocks", "service", s.reg.Key().String(),
		"reason", fmt.Sprintf("publisher restarted while this process was down: its next seq=%d is at or below the restored dump's %d", seq, s.skipThrough), "blocks", n)
	return n, true
}

// EndSkip ends the skipping RestoreStream turned on, for a caller that
// orders and deduplicates the stream itself (a replica): every later batch is
// applied, and Clear and a clearing Gap act at once instead of waiting for
// the next batch. A clear deferred meanwhile is applied now. It returns the
// stream's last sequence (the restored dump's when nothing was applied since).
func (s *Subscription) EndSkip() (seq uint64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.skipping = false
	if s.clearDeferred && !s.closed {
		s.clearDeferred = false
		s.clearLocked()
	}
	return s.lastSeq, s.hasSeq
}

// Holding restores one holding. It is skipped (false) when its context does
// not exist here or the subscription was unregistered.
func (r *StreamRestorer) Holding(h *Holding) bool {
	return r.Holdings(h, []uint64{h.Key}) == 1
}

// Holdings restores the holdings h describes for each key (h.Key is
// ignored), under one lock, and returns how many were applied. The owner is
// re-created as the live stream would create it (a stream owner with its
// dimensions, within Options.MaxStreamsPerSubscription) and the blocks go
// through the subscription's own add path, so its owner key sets and the
// holdings gauges stay exact.
func (r *StreamRestorer) Holdings(h *Holding, keys []uint64) int {
	s := r.s
	defer s.runRebinds()
	s.mu.Lock()
	defer s.mu.Unlock()
	sc := s.restoreCtx(&h.Context)
	if sc == nil || h.Tier >= NumTiers {
		r.Skipped += len(keys)
		return 0
	}
	k := ownerKey{sub: s.id, shared: h.Shared, name: h.Name}
	if !h.Shared {
		k.rank, k.name = h.Rank, s.reg.InstanceID
	}
	var dims *streamDims
	if h.Stream != nil {
		dims = &streamDims{salt: h.Stream.Salt, backend: h.Stream.BackendID, medium: strings.ToLower(h.Stream.Medium)}
		k.stream = streamTag([]byte(dims.salt), []byte(dims.backend), []byte(dims.medium))
	}
	s.rebind(sc)
	id, ok := sc.ownerDims(k, dims, s.ix.opts.MaxStreamsPerSubscription)
	if !ok {
		r.Skipped += len(keys)
		return 0
	}
	if !sc.bind.bound && dims != nil && dims.salt != "" {
		// A salted stream's keys in a pool-only partition are in the salt
		// namespace of the xxh3 default.
		sc.markDerived(id.id())
	}
	n := h.Copies
	if n == 0 {
		n = 1
	}
	var st ApplyStats
	s.addBlocks(sc, keys, id, h.Tier, n, &st)
	r.Applied += len(keys)
	if h.Expires != 0 {
		for _, k := range keys {
			r.marked = append(r.marked, restoredMark{sc: sc, oid: id.id(), key: k, at: h.Expires})
		}
	}
	return len(keys)
}

// End ends the section: its pending gap marks (StreamInfo.Marks, else one
// per deadline its holdings carry) are re-created, oldest first, each behind
// exactly the keys the dump held at it (and at older ones) in their owners'
// key sets, so the restored blocks expire when they would have, a store
// that announces one again keeps it, and a replica's marks pair one to one
// with its relay's (TestRestoreKeepsGapMarks,
// TestReplicaTransferKeepsGapMarks). The section is restored into a fresh
// subscription (no marks of its own). Without End, restored holdings are
// simply kept.
func (r *StreamRestorer) End() {
	if len(r.marked) == 0 && len(r.marks) == 0 {
		return
	}
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	marked, ats := r.marked, r.marks
	r.marked, r.marks = nil, nil
	if s.closed {
		return
	}
	// The marks in the order listed (the order they were made, which a
	// replica's relay expires them in, whatever their deadlines); without a
	// list, one per deadline the holdings carry, oldest first.
	listed := make(map[int64]bool, len(ats))
	for _, at := range ats {
		listed[at] = true
	}
	var extra []int64
	for _, m := range marked {
		if !listed[m.at] {
			listed[m.at] = true
			extra = append(extra, m.at)
		}
	}
	slices.Sort(extra)
	ats = append(ats, extra...)
	ids := make(map[int64]int, len(ats)) // deadline → index of its first mark
	for i := len(ats) - 1; i >= 0; i-- {
		ids[ats[i]] = i
	}
	marks := make([]uint64, len(ats))
	for i, at := range ats {
		marks[i] = s.newMark(time.Unix(0, at))
	}
	type setKey struct {
		sc  *subCtx
		oid uint32
	}
	groups := make(map[setKey]map[uint64]int)
	for _, m := range marked {
		g := groups[setKey{m.sc, m.oid}]
		if g == nil {
			g = make(map[uint64]int)
			groups[setKey{m.sc, m.oid}] = g
		}
		if i, ok := g[m.key]; !ok || ids[m.at] < i {
			g[m.key] = ids[m.at]
		}
	}
	for sk, g := range groups {
		set := sk.sc.keys[sk.oid]
		if set == nil {
			continue
		}
		// The set again in the order [keys of mark i] mark i [keys of mark
		// j] mark j ... [keys held at no mark], for the marks i < j ... it
		// holds keys at: a mark without keys here takes nothing from this
		// set, and the older ones took theirs before it.
		byMark := make(map[int][]uint64)
		var free []uint64
		set.each(func(k uint64) {
			if i, ok := g[k]; ok {
				byMark[i] = append(byMark[i], k)
			} else {
				free = append(free, k)
			}
		})
		used := slices.Sorted(maps.Keys(byMark))
		set.reset()
		for _, i := range used {
			for _, k := range byMark[i] {
				set.add(k)
			}
			set.mark(marks[i])
		}
		for _, k := range free {
			set.add(k)
		}
	}
}

// Engine restores one engine-hash mapping.
func (r *StreamRestorer) Engine(e *EngineEntry) bool {
	s := r.s
	defer s.runRebinds()
	s.mu.Lock()
	defer s.mu.Unlock()
	sc := s.restoreCtx(&e.Context)
	if sc == nil || e.Count == 0 {
		r.Skipped++
		return false
	}
	s.rebind(sc)
	if !sc.bind.bound {
		// A mapping in a pool-only partition: the section's owners holding
		// its key (restored before its engine entries) filed it under a
		// re-hash of token_ids.
		if v, ok := sc.ctx.blocks.Load(e.Key); ok {
			v.forEach(func(w uint64) {
				if id := wordOwner(w); sc.keys[id] != nil {
					sc.markDerived(id)
				}
			})
		}
	}
	ref, _ := sc.engine.get(e.Hash)
	ref.key, ref.plain = e.Key, e.Plain
	ref.n += e.Count
	sc.engine.put(e.Hash, ref)
	r.Applied++
	return true
}

func (s *Subscription) restoreCtx(k *ContextKey) *subCtx {
	if s.closed {
		return nil
	}
	if k.TenantID == "" {
		k.TenantID = "default"
	}
	if s.adapterKey(k) {
		// An adapter context of an AdaptersFromEvents registration: made
		// again as its first stored event made it (adapter.go).
		sc, _, _ := s.adapterState([]byte(k.LoraName))
		return sc
	}
	return s.ctxState(k)
}

// recoveredSkip is called by Apply under s.mu: it records the batch's
// sequence and reports whether a restored dump already holds the batch.
func (s *Subscription) recoveredSkip(b *Batch) bool {
	if s.clearDeferred {
		s.clearDeferred = false
		if !b.HasSeq || !s.skipping || !s.hasRecv || b.Seq <= s.recvSeq {
			// The stream restarted (its sequence went back) or cannot be
			// placed: the clear the transport asked for (Clear) is due.
			n := s.clearLocked()
			s.skipping = false
			s.ix.opts.Logger.Info("cleared subscription blocks", "service", s.reg.Key().String(),
				"reason", "deferred clear: the stream did not continue above the dump", "blocks", n)
		}
		// Else the stream continues ahead: batches lost below the dump's
		// watermark are in the dump; a gap past it clears below.
	}
	if !b.HasSeq {
		return false
	}
	s.recvSeq, s.hasRecv = b.Seq, true
	if s.skipping {
		if b.Seq <= s.skipThrough {
			s.ix.counters.RecoveredSkips.Add(1)
			return true
		}
		s.skipping = false
		if b.Seq > s.skipThrough+1 {
			// Batches between the dump's watermark and the first one this
			// subscription received are in neither: what was restored may
			// be wrong, so it is cleared, as for a stale stream (true if
			// incomplete, never silently wrong).
			s.ix.counters.RecoveryGaps.Add(1)
			s.gapLocked(s.gapPolicy(), fmt.Sprintf("batches %d..%d lost between the restored dump and the live stream",
				s.skipThrough+1, b.Seq-1))
		}
	}
	s.lastSeq, s.hasSeq = b.Seq, true
	return false
}

// HoldApplies closes the apply gate until release is called: Apply, Clear and
// FlushHeld of every subscription wait before taking any lock, so listeners
// keep their messages queued while a peer's dump is restored (the restore
// functions are not gated). Holds nest; the gate opens when every hold was
// released. release is idempotent.
func (ix *Index) HoldApplies() (release func()) {
	ix.gateMu.Lock()
	if ix.gateN == 0 {
		ch := make(chan struct{})
		ix.gate.Store(&ch)
	}
	ix.gateN++
	ix.gateMu.Unlock()
	done := false
	return func() {
		ix.gateMu.Lock()
		defer ix.gateMu.Unlock()
		if done {
			return
		}
		done = true
		ix.gateN--
		if ix.gateN == 0 {
			ch := ix.gate.Swap(nil)
			close(*ch)
		}
	}
}

// Gated reports whether the apply gate is closed.
func (ix *Index) Gated() bool { return ix.gate.Load() != nil }

// waitGate blocks while the apply gate is closed, or until s is aborted.
func (s *Subscription) waitGate() {
	if ch := s.ix.gate.Load(); ch != nil {
		select {
		case <-*ch:
		case <-s.closing:
		}
	}
}
