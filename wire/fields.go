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

// mapKey is a key of a map of any dialect, spelled by mapKeyNames: nextField
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
	mkDataParallelRank: "data_parallel_rank", mkMetadata: "metadata",
}

// fieldWalk walks one map's fields for a decoder: walkMap enters the map,
// next steps to each field a table knows (id), and err holds what ended the
// walk early.
//
//	w := d.walkMap(r, table, parent)
//	for w.next() {
//		… decode the value of field w.id …
//	}
//	if w.err != nil { … }
type fieldWalk struct {
	d      *Decoder
	r      codec.Reader
	t      *fieldTable
	parent string // the error context's field for the map's own entries ("" for an event or a batch)
	i      int    // entries stepped to
	seen   uint32 // ids read
	id     uint32 // the current field
	err    error
}

func (d *Decoder) walkMap(r codec.Reader, t *fieldTable, parent string) fieldWalk {
	w := fieldWalk{d: d, r: r, t: t, parent: parent}
	_, w.err = r.EnterMap()
	return w
}

// next steps to the next field: false at the map's end or on an error.
func (w *fieldWalk) next() bool {
	if w.err != nil {
		return false
	}
	w.id, w.err = w.d.nextField(w) // id 0 on an error
	return w.id != 0
}

// nextField steps to the map's next entry whose key w.t knows, skipping the
// others, and returns its id with the cursor at its value, or 0 after the
// last entry. Every map of every dialect is walked this way, so they share
// one error context: a key that cannot be read fails at (parent, its entry
// index), the value of an unknown key at (parent, -1), a known field at (its
// name, -1) — a repeated one is ErrDuplicateField — and a malformed separator
// (JSON) after a value at that value's field. The context is written only
// where it changes (the index is -1 after every value read).
func (d *Decoder) nextField(w *fieldWalk) (uint32, error) {
	r := w.r
	for {
		key, ok, err := r.NextKey()
		w.i++
		if err != nil {
			if ok { // the entry's key
				d.field, d.index = w.parent, w.i-1
			}
			return 0, err
		}
		if !ok {
			return 0, nil
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
		case "metadata":
			mk = mkMetadata
		}
		id := w.t[mk]
		if id == 0 {
			d.field = w.parent
			if err = r.Skip(); err != nil {
				return 0, err
			}
			continue
		}
		d.field = mapKeyNames[mk]
		if w.seen&id != 0 {
			return 0, ErrDuplicateField
		}
		w.seen |= id
		return id, nil
	}
}
