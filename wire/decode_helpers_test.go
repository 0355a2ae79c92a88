package wire

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/tinylib/msgp/msgp"
)

// renderEvent prints every set field of e in a fixed order, so tests compare
// decoded events to expectations field by field with a readable diff. Byte fields
// print nil and "" differently: the decoder keeps that distinction.
func renderEvent(e *core.Event) string {
	var sb strings.Builder
	sb.WriteString(e.Kind.String())
	fmt.Fprintf(&sb, " hashes=%v", e.Hashes)
	if e.HasParent {
		fmt.Fprintf(&sb, " parent=%d", e.Parent)
	}
	if e.HasTokens {
		fmt.Fprintf(&sb, " tokens=%v", e.Tokens)
	} else if len(e.Tokens) != 0 {
		fmt.Fprintf(&sb, " STRAY-tokens=%v", e.Tokens)
	}
	if e.Bigram {
		sb.WriteString(" bigram")
	}
	if e.HasBlockSize || e.BlockSize != 0 {
		fmt.Fprintf(&sb, " block_size=%d/%v", e.BlockSize, e.HasBlockSize)
	}
	if e.Partial {
		sb.WriteString(" partial")
	}
	if e.HasLoraID {
		fmt.Fprintf(&sb, " lora_id=%d", e.LoraID)
	}
	if e.HasGroupIdx {
		fmt.Fprintf(&sb, " group_idx=%d", e.GroupIdx)
	}
	if e.HasSlidingWindow {
		sb.WriteString(" sliding_window")
	}
	if e.ExtraKeysPresent {
		sb.WriteString(" extra_keys")
	}
	if e.HasEventID {
		fmt.Fprintf(&sb, " event_id=%d", e.EventID)
	}
	if e.Timestamp != 0 {
		fmt.Fprintf(&sb, " timestamp=%d", e.Timestamp)
	}
	if e.HasModelName != (e.ModelName != nil) {
		sb.WriteString(" BAD-HasModelName")
	}
	if e.HasDPRank {
		fmt.Fprintf(&sb, " dp_rank=%d", e.DPRank)
	}
	if e.HasBaseIdx {
		fmt.Fprintf(&sb, " base_block_idx=%d", e.BaseBlockIdx)
	}
	for _, f := range []struct {
		name string
		v    []byte
	}{
		{"medium", e.Medium}, {"lora_name", e.LoraName}, {"spec_kind", e.SpecKind},
		{"cache_salt", e.CacheSalt}, {"model_name", e.ModelName},
		{"additional_salt", e.AdditionalSalt}, {"tenant_id", e.TenantID},
		{"backend_id", e.BackendID}, {"object_key", e.ObjectKey},
	} {
		if f.v != nil {
			fmt.Fprintf(&sb, " %s=%q", f.name, f.v)
		}
	}
	return sb.String()
}

// renderBatch prints the batch envelope and its events one per line.
func renderBatch(b *core.Batch) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "ts=%v/%d", b.TimestampF, b.TimestampU)
	if b.HasDPRank {
		fmt.Fprintf(&sb, " dp=%d", b.DPRank)
	} else {
		sb.WriteString(" dp=nil")
	}
	fmt.Fprintf(&sb, " events=%d skipped=%d\n", len(b.Events), b.Skipped)
	for i := range b.Events {
		sb.WriteString(renderEvent(&b.Events[i]))
		sb.WriteByte('\n')
	}
	for _, err := range b.Errors {
		sb.WriteString("error: ")
		sb.WriteString(err.Error())
		sb.WriteByte('\n')
	}
	return sb.String()
}

// loadJSON reads testdata/name keeping numbers exact (json.Number): the vectors hold
// u64 hashes above 2^53.
func loadJSON(t testing.TB, name string, v any) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// mp builds msgpack test payloads with msgp's Append functions.
type mp []byte

func (m mp) arr(n int) mp      { return msgp.AppendArrayHeader(m, uint32(n)) }
func (m mp) mapn(n int) mp     { return msgp.AppendMapHeader(m, uint32(n)) }
func (m mp) str(s string) mp   { return msgp.AppendString(m, s) }
func (m mp) u(v uint64) mp     { return msgp.AppendUint64(m, v) }
func (m mp) i(v int64) mp      { return msgp.AppendInt64(m, v) }
func (m mp) f(v float64) mp    { return msgp.AppendFloat64(m, v) }
func (m mp) null() mp          { return msgp.AppendNil(m) }
func (m mp) bin(b []byte) mp   { return msgp.AppendBytes(m, b) }
func (m mp) boolean(v bool) mp { return msgp.AppendBool(m, v) }
func (m mp) raw(b ...byte) mp  { return append(m, b...) }
func (m mp) kv(k string) mp    { return m.str(k) }

// u64s and ints append arrays of hashes and tokens.
func (m mp) u64s(vs ...uint64) mp {
	m = m.arr(len(vs))
	for _, v := range vs {
		m = m.u(v)
	}
	return m
}

// ints encodes like msgspec and Python msgpack (the real publishers): non-negative
// values in the uint forms, negative ones in the int forms.
func (m mp) ints(vs ...int64) mp {
	m = m.arr(len(vs))
	for _, v := range vs {
		if v >= 0 {
			m = m.u(uint64(v))
		} else {
			m = m.i(v)
		}
	}
	return m
}

// sints encodes like tinylib/msgp (a Go publisher): signed forms for every value.
func (m mp) sints(vs ...int64) mp {
	m = m.arr(len(vs))
	for _, v := range vs {
		m = m.i(v)
	}
	return m
}

// batch wraps pre-encoded events in `[ts, [events...], dp]`.
func batch(ts float64, dp int64, events ...mp) []byte {
	m := mp(nil).arr(3).f(ts).arr(len(events))
	for _, e := range events {
		m = append(m, e...)
	}
	return m.i(dp)
}

// mooncakeBatch wraps events in the master's `[ts_ms, [events...], dp]`.
func mooncakeBatchOf(ts uint64, dp int64, events ...mp) []byte {
	m := mp(nil).arr(3).u(ts).arr(len(events))
	for _, e := range events {
		m = append(m, e...)
	}
	return m.i(dp)
}

// vllmStoredMap is a map-era vLLM BlockStored with every required key.
func vllmStoredMap(hashes []uint64, tokens []int64, blockSize int64) mp {
	m := mp(nil).mapn(8).kv("type").str("BlockStored").
		kv("block_hashes").u64s(hashes...).
		kv("parent_block_hash").null().
		kv("token_ids").ints(tokens...).
		kv("block_size").i(blockSize).
		kv("lora_id").null().
		kv("medium").str("GPU").
		kv("lora_name").null()
	return m
}

// vllmStoredArray is an array-era vLLM BlockStored of the v0.22 shape (11 fields).
func vllmStoredArray(hashes []uint64, tokens []int64, blockSize int64) mp {
	return mp(nil).arr(12).str("BlockStored").u64s(hashes...).null().ints(tokens...).
		i(blockSize).null().str("GPU").null().null().i(0).str("full_attention").null()
}

// seqTokens returns n tokens 1000, 1001, … (uint16 encodings, like real vocabularies).
func seqTokens(n int) []int64 {
	ts := make([]int64, n)
	for i := range ts {
		ts[i] = int64(1000 + i)
	}
	return ts
}

func seqHashes(n int) []uint64 {
	hs := make([]uint64, n)
	for i := range hs {
		hs[i] = 0x9e3779b97f4a7c15 * uint64(i+1)
	}
	return hs
}
