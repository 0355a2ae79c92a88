package core

import (
	"sort"

	"github.com/seed-c7a81618/conductor/hash"
)

// ContextView describes one partition of a context for /global_view: a
// context whose registrations bound several hash profiles (partition.go)
// has one view per profile.
type ContextView struct {
	ContextKey
	// PrefixCount is the number of distinct prefix keys with at least one owner.
	PrefixCount int
	Profile     hash.Profile
	// ProfileBound is false for a pool-only context whose profile is not yet
	// fixed by an engine registration.
	ProfileBound bool
	// Owner is the identity (Registration.Owner) that bound the profile;
	// "" while unbound.
	Owner string
	// Instances maps each query instance to its ranks, ascending.
	Instances map[string][]int32
}

// GlobalView describes every context partition, sorted by key, the
// partitions of one key in the order they were created.
type GlobalView struct {
	Contexts []ContextView
}

// GlobalView returns a snapshot of every context partition.
func (ix *Index) GlobalView() GlobalView {
	var gv GlobalView
	ix.contexts.Range(func(k ContextKey, head *context) bool {
		for c := head; c != nil; c = c.next.Load() {
			m := c.snapshot()
			b := c.bind.Load()
			cv := ContextView{ContextKey: k, PrefixCount: c.blocks.Size(), Profile: b.profile,
				ProfileBound: b.bound, Owner: b.owner, Instances: make(map[string][]int32, len(m.instances))}
			for _, sp := range m.instances {
				ranks := make([]int32, 0, sp.hi-sp.lo)
				for _, s := range m.slots[sp.lo:sp.hi] {
					ranks = append(ranks, s.rank)
				}
				cv.Instances[sp.id] = ranks
			}
			gv.Contexts = append(gv.Contexts, cv)
		}
		return true
	})
	sort.SliceStable(gv.Contexts, func(i, j int) bool { return ctxLess(gv.Contexts[i].ContextKey, gv.Contexts[j].ContextKey) })
	return gv
}

func ctxLess(a, b ContextKey) bool {
	switch {
	case a.TenantID != b.TenantID:
		return a.TenantID < b.TenantID
	case a.ModelName != b.ModelName:
		return a.ModelName < b.ModelName
	case a.LoraName != b.LoraName:
		return a.LoraName < b.LoraName
	}
	return a.BlockSize < b.BlockSize
}

// prefetchMin is the index size (holdings, all tiers) from which appliers
// look a batch's keys up before updating them (blockMap.Prefetch). Below it
// the block tables mostly stay in cache and the extra lookups only cost
// (BenchmarkApply/store+remove, 64k blocks: 15 % more per block); from 262k
// blocks up, separate-process ingest took a quarter less CPU per block with
// them. Queries do not look ahead: a query hashes each block between two
// lookups, and looking blocks up ahead of a 1M-token walk over a 5M-block
// index made it 13 % slower. A variable so that tests run both apply paths
// on small indexes (bothApplies).
var prefetchMin int64 = 1 << 17

// large reports whether the index holds at least prefetchMin holdings.
func (ix *Index) large() bool {
	var n int64
	for t := range ix.holdings {
		n += ix.holdings[t].Load()
	}
	return n >= prefetchMin
}

// TierBlocks returns the number of (block, owner) holdings per tier across
// all contexts. O(1): the counts are kept as blocks change
// (TestTierBlocksMatchesIndex checks them against a walk of the index).
func (ix *Index) TierBlocks() [NumTiers]int {
	var n [NumTiers]int
	for t := range n {
		n[t] = int(ix.holdings[t].Load())
	}
	return n
}
