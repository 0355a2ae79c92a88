package wire

import (
	"math/bits"

	"github.com/seed-c7a81618/conductor/codec"
)

// A fieldTable maps the keys of one kind of map (an engine event, an RFC #1527
// event, a batch map) to field ids, one bit each, so that a decoder tracks the
// fields it has seen in one word; 0 for keys it ignores. Aliases may share an
// id (a repeat of either is then a duplicate).
type fieldTable [numMapKeys]uint32

// fieldNames lists a dialect's fields by id: n[i] is the key of the field with
// the id 1<<i (ids order the fields missing fields are reported in).
type fieldNames []mapKey

// key and name are the key of the field with id f.
func (n fieldNames) key(f uint32) mapKey  { return n[bits.TrailingZeros32(f)] }
func (n fieldNames) name(f uint32) string { return mapKeyNames[n.key(f)] }

// table maps each key of n to its id, but for the ids in positional, which
// name array positions, not keys (SGLang's metadata).
func (n fieldNames) table(positional uint32) *fieldTable {
	t := new(fieldTable)
	for i, k := range n {
		if positional&(1<<i) == 0 {
			t[k] = 1 << i
		}
	}
	return t
}

// mapKey is a key of a map of any dialect, spelled by mapKeyNames: walkMap
// finds a key among them with one switch, and each fieldTable says what the
// key means to its map.
type mapKey uint8

const (
	mkNone mapKey = iota
	mkType
	mkBlockHashes
	mkParentBlockHash
	mkTokenIDs
	mkBlockSize
	mkLoraID
	mkMedium
	mkLoraName
	mkExtraKeys
	mkGroupIdx
	mkSpecKind
	mkSlidingWindow
	mkCacheSalt
	mkLocality
	mkOwnership
	mkSessionID
	mkEventID
	mkTimestamp
	mkEventType
	mkModelName
	mkAdditionalSalt
	mkTenantID
	mkBackendID
	mkDPRank
	mkSeqHashes
	mkBaseBlockIdx
	mkParentHash
	mkObjectKey
	mkGroupID
	mkTS
	mkEvents
	mkDataParallelRank
	mkAttnDPRank
	mkMetadata // an SGLang array position, not a key of any table
	numMapKeys
)

var mapKeyNames = [numMapKeys]string{
	mkType: "type", mkBlockHashes: "block_hashes", mkParentBlockHash: "parent_block_hash",
	mkTokenIDs: "token_ids", mkBlockSize: "block_size", mkLoraID: "lora_id", mkMedium: "medium",
	mkLoraName: "lora_name", mkExtraKeys: "extra_keys", mkGroupIdx: "group_idx",
	mkSpecKind: "kv_cache_spec_kind", mkSlidingWindow: "kv_cache_spec_sliding_window",
	mkCacheSalt: "cache_salt", mkLocality: "locality", mkOwnership: "ownership",
	mkSessionID: "session_id", mkEventID: "event_id", mkTimestamp: "timestamp",
	mkEventType: "event_type", mkModelName: "model_name", mkAdditionalSalt: "additional_salt",
	mkTenantID: "tenant_id", mkBackendID: "backend_id", mkDPRank: "dp_rank",
	mkSeqHashes: "seq_hashes", mkBaseBlockIdx: "base_block_idx", mkParentHash: "parent_hash",
	mkObjectKey: "object_key", mkGroupID: "group_id", mkTS: "ts", mkEvents: "events",
	mkDataParallelRank: "data_parallel_rank", mkAttnDPRank: "attn_dp_rank", mkMetadata: "metadata",
}

// walkMap enters the map at the cursor and walks its entries: it calls field
// with the id of each entry whose key t knows, the cursor at its value, and
// skips the others. It returns the ids seen and what ended the walk early, an
// error of the map's or field's.
//
// Every map of every dialect is walked this way, so they share one error
// context: a key that cannot be read fails at (parent, its entry index), the
// value of an unknown key at (parent, -1), a known field at (its name, -1) — a
// repeated one is ErrDuplicateField — and a malformed separator (JSON) after a
// value at that value's field. The context is written only where it changes
// (the index is -1 after every value read). parent is "" for an event or a
// batch.
//
// The loop is here and the field's decoding behind a function value, not the
// other way round (a step function returning each field to the caller's
// loop): the entry's state stays in registers, which is worth a tenth of a
// map-era event's decode.
func (d *Decoder) walkMap(r *codec.EitherReader, t *fieldTable, parent string, field func(id uint32) error) (seen uint32, err error) {
	if _, err = r.EnterMap(); err != nil {
		return 0, err
	}
	for i := 0; ; i++ {
		key, ok, err := r.NextKey()
		if err != nil {
			if ok { // the entry's key
				d.field, d.index = parent, i
			}
			return seen, err
		}
		if !ok {
			return seen, nil
		}
		// The switch, not a table, finds the key: the compiler turns it into a
		// jump on the length and word compares with constants, a few
		// nanoseconds less per entry than hashing the key and a call less
		// than a lookup function (TestMapKeys checks it against mapKeyNames).
		var mk mapKey
		switch string(key) {
		case "type":
			mk = mkType
		case "block_hashes":
			mk = mkBlockHashes
		case "parent_block_hash":
			mk = mkParentBlockHash
		case "token_ids":
			mk = mkTokenIDs
		case "block_size":
			mk = mkBlockSize
		case "lora_id":
			mk = mkLoraID
		case "medium":
			mk = mkMedium
		case "lora_name":
			mk = mkLoraName
		case "extra_keys":
			mk = mkExtraKeys
		case "group_idx":
			mk = mkGroupIdx
		case "kv_cache_spec_kind":
			mk = mkSpecKind
		case "kv_cache_spec_sliding_window":
			mk = mkSlidingWindow
		case "cache_salt":
			mk = mkCacheSalt
		case "locality":
			mk = mkLocality
		case "ownership":
			mk = mkOwnership
		case "session_id":
			mk = mkSessionID
		case "event_id":
			mk = mkEventID
		case "timestamp":
			mk = mkTimestamp
		case "event_type":
			mk = mkEventType
		case "model_name":
			mk = mkModelName
		case "additional_salt":
			mk = mkAdditionalSalt
		case "tenant_id":
			mk = mkTenantID
		case "backend_id":
			mk = mkBackendID
		case "dp_rank":
			mk = mkDPRank
		case "seq_hashes":
			mk = mkSeqHashes
		case "base_block_idx":
			mk = mkBaseBlockIdx
		case "parent_hash":
			mk = mkParentHash
		case "object_key":
			mk = mkObjectKey
		case "group_id":
			mk = mkGroupID
		case "ts":
			mk = mkTS
		case "events":
			mk = mkEvents
		case "data_parallel_rank":
			mk = mkDataParallelRank
		case "attn_dp_rank":
			mk = mkAttnDPRank
		case "metadata":
			mk = mkMetadata
		}
		id := t[mk]
		if id == 0 {
			d.field = parent
			if err = r.Skip(); err != nil {
				return seen, err
			}
			continue
		}
		d.field = mapKeyNames[mk]
		if seen&id != 0 {
			return seen, ErrDuplicateField
		}
		seen |= id
		if err = field(id); err != nil {
			return seen, err
		}
	}
}
