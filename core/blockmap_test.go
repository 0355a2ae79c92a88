package core

import (
	"math/rand"
	"testing"
)

// TestBlockMapGrowsPerShard: the sharded block map behaves as one map (a
// random mix of stores, updates, deletes and loads checked against a Go map,
// with Size and Range), and its blocks spread over the shards so that a
// doubling copies one shard: with 64 shards and 200k random keys, no shard
// holds more than 1.25× its share. Shards are made on first write only.
func TestBlockMapGrowsPerShard(t *testing.T) {
	m := newBlockMap(0)
	if _, ok := m.Load(1); ok || m.Size() != 0 || m.shardsMade() != 0 {
		t.Fatal("new map not empty")
	}
	ref := map[uint64]uint64{}
	rng := rand.New(rand.NewSource(7))
	keys := make([]uint64, 0, 200_000)
	for i := 0; i < 400_000; i++ {
		var k uint64
		if len(keys) > 0 && rng.Intn(3) == 0 {
			k = keys[rng.Intn(len(keys))]
		} else {
			k = rng.Uint64()
			keys = append(keys, k)
		}
		switch rng.Intn(4) {
		case 0: // delete
			m.Compute(k, func(old blockVal, loaded bool) (blockVal, bool) { return old, true })
			delete(ref, k)
		default: // store or overwrite
			w := rng.Uint64() | 1
			m.Compute(k, func(blockVal, bool) (blockVal, bool) { return singleVal(w), false })
			ref[k] = w
		}
		if i%97 == 0 {
			q := keys[rng.Intn(len(keys))]
			v, ok := m.Load(q)
			if want, has := ref[q]; ok != has || (ok && v.first() != want) {
				t.Fatalf("Load(%x) = %v, %v; want %x, %v", q, v.first(), ok, want, has)
			}
		}
	}
	if m.Size() != len(ref) {
		t.Fatalf("Size %d, want %d", m.Size(), len(ref))
	}
	seen := 0
	m.Range(func(k uint64, v blockVal) bool {
		if ref[k] != v.first() {
			t.Fatalf("Range: %x = %x, want %x", k, v.first(), ref[k])
		}
		seen++
		return true
	})
	if seen != len(ref) {
		t.Fatalf("Range saw %d, want %d", seen, len(ref))
	}
	stopAt := 0
	m.Range(func(uint64, blockVal) bool { stopAt++; return stopAt < 10 })
	if stopAt != 10 {
		t.Fatalf("Range went on after false: %d calls", stopAt)
	}
	share := float64(len(ref)) / blockShards
	for i := range m.shards {
		s := m.shards[i].Load()
		if s == nil {
			t.Fatalf("shard %d never written", i)
		}
		if n := float64(s.Size()); n > 1.25*share {
			t.Errorf("shard %d holds %.0f blocks, share %.0f", i, n, share)
		}
	}
	if m.shardsMade() != blockShards {
		t.Fatalf("%d shards made, want %d", m.shardsMade(), blockShards)
	}
}

// TestBlockMapConcurrentCreate: writers racing to make the same shards end
// with one table per shard and no lost store (run with -race).
func TestBlockMapConcurrentCreate(t *testing.T) {
	m := newBlockMap(1 << 10)
	const writers, per = 8, 2000
	done := make(chan struct{})
	for w := 0; w < writers; w++ {
		go func(w int) {
			defer func() { done <- struct{}{} }()
			for i := 0; i < per; i++ {
				k := uint64(w*per+i)*0x100000001b3 + 1
				m.Compute(k, func(blockVal, bool) (blockVal, bool) { return singleVal(k), false })
			}
		}(w)
	}
	for w := 0; w < writers; w++ {
		<-done
	}
	if m.Size() != writers*per || m.shardsMade() != blockShards {
		t.Fatalf("size %d, shards %d; want %d and %d", m.Size(), m.shardsMade(), writers*per, blockShards)
	}
	for w := 0; w < writers; w++ {
		for i := 0; i < per; i++ {
			k := uint64(w*per+i)*0x100000001b3 + 1
			if v, ok := m.Load(k); !ok || v.first() != k {
				t.Fatalf("key %x lost", k)
			}
		}
	}
}

// shardsMade counts the shards that have a table.
func (m *blockMap) shardsMade() int {
	n := 0
	for i := range m.shards {
		if m.shards[i].Load() != nil {
			n++
		}
	}
	return n
}
