package wire

import (
	"fmt"
	"testing"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/tinylib/msgp/msgp"
)

// benchPayload is a vLLM batch of `events` BlockStored events of `blocks` blocks
// each, block size 16, in the array era (v0.22 shape) or the map era (v0.24+ shape
// with extra_keys, group_idx and kv_cache_spec_kind, as the real 0.26 capture has).
// Hashes are random u64 (uint64 encodings), tokens random ids below 152k (a Qwen-sized
// vocabulary: uint16 and uint32 encodings), so the byte mix matches production.
func benchPayload(mapEra bool, blocks, events int) []byte {
	const bs = 16
	x := uint64(0x2545f4914f6cdd1d)
	next := func() uint64 { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return x }
	evs := make([]mp, events)
	for e := range evs {
		hs := make([]uint64, blocks)
		for i := range hs {
			hs[i] = next() | 1<<63
		}
		ts := make([]int64, blocks*bs)
		for i := range ts {
			ts[i] = int64(next() % 152000)
		}
		var m mp
		if mapEra {
			m = mp(nil).mapn(11).kv("type").str("BlockStored").kv("block_hashes").u64s(hs...).
				kv("parent_block_hash").u(next()).kv("token_ids").ints(ts...).kv("block_size").i(bs).
				kv("lora_id").null().kv("medium").str("GPU").kv("lora_name").null()
			m = m.kv("extra_keys").arr(blocks)
			for i := 0; i < blocks; i++ {
				m = m.null()
			}
			m = m.kv("group_idx").i(0).kv("kv_cache_spec_kind").str("full_attention")
		} else {
			m = mp(nil).arr(12).str("BlockStored").u64s(hs...).u(next()).ints(ts...).i(bs).
				null().str("GPU").null().null().i(0).str("full_attention").null()
		}
		evs[e] = m
	}
	return batch(1789095808.8378847, 0, evs...)
}

// BenchmarkDecode measures vLLM BlockStored decoding (target ≤ 60 ns/block, 0
// allocs/op) against a generic baseline: msgp.ReadIntfBytes of the same payload,
// which builds the tree of interface values a reflection-free but schema-less
// decoder would hand on (and which still lacks validation and hash folding).
func BenchmarkDecode(b *testing.B) {
	for _, sh := range []struct {
		name           string
		mapEra         bool
		blocks, events int
	}{
		{"array/blocks=16", false, 16, 1},
		{"array/blocks=64", false, 64, 1},
		{"map/blocks=16", true, 16, 1},
		{"map/blocks=64", true, 64, 1},
		{"map/blocks=16x1", true, 1, 16}, // 16 single-block events: the decode-phase pattern
	} {
		payload := benchPayload(sh.mapEra, sh.blocks, sh.events)
		nblocks := sh.blocks * sh.events
		b.Run(sh.name+"/conductor", func(b *testing.B) {
			var d Decoder
			var batch core.Batch
			b.ReportAllocs()
			b.SetBytes(int64(len(payload)))
			for b.Loop() {
				if err := d.Decode(DialectVLLM, payload, &batch); err != nil {
					b.Fatal(err)
				}
			}
			if len(batch.Events) != sh.events || len(batch.Events[0].Hashes) != sh.blocks {
				b.Fatal(fmt.Sprint("decoded ", len(batch.Events), " events"))
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*nblocks), "ns/block")
		})
		b.Run(sh.name+"/baseline_msgp_intf", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(payload)))
			for b.Loop() {
				if _, _, err := msgp.ReadIntfBytes(payload); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*nblocks), "ns/block")
		})
	}
}
