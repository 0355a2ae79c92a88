package wire

import (
	"errors"
	"strings"
	"testing"

	"github.com/seed-c7a81618/conductor/core"
)

// The RFC #1527 examples (seeds/conductor-indexer-api.md "KV Events API"), verbatim.
const (
	rfcStoredJSON = `{
  "event_id": 42,
  "timestamp": 1739145600000,
  "event_type": "stored",
  "model_name": "llama-3.1-8b",
  "block_size": 64,
  "additional_salt": null,
  "lora_name": null,
  "tenant_id": "default",
  "backend_id": "worker-0",
  "medium": "gpu",
  "dp_rank": 0,
  "seq_hashes": [1234567890, 9876543210, 1122334455],
  "base_block_idx": 5,
  "parent_hash": 9999999999,
  "token_ids": null
}`
	rfcRemovedJSON = `{
  "event_id": 43,
  "timestamp": 1739145601000,
  "event_type": "removed",
  "model_name": "llama-3.1-8b",
  "block_size": 64,
  "additional_salt": null,
  "lora_name": null,
  "tenant_id": "default",
  "backend_id": "worker-0",
  "medium": "gpu",
  "dp_rank": 0,
  "seq_hashes": [1122334455],
  "base_block_idx": 7
}`
	rfcClearedJSON = `{
  "event_id": 44,
  "timestamp": 1739145602000,
  "event_type": "cleared",
  "model_name": "llama-3.1-8b",
  "block_size": 64,
  "additional_salt": null,
  "lora_name": null,
  "tenant_id": "default",
  "backend_id": "worker-0",
  "medium": "gpu",
  "dp_rank": 0
}`
	rfcStoredWant  = `stored hashes=[1234567890 9876543210 1122334455] parent=9999999999 block_size=64/true event_id=42 timestamp=1739145600000 dp_rank=0 base_block_idx=5 medium="gpu" model_name="llama-3.1-8b" tenant_id="default" backend_id="worker-0"`
	rfcRemovedWant = `removed hashes=[1122334455] block_size=64/true event_id=43 timestamp=1739145601000 dp_rank=0 base_block_idx=7 medium="gpu" model_name="llama-3.1-8b" tenant_id="default" backend_id="worker-0"`
	rfcClearedWant = `cleared hashes=[] block_size=64/true event_id=44 timestamp=1739145602000 dp_rank=0 medium="gpu" model_name="llama-3.1-8b" tenant_id="default" backend_id="worker-0"`
)

func TestDecodeStandardJSON(t *testing.T) {
	all := "[" + rfcStoredJSON + "," + rfcRemovedJSON + "," + rfcClearedJSON + "]"
	cases := []struct {
		name, in, want string
	}{
		{"rfc_stored", rfcStoredJSON, "ts=0/0 dp=nil events=1 skipped=0\n" + rfcStoredWant},
		{"rfc_array", all, "ts=0/0 dp=nil events=3 skipped=0\n" + rfcStoredWant + "\n" + rfcRemovedWant + "\n" + rfcClearedWant},
		{"wrapper", ` {"ts": 1.5, "dp_rank": 2, "other": {"x": [1, {"y": null}], "z": "\"]"}, "events": ` + all + "}\n",
			"ts=1.5/0 dp=2 events=3 skipped=0\n" + rfcStoredWant + "\n" + rfcRemovedWant + "\n" + rfcClearedWant},
		{"wrapper_int_timestamp", `{"events":[],"timestamp":1739145600000,"data_parallel_rank":null}`, "ts=1.7391456e+12/1739145600000 dp=nil events=0 skipped=0"},
		{"empty_array", " [ ] ", "ts=0/0 dp=nil events=0 skipped=0"},
		{"u64_exact", `{"event_id":18446744073709551615,"event_type":"removed","seq_hashes":[18446744073709551615,0,-1,-9223372036854775808,"0xFF","123"],"timestamp":18446744073709551614}`,
			"ts=0/0 dp=nil events=1 skipped=0\nremoved hashes=[18446744073709551615 0 18446744073709551615 9223372036854775808 255 123] event_id=18446744073709551615 timestamp=18446744073709551614"},
		{"escapes", `{"event_id":1,"event_type":"cleared","model_name":"a\"b\\c\/\u00e9\ud83d\ude00\n\t","tenant_id":"\ud800x","backend_id":"plain"}`,
			"ts=0/0 dp=nil events=1 skipped=0\n" + `cleared hashes=[] event_id=1 model_name="a\"b\\c/é😀\n\t" tenant_id="` + "\ufffd" + `x" backend_id="plain"`},
		{"escaped_key", `{"event\u005fid":3,"event_type":"cleared"}`, "ts=0/0 dp=nil events=1 skipped=0\ncleared hashes=[] event_id=3"},
		{"aliases_tokens_group", `{"event_id":1,"type":"BlockStored","block_hashes":[5,6],"seq_hashes":[5,6],"parent_block_hash":4,"parent_hash":4,"token_ids":[1,2,4294967295,-2147483648],"block_size":2,"group_id":"0","cache_salt":"s"}`,
			"ts=0/0 dp=nil events=1 skipped=0\n" + `stored hashes=[5 6] parent=4 tokens=[1 2 -1 -2147483648] block_size=2/true group_idx=0 event_id=1 cache_salt="s"`},
		{"object_key_hash", `{"event_id":1,"event_type":"stored","seq_hashes":[],"object_key":"0x10","group_id":-1}`,
			"ts=0/0 dp=nil events=1 skipped=0\n" + `stored hashes=[16] group_idx=-1 event_id=1 object_key="0x10"`},
	}
	var d Decoder
	var b core.Batch
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := d.DecodeStandardJSON([]byte(c.in), &b); err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSuffix(renderBatch(&b), "\n"); got != c.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, c.want)
			}
		})
	}

	// The same events in msgpack decode identically (TestDecodeStandardMsgpack's
	// rfc_example_stored builds the stored one).
	msg := mp(nil).mapn(15).kv("event_id").u(42).kv("timestamp").u(1739145600000).
		kv("event_type").str("stored").kv("model_name").str("llama-3.1-8b").kv("block_size").u(64).
		kv("additional_salt").null().kv("lora_name").null().kv("tenant_id").str("default").
		kv("backend_id").str("worker-0").kv("medium").str("gpu").kv("dp_rank").u(0).
		kv("seq_hashes").u64s(1234567890, 9876543210, 1122334455).kv("base_block_idx").u(5).
		kv("parent_hash").u(9999999999).kv("token_ids").null()
	if err := d.Decode(DialectStandard, msg, &b); err != nil || renderEvent(&b.Events[0]) != rfcStoredWant {
		t.Errorf("msgpack twin: %v %s", err, renderBatch(&b))
	}
}

func decodeJSON(d *Decoder, _ Dialect, p []byte, b *core.Batch) error {
	return d.DecodeStandardJSON(p, b)
}

func TestDecodeStandardJSONEnvelopeErrors(t *testing.T) {
	j := func(s string) []byte { return []byte(s) }
	deep := `{"event_id":1,"event_type":"cleared","x":` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + "}"
	cases := []errCase{
		{"empty", DialectStandard, j(""), ErrEmptyPayload, -1, ""},
		{"whitespace", DialectStandard, j(" \n\t"), ErrEmptyPayload, -1, ""},
		{"number_root", DialectStandard, j("42"), ErrWrongType, -1, ""},
		{"trailing", DialectStandard, j(`[] x`), ErrTrailingBytes, -1, ""},
		{"trailing_second_value", DialectStandard, j(`{"event_id":1,"event_type":"cleared"} {}`), ErrTrailingBytes, -1, ""},
		{"unclosed_array", DialectStandard, j(`[{"event_id":1,"event_type":"cleared"}`), ErrTruncated, -1, "events"},
		{"bad_separator", DialectStandard, j(`[{"event_id":1,"event_type":"cleared"};]`), ErrSyntax, -1, "events"},
		{"syntax_in_event", DialectStandard, j(`[{"event_id":1,"event_type":"cleared","x":tru}]`), ErrSyntax, 0, ""},
		{"bad_escape", DialectStandard, j(`[{"event_id":1,"event_type":"cleared","x":"\q"}]`), ErrSyntax, 0, ""},
		{"control_char", DialectStandard, j("[{\"event_id\":1,\"event_type\":\"cleared\",\"x\":\"a\nb\"}]"), ErrSyntax, 0, ""},
		{"leading_zero", DialectStandard, j(`[{"event_id":01,"event_type":"cleared"}]`), ErrSyntax, 0, "event_id"},
		{"too_deep", DialectStandard, j(deep), ErrTooLarge, 0, ""},
		{"wrapper_events_object", DialectStandard, j(`{"events":{}}`), ErrWrongType, -1, "events"},
		{"wrapper_dup", DialectStandard, j(`{"events":[],"events":[]}`), ErrDuplicateField, -1, "events"},
		{"wrapper_dp_negative", DialectStandard, j(`{"events":[],"dp_rank":-1}`), ErrOutOfRange, -1, "dp_rank"},
		{"wrapper_ts_string", DialectStandard, j(`{"events":[],"ts":"1"}`), ErrWrongType, -1, "ts"},
		{"wrapper_timestamp_float", DialectStandard, j(`{"events":[],"timestamp":1.5}`), ErrWrongType, -1, "timestamp"},
	}
	runErrCases(t, decodeJSON, cases)
}

func TestDecodeStandardJSONEventErrors(t *testing.T) {
	cases := []struct {
		name, event string
		err         error
		field       string
		index       int
	}{
		{"event_id_float", `{"event_id":1.0,"event_type":"cleared"}`, ErrWrongType, "event_id", -1},
		{"event_id_exponent", `{"event_id":1e3,"event_type":"cleared"}`, ErrWrongType, "event_id", -1},
		{"event_id_overflow", `{"event_id":18446744073709551616,"event_type":"cleared"}`, ErrOutOfRange, "event_id", -1},
		{"event_id_negative", `{"event_id":-1,"event_type":"cleared"}`, ErrOutOfRange, "event_id", -1},
		{"event_id_string", `{"event_id":"1","event_type":"cleared"}`, ErrWrongType, "event_id", -1},
		{"event_id_missing", `{"event_type":"cleared"}`, ErrMissingField, "event_id", -1},
		{"empty_object", `{}`, ErrMissingField, "event_id", -1},
		{"event_type_unknown", `{"event_id":1,"event_type":"updated"}`, ErrUnknownTag, "event_type", -1},
		{"dup", `{"event_id":1,"event_type":"cleared","event_id":2}`, ErrDuplicateField, "event_id", -1},
		{"hash_float", `{"event_id":1,"event_type":"removed","seq_hashes":[1,2.5]}`, ErrWrongType, "seq_hashes", 1},
		{"hash_text", `{"event_id":1,"event_type":"removed","seq_hashes":["abc"]}`, ErrWrongType, "seq_hashes", 0},
		{"hash_too_negative", `{"event_id":1,"event_type":"removed","seq_hashes":[-9223372036854775809]}`, ErrOutOfRange, "seq_hashes", 0},
		{"hashes_alias_differ", `{"event_id":1,"event_type":"removed","seq_hashes":[1,2],"block_hashes":[1]}`, ErrInconsistent, "block_hashes", -1},
		{"token_over_u32", `{"event_id":1,"event_type":"stored","seq_hashes":[1],"token_ids":[4294967296]}`, ErrOutOfRange, "token_ids", 0},
		{"tokens_inconsistent", `{"event_id":1,"event_type":"stored","seq_hashes":[1],"block_size":2,"token_ids":[1,2,3]}`, ErrInconsistent, "token_ids", -1},
		{"block_size_null_ok_but_string", `{"event_id":1,"event_type":"cleared","block_size":"2"}`, ErrWrongType, "block_size", -1},
		{"dp_rank_over_u32", `{"event_id":1,"event_type":"cleared","dp_rank":4294967296}`, ErrOutOfRange, "dp_rank", -1},
		{"backend_null", `{"event_id":1,"event_type":"cleared","backend_id":null}`, ErrWrongType, "backend_id", -1},
		{"removed_tokens", `{"event_id":1,"event_type":"removed","seq_hashes":[1],"token_ids":null}`, ErrUnexpectedField, "token_ids", -1},
		{"not_object", `[1]`, ErrWrongType, "", -1},
	}
	var d Decoder
	var b core.Batch
	const sib = `{"event_id":5,"event_type":"cleared"}`
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := "[" + sib + "," + c.event + "," + sib + "]"
			if err := d.DecodeStandardJSON([]byte(in), &b); err != nil {
				t.Fatalf("batch failed: %v", err)
			}
			if len(b.Events) != 2 || b.Skipped != 1 {
				t.Fatalf("want 2 events, 1 skipped:\n%s", renderBatch(&b))
			}
			de := b.Errors[0].(*DecodeError)
			if !errors.Is(de, c.err) || de.Event != 1 || de.Field != c.field || de.Index != c.index {
				t.Errorf("error %v (field %q index %d), want %v field %q index %d", de, de.Field, de.Index, c.err, c.field, c.index)
			}
		})
	}
}

func TestDecodeStandardJSONTruncatedEverywhere(t *testing.T) {
	in := []byte(`{"ts":1.5,"events":[` + rfcStoredJSON + `,{"event_id":1,"event_type":"cleared","model_name":"\u00e9\"x"}]}`)
	var d Decoder
	var b core.Batch
	if err := d.DecodeStandardJSON(in, &b); err != nil || b.Skipped != 0 {
		t.Fatal(err, b.Errors)
	}
	for i := 0; i < len(in); i++ {
		err := d.DecodeStandardJSON(in[:i], &b)
		if i == 0 {
			if !errors.Is(err, ErrEmptyPayload) {
				t.Fatalf("cut at 0: %v", err)
			}
			continue
		}
		if !errors.Is(err, ErrTruncated) {
			t.Fatalf("cut at %d (%q): err = %v", i, in[max(0, i-10):i], err)
		}
	}
}
