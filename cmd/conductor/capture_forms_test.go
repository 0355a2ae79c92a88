package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tinylib/msgp/msgp"
)

// The envelope forms the captures do not show (wire/forms_test.go says which
// upstream releases send each), made from the captures: each step's events,
// as the expect file decodes them, encoded again the way msgspec encodes the
// upstream structs in that form (fields in declaration order, non-negative
// integers as uint and negative ones as int, map fields that have a default
// left out while they hold it), in the captured frames around them. The
// events are the same, so every answer the expect file gives holds.
//
//   - vLLM [ts, events, data_parallel_rank] of map events (vLLM after v0.23,
//     v0.26 among them), from every vLLM capture (a batch map there);
//   - SGLang [ts, events, attn_dp_rank] of map events (SGLang PR #37482) and
//     SGLang {ts, events, attn_dp_rank} of map events, from every SGLang
//     capture (array events there).

// Declaration order of the events' fields, the tag first.
var (
	vllmStoredFields = []string{"type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
		"medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window"}
	vllmRemovedFields = []string{"type", "block_hashes", "medium", "group_idx"}
	sglStoredFields   = []string{"type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium"}
	sglRemovedFields  = []string{"type", "block_hashes", "medium"}
	// sglStoredMapFields are SGLang's map-era BlockStored fields (PR #37482):
	// the array era's and two more with a default.
	sglStoredMapFields = append(slices.Clone(sglStoredFields), "cache_salt", "session_id")
	// sglDefaulted are SGLang's map-era fields with a default (None), left
	// out while unset.
	sglDefaulted = []string{"medium", "cache_salt", "session_id"}
)

// captureForm is one re-encoding of a capture's live messages.
type captureForm struct {
	suffix        string
	envelope      string // the expect files' wording, for captureProbe
	eventEncoding string
	encode        func(t *testing.T, ts float64, rank any, events []map[string]any) []byte
}

var captureForms = map[string][]captureForm{
	"vLLM": {{"vllm-array-batch", "array [ts, events, data_parallel_rank]", "map with tag key 'type'",
		func(t *testing.T, ts float64, rank any, events []map[string]any) []byte {
			b := msgp.AppendFloat64(msgp.AppendArrayHeader(nil, 3), ts)
			return appendPy(t, appendMapEvents(t, b, false, events), rank)
		}}},
	"SGLang": {
		{"sglang-map-events", "array [ts, events, attn_dp_rank]", "map with tag key 'type'",
			func(t *testing.T, ts float64, rank any, events []map[string]any) []byte {
				b := msgp.AppendFloat64(msgp.AppendArrayHeader(nil, 3), ts)
				return appendPy(t, appendMapEvents(t, b, true, events), rank)
			}},
		{"sglang-map-batch", "map {ts, events, attn_dp_rank}", "map with tag key 'type'",
			func(t *testing.T, ts float64, rank any, events []map[string]any) []byte {
				n := uint32(3)
				if rank == nil {
					n = 2 // attn_dp_rank has a default: left out while unset
				}
				b := msgp.AppendFloat64(msgp.AppendString(msgp.AppendMapHeader(nil, n), "ts"), ts)
				b = appendMapEvents(t, msgp.AppendString(b, "events"), true, events)
				if rank != nil {
					b = appendPy(t, msgp.AppendString(b, "attn_dp_rank"), rank)
				}
				return b
			}},
	},
}

// TestCaptureForms replays each capture, re-encoded in each form of its
// engine the captures lack, into a conductor process, checking every step as
// TestCaptureReplay does, and probes it.
func TestCaptureForms(t *testing.T) {
	caps := loadCaptures(t)
	c := startChild(t, 0)
	n := 0
	for _, cp := range caps {
		for _, form := range captureForms[cp.expect.Registration.Type] {
			re := cp.reencode(t, form)
			n++
			t.Run(re.name, func(t *testing.T) {
				t.Run("live", func(t *testing.T) { captureLive(t, c, re) })
				t.Run("probe", func(t *testing.T) { captureProbe(t, re) })
			})
		}
	}
	if n != 11 { // 7 vLLM captures in one form, 2 SGLang captures in two
		t.Fatalf("%d re-encoded captures", n)
	}
}

// reencode returns cp with its live messages in form.
func (cp *capture) reencode(t *testing.T, form captureForm) *capture {
	t.Helper()
	re := *cp
	re.name = cp.name + "+" + form.suffix
	re.expect.Wire.Envelope, re.expect.Wire.EventEncoding = form.envelope, form.eventEncoding
	re.live = nil
	for k, m := range cp.live {
		ts := payloadTS(t, m.Frames[2])
		rank, events := decodedEvents(t, cp.expect.Steps[k].Payload)
		frames := [][]byte{m.Frames[0], m.Frames[1], form.encode(t, ts, rank, events)}
		re.live = append(re.live, captureMsg{Dir: m.Dir, Frames: frames, Seq: m.Seq})
	}
	return &re
}

// decodedEvents returns a step's rank and events (the expect file's decoded
// payload, numbers kept exact), SGLang's array events as maps of their
// fields (the tag as "type").
func decodedEvents(t *testing.T, payload json.RawMessage) (rank any, events []map[string]any) {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(payload))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatal(err)
	}
	var list []any
	switch v := v.(type) {
	case map[string]any: // vLLM: {ts, events, data_parallel_rank} of map events
		list, _ = v["events"].([]any)
		rank = v["data_parallel_rank"]
	case []any: // SGLang: [ts, events, attn_dp_rank] of array events
		if len(v) != 3 {
			t.Fatalf("payload %s", payload)
		}
		list, _ = v[1].([]any)
		rank = v[2]
	}
	for _, e := range list {
		switch e := e.(type) {
		case map[string]any:
			events = append(events, e)
		case []any:
			fields := map[string][]string{"BlockStored": sglStoredFields, "BlockRemoved": sglRemovedFields,
				"AllBlocksCleared": {"type"}}[e[0].(string)]
			if len(e) != len(fields) {
				t.Fatalf("array event %v: want %d fields", e, len(fields))
			}
			m := map[string]any{}
			for i, f := range fields {
				if e[i] != nil || !slices.Contains(sglDefaulted, f) {
					m[f] = e[i]
				}
			}
			events = append(events, m)
		default:
			t.Fatalf("event %v", e)
		}
	}
	return rank, events
}

// appendMapEvents appends events as an array of maps, each in its fields'
// declaration order (SGLang's or vLLM's).
func appendMapEvents(t *testing.T, b []byte, sglang bool, events []map[string]any) []byte {
	t.Helper()
	orders := map[string][]string{"BlockStored": vllmStoredFields, "BlockRemoved": vllmRemovedFields, "AllBlocksCleared": {"type"}}
	if sglang {
		orders = map[string][]string{"BlockStored": sglStoredMapFields, "BlockRemoved": sglRemovedFields, "AllBlocksCleared": {"type"}}
	}
	b = msgp.AppendArrayHeader(b, uint32(len(events)))
	for _, e := range events {
		order := orders[e["type"].(string)]
		for k := range e {
			if !slices.Contains(order, k) {
				t.Fatalf("event key %q has no place in %v", k, order)
			}
		}
		b = msgp.AppendMapHeader(b, uint32(len(e)))
		for _, k := range order {
			if v, ok := e[k]; ok {
				b = appendPy(t, msgp.AppendString(b, k), v)
			}
		}
	}
	return b
}

// appendPy appends a decoded JSON value as msgspec encodes the Python value
// it stands for: an integer in the smallest uint form, or int form when
// negative; {"bin": hex} as bin.
func appendPy(t *testing.T, b []byte, v any) []byte {
	t.Helper()
	switch v := v.(type) {
	case nil:
		return msgp.AppendNil(b)
	case json.Number:
		s := v.String()
		if strings.HasPrefix(s, "-") {
			i, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return msgp.AppendInt64(b, i)
		}
		u, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return msgp.AppendUint64(b, u)
	case string:
		return msgp.AppendString(b, v)
	case []any:
		b = msgp.AppendArrayHeader(b, uint32(len(v)))
		for _, e := range v {
			b = appendPy(t, b, e)
		}
		return b
	case map[string]any:
		if h, ok := v["bin"].(string); ok && len(v) == 1 {
			raw, err := hex.DecodeString(h)
			if err != nil {
				t.Fatal(err)
			}
			return msgp.AppendBytes(b, raw)
		}
	}
	t.Fatalf("value %v (%T)", v, v)
	return nil
}

// payloadTS reads the batch timestamp of a captured payload (float seconds,
// first in both engines' batches).
func payloadTS(t *testing.T, p []byte) float64 {
	t.Helper()
	var err error
	var n uint32
	switch msgp.NextType(p) {
	case msgp.MapType:
		if n, p, err = msgp.ReadMapHeaderBytes(p); err == nil && n > 0 {
			var key string
			key, p, err = msgp.ReadStringBytes(p)
			if err == nil && key != "ts" {
				t.Fatalf("first key %q", key)
			}
		}
	case msgp.ArrayType:
		_, p, err = msgp.ReadArrayHeaderBytes(p)
	}
	if err != nil {
		t.Fatal(err)
	}
	ts, _, err := msgp.ReadFloat64Bytes(p)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}
