package wire

import (
	"errors"
	"testing"

	"github.com/seed-c7a81618/conductor/core"
)

// The envelope forms the captures (testdata/captures) do not show, which
// other releases of the same engines send. Each payload is hand-encoded here
// with msgp's Append functions the way msgspec encodes the upstream structs:
// fields in declaration order, non-negative integers in the uint forms and
// negative ones in the int forms, and, in the map forms, fields that have a
// default left out while they hold it (omit_defaults). The facts per form:
//
//   - vLLM [ts, events, data_parallel_rank] of map events: vLLM PR #42892
//     dropped array_like from KVCacheEvent (releases after v0.23.0) while
//     EventBatch stayed array_like; vLLM v0.26.0 sends it (a batch quoted in
//     volcano-sh/kthena#1535). The captures come from a later vLLM
//     (commit 0181ea31), whose EventBatch is a map as well.
//   - SGLang [ts, events, attn_dp_rank] of map events: SGLang PR #37482
//     dropped array_like from KVCacheEvent and kept it on EventBatch
//     (sgl-project/sglang#40684 says so); its event maps always carry
//     type, block_hashes, parent_block_hash, token_ids, block_size and
//     lora_id, and medium, cache_salt and session_id only when set. The
//     captures come from an SGLang with array events.
//   - SGLang {ts, events, attn_dp_rank} of map events: what SGLang's
//     EventBatch encodes to without array_like, as vLLM's did: the batch of a
//     release that aligns its events with vLLM's schema (sgl-project/sglang
//     #39991 proposes it) or of a fork; no SGLang release seen so far sends
//     it. attn_dp_rank has a default (None) and is left out while unset.

// Hashes and tokens of the forms: a two-block SGLang chain (signed int64 page
// hashes, one negative) and a vLLM block hash above 2^63.
var (
	formSGLHashes = []int64{5740554423035903369, -278502217879090434}
	formTokens    = seqTokens(8)
)

// sglMapStored is a map-era SGLang BlockStored as msgspec encodes it: the six
// fields without a default always, medium and cache_salt when set.
func sglMapStored(hashes []int64, parent *int64, tokens []int64, medium, salt string) mp {
	n := 6
	if medium != "" {
		n++
	}
	if salt != "" {
		n++
	}
	m := mp(nil).mapn(n).kv("type").str("BlockStored").kv("block_hashes").ints(hashes...).kv("parent_block_hash")
	switch {
	case parent == nil:
		m = m.null()
	case *parent < 0:
		m = m.i(*parent)
	default:
		m = m.u(uint64(*parent))
	}
	m = m.kv("token_ids").ints(tokens...).kv("block_size").u(4).kv("lora_id").null()
	if medium != "" {
		m = m.kv("medium").str(medium)
	}
	if salt != "" {
		m = m.kv("cache_salt").str(salt)
	}
	return m
}

func sglMapEvents() []mp {
	parent := formSGLHashes[0]
	return []mp{
		sglMapStored(formSGLHashes[:1], nil, formTokens[:4], "", "tenant-a"),
		sglMapStored(formSGLHashes[1:], &parent, formTokens[4:], "CPU_PINNED", ""),
		mp(nil).mapn(2).kv("type").str("BlockRemoved").kv("block_hashes").ints(formSGLHashes[1]),
		mp(nil).mapn(3).kv("type").str("BlockRemoved").kv("block_hashes").ints(formSGLHashes[0]).kv("medium").str("GPU"),
		mp(nil).mapn(1).kv("type").str("AllBlocksCleared"),
	}
}

// sglMapBatch is {ts, events, attn_dp_rank}, the rank left out when negative.
func sglMapBatch(ts float64, rank int64, events ...mp) []byte {
	n := 3
	if rank < 0 {
		n = 2
	}
	m := mp(nil).mapn(n).kv("ts").f(ts).kv("events").arr(len(events))
	for _, e := range events {
		m = append(m, e...)
	}
	if rank >= 0 {
		m = m.kv("attn_dp_rank").u(uint64(rank))
	}
	return m
}

const sglMapWant = `stored hashes=[5740554423035903369] tokens=[1000 1001 1002 1003] block_size=4/true cache_salt="tenant-a"` + "\n" +
	`stored hashes=[18168241855830461182] parent=5740554423035903369 tokens=[1004 1005 1006 1007] block_size=4/true medium="CPU_PINNED"` + "\n" +
	"removed hashes=[18168241855830461182]\n" +
	`removed hashes=[5740554423035903369] medium="GPU"` + "\n" +
	"cleared hashes=[]"

// vllmMapEvents are a map-era vLLM store, removal and clear as v0.26.0 sends
// them (extra_keys, group_idx and kv_cache_spec_kind set, the sliding
// window left out).
func vllmMapEvents() []mp {
	h := []uint64{17507053300047258101, 14424512966625972522}
	return []mp{
		mp(nil).mapn(11).kv("type").str("BlockStored").kv("block_hashes").u64s(h...).
			kv("parent_block_hash").null().kv("token_ids").ints(formTokens...).kv("block_size").u(4).
			kv("lora_id").null().kv("medium").str("GPU").kv("lora_name").null().
			kv("extra_keys").arr(2).null().null().kv("group_idx").u(0).kv("kv_cache_spec_kind").str("full_attention"),
		mp(nil).mapn(4).kv("type").str("BlockRemoved").kv("block_hashes").u64s(h[1]).kv("medium").str("GPU").kv("group_idx").u(0),
		mp(nil).mapn(1).kv("type").str("AllBlocksCleared"),
	}
}

const vllmMapWant = `stored hashes=[17507053300047258101 14424512966625972522] tokens=[1000 1001 1002 1003 1004 1005 1006 1007] block_size=4/true group_idx=0 extra_keys medium="GPU" spec_kind="full_attention"` + "\n" +
	`removed hashes=[14424512966625972522] group_idx=0 medium="GPU"` + "\n" +
	"cleared hashes=[]"

// TestEnvelopeForms: each form decodes with its engine's dialect to the
// events it carries, and detection names the engine (surely), the map era
// and the envelope, from the payload alone.
func TestEnvelopeForms(t *testing.T) {
	cases := []struct {
		decodeCase
		env Envelope
	}{
		{decodeCase{"vllm_array_batch_map_events", DialectVLLM, batch(1789095808.84, 0, vllmMapEvents()...),
			"ts=1.78909580884e+09/0 dp=0 events=3 skipped=0\n" + vllmMapWant}, EnvelopeArray},
		{decodeCase{"vllm_array_batch_map_events_rank_3", DialectVLLM, batch(1789095808.84, 3, vllmMapEvents()...),
			"ts=1.78909580884e+09/0 dp=3 events=3 skipped=0\n" + vllmMapWant}, EnvelopeArray},
		{decodeCase{"sglang_array_batch_map_events", DialectSGLang, batch(2.5, 1, sglMapEvents()...),
			"ts=2.5/0 dp=1 events=5 skipped=0\n" + sglMapWant}, EnvelopeArray},
		{decodeCase{"sglang_map_batch_map_events", DialectSGLang, sglMapBatch(2.5, 1, sglMapEvents()...),
			"ts=2.5/0 dp=1 events=5 skipped=0\n" + sglMapWant}, EnvelopeMap},
		{decodeCase{"sglang_map_batch_rank_unset", DialectSGLang, sglMapBatch(2.5, -1, sglMapEvents()...),
			"ts=2.5/0 dp=nil events=5 skipped=0\n" + sglMapWant}, EnvelopeMap},
	}
	var d Decoder
	var b core.Batch
	for _, c := range cases {
		runDecodeCases(t, []decodeCase{c.decodeCase})
		s, err := d.DecodeAny(c.payload, &b)
		if err != nil || s.Dialect != c.dialect || !s.Sure || s.Era != EraMap || s.Envelope != c.env {
			t.Errorf("%s: detected %v sure=%v era %v envelope %v (evidence %#x, %v); want %v, sure, map, %v",
				c.name, s.Dialect, s.Sure, s.Era, s.Envelope, s.Evidence, err, c.dialect, c.env)
		}
	}
}

// TestEnvelopeFormsRefused: a batch map's keys are its engine's; another
// engine's rank key is not read as the rank, and a batch map without ts is
// refused as vLLM's is.
func TestEnvelopeFormsRefused(t *testing.T) {
	var d Decoder
	var b core.Batch
	vllmRank := mp(nil).mapn(3).kv("ts").f(1).kv("events").arr(0).kv("data_parallel_rank").u(2)
	if err := d.Decode(DialectSGLang, vllmRank, &b); err != nil || b.HasDPRank {
		t.Errorf("SGLang batch map with data_parallel_rank: %v, rank %d/%v; want decoded without a rank", err, b.DPRank, b.HasDPRank)
	}
	sglRank := sglMapBatch(1, 2)
	if err := d.Decode(DialectVLLM, sglRank, &b); err != nil || b.HasDPRank {
		t.Errorf("vLLM batch map with attn_dp_rank: %v, rank %d/%v; want decoded without a rank", err, b.DPRank, b.HasDPRank)
	}
	noTS := mp(nil).mapn(2).kv("events").arr(0).kv("attn_dp_rank").u(0)
	if err := d.Decode(DialectSGLang, noTS, &b); err == nil {
		t.Error("SGLang batch map without ts decoded")
	} else if de, ok := err.(*DecodeError); !ok || de.Field != "ts" || !errors.Is(err, ErrMissingField) {
		t.Errorf("SGLang batch map without ts: %v, want ts missing", err)
	}
}
