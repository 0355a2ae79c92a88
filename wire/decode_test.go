package wire

import (
	"errors"
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/seed-c7a81618/conductor/core"
)

// decodeCase is one payload and the batch it must decode to, rendered by renderBatch.
type decodeCase struct {
	name    string
	dialect Dialect
	payload []byte
	want    string // renderBatch output, without its trailing newline
}

func runDecodeCases(t *testing.T, cases []decodeCase) {
	t.Helper()
	var d Decoder // one decoder and one batch for every case (STYLE rule 10)
	var b core.Batch
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := d.Decode(c.dialect, c.payload, &b); err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if got := strings.TrimSuffix(renderBatch(&b), "\n"); got != c.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, c.want)
			}
		})
	}
}

func TestDecodeVLLM(t *testing.T) {
	h1, h2 := uint64(2164874634404590027), uint64(17270480062156288726)
	stored := func(fields int) mp { // array-era BlockStored with `fields` fields after the tag
		m := mp(nil).arr(fields+1).str("BlockStored").u64s(h1, h2).null().ints(1, 2, 3, 4, 5, 6, 7, 8).i(4).null()
		rest := []func(mp) mp{
			func(m mp) mp { return m.str("GPU") },
			func(m mp) mp { return m.null() },
			func(m mp) mp { return m.arr(2).null().null() },
			func(m mp) mp { return m.i(0) },
			func(m mp) mp { return m.str("full_attention") },
			func(m mp) mp { return m.null() },
			func(m mp) mp { return m.str("future-field") },
		}
		for _, f := range rest[:fields-5] {
			m = f(m)
		}
		return m
	}
	const base = "stored hashes=[2164874634404590027 17270480062156288726] tokens=[1 2 3 4 5 6 7 8] block_size=4/true"
	cases := []decodeCase{
		{"array_5_fields", DialectVLLM, batch(1.5, 0, stored(5)), "ts=1.5/0 dp=0 events=1 skipped=0\n" + base},
		{"array_6_fields", DialectVLLM, batch(1.5, 0, stored(6)), "ts=1.5/0 dp=0 events=1 skipped=0\n" + base + ` medium="GPU"`},
		{"array_7_fields", DialectVLLM, batch(1.5, 0, stored(7)), "ts=1.5/0 dp=0 events=1 skipped=0\n" + base + ` medium="GPU"`},
		{"array_8_fields", DialectVLLM, batch(1.5, 0, stored(8)), "ts=1.5/0 dp=0 events=1 skipped=0\n" + base + ` extra_keys medium="GPU"`},
		{"array_9_fields", DialectVLLM, batch(1.5, 0, stored(9)), "ts=1.5/0 dp=0 events=1 skipped=0\n" + base + ` group_idx=0 extra_keys medium="GPU"`},
		{"array_10_fields", DialectVLLM, batch(1.5, 0, stored(10)), "ts=1.5/0 dp=0 events=1 skipped=0\n" + base + ` group_idx=0 extra_keys medium="GPU" spec_kind="full_attention"`},
		{"array_11_fields", DialectVLLM, batch(1.5, 0, stored(11)), "ts=1.5/0 dp=0 events=1 skipped=0\n" + base + ` group_idx=0 extra_keys medium="GPU" spec_kind="full_attention"`},
		{"array_12_fields_extra_ignored", DialectVLLM, batch(1.5, 0, stored(12)), "ts=1.5/0 dp=0 events=1 skipped=0\n" + base + ` group_idx=0 extra_keys medium="GPU" spec_kind="full_attention"`},
		{"array_removed_shapes", DialectVLLM, batch(2, 1,
			mp(nil).arr(2).str("BlockRemoved").u64s(h1),
			mp(nil).arr(3).str("BlockRemoved").u64s(h1).str("CPU"),
			mp(nil).arr(4).str("BlockRemoved").u64s(h1).str("GPU").i(1),
			mp(nil).arr(5).str("BlockRemoved").u64s(h1).null().null().str("extra")),
			"ts=2/0 dp=1 events=4 skipped=0\n" +
				"removed hashes=[2164874634404590027]\n" +
				`removed hashes=[2164874634404590027] medium="CPU"` + "\n" +
				`removed hashes=[2164874634404590027] group_idx=1 medium="GPU"` + "\n" +
				"removed hashes=[2164874634404590027]"},
		{"array_cleared_extra_ignored", DialectVLLM, batch(2, 0,
			mp(nil).arr(1).str("AllBlocksCleared"), mp(nil).arr(2).str("AllBlocksCleared").u(1)),
			"ts=2/0 dp=0 events=2 skipped=0\ncleared hashes=[]\ncleared hashes=[]"},
		{"two_element_batch_int_ts", DialectVLLM, mp(nil).arr(2).u(1700000000).arr(1).arr(1).str("AllBlocksCleared"),
			"ts=1.7e+09/1700000000 dp=nil events=1 skipped=0\ncleared hashes=[]"},
		{"nil_dp_rank", DialectVLLM, mp(nil).arr(3).f(3).arr(0).null(), "ts=3/0 dp=nil events=0 skipped=0"},
		{"float32_ts", DialectVLLM, mp(nil).arr(3).raw(0xca, 0x3f, 0xc0, 0, 0).arr(0).i(2), "ts=1.5/0 dp=2 events=0 skipped=0"},
		{"map_batch", DialectVLLM, mp(nil).mapn(4).kv("events").arr(1).arr(1).str("AllBlocksCleared").
			kv("unknown").str("x").kv("data_parallel_rank").i(7).kv("ts").f(4.25),
			"ts=4.25/0 dp=7 events=1 skipped=0\ncleared hashes=[]"},
		{"map_era_unknown_keys_and_tolerated", DialectVLLM, batch(1, 0,
			mp(nil).mapn(13).kv("type").str("BlockStored").kv("block_hashes").u64s(7).
				kv("parent_block_hash").u(6).kv("token_ids").ints(1, 2).kv("block_size").i(2).
				kv("lora_id").i(3).kv("medium").str("STORAGE").kv("lora_name").str("sql").
				kv("locality").str("REMOTE").kv("ownership").i(5).kv("session_id").str("req-1").
				kv("future_store_metadata").boolean(true).kv("kv_cache_spec_sliding_window").i(64)),
			"ts=1/0 dp=0 events=1 skipped=0\n" +
				`stored hashes=[7] parent=6 tokens=[1 2] block_size=2/true lora_id=3 sliding_window medium="STORAGE" lora_name="sql"`},
		{"negative_and_bin_hashes", DialectVLLM, batch(1, 0,
			mp(nil).arr(3).str("BlockRemoved").arr(4).i(-1).i(math.MinInt64).
				bin([]byte{1, 2, 3, 4, 5, 6, 7, 8}).
				bin([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0x01, 0x02}).
				str("GPU")),
			"ts=1/0 dp=0 events=1 skipped=0\n" +
				`removed hashes=[18446744073709551615 9223372036854775808 72623859790382856 258] medium="GPU"`},
		{"offload_placeholder_and_empty_store", DialectVLLM, batch(1, 0,
			vllmStoredMap([]uint64{1}, []int64{}, 0), vllmStoredMap(nil, nil, 16)),
			"ts=1/0 dp=0 events=2 skipped=0\n" +
				`stored hashes=[1] tokens=[] block_size=0/true medium="GPU"` + "\n" +
				`stored hashes=[] tokens=[] block_size=16/true medium="GPU"`},
		{"tokens_signed_encodings", DialectVLLM, batch(1, 0,
			mp(nil).arr(6).str("BlockStored").u64s(1).null().
				sints(0, 127, 128, 32767, 32768, 1<<31-1, -1, -33, -129, -32769, 1<<31, math.MaxUint32, math.MinInt32).
				i(13).null()),
			"ts=1/0 dp=0 events=1 skipped=0\n" +
				`stored hashes=[1] tokens=[0 127 128 32767 32768 2147483647 -1 -33 -129 -32769 -2147483648 -1 -2147483648] block_size=13/true`},
		{"tokens_u32_range_and_negative", DialectVLLM, batch(1, 0,
			vllmStoredMap([]uint64{1}, []int64{0, 127, 128, 65535, 65536, math.MaxUint32, -1, math.MinInt32}, 8)),
			"ts=1/0 dp=0 events=1 skipped=0\n" +
				`stored hashes=[1] tokens=[0 127 128 65535 65536 -1 -1 -2147483648] block_size=8/true medium="GPU"`},
	}
	runDecodeCases(t, cases)
}

func TestDecodeSGLang(t *testing.T) {
	cases := []decodeCase{
		{"array_era_medium_optional", DialectSGLang, batch(1, 2,
			mp(nil).arr(6).str("BlockStored").ints(-5).null().ints(1, 2).i(2).null(),
			mp(nil).arr(7).str("BlockStored").ints(-6).i(-5).ints(3, 4).i(2).null().str("CPU_PINNED"),
			mp(nil).arr(2).str("BlockRemoved").ints(-5),
			mp(nil).arr(3).str("BlockRemoved").ints(-6).str("DISK")),
			"ts=1/0 dp=2 events=4 skipped=0\n" +
				"stored hashes=[18446744073709551611] tokens=[1 2] block_size=2/true\n" +
				`stored hashes=[18446744073709551610] parent=18446744073709551611 tokens=[3 4] block_size=2/true medium="CPU_PINNED"` + "\n" +
				"removed hashes=[18446744073709551611]\n" +
				`removed hashes=[18446744073709551610] medium="DISK"`},
		{"metadata_map", DialectSGLang, batch(1, 0,
			mp(nil).arr(8).str("BlockStored").ints(1).null().ints(1).i(1).null().str("GPU").mapn(2).kv("other").i(1).kv("cache_salt").str("t-a"),
			mp(nil).arr(8).str("BlockStoredWithMetadata").ints(2).null().ints(1).i(1).null().null().null()),
			"ts=1/0 dp=0 events=2 skipped=0\n" +
				`stored hashes=[1] tokens=[1] block_size=1/true medium="GPU" cache_salt="t-a"` + "\n" +
				"stored hashes=[2] tokens=[1] block_size=1/true"},
		{"map_era_salt_session", DialectSGLang, batch(1, 0,
			mp(nil).mapn(8).kv("type").str("BlockStored").kv("block_hashes").ints(9).kv("parent_block_hash").null().
				kv("token_ids").ints(5, 6).kv("block_size").i(2).kv("lora_id").null().kv("cache_salt").str("s").kv("session_id").str("x")),
			"ts=1/0 dp=0 events=1 skipped=0\n" + `stored hashes=[9] tokens=[5 6] block_size=2/true cache_salt="s"`},
		{"bigram_pairs_flattened", DialectSGLang, batch(1, 0,
			mp(nil).arr(6).str("BlockStored").ints(11, 12).null().arr(4).ints(10, 11).ints(11, 12).ints(12, 13).ints(13, 14).i(2).null()),
			"ts=1/0 dp=0 events=1 skipped=0\nstored hashes=[11 12] tokens=[10 11 11 12 12 13 13 14] bigram block_size=2/true"},
		{"partial_last_page", DialectSGLang, batch(1, 0,
			mp(nil).arr(6).str("BlockStored").ints(1, 2).null().ints(1, 2, 3, 4, 5).i(4).null()),
			"ts=1/0 dp=0 events=1 skipped=0\nstored hashes=[1 2] tokens=[1 2 3 4 5] block_size=4/true partial"},
		{"uint64_hash_kept", DialectSGLang, batch(1, 0, mp(nil).arr(2).str("BlockRemoved").u64s(math.MaxUint64)),
			"ts=1/0 dp=0 events=1 skipped=0\nremoved hashes=[18446744073709551615]"},
	}
	runDecodeCases(t, cases)
}

// mooncakeStored is the reference's §5.4 case 3 stored event: 28 keys.
func mooncakeStored(extra ...func(mp) mp) mp {
	digest := make([]byte, 32)
	for i := range digest {
		digest[i] = byte(i)
	}
	m := mp(nil).mapn(28 + len(extra)).kv("event_id").u(7).kv("timestamp").u(1700000000123).
		kv("event_type").str("stored").kv("type").str("BlockStored").kv("model_name").str("model-a").
		kv("block_size").u(16).kv("additional_salt").null().kv("lora_name").null().
		kv("tenant_id").str("tenant-a").kv("backend_id").str("backend-a").kv("medium").str("cpu").
		kv("dp_rank").u(0).kv("group_id").str("0").kv("object_key").str("object-a").
		kv("connector_block_hash").bin(digest).kv("cache_prefix").str("prefix").
		kv("tp_rank").u(1).kv("head_or_tp_rank").u(1).kv("pcp_rank").u(0).kv("dcp_rank").u(0).
		kv("pp_rank").u(3).kv("layer_id").u(31).
		kv("seq_hashes").u64s(0x18191a1b1c1d1e1f).kv("block_hashes").u64s(0x18191a1b1c1d1e1f).
		kv("base_block_idx").null().kv("parent_hash").null().kv("token_ids").null().kv("parent_block_hash").null()
	for _, f := range extra {
		m = f(m)
	}
	return m
}

func mooncakeRemoved() mp {
	return mp(nil).mapn(25).kv("event_id").u(8).kv("timestamp").u(1700000000123).
		kv("event_type").str("removed").kv("type").str("BlockRemoved").kv("model_name").str("model-a").
		kv("block_size").u(16).kv("additional_salt").null().kv("lora_name").null().
		kv("tenant_id").str("tenant-a").kv("backend_id").str("backend-a").kv("medium").str("disk").
		kv("dp_rank").u(0).kv("group_id").str("0").kv("object_key").str("object-a").
		kv("connector_block_hash").str("0x0001").kv("cache_prefix").str("prefix").
		kv("tp_rank").u(1).kv("head_or_tp_rank").u(1).kv("pcp_rank").u(0).kv("dcp_rank").u(0).
		kv("pp_rank").u(3).kv("layer_id").null().
		kv("seq_hashes").u64s(0x18191a1b1c1d1e1f).kv("block_hashes").u64s(0x18191a1b1c1d1e1f).
		kv("base_block_idx").u(4)
}

func mooncakeCleared(extra ...func(mp) mp) mp {
	m := mp(nil).mapn(12 + len(extra)).kv("event_id").u(9).kv("timestamp").u(1700000000123).
		kv("event_type").str("cleared").kv("type").str("AllBlocksCleared").kv("model_name").null().
		kv("block_size").null().kv("additional_salt").null().kv("lora_name").null().
		kv("tenant_id").str("tenant-a").kv("backend_id").str("backend-a").kv("medium").null().
		kv("dp_rank").u(2)
	for _, f := range extra {
		m = f(m)
	}
	return m
}

const (
	mcStoredWant  = `stored hashes=[1736447835066146335] block_size=16/true group_idx=0 event_id=7 timestamp=1700000000123 dp_rank=0 medium="cpu" model_name="model-a" tenant_id="tenant-a" backend_id="backend-a" object_key="object-a"`
	mcRemovedWant = `removed hashes=[1736447835066146335] block_size=16/true group_idx=0 event_id=8 timestamp=1700000000123 dp_rank=0 base_block_idx=4 medium="disk" model_name="model-a" tenant_id="tenant-a" backend_id="backend-a" object_key="object-a"`
	mcClearedWant = `cleared hashes=[] event_id=9 timestamp=1700000000123 dp_rank=2 tenant_id="tenant-a" backend_id="backend-a"`
)

func TestDecodeMooncake(t *testing.T) {
	unknown := func(m mp) mp { return m.kv("future_key").arr(1).mapn(0) }
	ev := func(keys int, f func(mp) mp) mp { return f(mp(nil).mapn(keys)) }
	cases := []decodeCase{
		// §5.4 case 3: the deterministic publisher fixture.
		{"ref_5_4_3_fixture", DialectMooncake, mooncakeBatchOf(1700000000123, 2,
			mooncakeStored(), mooncakeRemoved(), mooncakeCleared()),
			"ts=1.700000000123e+12/1700000000123 dp=2 events=3 skipped=0\n" + mcStoredWant + "\n" + mcRemovedWant + "\n" + mcClearedWant},
		// §5.4 case 4: unknown keys and a nil batch rank.
		{"ref_5_4_4_unknown_keys_nil_dp", DialectMooncake,
			mp(nil).arr(3).u(5).arr(2).cat2(mooncakeStored(unknown), mooncakeCleared(unknown)).null(),
			"ts=5/5 dp=nil events=2 skipped=0\n" + mcStoredWant + "\n" + mcClearedWant},
		{"object_key_decimal_and_hex", DialectMooncake, mooncakeBatchOf(1, 0,
			ev(4, func(m mp) mp {
				return m.kv("event_id").u(1).kv("event_type").str("stored").kv("seq_hashes").arr(0).kv("object_key").str("18446744073709551615")
			}),
			ev(3, func(m mp) mp {
				return m.kv("event_id").u(2).kv("event_type").str("removed").kv("object_key").str("0xDEADbeef")
			}),
			ev(3, func(m mp) mp {
				return m.kv("event_id").u(3).kv("event_type").str("removed").kv("object_key").str("0x")
			}),
			ev(3, func(m mp) mp {
				return m.kv("event_id").u(4).kv("event_type").str("stored").kv("object_key").str("18446744073709551616")
			})),
			"ts=1/1 dp=0 events=4 skipped=0\n" +
				`stored hashes=[18446744073709551615] event_id=1 object_key="18446744073709551615"` + "\n" +
				`removed hashes=[3735928559] event_id=2 object_key="0xDEADbeef"` + "\n" +
				`removed hashes=[] event_id=3 object_key="0x"` + "\n" +
				`stored hashes=[] event_id=4 object_key="18446744073709551616"`},
		{"legacy_aliases_only", DialectMooncake, mooncakeBatchOf(1, 0,
			ev(5, func(m mp) mp {
				return m.kv("event_id").u(1).kv("type").str("BlockStored").kv("block_hashes").u64s(5, 6).
					kv("parent_block_hash").u(4).kv("token_ids").ints(1, 2, 3, 4)
			})),
			"ts=1/1 dp=0 events=1 skipped=0\nstored hashes=[5 6] parent=4 tokens=[1 2 3 4] event_id=1"},
		{"tokens_checked_against_block_size", DialectMooncake, mooncakeBatchOf(1, 0,
			ev(5, func(m mp) mp {
				return m.kv("event_id").u(1).kv("event_type").str("stored").kv("seq_hashes").u64s(5, 6).
					kv("block_size").u(2).kv("token_ids").ints(1, 2, 3, 4)
			})),
			"ts=1/1 dp=0 events=1 skipped=0\nstored hashes=[5 6] tokens=[1 2 3 4] block_size=2/true event_id=1"},
	}
	runDecodeCases(t, cases)
}

// cat2 appends pre-encoded values.
func (m mp) cat2(vs ...mp) mp {
	for _, v := range vs {
		m = append(m, v...)
	}
	return m
}

func TestDecodeStandardMsgpack(t *testing.T) {
	event := func(id uint64) mp {
		return mp(nil).mapn(5).kv("event_id").u(id).kv("event_type").str("stored").
			kv("seq_hashes").u64s(id*10, id*10+1).kv("base_block_idx").u(5).kv("parent_hash").u(9999999999)
	}
	const e1 = "stored hashes=[10 11] parent=9999999999 event_id=1 base_block_idx=5"
	const e2 = "stored hashes=[20 21] parent=9999999999 event_id=2 base_block_idx=5"
	cases := []decodeCase{
		{"batch", DialectStandard, mp(nil).arr(3).u(1739145600000).arr(2).cat2(event(1), event(2)).u(0),
			"ts=1.7391456e+12/1739145600000 dp=0 events=2 skipped=0\n" + e1 + "\n" + e2},
		{"batch_float_ts_no_rank", DialectStandard, mp(nil).arr(2).f(1.5).arr(1).cat2(event(1)),
			"ts=1.5/0 dp=nil events=1 skipped=0\n" + e1},
		{"bare_array", DialectStandard, mp(nil).arr(2).cat2(event(1), event(2)), "ts=0/0 dp=nil events=2 skipped=0\n" + e1 + "\n" + e2},
		{"empty_array", DialectStandard, mp(nil).arr(0), "ts=0/0 dp=nil events=0 skipped=0"},
		{"single_event", DialectStandard, event(1), "ts=0/0 dp=nil events=1 skipped=0\n" + e1},
		{"wrapper_map", DialectStandard, mp(nil).mapn(3).kv("dp_rank").u(3).kv("events").arr(1).cat2(event(2)).kv("timestamp").u(7),
			"ts=7/7 dp=3 events=1 skipped=0\n" + e2},
		{"rfc_example_stored", DialectStandard, mp(nil).mapn(15).kv("event_id").u(42).kv("timestamp").u(1739145600000).
			kv("event_type").str("stored").kv("model_name").str("llama-3.1-8b").kv("block_size").u(64).
			kv("additional_salt").null().kv("lora_name").null().kv("tenant_id").str("default").
			kv("backend_id").str("worker-0").kv("medium").str("gpu").kv("dp_rank").u(0).
			kv("seq_hashes").u64s(1234567890, 9876543210, 1122334455).kv("base_block_idx").u(5).
			kv("parent_hash").u(9999999999).kv("token_ids").null(),
			"ts=0/0 dp=nil events=1 skipped=0\n" +
				`stored hashes=[1234567890 9876543210 1122334455] parent=9999999999 block_size=64/true event_id=42 timestamp=1739145600000 dp_rank=0 base_block_idx=5 medium="gpu" model_name="llama-3.1-8b" tenant_id="default" backend_id="worker-0"`},
	}
	runDecodeCases(t, cases)
}

// errCase is a payload Decode must reject as a whole.
type errCase struct {
	name    string
	dialect Dialect
	payload []byte
	err     error
	event   int
	field   string
}

func runErrCases(t *testing.T, decode func(*Decoder, Dialect, []byte, *core.Batch) error, cases []errCase) {
	t.Helper()
	var d Decoder
	var b core.Batch
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := decode(&d, c.dialect, c.payload, &b)
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("err = %v, want a *DecodeError", err)
			}
			if !errors.Is(err, c.err) || de.Event != c.event || de.Field != c.field || de.Dialect != c.dialect {
				t.Errorf("err = %v (event %d field %q), want %v at event %d field %q", err, de.Event, de.Field, c.err, c.event, c.field)
			}
		})
	}
}

func decodeMsgpack(d *Decoder, dialect Dialect, p []byte, b *core.Batch) error {
	return d.Decode(dialect, p, b)
}

func TestDecodeEnvelopeErrors(t *testing.T) {
	clear := mp(nil).arr(1).str("AllBlocksCleared")
	valid := batch(1.25, 0, clear)
	cases := []errCase{
		// §5.4 case 15.
		{"empty", DialectVLLM, nil, ErrEmptyPayload, -1, ""},
		{"c1_garbage", DialectMooncake, []byte{0xc1, 0x01, 0x02}, ErrSyntax, -1, ""},
		{"trailing_zero_byte", DialectVLLM, append(append([]byte{}, valid...), 0), ErrTrailingBytes, -1, ""},
		// §5.4 case 5 (vLLM); a map root and 2 elements are accepted here, see TestDecodeVLLM.
		{"vllm_4_elements", DialectVLLM, mp(nil).arr(4).f(1).arr(0).i(0).i(0), ErrArity, -1, ""},
		{"vllm_1_element", DialectVLLM, mp(nil).arr(1).f(1), ErrArity, -1, ""},
		{"vllm_string_root", DialectVLLM, mp(nil).str("x"), ErrWrongType, -1, ""},
		{"vllm_inf_ts", DialectVLLM, mp(nil).arr(3).f(math.Inf(1)).arr(0).i(0), ErrOutOfRange, -1, "ts"},
		{"vllm_nan_ts", DialectVLLM, mp(nil).arr(3).f(math.NaN()).arr(0).i(0), ErrOutOfRange, -1, "ts"},
		{"vllm_negative_ts", DialectVLLM, mp(nil).arr(3).f(-1).arr(0).i(0), ErrOutOfRange, -1, "ts"},
		{"vllm_string_ts", DialectVLLM, mp(nil).arr(3).str("1").arr(0).i(0), ErrWrongType, -1, "ts"},
		{"vllm_events_not_array", DialectVLLM, mp(nil).arr(3).f(1).mapn(0).i(0), ErrWrongType, -1, "events"},
		{"vllm_dp_minus_one", DialectVLLM, mp(nil).arr(3).f(1).arr(0).i(-1), ErrOutOfRange, -1, "data_parallel_rank"},
		{"vllm_dp_string", DialectVLLM, mp(nil).arr(3).f(1).arr(0).str("0"), ErrWrongType, -1, "data_parallel_rank"},
		{"vllm_dp_over_u32", DialectVLLM, mp(nil).arr(3).f(1).arr(0).u(1 << 32), ErrOutOfRange, -1, "data_parallel_rank"},
		{"vllm_map_batch_no_events", DialectVLLM, mp(nil).mapn(1).kv("ts").f(1), ErrMissingField, -1, "events"},
		{"vllm_map_batch_no_ts", DialectVLLM, mp(nil).mapn(1).kv("events").arr(0), ErrMissingField, -1, "ts"},
		{"vllm_map_batch_dup", DialectVLLM, mp(nil).mapn(3).kv("ts").f(1).kv("events").arr(0).kv("ts").f(2), ErrDuplicateField, -1, "ts"},
		{"sglang_2_elements", DialectSGLang, mp(nil).arr(2).f(1).arr(0), ErrArity, -1, ""},
		{"sglang_map_batch_no_ts", DialectSGLang, mp(nil).mapn(1).kv("events").arr(0), ErrMissingField, -1, "ts"},
		{"sglang_map_batch_no_events", DialectSGLang, mp(nil).mapn(2).kv("ts").f(1).kv("attn_dp_rank").u(0), ErrMissingField, -1, "events"},
		{"sglang_map_batch_dup_rank", DialectSGLang, mp(nil).mapn(4).kv("ts").f(1).kv("events").arr(0).kv("attn_dp_rank").u(0).kv("attn_dp_rank").u(1),
			ErrDuplicateField, -1, "attn_dp_rank"},
		{"sglang_map_batch_rank_bool", DialectSGLang, mp(nil).mapn(3).kv("ts").f(1).kv("events").arr(0).kv("attn_dp_rank").boolean(true),
			ErrWrongType, -1, "attn_dp_rank"},
		{"sglang_string_root", DialectSGLang, mp(nil).str("x"), ErrWrongType, -1, ""},
		{"sglang_attn_dp_bool", DialectSGLang, mp(nil).arr(3).f(1).arr(0).boolean(true), ErrWrongType, -1, "attn_dp_rank"},
		// §5.4 case 6 (Mooncake).
		{"mc_string_root", DialectMooncake, mp(nil).str("x"), ErrWrongType, -1, ""},
		{"mc_2_elements", DialectMooncake, mp(nil).arr(2).u(1).arr(0), ErrArity, -1, ""},
		{"mc_4_elements", DialectMooncake, mp(nil).arr(4).u(1).arr(0).u(0).u(0), ErrArity, -1, ""},
		{"mc_negative_ts", DialectMooncake, mp(nil).arr(3).i(-1).arr(0).u(0), ErrOutOfRange, -1, "ts"},
		{"mc_events_map", DialectMooncake, mp(nil).arr(3).u(1).mapn(0).u(0), ErrWrongType, -1, "events"},
		{"mc_dp_minus_one", DialectMooncake, mp(nil).arr(3).u(1).arr(0).i(-1), ErrOutOfRange, -1, "dp_rank"},
		{"mc_dp_false", DialectMooncake, mp(nil).arr(3).u(1).arr(0).boolean(false), ErrWrongType, -1, "dp_rank"},
		{"std_batch_4", DialectStandard, mp(nil).arr(4).u(1).arr(0).u(0).u(0), ErrArity, -1, ""},
		{"std_scalar_root", DialectStandard, mp(nil).u(1), ErrWrongType, -1, ""},
		{"unknown_dialect", Dialect(0), valid, ErrUnknownDialect, -1, ""},
		// Structure broken inside an event: nothing after it can be found.
		{"event_truncated", DialectVLLM, valid[:len(valid)-3], ErrTruncated, 0, "type"},
		{"event_invalid_byte", DialectVLLM, mp(nil).arr(3).f(1).arr(2).arr(2).str("BlockRemoved").raw(0xc1).cat2(clear).i(0), ErrSyntax, 0, "block_hashes"},
		{"events_count_lies", DialectVLLM, mp(nil).arr(3).f(1).raw(0xdd, 0x80, 0, 0, 0).cat2(clear).i(0), ErrTruncated, -1, "events"},
	}
	runErrCases(t, decodeMsgpack, cases)
}

// TestDecodeEventErrors puts each malformed event between two valid ones: the
// malformed one must be dropped with the expected error, its siblings decoded.
func TestDecodeEventErrors(t *testing.T) {
	type evCase struct {
		name    string
		dialect Dialect
		event   mp
		err     error
		field   string
		index   int
	}
	vStored := func(f func(mp) mp, keys int) mp { // map-era BlockStored with its 8 keys + f's
		return f(mp(nil).mapn(8+keys).kv("type").str("BlockStored").kv("block_hashes").u64s(1, 2).
			kv("parent_block_hash").null().kv("token_ids").ints(1, 2, 3, 4).kv("block_size").i(2).
			kv("lora_id").null().kv("medium").str("GPU").kv("lora_name").null())
	}
	vRemoved := func(f func(mp) mp, keys int) mp {
		return f(mp(nil).mapn(3 + keys).kv("type").str("BlockRemoved").kv("block_hashes").u64s(1).kv("medium").str("GPU"))
	}
	mcEvent := func(f func(mp) mp, keys int) mp {
		return f(mp(nil).mapn(3 + keys).kv("event_id").u(1).kv("event_type").str("stored").kv("seq_hashes").u64s(1))
	}
	var cases []evCase
	// §5.4 case 7: array event (accepted here: array era) then the map-era failures.
	cases = append(cases,
		evCase{"dup_type", DialectVLLM, mp(nil).mapn(2).kv("type").str("AllBlocksCleared").kv("type").str("AllBlocksCleared"), ErrDuplicateField, "type", -1},
		evCase{"missing_type", DialectVLLM, mp(nil).mapn(1).kv("block_hashes").u64s(1), ErrMissingField, "type", -1},
		evCase{"type_7", DialectVLLM, mp(nil).mapn(1).kv("type").i(7), ErrWrongType, "type", -1},
		evCase{"tag_BlockUpdated", DialectVLLM, mp(nil).mapn(1).kv("type").str("BlockUpdated"), ErrUnknownTag, "type", -1},
		evCase{"array_tag_unknown", DialectVLLM, mp(nil).arr(2).str("BlockInactive").u64s(1), ErrUnknownTag, "type", -1},
		evCase{"array_empty", DialectVLLM, mp(nil).arr(0), ErrMissingField, "type", -1},
		evCase{"array_tag_int", DialectVLLM, mp(nil).arr(1).i(1), ErrWrongType, "type", -1},
		evCase{"event_scalar", DialectVLLM, mp(nil).str("BlockStored"), ErrWrongType, "", -1},
		evCase{"non_string_key", DialectVLLM, mp(nil).mapn(1).i(1).i(1), ErrWrongType, "", 0},
		evCase{"sglang_WithMetadata_tag_is_sglang_only", DialectVLLM, mp(nil).arr(1).str("BlockStoredWithMetadata"), ErrUnknownTag, "type", -1},
	)
	// §5.4 case 8: stored-only keys on BlockRemoved.
	for _, k := range []string{"parent_block_hash", "token_ids", "block_size", "lora_id", "lora_name", "extra_keys", "kv_cache_spec_kind", "kv_cache_spec_sliding_window"} {
		val := mp(nil).null()
		if k == "block_size" {
			val = mp(nil).i(16) // nil is no block size: the type check would fire first
		}
		cases = append(cases, evCase{"removed_with_" + k, DialectVLLM, vRemoved(func(m mp) mp { return m.kv(k).cat2(val) }, 1), ErrUnexpectedField, k, -1})
	}
	cases = append(cases,
		evCase{"cleared_with_block_hashes", DialectVLLM, mp(nil).mapn(2).kv("type").str("AllBlocksCleared").kv("block_hashes").u64s(1), ErrUnexpectedField, "block_hashes", -1},
		// §5.4 case 9: extra_keys shape and cardinality.
		evCase{"extra_keys_string_entry", DialectVLLM, vStored(func(m mp) mp { return m.kv("extra_keys").arr(2).str("x").null() }, 1), ErrWrongType, "extra_keys", 0},
		evCase{"extra_keys_cardinality", DialectVLLM, vStored(func(m mp) mp { return m.kv("extra_keys").arr(1).null() }, 1), ErrInconsistent, "extra_keys", -1},
		evCase{"extra_keys_not_array", DialectVLLM, vStored(func(m mp) mp { return m.kv("extra_keys").str("x") }, 1), ErrWrongType, "extra_keys", -1},
		// §5.4 case 11: duplicate medium.
		evCase{"dup_medium", DialectVLLM, vStored(func(m mp) mp { return m.kv("medium").str("CPU") }, 1), ErrDuplicateField, "medium", -1},
		// Only the tag and block_hashes are essential (#9 item 12).
		evCase{"stored_missing_block_hashes", DialectVLLM, mp(nil).mapn(2).kv("type").str("BlockStored").kv("medium").str("GPU"), ErrMissingField, "block_hashes", -1},
		evCase{"sgl_removed_missing_block_hashes", DialectSGLang, mp(nil).mapn(1).kv("type").str("BlockRemoved"), ErrMissingField, "block_hashes", -1},
		// Hashes.
		evCase{"bin_hash_7_bytes", DialectVLLM, (mp(nil).mapn(3).kv("type").str("BlockRemoved").kv("block_hashes").arr(2).u(1).bin([]byte{1, 2, 3, 4, 5, 6, 7}).kv("medium").str("GPU")), ErrBadHash, "block_hashes", 1},
		evCase{"hash_string", DialectVLLM, mp(nil).arr(2).str("BlockRemoved").arr(1).str("1"), ErrWrongType, "block_hashes", 0},
		evCase{"hash_float", DialectVLLM, mp(nil).arr(2).str("BlockRemoved").arr(1).f(1), ErrWrongType, "block_hashes", 0},
		evCase{"parent_string", DialectVLLM, mp(nil).arr(6).str("BlockStored").u64s(1).str("p").ints(1).i(1).null(), ErrWrongType, "parent_block_hash", -1},
		evCase{"hashes_nil", DialectVLLM, mp(nil).arr(2).str("BlockRemoved").null(), ErrWrongType, "block_hashes", -1},
		// Tokens and sizes.
		evCase{"inconsistent_tokens", DialectVLLM, vllmStoredArray([]uint64{1, 2}, []int64{1, 2, 3}, 2), ErrInconsistent, "token_ids", -1},
		evCase{"vllm_short_tokens_not_partial", DialectVLLM, vllmStoredArray([]uint64{1, 2}, []int64{1, 2, 3}, 2), ErrInconsistent, "token_ids", -1},
		evCase{"token_over_u32", DialectVLLM, vllmStoredArray([]uint64{1}, []int64{1 << 32}, 1), ErrOutOfRange, "token_ids", 0},
		evCase{"token_under_i32", DialectVLLM, vllmStoredArray([]uint64{1}, []int64{math.MinInt32 - 1}, 1), ErrOutOfRange, "token_ids", 0},
		evCase{"token_string", DialectVLLM, mp(nil).arr(6).str("BlockStored").u64s(1).null().arr(1).str("a").i(1).null(), ErrWrongType, "token_ids", 0},
		evCase{"block_size_negative", DialectVLLM, vllmStoredArray([]uint64{1}, nil, -1), ErrOutOfRange, "block_size", -1},
		evCase{"block_size_nil", DialectVLLM, mp(nil).arr(6).str("BlockStored").u64s(1).null().null().null().null(), ErrWrongType, "block_size", -1},
		evCase{"array_too_short", DialectVLLM, mp(nil).arr(4).str("BlockStored").u64s(1).null().null(), ErrMissingField, "block_size", -1},
		evCase{"removed_no_hashes", DialectVLLM, mp(nil).arr(1).str("BlockRemoved"), ErrMissingField, "block_hashes", -1},
		evCase{"medium_int", DialectVLLM, mp(nil).arr(3).str("BlockRemoved").u64s(1).i(1), ErrWrongType, "medium", -1},
		evCase{"group_idx_string", DialectVLLM, mp(nil).arr(4).str("BlockRemoved").u64s(1).null().str("0"), ErrWrongType, "group_idx", -1},
		// SGLang.
		evCase{"sgl_bigram_inconsistent", DialectSGLang, mp(nil).arr(6).str("BlockStored").ints(1, 2).null().arr(1).ints(1, 2).i(2).null(), ErrInconsistent, "token_ids", -1},
		evCase{"sgl_bigram_triple", DialectSGLang, mp(nil).arr(6).str("BlockStored").ints(1).null().arr(2).ints(1, 2).ints(1, 2, 3).i(2).null(), ErrWrongType, "token_ids", 1},
		evCase{"sgl_bigram_mixed", DialectSGLang, mp(nil).arr(6).str("BlockStored").ints(1).null().arr(2).ints(1, 2).i(3).i(2).null(), ErrWrongType, "token_ids", 1},
		evCase{"vllm_no_bigram", DialectVLLM, mp(nil).arr(6).str("BlockStored").ints(1).null().arr(1).ints(1, 2).i(1).null(), ErrWrongType, "token_ids", 0},
		evCase{"sgl_too_many_tokens", DialectSGLang, mp(nil).arr(6).str("BlockStored").ints(1).null().ints(1, 2, 3).i(2).null(), ErrInconsistent, "token_ids", -1},
		evCase{"sgl_metadata_string", DialectSGLang, mp(nil).arr(8).str("BlockStored").ints(1).null().ints(1).i(1).null().null().str("salt"), ErrWrongType, "metadata", -1},
		evCase{"sgl_metadata_dup_salt", DialectSGLang, mp(nil).arr(8).str("BlockStored").ints(1).null().ints(1).i(1).null().null().mapn(2).kv("cache_salt").str("a").kv("cache_salt").str("b"), ErrDuplicateField, "cache_salt", -1},
		// §5.4 cases 10, 12, 14 (Mooncake).
		evCase{"mc_array_event", DialectMooncake, mp(nil).arr(1).str("stored"), ErrWrongType, "", -1},
		evCase{"mc_dup_event_type", DialectMooncake, mcEvent(func(m mp) mp { return m.kv("event_type").str("stored") }, 1), ErrDuplicateField, "event_type", -1},
		evCase{"mc_missing_event_type", DialectMooncake, mp(nil).mapn(2).kv("event_id").u(1).kv("seq_hashes").u64s(1), ErrMissingField, "event_type", -1},
		evCase{"mc_event_type_7", DialectMooncake, mp(nil).mapn(2).kv("event_id").u(1).kv("event_type").i(7), ErrWrongType, "event_type", -1},
		evCase{"mc_event_type_updated", DialectMooncake, mp(nil).mapn(2).kv("event_id").u(1).kv("event_type").str("updated"), ErrUnknownTag, "event_type", -1},
		evCase{"mc_missing_event_id", DialectMooncake, mp(nil).mapn(1).kv("event_type").str("stored"), ErrMissingField, "event_id", -1},
		evCase{"mc_cleared_medium_7", DialectMooncake, mp(nil).mapn(3).kv("event_id").u(9).kv("event_type").str("cleared").kv("medium").i(7), ErrWrongType, "medium", -1},
		evCase{"mc_type_mismatch", DialectMooncake, mcEvent(func(m mp) mp { return m.kv("type").str("BlockRemoved") }, 1), ErrInconsistent, "type", -1},
		evCase{"mc_type_unknown", DialectMooncake, mcEvent(func(m mp) mp { return m.kv("type").str("BlockUpdated") }, 1), ErrUnknownTag, "type", -1},
		evCase{"mc_block_hashes_differ", DialectMooncake, mcEvent(func(m mp) mp { return m.kv("block_hashes").u64s(2) }, 1), ErrInconsistent, "block_hashes", 0},
		evCase{"mc_block_hashes_longer", DialectMooncake, mcEvent(func(m mp) mp { return m.kv("block_hashes").u64s(1, 2) }, 1), ErrInconsistent, "block_hashes", -1},
		evCase{"mc_parent_alias_differs", DialectMooncake, mcEvent(func(m mp) mp { return m.kv("parent_hash").u(1).kv("parent_block_hash").null() }, 2), ErrInconsistent, "parent_block_hash", -1},
		evCase{"mc_no_hashes_no_key", DialectMooncake, mp(nil).mapn(2).kv("event_id").u(1).kv("event_type").str("removed"), ErrMissingField, "seq_hashes", -1},
		evCase{"mc_removed_with_parent", DialectMooncake, mp(nil).mapn(4).kv("event_id").u(1).kv("event_type").str("removed").kv("seq_hashes").u64s(1).kv("parent_hash").null(), ErrUnexpectedField, "parent_hash", -1},
		evCase{"mc_cleared_with_object_key", DialectMooncake, mp(nil).mapn(3).kv("event_id").u(1).kv("event_type").str("cleared").kv("object_key").str("k"), ErrUnexpectedField, "object_key", -1},
		evCase{"mc_event_id_negative", DialectMooncake, mp(nil).mapn(2).kv("event_id").i(-1).kv("event_type").str("cleared"), ErrOutOfRange, "event_id", -1},
		evCase{"mc_event_id_nil", DialectMooncake, mp(nil).mapn(2).kv("event_id").null().kv("event_type").str("cleared"), ErrWrongType, "event_id", -1},
		evCase{"mc_tenant_nil", DialectMooncake, mcEvent(func(m mp) mp { return m.kv("tenant_id").null() }, 1), ErrWrongType, "tenant_id", -1},
		evCase{"mc_block_size_over_u32", DialectMooncake, mcEvent(func(m mp) mp { return m.kv("block_size").u(1 << 32) }, 1), ErrOutOfRange, "block_size", -1},
		evCase{"mc_group_id_text", DialectMooncake, mcEvent(func(m mp) mp { return m.kv("group_id").str("attn") }, 1), ErrWrongType, "group_id", -1},
		evCase{"mc_inconsistent_tokens", DialectMooncake, mcEvent(func(m mp) mp { return m.kv("block_size").u(2).kv("token_ids").ints(1) }, 2), ErrInconsistent, "token_ids", -1},
		evCase{"std_seq_hashes_nil", DialectStandard, mp(nil).mapn(3).kv("event_id").u(1).kv("event_type").str("stored").kv("seq_hashes").null(), ErrWrongType, "seq_hashes", -1},
	)

	var d Decoder
	var b core.Batch
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var sib mp
			var p []byte
			switch c.dialect {
			case DialectVLLM, DialectSGLang:
				sib = mp(nil).mapn(1).kv("type").str("AllBlocksCleared")
				p = batch(1, 0, sib, c.event, sib)
			default:
				sib = mp(nil).mapn(2).kv("event_id").u(5).kv("event_type").str("cleared")
				p = mooncakeBatchOf(1, 0, sib, c.event, sib)
			}
			if err := d.Decode(c.dialect, p, &b); err != nil {
				t.Fatalf("Decode failed the batch: %v", err)
			}
			if len(b.Events) != 2 || b.Skipped != 1 || len(b.Errors) != 1 {
				t.Fatalf("want 2 events and 1 skipped, got:\n%s", renderBatch(&b))
			}
			for i := range b.Events {
				if b.Events[i].Kind != core.EventCleared {
					t.Errorf("sibling %d decoded as %s", i, renderEvent(&b.Events[i]))
				}
			}
			var de *DecodeError
			if !errors.As(b.Errors[0], &de) {
				t.Fatalf("error %T", b.Errors[0])
			}
			if !errors.Is(de, c.err) || de.Event != 1 || de.Field != c.field || de.Index != c.index {
				t.Errorf("error %v (event %d field %q index %d), want %v field %q index %d",
					de, de.Event, de.Field, de.Index, c.err, c.field, c.index)
			}
		})
	}
}

// TestReferenceCanonicalFixtures covers the reference's §5.4 cases 1 and 2 (vLLM).
func TestReferenceCanonicalFixtures(t *testing.T) {
	canonical := mp(nil).arr(3).f(1.25).arr(3).
		mapn(9).kv("type").str("BlockStored").kv("block_hashes").u64s(42).kv("parent_block_hash").null().
		kv("token_ids").ints(1, 2).kv("block_size").i(2).kv("lora_id").null().kv("medium").str("GPU").
		kv("lora_name").null().kv("group_idx").i(0).
		mapn(4).kv("type").str("BlockRemoved").kv("block_hashes").u64s(42).kv("medium").str("GPU").kv("group_idx").i(0).
		mapn(1).kv("type").str("AllBlocksCleared").
		i(3)
	if len(canonical) != 210 {
		t.Errorf("canonical fixture is %d bytes; the reference's is 210", len(canonical))
	}
	digest := make([]byte, 32)
	for i := range digest {
		digest[i] = byte(i)
	}
	thirteen := mp(nil).arr(3).f(1).arr(1).
		mapn(13).kv("type").str("BlockStored").kv("block_hashes").arr(2).u(math.MaxUint64).bin(digest).
		kv("parent_block_hash").bin(digest).kv("token_ids").null().kv("block_size").i(16).
		kv("lora_id").null().kv("medium").null().kv("lora_name").null().
		kv("extra_keys").arr(2).null().arr(1).str("future-key").kv("group_idx").null().
		kv("kv_cache_spec_kind").str("full").kv("kv_cache_spec_sliding_window").null().
		kv("future_store_metadata").boolean(true).
		null()
	runDecodeCases(t, []decodeCase{
		{"ref_5_4_1_canonical", DialectVLLM, canonical, "ts=1.25/0 dp=3 events=3 skipped=0\n" +
			`stored hashes=[42] tokens=[1 2] block_size=2/true group_idx=0 medium="GPU"` + "\n" +
			`removed hashes=[42] group_idx=0 medium="GPU"` + "\n" +
			"cleared hashes=[]"},
		{"ref_5_4_2_hash_forms", DialectVLLM, thirteen, "ts=1/0 dp=nil events=1 skipped=0\n" +
			`stored hashes=[18446744073709551615 1736447835066146335] parent=1736447835066146335 block_size=16/true extra_keys spec_kind="full"`},
	})
}

// TestDecodeTruncatedEverywhere cuts valid payloads at every byte: each prefix must
// fail with ErrTruncated (ErrEmptyPayload for the empty one) and never panic.
func TestDecodeTruncatedEverywhere(t *testing.T) {
	payloads := []struct {
		dialect Dialect
		p       []byte
	}{
		{DialectVLLM, batch(1, 0, vllmStoredArray(seqHashes(2), seqTokens(8), 4), vllmStoredMap(seqHashes(1), seqTokens(4), 4))},
		{DialectVLLM, mp(nil).mapn(3).kv("ts").f(1).kv("events").arr(1).arr(1).str("AllBlocksCleared").kv("data_parallel_rank").i(1)},
		{DialectSGLang, batch(1, 0, mp(nil).arr(8).str("BlockStored").ints(-1, -2).null().arr(2).ints(1, 2).ints(3, 4).i(1).null().str("GPU").mapn(1).kv("cache_salt").str("s"))},
		{DialectMooncake, mooncakeBatchOf(1, 0, mooncakeStored(), mooncakeRemoved(), mooncakeCleared())},
		{DialectStandard, mp(nil).mapn(1).kv("events").arr(1).cat2(mooncakeCleared())},
	}
	var vectors struct {
		Cases []struct {
			Name string `json:"name"`
			Hex  string `json:"payload_hex"`
		} `json:"cases"`
	}
	loadJSON(t, "derived_engine_wire_vectors.json", &vectors)
	for _, c := range vectors.Cases {
		dl := DialectVLLM
		if strings.HasPrefix(c.Name, "sglang") {
			dl = DialectSGLang
		}
		payloads = append(payloads, struct {
			dialect Dialect
			p       []byte
		}{dl, mustHex(t, c.Hex)})
	}
	var d Decoder
	var b core.Batch
	for pi, pl := range payloads {
		if err := d.Decode(pl.dialect, pl.p, &b); err != nil || b.Skipped != 0 {
			t.Fatalf("payload %d invalid: %v %v", pi, err, b.Errors)
		}
		for i := 0; i < len(pl.p); i++ {
			err := d.Decode(pl.dialect, pl.p[:i], &b)
			want := ErrTruncated
			if i == 0 {
				want = ErrEmptyPayload
			}
			if !errors.Is(err, want) {
				t.Fatalf("payload %d cut at %d/%d: err = %v, want %v", pi, i, len(pl.p), err, want)
			}
		}
	}
}

// TestDecodeLyingLengths: headers claiming 2^31 elements or bytes in a 20-byte
// payload fail at once, without sizing anything from the claim.
func TestDecodeLyingLengths(t *testing.T) {
	big := []byte{0xdd, 0x80, 0, 0, 0} // array32 of 2^31
	pad := func(m mp) []byte {
		for len(m) < 20 {
			m = append(m, 0)
		}
		return m
	}
	cases := []errCase{
		{"top_array", DialectVLLM, pad(mp(nil).raw(big...)), ErrTruncated, -1, ""},
		{"top_map", DialectStandard, pad(mp(nil).raw(0xdf, 0x80, 0, 0, 0)), ErrTruncated, 0, ""},
		{"events", DialectVLLM, pad(mp(nil).arr(3).f(1).raw(big...)), ErrTruncated, -1, "events"},
		{"mc_events", DialectMooncake, pad(mp(nil).arr(3).u(1).raw(big...)), ErrTruncated, -1, "events"},
		{"event_array", DialectVLLM, pad(mp(nil).arr(3).f(1).arr(1).raw(big...)), ErrTruncated, 0, ""},
		{"event_map", DialectVLLM, pad(mp(nil).arr(3).f(1).arr(1).raw(0xdf, 0x80, 0, 0, 0)), ErrTruncated, 0, ""},
		{"hashes", DialectVLLM, pad(mp(nil).arr(3).f(1).arr(1).arr(2).str("BlockRemoved").raw(0xdd, 0, 0x0f, 0xff, 0xff)), ErrTruncated, 0, "block_hashes"},
		{"str32", DialectVLLM, pad(mp(nil).arr(3).f(1).arr(1).arr(1).raw(0xdb, 0x80, 0, 0, 0)), ErrTruncated, 0, "type"},
		{"bin32_hash", DialectVLLM, pad(mp(nil).arr(3).f(1).arr(1).arr(2).str("BlockRemoved").arr(1).raw(0xc6, 0x80, 0, 0, 0)), ErrTruncated, 0, "block_hashes"},
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.TotalAlloc
	runErrCases(t, decodeMsgpack, cases)
	runtime.ReadMemStats(&ms)
	if grew := ms.TotalAlloc - before; grew > 1<<20 {
		t.Errorf("lying headers allocated %d bytes", grew)
	}

	// Counts over the per-event caps fail with ErrTooLarge even when the bytes would
	// be there (checked before the remaining-bytes test).
	over := mp(nil).arr(3).f(1).arr(1).arr(2).str("BlockRemoved").raw(0xdd, 0, 0x10, 0, 1) // 2^20+1 hashes
	over = append(over, make([]byte, MaxEventHashes+1)...)
	over = append(over, 0)
	var d Decoder
	var b core.Batch
	if err := d.Decode(DialectVLLM, over, &b); err != nil || b.Skipped != 1 || !errors.Is(b.Errors[0], ErrTooLarge) {
		t.Errorf("oversized hash list: err=%v errors=%v", err, b.Errors)
	}
}

func TestDecodeErrorsCapped(t *testing.T) {
	bad := mp(nil).arr(1).str("Nope")
	events := make([]mp, 20)
	for i := range events {
		events[i] = bad
	}
	var d Decoder
	var b core.Batch
	if err := d.Decode(DialectVLLM, batch(1, 0, events...), &b); err != nil {
		t.Fatal(err)
	}
	if b.Skipped != 20 || len(b.Errors) != MaxBatchErrors || len(b.Events) != 0 {
		t.Errorf("skipped=%d errors=%d events=%d", b.Skipped, len(b.Errors), len(b.Events))
	}
	if !errors.Is(b.Errors[7], ErrUnknownTag) || b.Errors[7].(*DecodeError).Event != 7 {
		t.Errorf("errors[7] = %v", b.Errors[7])
	}
}

// TestDecodeReusesBatch: a small batch after a large one leaves nothing stale, and
// the event slots and their slices are reused (dst == src[:0]).
func TestDecodeReusesBatch(t *testing.T) {
	var d Decoder
	var b core.Batch
	large := batch(1, 3, vllmStoredArray(seqHashes(4), seqTokens(64), 16), vllmStoredArray(seqHashes(2), seqTokens(32), 16))
	small := batch(2, 0, mp(nil).arr(2).str("BlockRemoved").u64s(9))
	if err := d.Decode(DialectVLLM, large, &b); err != nil {
		t.Fatal(err)
	}
	ev0, hs0 := &b.Events[0], &b.Events[0].Hashes[:1][0]
	if err := d.Decode(DialectVLLM, small, &b); err != nil {
		t.Fatal(err)
	}
	want := "ts=2/0 dp=0 events=1 skipped=0\nremoved hashes=[9]\n"
	if got := renderBatch(&b); got != want {
		t.Errorf("after reuse:\n%s", got)
	}
	if &b.Events[0] != ev0 || &b.Events[0].Hashes[0] != hs0 {
		t.Error("event slot or hash slice was reallocated")
	}
	if err := d.Decode(DialectVLLM, large, &b); err != nil {
		t.Fatal(err)
	}
	if cap(b.Events[1].Tokens) < 32 {
		t.Error("second slot lost its token capacity")
	}
}

func TestParseDialect(t *testing.T) {
	f := func(in string, want Dialect) {
		t.Helper()
		got, err := ParseDialect(in)
		if want == 0 {
			if !errors.Is(err, ErrUnknownDialect) {
				t.Errorf("ParseDialect(%q) = %v, %v; want ErrUnknownDialect", in, got, err)
			}
			return
		}
		if err != nil || got != want {
			t.Errorf("ParseDialect(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	f("vLLM", DialectVLLM)
	f("vllm", DialectVLLM)
	f("SGLang", DialectSGLang)
	f("SGLANG", DialectSGLang)
	f("Mooncake", DialectMooncake)
	f("standard", DialectStandard)
	f("Standard", DialectStandard)
	f("", 0)
	f("vllm ", 0)
	f("trtllm", 0)
	for d := DialectVLLM; d <= DialectStandard; d++ {
		f(d.String(), d)
	}
}

func TestDecodeErrorString(t *testing.T) {
	f := func(e *DecodeError, want string) {
		t.Helper()
		if got := e.Error(); got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	f(&DecodeError{DialectVLLM, -1, "ts", -1, ErrOutOfRange}, `wire: vLLM batch field="ts": conductor: value out of range`)
	f(&DecodeError{DialectSGLang, 3, "token_ids", 7, ErrWrongType}, `wire: SGLang event 3 field="token_ids"[7]: conductor: wrong value type`)
	f(&DecodeError{DialectMooncake, 0, "", -1, ErrTruncated}, `wire: Mooncake event 0: conductor: truncated payload`)
}

// TestDecodeAbsentOptionalFields (#9 item 12): a map-era engine event with only
// its tag and block_hashes decodes; absent optional fields are nil (a vLLM
// BlockStored without lora_name is the base model, not a dropped event).
func TestDecodeAbsentOptionalFields(t *testing.T) {
	runDecodeCases(t, []decodeCase{
		{"vllm_stored_tag_and_hashes", DialectVLLM, batch(1.5, 0, mp(nil).mapn(2).kv("type").str("BlockStored").kv("block_hashes").u64s(7, 8)),
			"ts=1.5/0 dp=0 events=1 skipped=0\nstored hashes=[7 8]"},
		{"vllm_stored_without_lora_name", DialectVLLM, batch(1.5, 0, mp(nil).mapn(6).kv("type").str("BlockStored").kv("block_hashes").u64s(7).
			kv("parent_block_hash").null().kv("token_ids").ints(1, 2).kv("block_size").i(2).kv("medium").str("GPU")),
			"ts=1.5/0 dp=0 events=1 skipped=0\nstored hashes=[7] tokens=[1 2] block_size=2/true medium=\"GPU\""},
		{"vllm_removed_without_medium", DialectVLLM, batch(1.5, 0, mp(nil).mapn(2).kv("type").str("BlockRemoved").kv("block_hashes").u64s(7)),
			"ts=1.5/0 dp=0 events=1 skipped=0\nremoved hashes=[7]"},
		{"sgl_stored_without_block_size", DialectSGLang, batch(1.5, 0, mp(nil).mapn(4).kv("type").str("BlockStored").kv("block_hashes").ints(1).kv("parent_block_hash").null().kv("token_ids").null()),
			"ts=1.5/0 dp=0 events=1 skipped=0\nstored hashes=[1]"},
		// A Mooncake master batch with float seconds.
		{"mooncake_float_seconds", DialectMooncake, mp(nil).arr(3).f(1739145600.5).arr(0).u(0), "ts=1.7391456005e+09/0 dp=0 events=0 skipped=0"},
		{"mooncake_int_ms", DialectMooncake, mp(nil).arr(3).u(1739145600500).arr(0).u(0), "ts=1.7391456005e+12/1739145600500 dp=0 events=0 skipped=0"},
	})
}

// TestDecodeStandardMapInEngineBatch: an RFC #1527 event map in
// a vLLM or SGLang batch is recognised by its event_type key and decoded as a
// standardized event (flagged Standard), whatever key order.
func TestDecodeStandardMapInEngineBatch(t *testing.T) {
	std := func(typeFirst bool) mp {
		m := mp(nil).mapn(6)
		if typeFirst {
			m = m.kv("event_type").str("stored")
		}
		m = m.kv("event_id").u(42).kv("backend_id").str("worker-0").kv("medium").str("gpu").
			kv("seq_hashes").u64s(11, 12)
		if !typeFirst {
			m = m.kv("event_type").str("stored")
		}
		return m.kv("block_size").u(64)
	}
	for _, d := range []Dialect{DialectVLLM, DialectSGLang} {
		for _, first := range []bool{true, false} {
			var dec Decoder
			var b core.Batch
			engine := mp(nil).mapn(2).kv("type").str("BlockRemoved").kv("block_hashes").u64s(5)
			if err := dec.Decode(d, batch(1.5, 0, std(first), engine), &b); err != nil {
				t.Fatalf("%v first=%v: %v", d, first, err)
			}
			if len(b.Events) != 2 || b.Skipped != 0 {
				t.Fatalf("%v first=%v: %s", d, first, renderBatch(&b))
			}
			e := &b.Events[0]
			if !e.Standard || e.Kind != core.EventStored || !e.HasEventID || e.EventID != 42 || string(e.BackendID) != "worker-0" ||
				len(e.Hashes) != 2 || e.Hashes[1] != 12 || e.BlockSize != 64 {
				t.Fatalf("%v first=%v: standardized event: %s", d, first, renderEvent(e))
			}
			if b.Events[1].Standard || b.Events[1].Kind != core.EventRemoved {
				t.Fatalf("%v: engine event flagged standard: %s", d, renderEvent(&b.Events[1]))
			}
		}
	}
}
