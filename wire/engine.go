package wire

import (
	"errors"
	"github.com/seed-c7a81618/conductor/codec"
	"math"
	"math/bits"

	"github.com/seed-c7a81618/conductor/core"
)

// Engine events: vLLM and SGLang BlockStored / BlockRemoved / AllBlocksCleared in
// their array encoding (tag first, fields by position) and map encoding (`type` key).
// Both encodings set fields through engineField, so a field means the same thing
// whatever its era; only which fields must be present differs.
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
)

var engineFieldNames = [...]string{
	"type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
	"medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind",
	"kv_cache_spec_sliding_window", "cache_salt", "metadata", "locality", "ownership",
	"session_id",
}

func engineFieldName(f uint32) string { return engineFieldNames[bits.TrailingZeros32(f)] }

// engineKey maps a map-era key to its field id; 0 = not recognised (ignored).
func engineKey(key []byte) uint32 {
	switch string(key) {
	case "type":
		return efType
	case "block_hashes":
		return efBlockHashes
	case "parent_block_hash":
		return efParent
	case "token_ids":
		return efTokenIDs
	case "block_size":
		return efBlockSize
	case "lora_id":
		return efLoraID
	case "medium":
		return efMedium
	case "lora_name":
		return efLoraName
	case "extra_keys":
		return efExtraKeys
	case "group_idx":
		return efGroupIdx
	case "kv_cache_spec_kind":
		return efSpecKind
	case "kv_cache_spec_sliding_window":
		return efSlidingWindow
	case "cache_salt":
		return efCacheSalt
	case "locality":
		return efLocality
	case "ownership":
		return efOwnership
	case "session_id":
		return efSessionID
	}
	return 0
}

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
	return engineKind(tag)
}

// engineKind maps the vLLM/SGLang event class names (also Mooncake's legacy
// `type` alias) to event kinds; 0 for anything else.
func engineKind(tag []byte) core.EventKind {
	switch string(tag) {
	case "BlockStored":
		return core.EventStored
	case "BlockRemoved":
		return core.EventRemoved
	case "AllBlocksCleared":
		return core.EventCleared
	}
	return 0
}

func (d *Decoder) engineEvent(e *core.Event, p []byte) ([]byte, error) {
	if len(p) == 0 {
		return p, ErrTruncated
	}
	switch {
	case codec.IsArrayLead(p[0]):
		return d.engineArrayEvent(e, p)
	case codec.IsMapLead(p[0]):
		return d.engineMapEvent(e, p)
	}
	return p, ErrWrongType
}

func (d *Decoder) engineArrayEvent(e *core.Event, p []byte) ([]byte, error) {
	n, p, err := codec.ReadArray(p, math.MaxUint32)
	if err != nil {
		return p, err
	}
	d.field = "type"
	if n == 0 {
		return p, ErrMissingField
	}
	var tag []byte
	if tag, p, err = codec.ReadStr(p); err != nil {
		return p, err
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
		return p, ErrUnknownTag
	}
	if n-1 < required {
		d.field = engineFieldName(layout[n-1])
		return p, ErrMissingField
	}
	for i := 1; i < n; i++ {
		if i-1 < len(layout) {
			p, err = d.engineField(e, layout[i-1], p)
		} else {
			d.field = ""
			p, err = codec.Skip(p)
		}
		if err != nil {
			return p, err
		}
	}
	return p, d.finishEngine(e, kind)
}

// engineMapEvent decodes a map-era engine event, or, when the map is an RFC
// #1527 standardized event (it has an event_type key), that event, flagged
// Standard: standardized maps are recognised whatever the registration type.
func (d *Decoder) engineMapEvent(e *core.Event, p []byte) ([]byte, error) {
	start := p
	q, err := d.engineMap(e, p)
	if err == nil {
		return q, nil
	}
	if err == errStandardMap || mapHasKey(start, "event_type") {
		*e = core.Event{Hashes: e.Hashes[:0], Tokens: e.Tokens[:0]}
		d.field, d.index = "", -1
		q, err = d.rfcEvent(e, start)
		e.Standard = true
	}
	return q, err
}

// errStandardMap is engineMap's signal that the map is a standardized event
// (never returned by Decode).
var errStandardMap = errors.New("conductor: standardized event map")

func (d *Decoder) engineMap(e *core.Event, p []byte) ([]byte, error) {
	n, p, err := codec.ReadMap(p)
	if err != nil {
		return p, err
	}
	var seen uint32
	var kind core.EventKind
	for i := 0; i < n; i++ {
		d.field, d.index = "", i
		var key []byte
		if key, p, err = codec.ReadStr(p); err != nil {
			return p, err // non-str key: Field "" and the entry index
		}
		d.index = -1
		f := engineKey(key)
		if f == 0 {
			if string(key) == "event_type" {
				return p, errStandardMap
			}
			if p, err = codec.Skip(p); err != nil {
				return p, err
			}
			continue
		}
		d.field = engineFieldName(f)
		if seen&f != 0 {
			return p, ErrDuplicateField
		}
		seen |= f
		if f == efType {
			var tag []byte
			if tag, p, err = codec.ReadStr(p); err != nil {
				return p, err
			}
			if kind = d.engineTag(tag); kind == 0 {
				return p, ErrUnknownTag
			}
			continue
		}
		if p, err = d.engineField(e, f, p); err != nil {
			return p, err
		}
	}
	var required, forbidden uint32
	sgl := d.dialect == DialectSGLang
	switch kind {
	case 0:
		d.field = "type"
		return p, ErrMissingField
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
		return p, ErrMissingField
	}
	if bad := seen & forbidden; bad != 0 {
		d.field = engineFieldName(bad & -bad)
		return p, ErrUnexpectedField
	}
	return p, d.finishEngine(e, kind)
}

// engineField decodes the value of field f into e.
func (d *Decoder) engineField(e *core.Event, f uint32, p []byte) ([]byte, error) {
	d.field, d.index = engineFieldName(f), -1
	switch f {
	case efBlockHashes:
		return d.readHashes(e, p, false)
	case efParent:
		return readParent(e, p)
	case efTokenIDs:
		return d.readTokens(e, p, d.dialect == DialectSGLang)
	case efBlockSize:
		v, rest, err := codec.ReadInt(p)
		if err != nil {
			return p, err
		}
		if v < 0 || v > MaxEventTokens {
			return p, ErrOutOfRange
		}
		e.BlockSize, e.HasBlockSize = int(v), true
		return rest, nil
	case efLoraID, efGroupIdx, efSlidingWindow:
		if len(p) != 0 && p[0] == codec.Nil {
			return p[1:], nil
		}
		v, rest, err := codec.ReadInt(p)
		if err != nil {
			return p, err
		}
		switch f {
		case efLoraID:
			e.LoraID, e.HasLoraID = v, true
		case efGroupIdx:
			e.GroupIdx, e.HasGroupIdx = v, true
		default:
			e.HasSlidingWindow = true
		}
		return rest, nil
	case efMedium, efLoraName, efSpecKind, efCacheSalt:
		v, rest, err := codec.ReadStrOrNil(p)
		if err != nil {
			return p, err
		}
		switch f {
		case efMedium:
			e.Medium = v
		case efLoraName:
			e.LoraName = v
		case efSpecKind:
			e.SpecKind = v
		default:
			e.CacheSalt = v
		}
		return rest, nil
	case efExtraKeys:
		return d.readExtraKeys(e, p)
	case efMetadata:
		return d.readMetadata(e, p)
	}
	// locality, ownership, session_id: informational for us; any value is accepted so
	// that a malformed annotation cannot cost the index a store.
	return codec.Skip(p)
}

// readExtraKeys checks extra_keys' shape — nil, or one entry (nil or an array) per
// block — without interpreting the entries: conductor never re-hashes vLLM blocks
// from events, it only needs to know extra keys were in play.
func (d *Decoder) readExtraKeys(e *core.Event, p []byte) ([]byte, error) {
	if len(p) != 0 && p[0] == codec.Nil {
		return p[1:], nil
	}
	n, p, err := codec.ReadArray(p, MaxEventHashes)
	if err != nil {
		return p, err
	}
	for i := 0; i < n; i++ {
		if len(p) != 0 && p[0] == codec.Nil { // the usual entry: no extra keys for this block
			p = p[1:]
			continue
		}
		if len(p) != 0 && !codec.IsArrayLead(p[0]) {
			d.index = i
			return p, ErrWrongType
		}
		if p, err = codec.Skip(p); err != nil {
			d.index = i
			return p, err
		}
	}
	e.ExtraKeysPresent, d.extraKeys = true, n
	return p, nil
}

// readMetadata reads SGLang's BlockStoredWithMetadata map ({"cache_salt": str}).
func (d *Decoder) readMetadata(e *core.Event, p []byte) ([]byte, error) {
	if len(p) != 0 && p[0] == codec.Nil {
		return p[1:], nil
	}
	n, p, err := codec.ReadMap(p)
	if err != nil {
		return p, err
	}
	seenSalt := false
	for i := 0; i < n; i++ {
		var key []byte
		if key, p, err = codec.ReadStr(p); err != nil {
			d.index = i
			return p, err
		}
		if string(key) != "cache_salt" {
			if p, err = codec.Skip(p); err != nil {
				return p, err
			}
			continue
		}
		d.field = "cache_salt"
		if seenSalt {
			return p, ErrDuplicateField
		}
		seenSalt = true
		if e.CacheSalt, p, err = codec.ReadStrOrNil(p); err != nil {
			return p, err
		}
	}
	return p, nil
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
