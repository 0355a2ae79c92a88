package fuzz

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/wire"
	"github.com/tinylib/msgp/msgp"
)

// Fuzz targets for the wire decoders. Each is seeded with the real payloads of
// wire/testdata (shared/vectors copies, and in captures/ the bytes of upstream
// vLLM's and SGLang's publishers) plus hand-built ones, caps its input at 64 KiB,
// and checks properties rather than exact output: no panic, every kept event
// well-formed, and decoding deterministic through a reused, dirtied batch.

const maxWireInput = 64 << 10

var vectorDir = filepath.Join("..", "wire", "testdata")

// vectorPayloads returns the payload_hex values of a vector file whose case names
// have the given prefix ("" for all), plus, for the Mooncake file, its integration
// payloads.
func vectorPayloads(f *testing.F, file, prefix string) [][]byte {
	f.Helper()
	raw, err := os.ReadFile(filepath.Join(vectorDir, file))
	if err != nil {
		f.Fatal(err)
	}
	var v struct {
		Cases []struct {
			Name string `json:"name"`
			Hex  string `json:"payload_hex"`
		} `json:"cases"`
		Integration struct {
			Tiers []struct {
				Hex string `json:"payload_hex"`
			} `json:"tier_publishes"`
			Remove string `json:"remove_first_block_hex"`
			Clear  string `json:"clear_all_hex"`
		} `json:"integration"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		f.Fatal(err)
	}
	hexes := []string{v.Integration.Remove, v.Integration.Clear}
	for _, t := range v.Integration.Tiers {
		hexes = append(hexes, t.Hex)
	}
	for _, c := range v.Cases {
		if strings.HasPrefix(c.Name, prefix) {
			hexes = append(hexes, c.Hex)
		}
	}
	var out [][]byte
	for _, h := range hexes {
		if h == "" {
			continue
		}
		b, err := hex.DecodeString(h)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// captureMessages returns the frames of every message of the wire captures
// (wire/testdata/captures: real vLLM and SGLang publishers' bytes) whose file
// name has the given prefix: live messages, the replay request and the replay
// replies.
func captureMessages(f *testing.F, prefix string) [][][]byte {
	f.Helper()
	paths, err := filepath.Glob(filepath.Join(vectorDir, "captures", prefix+"*.jsonl"))
	if err != nil || len(paths) == 0 {
		f.Fatalf("no captures %s*: %v", prefix, err)
	}
	var out [][][]byte
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			var m struct {
				Frames [][]byte `json:"frames_b64"`
			}
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				f.Fatalf("%s: %v", p, err)
			}
			out = append(out, m.Frames)
		}
	}
	return out
}

// capturePayloads returns the msgpack payloads (the last frame, when not
// empty) of the captures whose file name has the given prefix.
func capturePayloads(f *testing.F, prefix string) [][]byte {
	f.Helper()
	var out [][]byte
	for _, frames := range captureMessages(f, prefix) {
		if p := frames[len(frames)-1]; len(frames) == 3 && len(p) > 0 {
			out = append(out, p)
		}
	}
	return out
}

// rfcEvent builds an RFC #1527 event map as the Mooncake master sends it.
func rfcEvent(kind string, id uint64, hashes ...uint64) []byte {
	b := msgp.AppendMapHeader(nil, 9)
	b = msgp.AppendString(b, "event_id")
	b = msgp.AppendUint64(b, id)
	b = msgp.AppendString(b, "event_type")
	b = msgp.AppendString(b, kind)
	b = msgp.AppendString(b, "tenant_id")
	b = msgp.AppendString(b, "default")
	b = msgp.AppendString(b, "backend_id")
	b = msgp.AppendString(b, "worker-0")
	b = msgp.AppendString(b, "medium")
	b = msgp.AppendString(b, "cpu")
	b = msgp.AppendString(b, "block_size")
	b = msgp.AppendUint64(b, 2)
	b = msgp.AppendString(b, "object_key")
	b = msgp.AppendString(b, "0x1f")
	if kind == "cleared" {
		b = msgp.AppendString(b, "model_name")
		b = msgp.AppendNil(b)
		b = msgp.AppendString(b, "dp_rank")
		return msgp.AppendUint64(b, 0)
	}
	b = msgp.AppendString(b, "seq_hashes")
	b = msgp.AppendArrayHeader(b, uint32(len(hashes)))
	for _, h := range hashes {
		b = msgp.AppendUint64(b, h)
	}
	if kind == "stored" {
		b = msgp.AppendString(b, "token_ids")
		b = msgp.AppendArrayHeader(b, uint32(2*len(hashes)))
		for i := range 2 * len(hashes) {
			b = msgp.AppendUint64(b, uint64(100+i))
		}
		return b
	}
	b = msgp.AppendString(b, "base_block_idx")
	return msgp.AppendUint64(b, 3)
}

func rfcEvents() [][]byte {
	return [][]byte{rfcEvent("stored", 1, 1, 2), rfcEvent("removed", 2, 2), rfcEvent("cleared", 3)}
}

// checkEvents asserts what every successful decode must satisfy.
func checkEvents(t *testing.T, b *core.Batch) {
	t.Helper()
	if b.Skipped < len(b.Errors) || len(b.Errors) > wire.MaxBatchErrors {
		t.Fatalf("skipped %d with %d errors", b.Skipped, len(b.Errors))
	}
	for _, err := range b.Errors {
		if _, ok := err.(*wire.DecodeError); !ok {
			t.Fatalf("batch error %T %v", err, err)
		}
	}
	for i := range b.Events {
		e := &b.Events[i]
		if e.Kind < core.EventStored || e.Kind > core.EventCleared {
			t.Fatalf("event %d has no kind: %+v", i, e)
		}
		if len(e.Hashes) > wire.MaxEventHashes || len(e.Tokens) > wire.MaxEventTokens {
			t.Fatalf("event %d over limits", i)
		}
		if !e.HasTokens && len(e.Tokens) != 0 {
			t.Fatalf("event %d: tokens without HasTokens", i)
		}
		if e.Bigram && len(e.Tokens)%2 != 0 {
			t.Fatalf("event %d: odd bigram token count %d", i, len(e.Tokens))
		}
		if e.Kind != core.EventStored || len(e.Tokens) == 0 || len(e.Hashes) == 0 || e.BlockSize <= 0 ||
			e.Partial || !e.FullAttention() {
			continue
		}
		n := len(e.Tokens)
		if e.Bigram {
			n /= 2
		}
		if n != len(e.Hashes)*e.BlockSize {
			t.Fatalf("event %d: %d tokens for %d blocks of %d", i, n, len(e.Hashes), e.BlockSize)
		}
	}
}

// snapshot renders everything a decode produced.
func snapshot(b *core.Batch, err error) string {
	return fmt.Sprintf("%v|%v|%d|%d/%v|%d|%v|%+v", err, b.TimestampF, b.TimestampU, b.DPRank, b.HasDPRank,
		b.Skipped, b.Errors, b.Events)
}

// fuzzDecode runs one decoder on in: checks the result, then decodes another
// payload into the same batch and in again, which must reproduce the first result.
func fuzzDecode(t *testing.T, in, other []byte, decode func(*wire.Decoder, []byte, *core.Batch) error) {
	if len(in) > maxWireInput {
		return
	}
	var d wire.Decoder
	var b core.Batch
	err := decode(&d, in, &b)
	if err != nil {
		if _, ok := err.(*wire.DecodeError); !ok {
			t.Fatalf("error %T %v", err, err)
		}
	} else {
		checkEvents(t, &b)
	}
	first := snapshot(&b, err)
	_ = decode(&d, other, &b)
	if again := snapshot(&b, decode(&d, in, &b)); again != first {
		t.Fatalf("decode not deterministic through a reused batch:\n%s\n%s", first, again)
	}
}

func msgpackDecoder(dialect wire.Dialect) func(*wire.Decoder, []byte, *core.Batch) error {
	return func(d *wire.Decoder, p []byte, b *core.Batch) error { return d.Decode(dialect, p, b) }
}

func addAll(f *testing.F, seeds [][]byte) {
	for _, s := range seeds {
		f.Add(s)
	}
}

func FuzzDecodeVLLM(f *testing.F) {
	seeds := vectorPayloads(f, "derived_engine_wire_vectors.json", "vllm_")
	addAll(f, seeds)
	addAll(f, capturePayloads(f, "vllm-"))
	f.Add([]byte{})
	f.Add([]byte{0x92, 0xcb, 0x3f, 0xf4, 0, 0, 0, 0, 0, 0, 0x90})                // [1.25, []]
	f.Add([]byte{0x81, 0xa6, 'e', 'v', 'e', 'n', 't', 's', 0xdd, 0x80, 0, 0, 0}) // {"events": lying array}
	// Standardized event maps inside a vLLM batch (recognised by event_type).
	std := msgp.AppendArrayHeader(nil, 3)
	std = msgp.AppendFloat64(std, 1.5)
	std = msgp.AppendArrayHeader(std, uint32(len(rfcEvents())))
	for _, e := range rfcEvents() {
		std = append(std, e...)
	}
	f.Add(msgp.AppendInt(std, 0))
	other := seeds[len(seeds)-1]
	f.Fuzz(func(t *testing.T, in []byte) { fuzzDecode(t, in, other, msgpackDecoder(wire.DialectVLLM)) })
}

func FuzzDecodeSGLang(f *testing.F) {
	seeds := append(vectorPayloads(f, "derived_engine_wire_vectors.json", "sglang_"),
		vectorPayloads(f, "mooncake_sglang_map_event_vectors.json", "")...)
	addAll(f, seeds)
	addAll(f, capturePayloads(f, "sglang-"))
	other := seeds[0]
	f.Fuzz(func(t *testing.T, in []byte) { fuzzDecode(t, in, other, msgpackDecoder(wire.DialectSGLang)) })
}

func FuzzDecodeMooncake(f *testing.F) {
	batch := msgp.AppendArrayHeader(nil, 3)
	batch = msgp.AppendUint64(batch, 1700000000123)
	batch = msgp.AppendArrayHeader(batch, 3)
	for _, e := range rfcEvents() {
		batch = append(batch, e...)
	}
	batch = msgp.AppendUint64(batch, 2)
	f.Add(batch)
	f.Add([]byte{0x93, 0x01, 0x90, 0xc0})
	f.Fuzz(func(t *testing.T, in []byte) { fuzzDecode(t, in, batch, msgpackDecoder(wire.DialectMooncake)) })
}

func FuzzDecodeStandard(f *testing.F) {
	evs := rfcEvents()
	list := msgp.AppendArrayHeader(nil, uint32(len(evs)))
	for _, e := range evs {
		list = append(list, e...)
	}
	wrapper := msgp.AppendMapHeader(nil, 2)
	wrapper = msgp.AppendString(wrapper, "ts")
	wrapper = msgp.AppendFloat64(wrapper, 1.5)
	wrapper = msgp.AppendString(wrapper, "events")
	wrapper = append(wrapper, list...)
	batch := append(msgp.AppendUint64(msgp.AppendArrayHeader(nil, 3), 7), list...)
	batch = msgp.AppendNil(batch)
	for _, s := range append(evs, list, wrapper, batch) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) { fuzzDecode(t, in, list, msgpackDecoder(wire.DialectStandard)) })
}

func FuzzDecodeStandardJSON(f *testing.F) {
	seeds := []string{
		`{"event_id":42,"timestamp":1739145600000,"event_type":"stored","model_name":"llama-3.1-8b","block_size":64,"additional_salt":null,"lora_name":null,"tenant_id":"default","backend_id":"worker-0","medium":"gpu","dp_rank":0,"seq_hashes":[1234567890,9876543210,1122334455],"base_block_idx":5,"parent_hash":9999999999,"token_ids":null}`,
		`[{"event_id":43,"event_type":"removed","seq_hashes":[18446744073709551615,"0x1f",-1]},{"event_id":44,"event_type":"cleared","tenant_id":"t\u00e9\ud83d\ude00"}]`,
		`{"ts":1.5,"dp_rank":1,"events":[{"event_id":1,"type":"BlockStored","block_hashes":[1],"token_ids":[1,2],"block_size":2}],"x":{"y":[true,false,null,1e5]}}`,
		`[]`, ``, `{"events":[{"event_id":1e3}]}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	other := []byte(seeds[1])
	f.Fuzz(func(t *testing.T, in []byte) {
		fuzzDecode(t, in, other, func(d *wire.Decoder, p []byte, b *core.Batch) error { return d.DecodeStandardJSON(p, b) })
	})
}

// FuzzDecodeAny: detection never panics and never fails a payload its
// dialect's decoder takes: DecodeAny's result is exactly Decode's with the
// dialect it detected, the shape's parts agree with its evidence, and the
// decode is deterministic through a reused batch.
func FuzzDecodeAny(f *testing.F) {
	seeds := append(vectorPayloads(f, "derived_engine_wire_vectors.json", ""),
		vectorPayloads(f, "mooncake_sglang_map_event_vectors.json", "")...)
	addAll(f, seeds)
	addAll(f, capturePayloads(f, ""))
	batch := msgp.AppendArrayHeader(nil, 3)
	batch = msgp.AppendUint64(batch, 1700000000123)
	batch = msgp.AppendArrayHeader(batch, uint32(len(rfcEvents())))
	for _, e := range rfcEvents() {
		batch = append(batch, e...)
	}
	f.Add(msgp.AppendUint64(batch, 2))
	for _, e := range rfcEvents() {
		f.Add(e)
	}
	other := seeds[0]
	f.Fuzz(func(t *testing.T, in []byte) {
		var shape wire.Shape
		fuzzDecode(t, in, other, func(d *wire.Decoder, p []byte, b *core.Batch) error {
			s, err := d.DecodeAny(p, b)
			shape = s
			return err
		})
		if len(in) > maxWireInput {
			return
		}
		if d, sure := shape.Evidence.Dialect(); d != shape.Dialect || sure != shape.Sure || shape.Evidence.Era() != shape.Era {
			t.Fatalf("shape %+v disagrees with its evidence", shape)
		}
		var d1, d2 wire.Decoder
		var b1, b2 core.Batch
		_, err1 := d1.DecodeAny(in, &b1)
		err2 := d2.Decode(shape.Dialect, in, &b2)
		if a, b := snapshot(&b1, err1), snapshot(&b2, err2); a != b {
			t.Fatalf("DecodeAny differs from Decode(%v):\n%s\n%s", shape.Dialect, a, b)
		}
	})
}

// frameBlob encodes frames as (length byte, bytes)* for the framing fuzzer.
func frameBlob(frames ...[]byte) []byte {
	var out []byte
	for _, fr := range frames {
		out = append(out, byte(len(fr)))
		out = append(out, fr...)
	}
	return out
}

func FuzzFraming(f *testing.F) {
	raw, err := os.ReadFile(filepath.Join(vectorDir, "derived_zmq_framing_vectors.json"))
	if err != nil {
		f.Fatal(err)
	}
	var v map[string]json.RawMessage
	if err := json.Unmarshal(raw, &v); err != nil {
		f.Fatal(err)
	}
	for _, msg := range v {
		var m struct {
			Frames []string `json:"frames_hex"`
		}
		if json.Unmarshal(msg, &m) != nil || len(m.Frames) == 0 {
			continue
		}
		var frames [][]byte
		for _, h := range m.Frames {
			if h == "<payload>" {
				h = "93cb41d954fc402000009000"
			}
			fr, err := hex.DecodeString(h)
			if err != nil {
				f.Fatal(err)
			}
			frames = append(frames, fr)
		}
		f.Add(frameBlob(frames...), uint64(42))
	}
	// The captured messages whose frames fit frameBlob's length byte: the
	// replay request, the end marker, the smaller live messages and replies.
	for _, frames := range captureMessages(f, "") {
		if !slices.ContainsFunc(frames, func(fr []byte) bool { return len(fr) > 255 }) {
			f.Add(frameBlob(frames...), uint64(2))
		}
	}
	f.Add([]byte{}, uint64(math.MaxUint64))
	f.Fuzz(func(t *testing.T, blob []byte, seq uint64) {
		if len(blob) > maxWireInput {
			return
		}
		var frames [][]byte
		for len(blob) > 0 && len(frames) < 6 {
			n := min(int(blob[0]), len(blob)-1)
			frames = append(frames, blob[1:1+n])
			blob = blob[1+n:]
		}
		if topic, s, payload, err := wire.ParseLive(frames); err == nil {
			if len(frames) != 3 || s != binary.BigEndian.Uint64(frames[1]) || string(topic) != string(frames[0]) || string(payload) != string(frames[2]) {
				t.Fatalf("ParseLive accepted %x", frames)
			}
		} else if len(frames) == 3 && len(frames[1]) == 8 {
			t.Fatalf("ParseLive rejected a valid message: %v", err)
		}
		if s, payload, end, err := wire.ParseReplayReply(frames); err == nil {
			if (len(frames) != 3 && len(frames) != 4) || len(frames[0]) != 0 ||
				end != (len(payload) == 0 || s == wire.ReplayEndSeq) {
				t.Fatalf("ParseReplayReply(%x) = %d %v", frames, s, end)
			}
		}
		// Round trip: a replay request followed by a payload is a 3-frame reply.
		req := wire.AppendReplayRequest(nil, seq)
		if len(req) != 2 || len(req[0]) != 0 || len(req[1]) != 8 {
			t.Fatalf("AppendReplayRequest(%d) = %x", seq, req)
		}
		payload := []byte{0x90}
		if len(frames) > 0 {
			payload = frames[len(frames)-1]
		}
		s, p, end, err := wire.ParseReplayReply(append(req, payload))
		if err != nil || s != seq || len(p) != len(payload) || end != (len(payload) == 0 || seq == wire.ReplayEndSeq) {
			t.Fatalf("round trip of seq %d: %d %v %v", seq, s, end, err)
		}
	})
}
