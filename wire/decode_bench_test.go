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

// BenchmarkDecodeStandard measures RFC #1527 events, read by the same decoder in
// both formats: 16 events of the Mooncake master's shape (28 keys, one block each)
// in msgpack, and 16 of the RFC's stored example (15 keys, 3 blocks) in msgpack and
// in JSON.
func BenchmarkDecodeStandard(b *testing.B) {
	evs := make([]mp, 16)
	for i := range evs {
		evs[i] = mooncakeStored()
	}
	rfc := mp(nil).mapn(15).kv("event_id").u(42).kv("timestamp").u(1739145600000).
		kv("event_type").str("stored").kv("model_name").str("llama-3.1-8b").kv("block_size").u(64).
		kv("additional_salt").null().kv("lora_name").null().kv("tenant_id").str("default").
		kv("backend_id").str("worker-0").kv("medium").str("gpu").kv("dp_rank").u(0).
		kv("seq_hashes").u64s(1234567890, 9876543210, 1122334455).kv("base_block_idx").u(5).
		kv("parent_hash").u(9999999999).kv("token_ids").null()
	rfcs := mp(nil).arr(16)
	js := []byte("[" + rfcStoredJSON)
	for i := 0; i < 16; i++ {
		rfcs = rfcs.cat2(rfc)
		if i > 0 {
			js = append(js, ","+rfcStoredJSON...)
		}
	}
	js = append(js, ']')
	for _, c := range []struct {
		name    string
		payload []byte
		decode  func(*Decoder, []byte, *core.Batch) error
	}{
		{"mooncake/events=16", mooncakeBatchOf(1700000000123, 0, evs...),
			func(d *Decoder, p []byte, b *core.Batch) error { return d.Decode(DialectMooncake, p, b) }},
		{"rfc_msgpack/events=16", rfcs,
			func(d *Decoder, p []byte, b *core.Batch) error { return d.Decode(DialectStandard, p, b) }},
		{"rfc_json/events=16", js, (*Decoder).DecodeStandardJSON},
	} {
		b.Run(c.name, func(b *testing.B) {
			var d Decoder
			var batch core.Batch
			b.ReportAllocs()
			b.SetBytes(int64(len(c.payload)))
			for b.Loop() {
				if err := c.decode(&d, c.payload, &batch); err != nil || len(batch.Events) != 16 {
					b.Fatal(err, batch.Errors)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*16), "ns/event")
		})
	}
}
