//go:build !race

package wire

import (
	"testing"

	"github.com/seed-c7a81618/conductor/core"
)

// TestDecodeZeroAllocs proves the steady-state contract of the package doc: once the
// batch has grown, decoding allocates nothing. (The race detector allocates, hence
// the build tag.)
func TestDecodeZeroAllocs(t *testing.T) {
	cases := []struct {
		name    string
		dialect Dialect
		payload []byte
	}{
		{"vllm_array_16_blocks", DialectVLLM, benchPayload(false, 16, 1)},
		{"vllm_map_16_blocks", DialectVLLM, benchPayload(true, 16, 1)},
		{"vllm_map_16x1_blocks", DialectVLLM, benchPayload(true, 1, 16)},
		{"vllm_bytes_hashes_and_all_event_types", DialectVLLM, batch(1, 0,
			mp(nil).arr(12).str("BlockStored").arr(1).bin(make([]byte, 32)).bin(make([]byte, 32)).ints(1, 2).i(2).
				null().str("GPU").str("lora").arr(1).arr(1).str("k").i(0).str("full_attention").null(),
			mp(nil).arr(4).str("BlockRemoved").u64s(1).str("GPU").i(0),
			mp(nil).mapn(1).kv("type").str("AllBlocksCleared"))},
		{"sglang_map_16_blocks", DialectSGLang, batch(1, 0, mp(nil).mapn(8).kv("type").str("BlockStored").
			kv("block_hashes").u64s(seqHashes(16)...).kv("parent_block_hash").i(-3).
			kv("token_ids").ints(seqTokens(16*16)...).kv("block_size").i(16).kv("lora_id").null().
			kv("medium").str("CPU_PINNED").kv("cache_salt").str("s"))},
		{"sglang_array_bigram", DialectSGLang, batch(1, 0,
			mp(nil).arr(8).str("BlockStored").ints(1, 2).null().arr(4).ints(1, 2).ints(2, 3).ints(3, 4).ints(4, 5).i(2).null().null().mapn(1).kv("cache_salt").str("x"))},
		{"mooncake", DialectMooncake, mooncakeBatchOf(1700000000123, 2, mooncakeStored(), mooncakeRemoved(), mooncakeCleared())},
		{"standard_wrapper", DialectStandard, mp(nil).mapn(2).kv("ts").u(1).kv("events").arr(2).cat2(mooncakeStored(), mooncakeCleared())},
	}
	var d Decoder
	var b core.Batch
	for _, c := range cases {
		if err := d.Decode(c.dialect, c.payload, &b); err != nil || b.Skipped != 0 {
			t.Fatalf("%s: %v %v", c.name, err, b.Errors)
		}
		if n := testing.AllocsPerRun(100, func() { _ = d.Decode(c.dialect, c.payload, &b) }); n != 0 {
			t.Errorf("%s: %v allocs per decode, want 0", c.name, n)
		}
	}

	// JSON: not part of the contract, but unescaped and escaped strings (the arena)
	// stay allocation-free once warm.
	for _, s := range []string{rfcStoredJSON, `[{"event_id":1,"event_type":"cleared","tenant_id":"t\u00e9"}]`} {
		in := []byte(s)
		if n := testing.AllocsPerRun(100, func() { _ = d.DecodeStandardJSON(in, &b) }); n != 0 {
			t.Errorf("JSON %.20q: %v allocs per decode", in, n)
		}
	}

	frames := [][]byte{nil, make([]byte, 8), {0x90}}
	reply := [][]byte{{}, []byte("topic"), make([]byte, 8), {0x90}}
	if n := testing.AllocsPerRun(100, func() {
		_, _, _, _ = ParseLive(frames)
		_, _, _, _ = ParseReplayReply(reply)
	}); n != 0 {
		t.Errorf("framing: %v allocs", n)
	}
}
