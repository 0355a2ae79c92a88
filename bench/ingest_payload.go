package bench

import (
	"encoding/binary"
	"fmt"

	"github.com/tinylib/msgp/msgp"
)

// Payload builders for the KV-event dialects, written with msgp.Append* the way the
// publishers' msgspec encoders lay them out (reference: wire-formats-and-dynamo.md
// A.4 and B.2, mooncake-conductor.md §5.2). They are test and load-harness code:
// clarity over speed, except StoredTemplate, which the ingest benchmark uses.

// Era selects how engine events are encoded.
type Era uint8

const (
	// EraArray: msgspec array_like events, tag first, every field by position
	// (vLLM ≤ v0.23, SGLang until PR #37482).
	EraArray Era = iota + 1
	// EraMap: tagged maps with a "type" key (vLLM PR #42892, SGLang PR #37482).
	EraMap
)

// EngineStored is a BlockStored event. Empty Medium / LoraName encode as nil.
type EngineStored struct {
	Hashes    []uint64
	Parent    uint64
	HasParent bool
	Tokens    []int32
	BlockSize int
	Medium    string
	LoraName  string
}

// EngineRemoved is a BlockRemoved event. Empty Medium encodes as nil.
type EngineRemoved struct {
	Hashes []uint64
	Medium string
}

// EngineCleared is an AllBlocksCleared event.
type EngineCleared struct{}

// AppendVLLMBatch appends a vLLM KVEventBatch [ts, events, data_parallel_rank]; a
// negative dp encodes nil. events are EngineStored, EngineRemoved or EngineCleared.
// Hashes are unsigned ints (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1).
func AppendVLLMBatch(dst []byte, era Era, ts float64, dp int, events ...any) []byte {
	return appendEngineBatch(dst, era, false, ts, dp, events)
}

// AppendSGLangBatch appends an SGLang KVEventBatch [ts, events, attn_dp_rank]. Hashes
// are sent as SGLang does, as signed int64 (the same 64-bit pattern).
func AppendSGLangBatch(dst []byte, era Era, ts float64, dp int, events ...any) []byte {
	return appendEngineBatch(dst, era, true, ts, dp, events)
}

func appendEngineBatch(dst []byte, era Era, sglang bool, ts float64, dp int, events []any) []byte {
	dst = msgp.AppendArrayHeader(dst, 3)
	dst = msgp.AppendFloat64(dst, ts)
	dst = msgp.AppendArrayHeader(dst, uint32(len(events)))
	for _, ev := range events {
		switch e := ev.(type) {
		case EngineStored:
			dst = appendStored(dst, era, sglang, &e)
		case EngineRemoved:
			dst = appendRemoved(dst, era, sglang, &e)
		case EngineCleared:
			if era == EraArray {
				dst = msgp.AppendArrayHeader(dst, 1)
			} else {
				dst = msgp.AppendMapHeader(dst, 1)
				dst = msgp.AppendString(dst, "type")
			}
			dst = msgp.AppendString(dst, "AllBlocksCleared")
		default:
			panic(fmt.Sprintf("bench: unknown engine event %T", ev))
		}
	}
	if dp < 0 {
		return msgp.AppendNil(dst)
	}
	return msgp.AppendInt(dst, dp)
}

func appendHash(dst []byte, sglang bool, h uint64) []byte {
	if sglang {
		return msgp.AppendInt64(dst, int64(h))
	}
	return msgp.AppendUint64(dst, h)
}

func appendHashes(dst []byte, sglang bool, hs []uint64) []byte {
	dst = msgp.AppendArrayHeader(dst, uint32(len(hs)))
	for _, h := range hs {
		dst = appendHash(dst, sglang, h)
	}
	return dst
}

func appendOptString(dst []byte, s string) []byte {
	if s == "" {
		return msgp.AppendNil(dst)
	}
	return msgp.AppendString(dst, s)
}

func appendTokens(dst []byte, toks []int32) []byte {
	dst = msgp.AppendArrayHeader(dst, uint32(len(toks)))
	for _, t := range toks {
		dst = msgp.AppendInt32(dst, t)
	}
	return dst
}

func appendStored(dst []byte, era Era, sglang bool, e *EngineStored) []byte {
	parent := func(dst []byte) []byte {
		if !e.HasParent {
			return msgp.AppendNil(dst)
		}
		return appendHash(dst, sglang, e.Parent)
	}
	if era == EraArray {
		// vLLM: [tag, hashes, parent, tokens, block_size, lora_id, medium, lora_name]
		// SGLang: [tag, hashes, parent, tokens, block_size, lora_id, medium]
		n := uint32(8)
		if sglang {
			n = 7
		}
		dst = msgp.AppendArrayHeader(dst, n)
		dst = msgp.AppendString(dst, "BlockStored")
		dst = appendHashes(dst, sglang, e.Hashes)
		dst = parent(dst)
		dst = appendTokens(dst, e.Tokens)
		dst = msgp.AppendInt(dst, e.BlockSize)
		dst = msgp.AppendNil(dst) // lora_id
		dst = appendOptString(dst, e.Medium)
		if !sglang {
			dst = appendOptString(dst, e.LoraName)
		}
		return dst
	}
	if sglang {
		// SGLang map era: type, block_hashes, parent_block_hash, token_ids,
		// block_size, lora_id always; medium only when set (omit_defaults).
		n := uint32(6)
		if e.Medium != "" {
			n++
		}
		dst = msgp.AppendMapHeader(dst, n)
	} else {
		// vLLM map era: every field without a default, even nil.
		dst = msgp.AppendMapHeader(dst, 8)
	}
	dst = msgp.AppendString(dst, "type")
	dst = msgp.AppendString(dst, "BlockStored")
	dst = msgp.AppendString(dst, "block_hashes")
	dst = appendHashes(dst, sglang, e.Hashes)
	dst = msgp.AppendString(dst, "parent_block_hash")
	dst = parent(dst)
	dst = msgp.AppendString(dst, "token_ids")
	dst = appendTokens(dst, e.Tokens)
	dst = msgp.AppendString(dst, "block_size")
	dst = msgp.AppendInt(dst, e.BlockSize)
	dst = msgp.AppendString(dst, "lora_id")
	dst = msgp.AppendNil(dst)
	if sglang {
		if e.Medium != "" {
			dst = msgp.AppendString(dst, "medium")
			dst = msgp.AppendString(dst, e.Medium)
		}
		return dst
	}
	dst = msgp.AppendString(dst, "medium")
	dst = appendOptString(dst, e.Medium)
	dst = msgp.AppendString(dst, "lora_name")
	return appendOptString(dst, e.LoraName)
}

func appendRemoved(dst []byte, era Era, sglang bool, e *EngineRemoved) []byte {
	if era == EraArray {
		dst = msgp.AppendArrayHeader(dst, 3)
		dst = msgp.AppendString(dst, "BlockRemoved")
		dst = appendHashes(dst, sglang, e.Hashes)
		return appendOptString(dst, e.Medium)
	}
	dst = msgp.AppendMapHeader(dst, 3)
	dst = msgp.AppendString(dst, "type")
	dst = msgp.AppendString(dst, "BlockRemoved")
	dst = msgp.AppendString(dst, "block_hashes")
	dst = appendHashes(dst, sglang, e.Hashes)
	dst = msgp.AppendString(dst, "medium")
	return appendOptString(dst, e.Medium)
}

// MooncakeEvent is one Mooncake store master event (an RFC #1527 map).
type MooncakeEvent struct {
	EventID   uint64
	Type      string // "stored", "removed" or "cleared"
	SeqHashes []uint64
	ObjectKey string
	Medium    string // "" encodes nil
	TenantID  string
	BackendID string
	ModelName string // "" encodes nil
	BlockSize int    // 0 encodes nil
	DPRank    int
}

// AppendMooncakeBatch appends a master batch [ts_ms, events, dp_rank] (negative dp:
// nil). Each event carries the master's common keys (event_id, timestamp,
// event_type, model_name, block_size, additional_salt, lora_name, tenant_id,
// backend_id, medium, dp_rank) and, for stored/removed, the object keys
// (group_id, seq_hashes, base_block_idx, object_key; stored adds parent_hash and
// token_ids as nil).
func AppendMooncakeBatch(dst []byte, tsMillis uint64, dp int, events ...MooncakeEvent) []byte {
	dst = msgp.AppendArrayHeader(dst, 3)
	dst = msgp.AppendUint64(dst, tsMillis)
	dst = msgp.AppendArrayHeader(dst, uint32(len(events)))
	for i := range events {
		e := &events[i]
		n := uint32(11)
		switch e.Type {
		case "stored":
			n += 6
		case "removed":
			n += 4
		}
		dst = msgp.AppendMapHeader(dst, n)
		dst = msgp.AppendString(dst, "event_id")
		dst = msgp.AppendUint64(dst, e.EventID)
		dst = msgp.AppendString(dst, "timestamp")
		dst = msgp.AppendUint64(dst, tsMillis)
		dst = msgp.AppendString(dst, "event_type")
		dst = msgp.AppendString(dst, e.Type)
		dst = msgp.AppendString(dst, "model_name")
		dst = appendOptString(dst, e.ModelName)
		dst = msgp.AppendString(dst, "block_size")
		if e.BlockSize == 0 {
			dst = msgp.AppendNil(dst)
		} else {
			dst = msgp.AppendInt(dst, e.BlockSize)
		}
		dst = msgp.AppendString(dst, "additional_salt")
		dst = msgp.AppendNil(dst)
		dst = msgp.AppendString(dst, "lora_name")
		dst = msgp.AppendNil(dst)
		dst = msgp.AppendString(dst, "tenant_id")
		dst = msgp.AppendString(dst, e.TenantID)
		dst = msgp.AppendString(dst, "backend_id")
		dst = msgp.AppendString(dst, e.BackendID)
		dst = msgp.AppendString(dst, "medium")
		dst = appendOptString(dst, e.Medium)
		dst = msgp.AppendString(dst, "dp_rank")
		dst = msgp.AppendInt(dst, e.DPRank)
		if e.Type == "cleared" {
			continue
		}
		dst = msgp.AppendString(dst, "group_id")
		dst = msgp.AppendNil(dst)
		dst = msgp.AppendString(dst, "seq_hashes")
		dst = msgp.AppendArrayHeader(dst, uint32(len(e.SeqHashes)))
		for _, h := range e.SeqHashes {
			dst = msgp.AppendUint64(dst, h)
		}
		dst = msgp.AppendString(dst, "base_block_idx")
		dst = msgp.AppendNil(dst)
		dst = msgp.AppendString(dst, "object_key")
		dst = msgp.AppendString(dst, e.ObjectKey)
		if e.Type == "stored" {
			dst = msgp.AppendString(dst, "parent_hash")
			dst = msgp.AppendNil(dst)
			dst = msgp.AppendString(dst, "token_ids")
			dst = msgp.AppendNil(dst)
		}
	}
	if dp < 0 {
		return msgp.AppendNil(dst)
	}
	return msgp.AppendInt(dst, dp)
}

// StandardEvent is one RFC #1527 standardized event, as a standard
// publisher sends it: a map with event_type, keyed blocks (seq_hashes) and,
// for stored, the tokens they hash (token_ids) and the parent (parent_hash).
type StandardEvent struct {
	EventID   uint64
	Type      string // "stored", "removed" or "cleared"
	SeqHashes []uint64
	Parent    uint64
	HasParent bool
	Tokens    []int32 // stored only
	ModelName string  // "" encodes nil (the registration's model applies)
	BlockSize int     // 0 encodes nil
	Medium    string  // "" encodes nil
	DPRank    int     // negative encodes nil
}

// AppendStandardBatch appends a standard publisher's batch [ts_ms, events,
// dp_rank] (negative dp: nil). Each event carries event_id, timestamp,
// event_type, model_name, block_size, medium and dp_rank; stored and removed
// add seq_hashes; stored adds parent_hash, token_ids and base_block_idx (nil).
func AppendStandardBatch(dst []byte, tsMillis uint64, dp int, events ...StandardEvent) []byte {
	dst = msgp.AppendArrayHeader(dst, 3)
	dst = msgp.AppendUint64(dst, tsMillis)
	dst = msgp.AppendArrayHeader(dst, uint32(len(events)))
	optInt := func(dst []byte, v int, nilIf bool) []byte {
		if nilIf {
			return msgp.AppendNil(dst)
		}
		return msgp.AppendInt(dst, v)
	}
	for i := range events {
		e := &events[i]
		n := uint32(7)
		switch e.Type {
		case "stored":
			n += 4
		case "removed":
			n++
		}
		dst = msgp.AppendMapHeader(dst, n)
		dst = msgp.AppendString(dst, "event_id")
		dst = msgp.AppendUint64(dst, e.EventID)
		dst = msgp.AppendString(dst, "timestamp")
		dst = msgp.AppendUint64(dst, tsMillis)
		dst = msgp.AppendString(dst, "event_type")
		dst = msgp.AppendString(dst, e.Type)
		dst = msgp.AppendString(dst, "model_name")
		dst = appendOptString(dst, e.ModelName)
		dst = msgp.AppendString(dst, "block_size")
		dst = optInt(dst, e.BlockSize, e.BlockSize == 0)
		dst = msgp.AppendString(dst, "medium")
		dst = appendOptString(dst, e.Medium)
		dst = msgp.AppendString(dst, "dp_rank")
		dst = optInt(dst, e.DPRank, e.DPRank < 0)
		if e.Type == "cleared" {
			continue
		}
		dst = msgp.AppendString(dst, "seq_hashes")
		dst = msgp.AppendArrayHeader(dst, uint32(len(e.SeqHashes)))
		for _, h := range e.SeqHashes {
			dst = msgp.AppendUint64(dst, h)
		}
		if e.Type != "stored" {
			continue
		}
		dst = msgp.AppendString(dst, "parent_hash")
		if e.HasParent {
			dst = msgp.AppendUint64(dst, e.Parent)
		} else {
			dst = msgp.AppendNil(dst)
		}
		dst = msgp.AppendString(dst, "token_ids")
		dst = appendTokens(dst, e.Tokens)
		dst = msgp.AppendString(dst, "base_block_idx")
		dst = msgp.AppendNil(dst)
	}
	return optInt(dst, dp, dp < 0)
}

// StoredTemplate is a vLLM map-era batch holding one BlockStored of a fixed number
// of root blocks and, optionally, one BlockRemoved of as many blocks (the
// evictions that keep a full GPU cache at its size). Hashes are encoded
// fixed-width (0xcf + 8 bytes), so Fill can stamp new ones into a copy without
// re-encoding: what a benchmark needs to publish unique blocks at millions per
// second without measuring the encoder.
type StoredTemplate struct {
	tmpl   []byte
	offs   []int // offset of each stored hash's 8 value bytes
	rmOffs []int // same for the removed hashes
}

// NewStoredTemplate builds the template: blocks blocks of blockSize tokens (ids
// derived from the block index, all below 32000), medium "GPU", dp rank dp; with
// evict, a BlockRemoved of blocks hashes follows the store.
func NewStoredTemplate(blocks, blockSize, dp int, evict bool) *StoredTemplate {
	t := &StoredTemplate{}
	fixed := func(b []byte, offs *[]int) []byte {
		b = msgp.AppendArrayHeader(b, uint32(blocks))
		for i := 0; i < blocks; i++ {
			b = append(b, 0xcf)
			*offs = append(*offs, len(b))
			b = binary.BigEndian.AppendUint64(b, 0)
		}
		return b
	}
	b := msgp.AppendArrayHeader(nil, 3)
	b = msgp.AppendFloat64(b, 1.7e9)
	if evict {
		b = msgp.AppendArrayHeader(b, 2)
	} else {
		b = msgp.AppendArrayHeader(b, 1)
	}
	b = msgp.AppendMapHeader(b, 8)
	b = msgp.AppendString(b, "type")
	b = msgp.AppendString(b, "BlockStored")
	b = msgp.AppendString(b, "block_hashes")
	b = fixed(b, &t.offs)
	b = msgp.AppendString(b, "parent_block_hash")
	b = msgp.AppendNil(b)
	b = msgp.AppendString(b, "token_ids")
	b = msgp.AppendArrayHeader(b, uint32(blocks*blockSize))
	for i := 0; i < blocks*blockSize; i++ {
		b = msgp.AppendInt32(b, int32(1000+i*7%31000))
	}
	b = msgp.AppendString(b, "block_size")
	b = msgp.AppendInt(b, blockSize)
	b = msgp.AppendString(b, "lora_id")
	b = msgp.AppendNil(b)
	b = msgp.AppendString(b, "medium")
	b = msgp.AppendString(b, "GPU")
	b = msgp.AppendString(b, "lora_name")
	b = msgp.AppendNil(b)
	if evict {
		b = msgp.AppendMapHeader(b, 3)
		b = msgp.AppendString(b, "type")
		b = msgp.AppendString(b, "BlockRemoved")
		b = msgp.AppendString(b, "block_hashes")
		b = fixed(b, &t.rmOffs)
		b = msgp.AppendString(b, "medium")
		b = msgp.AppendString(b, "GPU")
	}
	t.tmpl = msgp.AppendInt(b, dp)
	return t
}

// Blocks is the number of block hashes Fill stamps into the store.
func (t *StoredTemplate) Blocks() int { return len(t.offs) }

// Size is the payload size in bytes.
func (t *StoredTemplate) Size() int { return len(t.tmpl) }

// Fill appends a copy of the template with hashes stamped into the store and, for
// an evicting template, removed stamped into the removal (both of length Blocks()).
func (t *StoredTemplate) Fill(dst []byte, hashes, removed []uint64) []byte {
	start := len(dst)
	dst = append(dst, t.tmpl...)
	for i, off := range t.offs {
		binary.BigEndian.PutUint64(dst[start+off:], hashes[i])
	}
	for i, off := range t.rmOffs {
		binary.BigEndian.PutUint64(dst[start+off:], removed[i])
	}
	return dst
}
