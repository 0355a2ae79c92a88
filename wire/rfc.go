package wire

import (
	"github.com/seed-c7a81618/conductor/codec"
	"github.com/seed-c7a81618/conductor/core"
)

// RFC #1527 standardized events, as sent by the Mooncake store master and by
// standard publishers, in msgpack or JSON: one decoder over *codec.EitherReader.
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

var (
	rfcFieldNames = fieldNames{mkEventID, mkTimestamp, mkEventType, mkType, mkModelName,
		mkBlockSize, mkAdditionalSalt, mkLoraName, mkTenantID, mkBackendID, mkMedium, mkDPRank,
		mkSeqHashes, mkBlockHashes, mkBaseBlockIdx, mkParentHash, mkParentBlockHash,
		mkTokenIDs, mkObjectKey, mkGroupID, mkCacheSalt}
	rfcFields = rfcFieldNames.table(0)
)

func rfcFieldName(f uint32) string { return rfcFieldNames.name(f) }

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

// rfcEvent decodes an RFC #1527 event map, in either format.
func (d *Decoder) rfcEvent(r *codec.EitherReader, e *core.Event) error {
	var st rfcState
	var err error
	st.seen, err = d.walkMap(r, rfcFields, "", func(f uint32) error { return d.rfcField(r, e, &st, f) })
	if err != nil {
		return err
	}
	return d.finishRFC(e, &st)
}

// rfcField decodes the value of field f into e.
func (d *Decoder) rfcField(r *codec.EitherReader, e *core.Event, st *rfcState, f uint32) error {
	var err error
	switch f {
	case rfEventID:
		e.EventID, err = r.Uint64(codec.Unsigned)
		e.HasEventID = err == nil
		return err
	case rfTimestamp:
		v, isNil, err := r.Uint64OrNil(codec.Unsigned)
		if !isNil {
			e.Timestamp = v
		}
		return err
	case rfEventType, rfType:
		v, err := r.Str()
		if err != nil {
			return err
		}
		if f == rfEventType {
			st.kind = rfcKinds.kind(v)
			if st.kind == 0 {
				return ErrUnknownTag
			}
		} else if st.legacy = engineKinds.kind(v); st.legacy == 0 {
			return ErrUnknownTag
		}
		return nil
	case rfModelName, rfAdditionalSalt, rfLoraName, rfMedium, rfObjectKey, rfCacheSalt:
		v, err := r.StrOrNil()
		if err == nil {
			setStr(e, rfcFieldNames.key(f), v)
		}
		return err
	case rfTenantID, rfBackendID:
		v, err := r.Str()
		if err == nil {
			setStr(e, rfcFieldNames.key(f), v)
		}
		return err
	case rfBlockSize, rfDPRank, rfBaseBlockIdx:
		v, isNil, err := readU32OrNil(r)
		if err != nil {
			return err
		}
		return setRFCU32(e, f, v, isNil)
	case rfSeqHashes, rfBlockHashes:
		compare := st.hashesSet
		st.hashesSet = true
		return d.readHashes(r, e, compare)
	case rfParentHash, rfParentBlockHash:
		h, ok, err := readHashOrNil(r)
		switch {
		case err != nil:
			return err
		case !st.parentSet:
			st.parentSet = true
			e.Parent, e.HasParent = h, ok
		case ok != e.HasParent || h != e.Parent:
			return ErrInconsistent
		}
		return nil
	case rfTokenIDs:
		return d.readTokens(r, e, false)
	case rfGroupID:
		switch r.Kind() {
		case codec.KindNil:
			_, err = r.Nil()
			return err
		case codec.KindStr:
			v, err := r.Str()
			if err != nil {
				return err
			}
			return setGroupID(e, v)
		}
		e.GroupIdx, err = r.Int64()
		e.HasGroupIdx = err == nil
		return err
	}
	return r.Skip()
}

func setRFCU32(e *core.Event, f uint32, v uint32, isNil bool) error {
	if isNil {
		return nil
	}
	switch f {
	case rfBlockSize:
		return setBlockSize(e, int64(v))
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

// finishRFC runs the checks that need the whole event.
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
