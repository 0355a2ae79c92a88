package wire

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/seed-c7a81618/conductor/core"
)

// The expectations here are built from each vector's own decoded form ("decoded" in
// the derived file, "expected" in the Mooncake file), never from this decoder: the
// helpers below map the publisher's field names onto core.Event the way the wire
// format documents them.

// Field names by array position (after the tag), as the reference (§A.4, §B.2) lists them.
var (
	vecVLLMStored   = []string{"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window"}
	vecVLLMRemoved  = []string{"block_hashes", "medium", "group_idx"}
	vecSGLangStored = []string{"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "metadata"}
	vecSGLRemoved   = []string{"block_hashes", "medium"}
)

// vecHash folds a vector hash: a JSON integer, a decimal string (signed in the
// Mooncake file) or a digest, {"bin_hex": …} in the derived vectors and
// {"bin": …} in the captures' expect files (last 8 bytes big-endian).
func vecHash(t *testing.T, v any) uint64 {
	t.Helper()
	var s string
	switch v := v.(type) {
	case json.Number:
		s = v.String()
	case string:
		s = v
	case map[string]any:
		h, ok := v["bin_hex"].(string)
		if !ok {
			h, _ = v["bin"].(string)
		}
		d, err := hex.DecodeString(h)
		if err != nil || len(d) < 8 {
			t.Fatalf("bad bin_hex %v", v)
		}
		return binary.BigEndian.Uint64(d[len(d)-8:])
	default:
		t.Fatalf("hash of type %T", v)
	}
	if strings.HasPrefix(s, "-") {
		i, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return uint64(i)
	}
	u, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func vecInt(t *testing.T, v any) int64 {
	t.Helper()
	n, err := v.(json.Number).Int64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// vecEvent builds the expected event from a decoded array or map event.
func vecEvent(t *testing.T, d Dialect, ev any) core.Event {
	t.Helper()
	var tag string
	m := map[string]any{}
	switch ev := ev.(type) {
	case []any:
		tag = ev[0].(string)
		names := map[string][]string{
			"BlockStored": vecVLLMStored, "BlockRemoved": vecVLLMRemoved,
		}
		if d == DialectSGLang {
			names = map[string][]string{"BlockStored": vecSGLangStored, "BlockRemoved": vecSGLRemoved}
		}
		for i, v := range ev[1:] {
			if i < len(names[tag]) {
				m[names[tag][i]] = v
			}
		}
	case map[string]any:
		tag, m = ev["type"].(string), ev
	default:
		t.Fatalf("event of type %T", ev)
	}
	var e core.Event
	switch tag {
	case "BlockStored":
		e.Kind = core.EventStored
	case "BlockRemoved":
		e.Kind = core.EventRemoved
	case "AllBlocksCleared":
		e.Kind = core.EventCleared
	default:
		t.Fatalf("tag %q", tag)
	}
	e.Hashes = []uint64{}
	if hs, ok := m["block_hashes"].([]any); ok {
		for _, h := range hs {
			e.Hashes = append(e.Hashes, vecHash(t, h))
		}
	}
	if p, ok := m["parent_block_hash"]; ok && p != nil {
		e.Parent, e.HasParent = vecHash(t, p), true
	}
	if ts, ok := m["token_ids"]; ok && ts != nil {
		e.HasTokens = true
		for _, tok := range ts.([]any) {
			if pair, ok := tok.([]any); ok {
				e.Bigram = true
				e.Tokens = append(e.Tokens, int32(vecInt(t, pair[0])), int32(vecInt(t, pair[1])))
			} else {
				e.Tokens = append(e.Tokens, int32(vecInt(t, tok)))
			}
		}
	}
	if bs, ok := m["block_size"]; ok {
		e.BlockSize, e.HasBlockSize = int(vecInt(t, bs)), true
	}
	if v := m["lora_id"]; v != nil {
		e.LoraID, e.HasLoraID = vecInt(t, v), true
	}
	if v := m["group_idx"]; v != nil {
		e.GroupIdx, e.HasGroupIdx = vecInt(t, v), true
	}
	e.HasSlidingWindow = m["kv_cache_spec_sliding_window"] != nil
	e.ExtraKeysPresent = m["extra_keys"] != nil
	// SGLang's partial last page: full block_size, fewer tokens (core.Event.Partial).
	n := len(e.Tokens)
	if e.Bigram {
		n /= 2
	}
	if d == DialectSGLang && n > 0 && e.BlockSize > 0 && n < len(e.Hashes)*e.BlockSize {
		e.Partial = true
	}
	str := func(v any) []byte {
		if v == nil {
			return nil
		}
		return []byte(v.(string))
	}
	e.Medium = str(m["medium"])
	e.LoraName = str(m["lora_name"])
	e.SpecKind = str(m["kv_cache_spec_kind"])
	e.CacheSalt = str(m["cache_salt"])
	if md, ok := m["metadata"].(map[string]any); ok {
		e.CacheSalt = str(md["cache_salt"])
	}
	return e
}

// checkBatch compares a decoded batch with the expected envelope and events.
func checkBatch(t *testing.T, got *core.Batch, ts any, dp any, want []core.Event) {
	t.Helper()
	if ts != nil {
		f, err := ts.(json.Number).Float64()
		if err != nil {
			t.Fatal(err)
		}
		if got.TimestampF != f {
			t.Errorf("ts = %v, want %v", got.TimestampF, f)
		}
	}
	if dp == nil {
		if got.HasDPRank {
			t.Errorf("dp = %d, want nil", got.DPRank)
		}
	} else if r := vecInt(t, dp); !got.HasDPRank || int64(got.DPRank) != r {
		t.Errorf("dp = %d/%v, want %d", got.DPRank, got.HasDPRank, r)
	}
	if got.Skipped != 0 || len(got.Errors) != 0 {
		t.Errorf("skipped %d events: %v", got.Skipped, got.Errors)
	}
	if len(got.Events) != len(want) {
		t.Fatalf("%d events, want %d:\n%s", len(got.Events), len(want), renderBatch(got))
	}
	for i := range want {
		if g, w := renderEvent(&got.Events[i]), renderEvent(&want[i]); g != w {
			t.Errorf("event %d:\n got %s\nwant %s", i, g, w)
		}
	}
}

func TestEngineWireVectors(t *testing.T) {
	var file struct {
		VLLMHashes []string `json:"vllm_block_hashes_u64"`
		Cases      []struct {
			Name        string   `json:"name"`
			Decoded     []any    `json:"decoded"`
			PayloadHex  string   `json:"payload_hex"`
			ExpectedU64 []string `json:"expected_block_hashes_u64"`
		} `json:"cases"`
	}
	loadJSON(t, "derived_engine_wire_vectors.json", &file)
	if len(file.Cases) != 15 {
		t.Fatalf("%d cases, want all 15 of the file", len(file.Cases))
	}
	var d Decoder
	var b core.Batch
	for _, c := range file.Cases {
		t.Run(c.Name, func(t *testing.T) {
			dialect := DialectVLLM
			if strings.HasPrefix(c.Name, "sglang_") {
				dialect = DialectSGLang
			}
			if err := d.Decode(dialect, mustHex(t, c.PayloadHex), &b); err != nil {
				t.Fatal(err)
			}
			var want []core.Event
			for _, ev := range c.Decoded[1].([]any) {
				want = append(want, vecEvent(t, dialect, ev))
			}
			checkBatch(t, &b, c.Decoded[0], c.Decoded[2], want)
			// The bytes-hash case states its folded values independently.
			for i, s := range c.ExpectedU64 {
				if u, _ := strconv.ParseUint(s, 10, 64); b.Events[0].Hashes[i] != u {
					t.Errorf("hash %d = %d, want %s", i, b.Events[0].Hashes[i], s)
				}
			}
		})
	}
	// Both hash modes of vLLM name the same blocks.
	if err := d.Decode(DialectVLLM, mustHex(t, file.Cases[5].PayloadHex), &b); err != nil {
		t.Fatal(err)
	}
	for i, s := range file.VLLMHashes {
		if u, _ := strconv.ParseUint(s, 10, 64); b.Events[0].Hashes[i] != u {
			t.Errorf("bytes-mode hash %d = %d, want int-mode %s", i, b.Events[0].Hashes[i], s)
		}
	}
}

func TestSGLangMapEventVectors(t *testing.T) {
	var file struct {
		Cases []struct {
			Name       string `json:"name"`
			PayloadHex string `json:"payload_hex"`
			Expected   struct {
				TS     any   `json:"ts"`
				DP     any   `json:"attn_dp_rank"`
				Events []any `json:"events"`
			} `json:"expected"`
		} `json:"cases"`
		Integration struct {
			BlockSize int      `json:"block_size"`
			Tokens    []int64  `json:"token_ids"`
			Hashes    []string `json:"block_hashes_signed"`
			Tiers     []struct {
				Medium     string `json:"medium"`
				BlockCount int    `json:"block_count"`
				PayloadHex string `json:"payload_hex"`
			} `json:"tier_publishes"`
			RemoveHex string `json:"remove_first_block_hex"`
			ClearHex  string `json:"clear_all_hex"`
		} `json:"integration"`
	}
	loadJSON(t, "mooncake_sglang_map_event_vectors.json", &file)
	if len(file.Cases) != 6 {
		t.Fatalf("%d cases, want all 6 of the file", len(file.Cases))
	}
	var d Decoder
	var b core.Batch
	for _, c := range file.Cases {
		t.Run(c.Name, func(t *testing.T) {
			if err := d.Decode(DialectSGLang, mustHex(t, c.PayloadHex), &b); err != nil {
				t.Fatal(err)
			}
			var want []core.Event
			for _, ev := range c.Expected.Events {
				want = append(want, vecEvent(t, DialectSGLang, ev))
			}
			checkBatch(t, &b, c.Expected.TS, c.Expected.DP, want)
		})
	}

	in := file.Integration
	hash := func(i int) uint64 { return vecHash(t, in.Hashes[i]) }
	for _, tier := range in.Tiers {
		t.Run("integration_"+tier.Medium, func(t *testing.T) {
			if err := d.Decode(DialectSGLang, mustHex(t, tier.PayloadHex), &b); err != nil {
				t.Fatal(err)
			}
			want := core.Event{Kind: core.EventStored, HasTokens: true, BlockSize: in.BlockSize,
				HasBlockSize: true, Medium: []byte(tier.Medium)}
			for i := 0; i < tier.BlockCount; i++ {
				want.Hashes = append(want.Hashes, hash(i))
			}
			for _, tok := range in.Tokens[:tier.BlockCount*in.BlockSize] {
				want.Tokens = append(want.Tokens, int32(tok))
			}
			checkBatch(t, &b, nil, json.Number("0"), []core.Event{want})
		})
	}
	t.Run("integration_remove_clear", func(t *testing.T) {
		if err := d.Decode(DialectSGLang, mustHex(t, in.RemoveHex), &b); err != nil {
			t.Fatal(err)
		}
		checkBatch(t, &b, nil, json.Number("0"), []core.Event{
			{Kind: core.EventRemoved, Hashes: []uint64{hash(0)}, Medium: []byte("GPU")}})
		if err := d.Decode(DialectSGLang, mustHex(t, in.ClearHex), &b); err != nil {
			t.Fatal(err)
		}
		checkBatch(t, &b, nil, json.Number("0"), []core.Event{{Kind: core.EventCleared, Hashes: []uint64{}}})
	})
}

func TestFramingVectors(t *testing.T) {
	type frames struct {
		FramesHex []string `json:"frames_hex"`
	}
	var file struct {
		Live      frames            `json:"live_pub_message"`
		Seqs      map[string]string `json:"seq_examples"`
		Request   frames            `json:"replay_request_from_DEALER"`
		ReplyNew  frames            `json:"replay_reply_vllm_new_as_seen_by_DEALER"`
		EndNew    frames            `json:"replay_end_vllm_new_as_seen_by_DEALER"`
		ReplyOld  frames            `json:"replay_reply_legacy_and_sglang_as_seen_by_DEALER"`
		EndOld    frames            `json:"replay_end_legacy_and_sglang_as_seen_by_DEALER"`
		RuleCheck string            `json:"rule"`
	}
	loadJSON(t, "derived_zmq_framing_vectors.json", &file)
	payload := mustHex(t, file.Live.FramesHex[2])
	decode := func(f frames) [][]byte {
		out := make([][]byte, len(f.FramesHex))
		for i, h := range f.FramesHex {
			if h == "<payload>" {
				out[i] = payload
				continue
			}
			out[i] = mustHex(t, h)
		}
		return out
	}

	topic, seq, p, err := ParseLive(decode(file.Live))
	if err != nil || string(topic) != "kv-events" || seq != 0 || string(p) != string(payload) {
		t.Fatalf("live: %q %d %x %v", topic, seq, p, err)
	}
	var d Decoder
	var b core.Batch
	if err := d.Decode(DialectVLLM, p, &b); err != nil || len(b.Events) != 0 || b.TimestampF != 1700000000.5 {
		t.Fatalf("live payload: %v %s", err, renderBatch(&b))
	}
	for s, h := range file.Seqs {
		want, _ := strconv.ParseUint(s, 10, 64)
		_, got, _, err := ParseLive([][]byte{nil, mustHex(t, h), nil})
		if err != nil || got != want {
			t.Errorf("seq %s: got %d %v", s, got, err)
		}
	}

	req := AppendReplayRequest(nil, 42)
	want := decode(file.Request)
	if len(req) != 2 || len(req[0]) != 0 || string(req[1]) != string(want[1]) {
		t.Errorf("replay request = %x, want %x", req, want)
	}

	for _, c := range []struct {
		name string
		f    frames
		seq  uint64
		end  bool
	}{
		{"reply_vllm_new", file.ReplyNew, 42, false},
		{"end_vllm_new", file.EndNew, ReplayEndSeq, true},
		{"reply_legacy_sglang", file.ReplyOld, 42, false},
		{"end_legacy_sglang", file.EndOld, ReplayEndSeq, true},
	} {
		seq, p, end, err := ParseReplayReply(decode(c.f))
		if err != nil || seq != c.seq || end != c.end || (!end && string(p) != string(payload)) {
			t.Errorf("%s: seq=%d end=%v payload=%x err=%v", c.name, seq, end, p, err)
		}
	}
}
