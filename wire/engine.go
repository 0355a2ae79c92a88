package wire

import (
	"errors"
	"math"

	"github.com/seed-c7a81618/conductor/codec"
	"github.com/seed-c7a81618/conductor/core"
)

// Engine events: vLLM and SGLang BlockStored / BlockRemoved / AllBlocksCleared in
// their array encoding (tag first, fields by position) and map encoding (`type` key).
// Both encodings set fields through engineField, so a field means the same thing
// whatever its era; only which fields must be present differs. Engines publish
// msgpack, but the decoders read a codec.EitherReader like every other dialect's.
//
// Partial pages. SGLang emits the last page of a radix node even when it is not full,
// in one of two ways: with block_size = the page's token count (smaller than the
// registered size: only core, which knows that size, can tell, by comparing BlockSize
// with it), or with the full block_size and fewer tokens (the stored_salt_session_and_parent
// vector: 1 token, block_size 4). The decoder flags the second kind as Partial; the
// first it leaves to core. vLLM hashes only full blocks, so there a short token list
// is an inconsistency. Proved by TestSGLangMapEventVectors/stored_salt_session_and_parent
// and TestDecodeSGLang/partial_last_page.

// Engine field ids, one bit each, in vLLM declaration order (the order missing fields
// are reported in).
const (
	efType uint32 = 1 << iota
	efBlockHashes
	efParent
	efTokenIDs
	efBlockSize
	efLoraID
	efMedium
	efLoraName
	efExtraKeys
	efGroupIdx
	efSpecKind
	efSlidingWindow
	efCacheSalt
	efMetadata // SGLang array position 7; never a map key
	efLocality
	efOwnership
	efSessionID
	efEventType // not an engine field: engineMapEvent's signal
)

// engineFieldNames are the fields' keys by id; event_type, which no engine
// event has, marks a standardized event map (engineMapEvent).
var (
	engineFieldNames = fieldNames{mkType, mkBlockHashes, mkParentBlockHash, mkTokenIDs,
		mkBlockSize, mkLoraID, mkMedium, mkLoraName, mkExtraKeys, mkGroupIdx, mkSpecKind,
		mkSlidingWindow, mkCacheSalt, mkMetadata, mkLocality, mkOwnership, mkSessionID, mkEventType}
	engineFields = engineFieldNames.table(efMetadata)
)

func engineFieldName(f uint32) string { return engineFieldNames.name(f) }

// Array-era layouts: field at position i+1 (after the tag). Elements past the layout
// are skipped, so a newer publisher appending fields does not break us.
var (
	vllmStoredLayout = [...]uint32{efBlockHashes, efParent, efTokenIDs, efBlockSize,
		efLoraID, efMedium, efLoraName, efExtraKeys, efGroupIdx, efSpecKind, efSlidingWindow}
	vllmRemovedLayout = [...]uint32{efBlockHashes, efMedium, efGroupIdx}
	sglStoredLayout   = [...]uint32{efBlockHashes, efParent, efTokenIDs, efBlockSize,
		efLoraID, efMedium, efMetadata}
	sglRemovedLayout = [...]uint32{efBlockHashes, efMedium}
)

// Fields only a BlockStored may carry; in the map era their presence on another
// event type means a confused publisher, and the event is rejected rather than
// half-understood.
const storedOnly = efParent | efTokenIDs | efBlockSize | efLoraID | efLoraName |
	efExtraKeys | efSpecKind | efSlidingWindow | efCacheSalt | efMetadata

// Map-era required fields: only the tag and block_hashes are essential. Every other
// field is optional and absent means nil (no parent, no tokens, the registered block
// size, the device medium, the base model): publishers drop nil-valued keys
// (msgspec omit_defaults, forks, older releases) and a store without lora_name must
// not vanish silently. What core cannot place without a field (e.g. token_ids under
// the xxh3 profile) it drops with a logged reason.
const (
	vllmStoredRequired  = efBlockHashes
	vllmRemovedRequired = efBlockHashes
	sglStoredRequired   = efBlockHashes
	sglRemovedRequired  = efBlockHashes
)

func (d *Decoder) engineTag(tag []byte) core.EventKind {
	if d.dialect == DialectSGLang && string(tag) == "BlockStoredWithMetadata" {
		// SGLang's salted-store subclass; its msgspec tag defaults to the class name.
		return core.EventStored
	}
	return engineKinds.kind(tag)
}

// The event kinds' names in the engines' class names (also Mooncake's legacy
// `type` alias) and in RFC #1527's event_type.
var (
	engineKinds = eventKinds{core.EventStored: "BlockStored", core.EventRemoved: "BlockRemoved",
		core.EventCleared: "AllBlocksCleared"}
	rfcKinds = eventKinds{core.EventStored: "stored", core.EventRemoved: "removed", core.EventCleared: "cleared"}
)

// eventKinds names the event kinds in one vocabulary.
type eventKinds [core.EventCleared + 1]string

// kind returns the kind tag names, or 0.
func (k *eventKinds) kind(tag []byte) core.EventKind {
	for i := core.EventStored; i <= core.EventCleared; i++ {
		if k[i] == string(tag) {
			return i
		}
	}
	return 0
}

// engineEvent decodes an array-era or map-era engine event.
func (d *Decoder) engineEvent(r *codec.EitherReader, e *core.Event) error {
	switch r.Kind() {
	case codec.KindArray:
		return d.engineArrayEvent(r, e)
	case codec.KindMap:
		return d.engineMapEvent(r, e)
	}
	if r.End() {
		return ErrTruncated
	}
	return ErrWrongType
}

func (d *Decoder) engineArrayEvent(r *codec.EitherReader, e *core.Event) error {
	n, err := r.EnterArray(math.MaxUint32)
	if err != nil {
		return err
	}
	d.field = "type"
	if ok, err := r.Next(); !ok {
		if err == nil {
			err = ErrMissingField
		}
		return err
	}
	tag, err := r.Str()
	if err != nil {
		return err
	}
	kind := d.engineTag(tag)
	var layout []uint32
	required := 0 // positions after the tag every shape of this event has
	switch {
	case kind == core.EventStored && d.dialect == DialectSGLang:
		layout, required = sglStoredLayout[:], 5
	case kind == core.EventStored:
		layout, required = vllmStoredLayout[:], 5
	case kind == core.EventRemoved && d.dialect == DialectSGLang:
		layout, required = sglRemovedLayout[:], 1
	case kind == core.EventRemoved:
		layout, required = vllmRemovedLayout[:], 1
	case kind == core.EventCleared:
	default:
		return ErrUnknownTag
	}
	// A short event is reported before its fields are read where the encoding
	// states its length (msgpack), after them where it does not.
	if n >= 0 && n-1 < required {
		d.field = engineFieldName(layout[n-1])
		return ErrMissingField
	}
	i := 0
	for ; ; i++ {
		ok, err := r.Next()
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		if i < len(layout) {
			d.field = engineFieldName(layout[i])
			err = d.engineField(r, e, layout[i])
		} else {
			d.field = ""
			err = r.Skip()
		}
		if err != nil {
			return err
		}
	}
	if i < required {
		d.field = engineFieldName(layout[i])
		return ErrMissingField
	}
	return d.finishEngine(e, kind)
}

// engineMapEvent decodes a map-era engine event, or, when the map is an RFC
// #1527 standardized event (it has an event_type key), that event, flagged
// Standard: standardized maps are recognised whatever the registration type.
func (d *Decoder) engineMapEvent(r *codec.EitherReader, e *core.Event) error {
	start := r.Mark()
	err := d.engineMap(r, e)
	if err == nil {
		return nil
	}
	if r.Restore(start); err == errStandardMap || hasKey(r, "event_type") {
		*e = core.Event{Hashes: e.Hashes[:0], Tokens: e.Tokens[:0]}
		d.field, d.index = "", -1
		err = d.rfcEvent(r, e)
		e.Standard = true
	}
	return err
}

// errStandardMap is engineMap's signal that the map is a standardized event
// (never returned by Decode).
var errStandardMap = errors.New("conductor: standardized event map")

func (d *Decoder) engineMap(r *codec.EitherReader, e *core.Event) error {
	var kind core.EventKind
	seen, err := d.walkMap(r, engineFields, "", func(f uint32) error {
		switch f {
		case efEventType:
			return errStandardMap
		case efType:
			tag, err := r.Str()
			if err != nil {
				return err
			}
			if kind = d.engineTag(tag); kind == 0 {
				return ErrUnknownTag
			}
			return nil
		}
		return d.engineField(r, e, f)
	})
	if err != nil {
		return err
	}
	var required, forbidden uint32
	sgl := d.dialect == DialectSGLang
	switch kind {
	case 0:
		d.field = "type"
		return ErrMissingField
	case core.EventStored:
		required = vllmStoredRequired
		if sgl {
			required = sglStoredRequired
		}
	case core.EventRemoved:
		required, forbidden = vllmRemovedRequired, storedOnly
		if sgl {
			required = sglRemovedRequired
		}
	case core.EventCleared:
		// medium and group_idx would narrow a clear's scope; they are decoded, not refused.
		forbidden = storedOnly | efBlockHashes
	}
	if missing := required &^ seen; missing != 0 {
		d.field = engineFieldName(missing & -missing)
		return ErrMissingField
	}
	if bad := seen & forbidden; bad != 0 {
		d.field = engineFieldName(bad & -bad)
		return ErrUnexpectedField
	}
	return d.finishEngine(e, kind)
}

// engineField decodes the value of field f into e; d.field names it.
func (d *Decoder) engineField(r *codec.EitherReader, e *core.Event, f uint32) error {
	switch f {
	case efBlockHashes:
		return d.readHashes(r, e, false)
	case efParent:
		h, ok, err := readHashOrNil(r)
		e.Parent, e.HasParent = h, ok
		return err
	case efTokenIDs:
		return d.readTokens(r, e, d.dialect == DialectSGLang)
	case efBlockSize:
		v, err := r.Int64()
		if err != nil {
			return err
		}
		return setBlockSize(e, v)
	case efLoraID, efGroupIdx, efSlidingWindow:
		v, isNil, err := r.Int64OrNil()
		if isNil || err != nil {
			return err
		}
		switch f {
		case efLoraID:
			e.LoraID, e.HasLoraID = v, true
		case efGroupIdx:
			e.GroupIdx, e.HasGroupIdx = v, true
		default:
			e.HasSlidingWindow = true
		}
		return nil
	case efMedium, efLoraName, efSpecKind, efCacheSalt:
		v, err := r.StrOrNil()
		if err == nil {
			setStr(e, engineFieldNames.key(f), v)
		}
		return err
	case efExtraKeys:
		return d.readExtraKeys(r, e)
	case efMetadata:
		return d.readMetadata(r, e)
	}
	// locality, ownership, session_id: informational for us; any value is accepted so
	// that a malformed annotation cannot cost the index a store.
	return r.Skip()
}

// readExtraKeys checks extra_keys' shape — nil, or one entry (nil or an array) per
// block — without interpreting the entries: conductor never re-hashes vLLM blocks
// from events, it only needs to know extra keys were in play.
func (d *Decoder) readExtraKeys(r *codec.EitherReader, e *core.Event) error {
	if isNil, err := r.Nil(); isNil || err != nil {
		return err
	}
	if _, err := r.EnterArray(MaxEventHashes); err != nil {
		return err
	}
	n := 0
	for ; ; n++ {
		ok, err := r.Next()
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		isNil, err := r.Nil() // the usual entry: no extra keys for this block
		if !isNil && err == nil {
			if !r.End() && r.Kind() != codec.KindArray {
				err = ErrWrongType
			} else {
				err = r.Skip()
			}
		}
		if err != nil {
			d.index = n
			return err
		}
	}
	e.ExtraKeysPresent, d.extraKeys = true, n
	return nil
}

// metadataFields are the keys of SGLang's BlockStoredWithMetadata map.
var metadataFields = fieldNames{mkCacheSalt}.table(0)

// readMetadata reads SGLang's BlockStoredWithMetadata map ({"cache_salt": str}).
func (d *Decoder) readMetadata(r *codec.EitherReader, e *core.Event) error {
	if isNil, err := r.Nil(); isNil || err != nil {
		return err
	}
	_, err := d.walkMap(r, metadataFields, "metadata", func(uint32) error {
		var err error
		e.CacheSalt, err = r.StrOrNil()
		return err
	})
	return err
}

// finishEngine runs the checks that need the whole event.
func (d *Decoder) finishEngine(e *core.Event, kind core.EventKind) error {
	e.Kind = kind
	d.index = -1
	if e.ExtraKeysPresent && d.extraKeys != len(e.Hashes) {
		d.field = "extra_keys"
		return ErrInconsistent
	}
	if kind == core.EventStored {
		switch tokenFit(e) {
		case fitPartial:
			if d.dialect == DialectSGLang {
				e.Partial = true
				break
			}
			fallthrough
		case fitBad:
			d.field = "token_ids"
			return ErrInconsistent
		}
	}
	return nil
}

const (
	fitOK      = iota // tokens cover the blocks exactly, or there is nothing to compare
	fitPartial        // only the last block is short of tokens
	fitBad
)

// tokenFit checks that a store's tokens cover exactly its blocks. It does not apply
// when there is nothing to compare (no tokens: offload placeholders and RFC publishers
// using the standard hash; block_size 0) or to events of hybrid models' non-full-
// attention groups: vLLM sends a sliding-window group its whole window of tokens
// (TestEngineWireVectors/vllm_map_sliding_window_group), and core skips those events
// anyway.
func tokenFit(e *core.Event) int {
	if len(e.Tokens) == 0 || e.BlockSize <= 0 || !e.FullAttention() {
		return fitOK
	}
	n := len(e.Tokens)
	if e.Bigram {
		n /= 2
	}
	switch want := len(e.Hashes) * e.BlockSize; {
	case n == want:
		return fitOK
	case n < want && n > want-e.BlockSize:
		return fitPartial
	}
	return fitBad
}
