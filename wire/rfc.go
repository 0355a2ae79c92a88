package wire

import (
	"github.com/seed-c7a81618/conductor/codec"
	"math/bits"

	"github.com/seed-c7a81618/conductor/core"
)

// RFC #1527 standardized events, as sent by the Mooncake store master and by
// standard publishers. The key table and the whole-event checks are shared by the
// msgpack decoder here and the JSON one in json.go; only value parsing differs.
//
// What is required is deliberately little: event_id (it orders the stream) and the
// event type, plus, for stored/removed, something naming the blocks (seq_hashes, its
// legacy alias block_hashes, or an object_key). The RFC lists the other envelope
// fields as optional-or-null and the master does not stamp model, block size, LoRA or
// rank at all; registration supplies them. Unknown keys are ignored.

const (
	rfEventID uint32 = 1 << iota
	rfTimestamp
	rfEventType
	rfType
	rfModelName
	rfBlockSize
	rfAdditionalSalt
	rfLoraName
	rfTenantID
	rfBackendID
	rfMedium
	rfDPRank
	rfSeqHashes
	rfBlockHashes
	rfBaseBlockIdx
	rfParentHash
	rfParentBlockHash
	rfTokenIDs
	rfObjectKey
	rfGroupID
	rfCacheSalt
)

var rfcFieldNames = [...]string{
	"event_id", "timestamp", "event_type", "type", "model_name", "block_size",
	"additional_salt", "lora_name", "tenant_id", "backend_id", "medium", "dp_rank",
	"seq_hashes", "block_hashes", "base_block_idx", "parent_hash", "parent_block_hash",
	"token_ids", "object_key", "group_id", "cache_salt",
}

func rfcFieldName(f uint32) string { return rfcFieldNames[bits.TrailingZeros32(f)] }

func rfcKey(key []byte) uint32 {
	switch string(key) {
	case "event_id":
		return rfEventID
	case "timestamp":
		return rfTimestamp
	case "event_type":
		return rfEventType
	case "type":
		return rfType
	case "model_name":
		return rfModelName
	case "block_size":
		return rfBlockSize
	case "additional_salt":
		return rfAdditionalSalt
	case "lora_name":
		return rfLoraName
	case "tenant_id":
		return rfTenantID
	case "backend_id":
		return rfBackendID
	case "medium":
		return rfMedium
	case "dp_rank":
		return rfDPRank
	case "seq_hashes":
		return rfSeqHashes
	case "block_hashes":
		return rfBlockHashes
	case "base_block_idx":
		return rfBaseBlockIdx
	case "parent_hash":
		return rfParentHash
	case "parent_block_hash":
		return rfParentBlockHash
	case "token_ids":
		return rfTokenIDs
	case "object_key":
		return rfObjectKey
	case "group_id":
		return rfGroupID
	case "cache_salt":
		return rfCacheSalt
	}
	return 0
}

// Fields that locate blocks; a cleared event has no blocks, a removed one no content.
const (
	rfObjectFields  = rfSeqHashes | rfBlockHashes | rfBaseBlockIdx | rfParentHash | rfParentBlockHash | rfTokenIDs | rfObjectKey | rfGroupID
	rfStoredContent = rfParentHash | rfParentBlockHash | rfTokenIDs
)

// rfcState is what the whole-event checks need beyond the event itself.
type rfcState struct {
	seen      uint32
	kind      core.EventKind // from event_type
	legacy    core.EventKind // from the legacy type alias
	hashesSet bool           // e.Hashes holds seq_hashes or block_hashes, whichever came first
	parentSet bool           // e.Parent/HasParent hold parent_hash or parent_block_hash
}

func rfcEventType(v []byte) core.EventKind {
	switch string(v) {
	case "stored":
		return core.EventStored
	case "removed":
		return core.EventRemoved
	case "cleared":
		return core.EventCleared
	}
	return 0
}

func (d *Decoder) rfcEvent(e *core.Event, p []byte) ([]byte, error) {
	n, p, err := codec.ReadMap(p)
	if err != nil {
		return p, err
	}
	var st rfcState
	for i := 0; i < n; i++ {
		d.field, d.index = "", i
		var key []byte
		if key, p, err = codec.ReadStr(p); err != nil {
			return p, err
		}
		d.index = -1
		f := rfcKey(key)
		if f == 0 {
			if p, err = codec.Skip(p); err != nil {
				return p, err
			}
			continue
		}
		d.field = rfcFieldName(f)
		if st.seen&f != 0 {
			return p, ErrDuplicateField
		}
		st.seen |= f
		if p, err = d.rfcField(e, &st, f, p); err != nil {
			return p, err
		}
	}
	return p, d.finishRFC(e, &st)
}

// rfcField decodes the msgpack value of field f into e.
func (d *Decoder) rfcField(e *core.Event, st *rfcState, f uint32, p []byte) ([]byte, error) {
	var err error
	switch f {
	case rfEventID:
		if e.EventID, p, err = codec.ReadUint(p); err == nil {
			e.HasEventID = true
		}
		return p, err
	case rfTimestamp:
		if len(p) != 0 && p[0] == codec.Nil {
			return p[1:], nil
		}
		e.Timestamp, p, err = codec.ReadUint(p)
		return p, err
	case rfEventType, rfType:
		var v []byte
		if v, p, err = codec.ReadStr(p); err != nil {
			return p, err
		}
		if f == rfEventType {
			st.kind = rfcEventType(v)
			if st.kind == 0 {
				return p, ErrUnknownTag
			}
		} else if st.legacy = engineKind(v); st.legacy == 0 {
			return p, ErrUnknownTag
		}
		return p, nil
	case rfModelName, rfAdditionalSalt, rfLoraName, rfMedium, rfObjectKey, rfCacheSalt:
		var v []byte
		if v, p, err = codec.ReadStrOrNil(p); err != nil {
			return p, err
		}
		setRFCString(e, f, v)
		return p, nil
	case rfTenantID, rfBackendID:
		var v []byte
		if v, p, err = codec.ReadStr(p); err != nil {
			return p, err
		}
		setRFCString(e, f, v)
		return p, nil
	case rfBlockSize, rfDPRank, rfBaseBlockIdx:
		v, isNil, rest, err := readU32OrNil(p)
		if err != nil {
			return p, err
		}
		return rest, setRFCU32(e, f, v, isNil)
	case rfSeqHashes, rfBlockHashes:
		compare := st.hashesSet
		st.hashesSet = true
		return d.readHashes(e, p, compare)
	case rfParentHash, rfParentBlockHash:
		if !st.parentSet {
			st.parentSet = true
			return readParent(e, p)
		}
		h, ok, rest, err := readHashOrNil(p)
		if err != nil {
			return p, err
		}
		if ok != e.HasParent || h != e.Parent {
			return p, ErrInconsistent
		}
		return rest, nil
	case rfTokenIDs:
		return d.readTokens(e, p, false)
	case rfGroupID:
		if len(p) == 0 {
			return p, ErrTruncated
		}
		switch {
		case p[0] == codec.Nil:
			return p[1:], nil
		case codec.IsStrLead(p[0]):
			var v []byte
			if v, p, err = codec.ReadStr(p); err != nil {
				return p, err
			}
			return p, setGroupID(e, v)
		}
		if e.GroupIdx, p, err = codec.ReadInt(p); err == nil {
			e.HasGroupIdx = true
		}
		return p, err
	}
	return codec.Skip(p)
}

func setRFCString(e *core.Event, f uint32, v []byte) {
	switch f {
	case rfModelName:
		e.ModelName, e.HasModelName = v, v != nil
	case rfAdditionalSalt:
		e.AdditionalSalt = v
	case rfLoraName:
		e.LoraName = v
	case rfMedium:
		e.Medium = v
	case rfObjectKey:
		e.ObjectKey = v
	case rfCacheSalt:
		e.CacheSalt = v
	case rfTenantID:
		e.TenantID = v
	case rfBackendID:
		e.BackendID = v
	}
}

func setRFCU32(e *core.Event, f uint32, v uint32, isNil bool) error {
	if isNil {
		return nil
	}
	switch f {
	case rfBlockSize:
		if v > MaxEventTokens {
			return ErrOutOfRange
		}
		e.BlockSize, e.HasBlockSize = int(v), true
	case rfDPRank:
		e.DPRank, e.HasDPRank = v, true
	case rfBaseBlockIdx:
		e.BaseBlockIdx, e.HasBaseIdx = v, true
	}
	return nil
}

// setGroupID takes Mooncake's string group id: "" means none, else a decimal integer
// (core only serves group 0; other strings cannot be compared to anything).
func setGroupID(e *core.Event, v []byte) error {
	if len(v) == 0 {
		return nil
	}
	neg := v[0] == '-'
	digits := v
	if neg {
		digits = v[1:]
	}
	u, ok := codec.ParseDecimal(digits)
	if !ok || u > 1<<63-1 {
		return ErrWrongType
	}
	e.GroupIdx, e.HasGroupIdx = int64(u), true
	if neg {
		e.GroupIdx = -e.GroupIdx
	}
	return nil
}

// finishRFC runs the checks that need the whole event (shared by msgpack and JSON).
func (d *Decoder) finishRFC(e *core.Event, st *rfcState) error {
	d.index = -1
	if st.seen&rfEventID == 0 {
		d.field = "event_id"
		return ErrMissingField
	}
	switch {
	case st.seen&rfEventType != 0:
		if st.seen&rfType != 0 && st.legacy != st.kind {
			d.field = "type"
			return ErrInconsistent
		}
		e.Kind = st.kind
	case st.seen&rfType != 0:
		e.Kind = st.legacy
	default:
		d.field = "event_type"
		return ErrMissingField
	}
	switch e.Kind {
	case core.EventStored, core.EventRemoved:
		if st.seen&(rfSeqHashes|rfBlockHashes|rfObjectKey) == 0 {
			d.field = "seq_hashes"
			return ErrMissingField
		}
		if e.Kind == core.EventRemoved {
			if bad := st.seen & rfStoredContent; bad != 0 {
				d.field = rfcFieldName(bad & -bad)
				return ErrUnexpectedField
			}
		}
		// The master names a block by its object key when the key is the seq hash
		// written as a number, and then may leave seq_hashes empty.
		if len(e.Hashes) == 0 && e.ObjectKey != nil {
			if h, ok := codec.ParseU64Text(e.ObjectKey); ok {
				e.Hashes = append(e.Hashes, h)
			}
		}
	case core.EventCleared:
		if bad := st.seen & rfObjectFields; bad != 0 {
			d.field = rfcFieldName(bad & -bad)
			return ErrUnexpectedField
		}
	}
	// Hashes may legitimately be absent when an opaque object key names the block;
	// tokens then let core hash it, so there is nothing to compare them with.
	if e.Kind == core.EventStored && len(e.Hashes) > 0 && tokenFit(e) != fitOK {
		d.field = "token_ids"
		return ErrInconsistent
	}
	return nil
}
