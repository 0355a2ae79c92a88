package wire

import (
	"math"

	"github.com/seed-c7a81618/conductor/codec"
	"github.com/seed-c7a81618/conductor/core"
)

// Dialect detection, for a caller that does not know who publishes (conductor
// probe): what a payload's envelope, event encodings, keys and hash encodings
// show of its publisher. Detection reads the payload with the decoders' reader
// and map walk and decodes nothing itself: DecodeAny then decodes the payload
// with the dialect found.
//
// vLLM and SGLang share their batch and most of their event layout, so some
// payloads fit both; what tells them apart, strongest first:
//
//   - a form only one of them sends (EvVLLMForm, EvSGLangForm);
//   - the encoding of integer hashes: vLLM publishes its hashes unsigned, and
//     half of them exceed 2^63-1; SGLang publishes signed int64, half of
//     them negative (EvUnsignedHash, EvSignedHash);
//   - a stored event without lora_name (EvShortStored): SGLang never sends
//     it, and vLLM only did before it had LoRA names.
//
// Past that a payload is ambiguous, and so is a stream of such payloads: the
// hash profile that reproduces the engine's hashes (package hash) is then
// what names the engine.

// Era is how a payload encodes its events.
type Era uint8

const (
	// EraArray: engine events as arrays, tag first, fields by position (vLLM
	// up to v0.23, SGLang before its map encoding).
	EraArray Era = iota + 1
	// EraArrayMetadata: SGLang's array events whose salted stores
	// (BlockStoredWithMetadata) carry a metadata map at position 7.
	EraArrayMetadata
	// EraMap: engine events as maps with a "type" key (vLLM after v0.23,
	// SGLang's map encoding).
	EraMap
	// EraStandard: RFC #1527 event maps (an "event_type" key), as standard
	// publishers and the Mooncake store master send them.
	EraStandard
)

// String names the era in a word or two.
func (e Era) String() string {
	switch e {
	case EraArray:
		return "array"
	case EraArrayMetadata:
		return "array+metadata"
	case EraMap:
		return "map"
	case EraStandard:
		return "standard"
	}
	return "unknown"
}

// Envelope is the form of a payload's batch.
type Envelope uint8

const (
	// EnvelopeArray: [ts, events, rank], every dialect's usual batch.
	EnvelopeArray Envelope = iota + 1
	// EnvelopeNoRank: [ts, events], vLLM's batch before it had a rank (and a
	// standard publisher's).
	EnvelopeNoRank
	// EnvelopeMap: a batch map: vLLM's {ts, events, data_parallel_rank},
	// SGLang's {ts, events, attn_dp_rank}, or RFC #1527's {"events": [...]}
	// wrapper.
	EnvelopeMap
	// EnvelopeEvents: a bare array of RFC #1527 event maps.
	EnvelopeEvents
	// EnvelopeEvent: one RFC #1527 event map.
	EnvelopeEvent
)

// String describes the envelope.
func (e Envelope) String() string {
	switch e {
	case EnvelopeArray:
		return "[ts, events, rank]"
	case EnvelopeNoRank:
		return "[ts, events]"
	case EnvelopeMap:
		return "batch map"
	case EnvelopeEvents:
		return "array of events"
	case EnvelopeEvent:
		return "one event"
	}
	return "unknown"
}

// Evidence is a set of signs of a publisher, one bit each. Detection sets
// those one payload shows; a caller watching a stream ORs them over its
// payloads, and Dialect and Era read what they show together.
type Evidence uint32

const (
	// EvFloatTS: a batch stamped in float seconds, as engines stamp theirs.
	EvFloatTS Evidence = 1 << iota
	// EvIntTS: a batch stamped with an integer (milliseconds: the Mooncake
	// master and standard publishers).
	EvIntTS
	// EvEngineEvents: vLLM or SGLang events (arrays with the tag first, or
	// maps with a "type" key).
	EvEngineEvents
	// EvStandardEvents: RFC #1527 event maps, or an envelope only standard
	// publishers use (a bare array of events, one event).
	EvStandardEvents
	// EvStandardBlocks: an RFC #1527 stored or removed event (one that would
	// name its block by object_key if the Mooncake master sent it).
	EvStandardBlocks
	// EvMooncake: an RFC #1527 event naming its block by object_key or
	// carrying the legacy "type" alias: the Mooncake store master's.
	EvMooncake
	// EvVLLMForm: a form only vLLM sends: a batch map of engine events with
	// a data_parallel_rank key, a two-element batch of engine events, a
	// stored array with lora_name (a string at position 7) or more than 8
	// elements, a removed array with group_idx, a map event with lora_name,
	// extra_keys, group_idx, kv_cache_spec_kind, kv_cache_spec_sliding_window,
	// locality or ownership, a bin hash.
	EvVLLMForm
	// EvSGLangForm: a form only SGLang sends: a batch map with an
	// attn_dp_rank key, BlockStoredWithMetadata, a metadata map at position
	// 7, a cache_salt key, bigram token pairs.
	EvSGLangForm
	// EvUnsignedHash: an integer hash above 2^63-1.
	EvUnsignedHash
	// EvSignedHash: a negative integer hash.
	EvSignedHash
	// EvShortStored: a stored engine event without lora_name (an array of 7
	// elements or fewer, a map without the key).
	EvShortStored
	// EvArrayEvents, EvMetadataEvents, EvMapEvents: the engine eras seen.
	EvArrayEvents
	EvMetadataEvents
	EvMapEvents
)

// Dialect returns the dialect the evidence shows, and whether it shows only
// that one (sure). Unsure answers are guesses: SGLang for engine events whose
// stores lack lora_name, else vLLM; standard for RFC events that name no
// block, or for integer-stamped batches without events.
func (e Evidence) Dialect() (d Dialect, sure bool) {
	if e&EvEngineEvents == 0 {
		switch {
		case e&EvMooncake != 0:
			return DialectMooncake, true
		case e&EvStandardEvents != 0:
			return DialectStandard, e&EvStandardBlocks != 0
		case e&EvIntTS != 0:
			return DialectStandard, false
		}
		return DialectVLLM, false
	}
	if v, s := e&EvVLLMForm != 0, e&EvSGLangForm != 0; v != s {
		return pick(v), true
	} else if v {
		return DialectVLLM, false // contradictory forms
	}
	if u, s := e&EvUnsignedHash != 0, e&EvSignedHash != 0; u != s {
		return pick(u), true
	}
	return pick(e&EvShortStored == 0), false
}

func pick(vllm bool) Dialect {
	if vllm {
		return DialectVLLM
	}
	return DialectSGLang
}

// Era returns the event encoding the evidence shows: the engine era when
// engine events were seen (the metadata form over plain arrays, arrays over
// maps: a stream mixes them only when it mixes releases), else the standard
// one, else 0.
func (e Evidence) Era() Era {
	switch {
	case e&EvMetadataEvents != 0:
		return EraArrayMetadata
	case e&EvArrayEvents != 0:
		return EraArray
	case e&EvMapEvents != 0:
		return EraMap
	case e&EvStandardEvents != 0:
		return EraStandard
	}
	return 0
}

// Shape is what detection found in one payload.
type Shape struct {
	// Dialect and Sure are Evidence.Dialect.
	Dialect Dialect
	Sure    bool
	// Era is Evidence.Era: 0 when no event showed its encoding.
	Era Era
	// Envelope is 0 when the payload is neither an array nor a map.
	Envelope Envelope
	Evidence Evidence
}

// DecodeAny detects the dialect of a msgpack payload of an unknown publisher
// and decodes it with that dialect into b, as Decode does (an unsure guess
// included: vLLM and SGLang decode the payloads they both fit alike). It
// allocates nothing beyond what Decode does. Slices in b are valid as after
// Decode.
func (d *Decoder) DecodeAny(payload []byte, b *core.Batch) (Shape, error) {
	var s Shape
	s.Envelope, s.Evidence = d.detect(payload)
	s.Dialect, s.Sure = s.Evidence.Dialect()
	s.Era = s.Evidence.Era()
	return s, d.Decode(s.Dialect, payload, b)
}

// Detection's map keys: each its own id, since walkMap reports a key repeated
// under one id as a duplicate and the Mooncake master sends aliases together.
const (
	dtType uint32 = 1 << iota
	dtEventType
	dtBlockHashes
	dtSeqHashes
	dtParentBlockHash
	dtParentHash
	dtTokenIDs
	dtObjectKey
	dtCacheSalt
	dtLoraName
	dtExtraKeys
	dtGroupIdx
	dtSpecKind
	dtSlidingWindow
	dtLocality
	dtOwnership

	// dtVLLMOnly are the engine map keys SGLang never sends.
	dtVLLMOnly = dtLoraName | dtExtraKeys | dtGroupIdx | dtSpecKind | dtSlidingWindow | dtLocality | dtOwnership
)

const (
	dbTS uint32 = 1 << iota
	dbTimestamp
	dbEvents
	dbDataParallelRank
	dbAttnDPRank
)

var (
	detectEventFields = fieldNames{mkType, mkEventType, mkBlockHashes, mkSeqHashes, mkParentBlockHash,
		mkParentHash, mkTokenIDs, mkObjectKey, mkCacheSalt, mkLoraName, mkExtraKeys, mkGroupIdx,
		mkSpecKind, mkSlidingWindow, mkLocality, mkOwnership}.table(0)
	detectBatchFields = fieldNames{mkTS, mkTimestamp, mkEvents, mkDataParallelRank, mkAttnDPRank}.table(0)
)

// detect reads payload's envelope and events for evidence. Malformed parts
// show nothing; Decode reports them.
func (d *Decoder) detect(payload []byte) (env Envelope, ev Evidence) {
	r := &d.r
	r.ResetMsgpack(payload)
	d.dialect, d.json = 0, false
	switch r.Kind() {
	case codec.KindMap:
		if !hasKey(r, "events") {
			d.detectEvent(r, &ev)
			return EnvelopeEvent, ev | EvStandardEvents
		}
		seen, _ := d.walkMap(r, detectBatchFields, "", func(f uint32) error {
			switch f {
			case dbEvents:
				return d.detectEvents(r, &ev)
			case dbTS, dbTimestamp:
				detectTS(r, &ev)
			}
			return r.Skip()
		})
		// The rank's key names the engine; a batch map without one (an
		// unset rank, left out) shows nothing of it.
		if ev&EvEngineEvents != 0 && seen&dbDataParallelRank != 0 {
			ev |= EvVLLMForm
		}
		if ev&EvEngineEvents != 0 && seen&dbAttnDPRank != 0 {
			ev |= EvSGLangForm
		}
		return EnvelopeMap, ev
	case codec.KindArray:
		start := r.Mark()
		n, err := r.EnterArray(math.MaxUint32)
		if err != nil {
			return 0, 0
		}
		if ok, _ := r.Next(); !ok || r.Kind() == codec.KindMap {
			r.Restore(start)
			_ = d.detectEvents(r, &ev)
			return EnvelopeEvents, ev | EvStandardEvents
		}
		detectTS(r, &ev)
		if r.Skip() != nil {
			return EnvelopeArray, ev
		}
		if ok, _ := r.Next(); ok {
			_ = d.detectEvents(r, &ev)
		}
		if n == 2 {
			if ev&EvEngineEvents != 0 {
				ev |= EvVLLMForm
			}
			return EnvelopeNoRank, ev
		}
		return EnvelopeArray, ev
	}
	return 0, 0
}

func detectTS(r *codec.EitherReader, ev *Evidence) {
	switch r.Kind() {
	case codec.KindFloat:
		*ev |= EvFloatTS
	case codec.KindInt:
		*ev |= EvIntTS
	}
}

// detectEvents reads the event list at the cursor and leaves the cursor
// after it (an error: the list could not be skipped).
func (d *Decoder) detectEvents(r *codec.EitherReader, ev *Evidence) error {
	start := r.Mark()
	if _, err := r.EnterArray(math.MaxUint32); err == nil {
		for {
			if ok, err := r.Next(); !ok || err != nil {
				break
			}
			m := r.Mark()
			switch r.Kind() {
			case codec.KindArray:
				d.detectArrayEvent(r, ev)
			case codec.KindMap:
				d.detectEvent(r, ev)
			}
			r.Restore(m)
			if r.Skip() != nil {
				break
			}
		}
	}
	r.Restore(start)
	return r.Skip()
}

// detectArrayEvent reads an array-era engine event.
func (d *Decoder) detectArrayEvent(r *codec.EitherReader, ev *Evidence) {
	n, err := r.EnterArray(math.MaxUint32)
	if err != nil {
		return
	}
	if ok, _ := r.Next(); !ok {
		return
	}
	tag, err := r.Str()
	if err != nil {
		return
	}
	stored := false
	switch string(tag) {
	case "BlockStoredWithMetadata":
		*ev |= EvSGLangForm | EvMetadataEvents
		stored = true
	case "BlockStored":
		stored = true
	case "BlockRemoved":
		if n > 3 { // group_idx after medium
			*ev |= EvVLLMForm
		}
	case "AllBlocksCleared":
	default:
		return // an unknown tag shows nothing of its sender
	}
	*ev |= EvEngineEvents | EvArrayEvents
	if stored && n > 8 {
		*ev |= EvVLLMForm
	} else if stored && n >= 0 && n <= 7 {
		*ev |= EvShortStored
	}
	for i := 1; ; i++ {
		if ok, _ := r.Next(); !ok {
			return
		}
		m := r.Mark()
		switch {
		case i == 1:
			detectHashes(r, ev)
		case i == 2 && stored:
			detectHash(r, ev)
		case i == 3 && stored:
			detectTokens(r, ev)
		case i == 7 && stored:
			switch r.Kind() {
			case codec.KindMap:
				*ev |= EvSGLangForm | EvMetadataEvents
			case codec.KindStr:
				*ev |= EvVLLMForm
			}
		}
		r.Restore(m)
		if r.Skip() != nil {
			return
		}
	}
}

// detectEvent reads a map event: an engine event (a "type" key) or an RFC
// #1527 one (an "event_type" key).
func (d *Decoder) detectEvent(r *codec.EitherReader, ev *Evidence) {
	var tag []byte
	var found Evidence
	seen, err := d.walkMap(r, detectEventFields, "", func(f uint32) error {
		switch f {
		case dtType:
			var err error
			tag, err = r.Str()
			return err
		case dtBlockHashes, dtSeqHashes:
			m := r.Mark()
			detectHashes(r, &found)
			r.Restore(m)
		case dtParentBlockHash, dtParentHash:
			m := r.Mark()
			detectHash(r, &found)
			r.Restore(m)
		case dtTokenIDs:
			m := r.Mark()
			detectTokens(r, &found)
			r.Restore(m)
		case dtObjectKey:
			if r.Kind() == codec.KindStr {
				found |= EvMooncake
			}
		}
		return r.Skip()
	})
	if err != nil {
		return
	}
	if seen&dtEventType != 0 {
		// Hash and token encodings are the engines' signs, not the RFC's.
		*ev |= found&EvMooncake | EvStandardEvents
		if seen&dtType != 0 {
			*ev |= EvMooncake
		}
		if seen&(dtBlockHashes|dtSeqHashes|dtObjectKey) != 0 {
			*ev |= EvStandardBlocks
		}
		return
	}
	kind := engineKinds.kind(tag)
	if kind == 0 {
		return
	}
	*ev |= found | EvEngineEvents | EvMapEvents
	if seen&dtVLLMOnly != 0 {
		*ev |= EvVLLMForm
	}
	if seen&dtCacheSalt != 0 {
		*ev |= EvSGLangForm
	}
	if kind == core.EventStored && seen&dtLoraName == 0 {
		*ev |= EvShortStored
	}
}

// detectHashes reads an array of hashes for their encoding.
func detectHashes(r *codec.EitherReader, ev *Evidence) {
	if _, err := r.EnterArray(MaxEventHashes); err != nil {
		return
	}
	for {
		if ok, _ := r.Next(); !ok {
			return
		}
		if detectHash(r, ev) != nil {
			return
		}
	}
}

// detectHash reads one hash: a bin digest is vLLM's raw-digest mode; an
// integer's sign tells a signed publisher from an unsigned one when the value
// is beyond the other's range.
func detectHash(r *codec.EitherReader, ev *Evidence) error {
	switch r.Kind() {
	case codec.KindBin:
		*ev |= EvVLLMForm
	case codec.KindInt:
		v, err := r.Value()
		if err != nil {
			return err
		}
		if v.Num.Neg {
			*ev |= EvSignedHash
		} else if v.Num.Mag > math.MaxInt64 {
			*ev |= EvUnsignedHash
		}
		return nil
	}
	return r.Skip()
}

// detectTokens reads a token array for EAGLE bigram pairs.
func detectTokens(r *codec.EitherReader, ev *Evidence) {
	if r.Kind() != codec.KindArray {
		return
	}
	if _, err := r.EnterArray(MaxEventTokens); err != nil {
		return
	}
	if ok, _ := r.Next(); ok && r.Kind() == codec.KindArray {
		*ev |= EvSGLangForm
	}
}
