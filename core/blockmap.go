package core

import (
	"sync/atomic"

	"github.com/puzpuzpuz/xsync/v3"
)

// blockMap is a context's map from prefix key to blockVal, split into
// blockShards xsync maps by the key's top bits (after a multiplicative mix).
// Growth is per shard: an xsync map doubles by copying its whole table in the
// writer that triggers it (readers keep using the old table meanwhile), so one
// map of 10M blocks stalls its writer for seconds at a doubling, while a shard
// holds 1/blockShards of the blocks and copies only that: no growth ever
// stalls a writer for a whole-table copy (TestBlockMapGrowsPerShard). Shards are created on their first write, so a
// small context costs few tables; an xsync table starts at 32 buckets (2 KiB)
// plus its size counter, so a context with blocks in every shard holds about
// 128–256 KiB before its first doubling. Queries pay one multiply and one
// pointer load per block more than a single map (BenchmarkQuery: no
// measurable difference).
type blockMap struct {
	shards  [blockShards]atomic.Pointer[xsync.MapOf[uint64, blockVal]]
	presize int // per shard, from Options.ContextSizeHint; 0 = xsync's minimum
}

const (
	blockShardBits = 6
	blockShards    = 1 << blockShardBits
)

func newBlockMap(sizeHint int) *blockMap {
	m := &blockMap{}
	if sizeHint > 0 {
		m.presize = sizeHint/blockShards + 1
	}
	return m
}

// blockShard picks a key's shard from the top bits of a multiplicative mix
// (keys are hash outputs, but a publisher may choose them: the mix keeps a run
// of related keys from landing in one shard; a crafted set only makes one
// shard large, which is what a single map would be anyway).
func blockShard(k uint64) uint64 { return (k * 0xBF58476D1CE4E5B9) >> (64 - blockShardBits) }

// Load returns k's value.
func (m *blockMap) Load(k uint64) (blockVal, bool) {
	if s := m.shards[blockShard(k)].Load(); s != nil {
		return s.Load(k)
	}
	return blockVal{}, false
}

// Prefetch looks every key up, ahead of updates to the same keys: the
// lookups do not depend on each other, so the CPU overlaps their cache misses
// (a random bucket and its entry each), where the updates one by one would
// wait for each miss in turn. Worth it only when the index is larger than the
// caches (Index.large).
func (m *blockMap) Prefetch(keys []uint64) {
	for _, k := range keys {
		m.Load(k)
	}
}

// Compute runs fn on k's value under the shard's bucket lock (xsync.MapOf.Compute:
// fn returns the new value, or delete).
func (m *blockMap) Compute(k uint64, fn func(old blockVal, loaded bool) (blockVal, bool)) {
	p := &m.shards[blockShard(k)]
	s := p.Load()
	if s == nil {
		s = m.create(p)
	}
	s.Compute(k, fn)
}

func (m *blockMap) create(p *atomic.Pointer[xsync.MapOf[uint64, blockVal]]) *xsync.MapOf[uint64, blockVal] {
	// Grow-only: engines evict and re-store blocks all the time; a table that
	// shrank whenever evictions outpaced stores would pay resize after resize.
	opts := []func(*xsync.MapConfig){xsync.WithGrowOnly()}
	if m.presize > 0 {
		opts = append(opts, xsync.WithPresize(m.presize))
	}
	s := xsync.NewMapOfWithHasher[uint64, blockVal](hashBlockKey, opts...)
	if p.CompareAndSwap(nil, s) {
		return s
	}
	return p.Load()
}

// Size returns the number of blocks (the sum of the shards' counters).
func (m *blockMap) Size() int {
	n := 0
	for i := range m.shards {
		if s := m.shards[i].Load(); s != nil {
			n += s.Size()
		}
	}
	return n
}

// Range calls f for every block until it returns false, shard by shard (each
// shard's iteration is xsync's: weakly consistent with concurrent writes).
func (m *blockMap) Range(f func(k uint64, v blockVal) bool) {
	for i := range m.shards {
		s := m.shards[i].Load()
		if s == nil {
			continue
		}
		stop := false
		s.Range(func(k uint64, v blockVal) bool {
			if !f(k, v) {
				stop = true
			}
			return !stop
		})
		if stop {
			return
		}
	}
}
