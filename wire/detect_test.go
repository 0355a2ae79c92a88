package wire

import (
	"strings"
	"testing"

	"github.com/seed-c7a81618/conductor/core"
)

// detectCase is a payload and what detection must find in it: the dialect,
// whether it is sure, and the era.
type detectCase struct {
	name    string
	payload []byte
	dialect Dialect
	sure    bool
	era     Era
	env     Envelope
}

func runDetectCases(t *testing.T, cases []detectCase) {
	t.Helper()
	var d Decoder
	var b core.Batch
	for _, c := range cases {
		s, err := d.DecodeAny(c.payload, &b)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if s.Dialect != c.dialect || s.Sure != c.sure || s.Era != c.era || (c.env != 0 && s.Envelope != c.env) {
			t.Errorf("%s: %v sure=%v era=%v envelope=%v (evidence %#x); want %v sure=%v era=%v envelope=%v",
				c.name, s.Dialect, s.Sure, s.Era, s.Envelope, s.Evidence, c.dialect, c.sure, c.era, c.env)
		}
		if b.Skipped != 0 {
			t.Errorf("%s: decoded as %v, %d events dropped: %v", c.name, s.Dialect, b.Skipped, b.Errors)
		}
	}
}

// TestDetectEngineVectors: every engine vector is told apart by what it
// carries: a form only one engine sends, else the sign of its hashes.
func TestDetectEngineVectors(t *testing.T) {
	var file struct {
		Cases []struct {
			Name       string `json:"name"`
			PayloadHex string `json:"payload_hex"`
		} `json:"cases"`
	}
	loadJSON(t, "derived_engine_wire_vectors.json", &file)
	era := map[string]Era{
		"sglang_array_salted_metadata": EraArrayMetadata,
	}
	var cases []detectCase
	for _, c := range file.Cases {
		want := detectCase{name: c.Name, payload: mustHex(t, c.PayloadHex), dialect: DialectVLLM, sure: true, era: EraArray, env: EnvelopeArray}
		if strings.HasPrefix(c.Name, "sglang_") {
			want.dialect = DialectSGLang
		}
		if strings.Contains(c.Name, "_map_") || strings.HasPrefix(c.Name, "vllm_0_26") {
			want.era = EraMap
		}
		if e, ok := era[c.Name]; ok {
			want.era = e
		}
		cases = append(cases, want)
	}
	if len(cases) != 15 {
		t.Fatalf("%d cases", len(cases))
	}
	runDetectCases(t, cases)
}

// TestDetectSGLangMapVectors: SGLang's own map-era payloads are SGLang's,
// by their signed hashes or a cache_salt, or, with neither, by the absent
// lora_name, which older vLLM shares (unsure); an empty batch says nothing.
func TestDetectSGLangMapVectors(t *testing.T) {
	var file struct {
		Cases []struct {
			Name       string `json:"name"`
			PayloadHex string `json:"payload_hex"`
		} `json:"cases"`
	}
	loadJSON(t, "mooncake_sglang_map_event_vectors.json", &file)
	want := map[string]detectCase{
		"stored_removed_cleared":         {dialect: DialectSGLang, sure: true, era: EraMap},
		"stored_omitted_optionals":       {dialect: DialectSGLang, sure: false, era: EraMap},
		"stored_salt_session_and_parent": {dialect: DialectSGLang, sure: true, era: EraMap},
		"stored_signed_hash_limits":      {dialect: DialectSGLang, sure: true, era: EraMap},
		"removed_omitted_medium":         {dialect: DialectSGLang, sure: true, era: EraMap},
		"empty_batch":                    {dialect: DialectVLLM, sure: false},
	}
	var cases []detectCase
	for _, c := range file.Cases {
		w, ok := want[c.Name]
		if !ok {
			t.Fatalf("case %s has no expectation", c.Name)
		}
		w.name, w.payload, w.env = c.Name, mustHex(t, c.PayloadHex), EnvelopeArray
		cases = append(cases, w)
	}
	runDetectCases(t, cases)
}

// TestDetectEnvelopesAndRFC: the RFC #1527 forms and the Mooncake master, and
// the envelopes only one dialect uses.
func TestDetectEnvelopesAndRFC(t *testing.T) {
	std := mp(nil).mapn(5).kv("event_id").u(1).kv("event_type").str("stored").
		kv("seq_hashes").u64s(10, 11).kv("token_ids").ints(1, 2, 3, 4).kv("block_size").u(2)
	cleared := mp(nil).mapn(2).kv("event_id").u(2).kv("event_type").str("cleared")
	runDetectCases(t, []detectCase{
		{"mooncake_master", mooncakeBatchOf(1700000000123, 2, mooncakeStored(), mooncakeRemoved(), mooncakeCleared()),
			DialectMooncake, true, EraStandard, EnvelopeArray},
		{"mooncake_object_key_only", mooncakeBatchOf(1, 0, mp(nil).mapn(4).kv("event_id").u(1).kv("event_type").str("stored").
			kv("seq_hashes").arr(0).kv("object_key").str("7")), DialectMooncake, true, EraStandard, EnvelopeArray},
		{"standard_batch", mooncakeBatchOf(1, 0, std), DialectStandard, true, EraStandard, EnvelopeArray},
		{"standard_cleared_only", mooncakeBatchOf(1, 0, cleared), DialectStandard, false, EraStandard, EnvelopeArray},
		{"standard_bare_array", mp(nil).arr(2).cat2(std, cleared), DialectStandard, true, EraStandard, EnvelopeEvents},
		{"standard_one_event", std, DialectStandard, true, EraStandard, EnvelopeEvent},
		{"standard_wrapper", mp(nil).mapn(2).kv("events").arr(1).cat2(std).kv("timestamp").u(7), DialectStandard, true, EraStandard, EnvelopeMap},
		{"standard_empty_int_ts", mooncakeBatchOf(1, 0), DialectStandard, false, 0, EnvelopeArray},
		{"engine_empty_float_ts", batch(1.5, 0), DialectVLLM, false, 0, EnvelopeArray},
		{"vllm_map_batch", mp(nil).mapn(3).kv("ts").f(1.5).kv("events").arr(1).
			cat2(mp(nil).arr(7).str("BlockStored").u64s(1).null().ints(1, 2).i(2).null().str("GPU")).kv("data_parallel_rank").u(0),
			DialectVLLM, true, EraArray, EnvelopeMap},
		{"vllm_two_elements", mp(nil).arr(2).f(1.5).arr(1).cat2(mp(nil).arr(7).str("BlockStored").u64s(1).null().ints(1, 2).i(2).null().str("GPU")),
			DialectVLLM, true, EraArray, EnvelopeNoRank},
		{"vllm_removed_group_idx", batch(1.5, 0, mp(nil).arr(4).str("BlockRemoved").u64s(1).str("GPU").i(0)), DialectVLLM, true, EraArray, EnvelopeArray},
		{"vllm_lora_name_string", batch(1.5, 0, mp(nil).arr(8).str("BlockStored").u64s(1).null().ints(1, 2).i(2).null().str("GPU").str("a")),
			DialectVLLM, true, EraArray, EnvelopeArray},
		{"sglang_cache_salt_key", batch(1.5, 0, mp(nil).mapn(4).kv("type").str("BlockStored").kv("block_hashes").u64s(1).
			kv("block_size").u(2).kv("cache_salt").str("s")), DialectSGLang, true, EraMap, EnvelopeArray},
		{"unsigned_beats_short", batch(1.5, 0, mp(nil).arr(7).str("BlockStored").u64s(1<<63).null().ints(1, 2).i(2).null().str("GPU")),
			DialectVLLM, true, EraArray, EnvelopeArray},
		{"short_alone_guesses_sglang", batch(1.5, 0, mp(nil).arr(7).str("BlockStored").u64s(5).null().ints(1, 2).i(2).null().str("GPU")),
			DialectSGLang, false, EraArray, EnvelopeArray},
		{"nothing_guesses_vllm", batch(1.5, 0, mp(nil).arr(8).str("BlockStored").u64s(5).null().ints(1, 2).i(2).null().str("GPU").null()),
			DialectVLLM, false, EraArray, EnvelopeArray},
	})
	// An unknown tag shows nothing of its sender (and the decode drops it).
	var d Decoder
	var b core.Batch
	s, err := d.DecodeAny(batch(1.5, 0, mp(nil).arr(1).str("BlockInactive")), &b)
	if err != nil || s.Dialect != DialectVLLM || s.Sure || s.Era != 0 || s.Evidence != EvFloatTS || b.Skipped != 1 {
		t.Errorf("unknown tag: %+v %v, %d skipped", s, err, b.Skipped)
	}
}

// TestEvidenceOverAStream: evidence ORed over payloads decides what no
// single payload does; contradictory forms are not sure.
func TestEvidenceOverAStream(t *testing.T) {
	f := func(e Evidence, want Dialect, sure bool) {
		t.Helper()
		if d, s := e.Dialect(); d != want || s != sure {
			t.Errorf("%#x: %v sure=%v, want %v sure=%v", e, d, s, want, sure)
		}
	}
	eng := EvEngineEvents | EvFloatTS
	f(eng|EvShortStored, DialectSGLang, false)
	f(eng|EvShortStored|EvSignedHash, DialectSGLang, true)
	f(eng|EvShortStored|EvUnsignedHash, DialectVLLM, true)
	f(eng|EvSignedHash|EvUnsignedHash, DialectVLLM, false)
	f(eng|EvSignedHash|EvUnsignedHash|EvSGLangForm, DialectSGLang, true)
	f(eng|EvVLLMForm|EvSGLangForm, DialectVLLM, false)
	f(eng|EvStandardEvents|EvMooncake, DialectVLLM, false) // standardized maps inside an engine batch
	f(EvStandardEvents|EvStandardBlocks|EvMooncake, DialectMooncake, true)
	f(0, DialectVLLM, false)
}
