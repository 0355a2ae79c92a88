package wire

import (
	"math"
	"strconv"

	"github.com/seed-c7a81618/conductor/codec"
	"github.com/seed-c7a81618/conductor/core"
)

// JSON carries RFC #1527 events from publishers that cannot speak msgpack (and from
// test tools). encoding/json is not used: it would route every number through
// float64 (or a string per number) and hashes are u64 that must survive exactly, so
// the events are read with codec's strict JSON reader. Integers are parsed from their
// digits; a fraction or exponent in an integer field is ErrWrongType, never rounded.

// DecodeStandardJSON decodes RFC #1527 events in JSON into b, which it resets first:
// one event object, an array of event objects, or a wrapper object
// {"events": [...], "ts"|"timestamp": …, "dp_rank": …}. Error semantics are Decode's.
//
// Strings without escapes alias payload (valid until the payload buffer is reused);
// escaped ones are unescaped into the Decoder's scratch, valid until the next decode.
// Hash values may also be written as decimal or 0x-hex strings, for producers whose
// JSON numbers are float64 (JavaScript) and would lose the low bits of a u64.
func (d *Decoder) DecodeStandardJSON(payload []byte, b *core.Batch) error {
	b.Reset()
	d.dialect = DialectStandard
	d.at(-1, "", -1)
	d.arena = d.arena[:0]
	p := codec.JSONWS(payload)
	if len(p) == 0 {
		return d.newError(ErrEmptyPayload)
	}
	var err error
	switch p[0] {
	case '{':
		if d.jsonHasKey(p, "events") {
			p, err = d.jsonWrapper(p, b)
		} else {
			p, err = d.jsonEvent(0, p, b)
		}
	case '[':
		p, err = d.jsonEventArray(p, b)
	default:
		err = ErrWrongType
	}
	if err != nil {
		return d.newError(err)
	}
	if len(codec.JSONWS(p)) != 0 {
		d.at(-1, "", -1)
		return d.newError(ErrTrailingBytes)
	}
	return nil
}

// jsonHasKey reports whether the object at p has a top-level key equal to key.
func (d *Decoder) jsonHasKey(p []byte, key string) bool {
	p, err := jsonNextValue(p[1:])
	if err != nil || p[0] == '}' {
		return false
	}
	for more := true; more; {
		var k []byte
		if k, p, err = codec.JSONKey(p, &d.arena); err != nil {
			return false
		}
		if string(k) == key {
			return true
		}
		if p, err = codec.JSONSkip(p); err != nil {
			return false
		}
		if p, more, err = codec.JSONNext(p, '}'); err != nil {
			return false
		}
	}
	return false
}

// jsonWrapper decodes {"events": [...], "ts"|"timestamp": …, "dp_rank"|"data_parallel_rank": …}.
func (d *Decoder) jsonWrapper(p []byte, b *core.Batch) ([]byte, error) {
	p, err := jsonNextValue(p[1:])
	if err != nil {
		return p, err
	}
	if p[0] == '}' { // unreachable: jsonHasKey found "events"
		return p[1:], nil
	}
	seen := 0
	for i, more := 0, true; more; i++ {
		d.at(-1, "", i)
		var key []byte
		if key, p, err = codec.JSONKey(p, &d.arena); err != nil {
			return p, err
		}
		d.index = -1
		bit, name := batchKey(key, true)
		d.field = name
		switch {
		case bit == 0:
			p, err = codec.JSONSkip(p)
		case seen&bit != 0:
			err = ErrDuplicateField
		case bit == seenTS:
			p, err = jsonBatchTS(p, b, name == "ts")
		case bit == seenEvents:
			if p[0] != '[' {
				err = ErrWrongType
				break
			}
			p, err = d.jsonEventArray(p, b)
		default:
			if codec.JSONIsNull(p) {
				p, err = codec.JSONLiteral(p, "null")
				break
			}
			var r uint64
			if r, p, err = jsonUint(p); err == nil && r > math.MaxUint32 {
				err = ErrOutOfRange
			}
			b.DPRank, b.HasDPRank = uint32(r), err == nil
		}
		if err != nil {
			return p, err
		}
		seen |= bit
		if p, more, err = codec.JSONNext(p, '}'); err != nil {
			return p, err
		}
	}
	d.at(-1, "", -1)
	return p, nil
}

// jsonBatchTS reads the wrapper's "ts" (seconds, int or float) or "timestamp" (u64 ms).
func jsonBatchTS(p []byte, b *core.Batch, allowFloat bool) ([]byte, error) {
	if allowFloat && len(p) != 0 && (p[0] == '-' || (p[0] >= '0' && p[0] <= '9')) {
		n, rest, err := codec.JSONNumber(p)
		if err != nil {
			return p, err
		}
		if n.Float {
			f, err := strconv.ParseFloat(string(p[:len(p)-len(rest)]), 64)
			if err != nil {
				return p, ErrOutOfRange
			}
			return rest, setBatchTSFloat(b, f)
		}
	}
	u, rest, err := jsonUint(p)
	if err != nil {
		return p, err
	}
	setBatchTS(b, u)
	return rest, nil
}

// jsonEventArray decodes `[event, …]`.
func (d *Decoder) jsonEventArray(p []byte, b *core.Batch) ([]byte, error) {
	p, err := jsonNextValue(p[1:])
	if err != nil {
		return p, err
	}
	if p[0] == ']' {
		return p[1:], nil
	}
	for i, more := 0, true; more; i++ {
		if p, err = d.jsonEvent(i, p, b); err != nil {
			return p, err
		}
		if p, more, err = codec.JSONNext(p, ']'); err != nil {
			d.at(-1, "events", -1)
			return p, err
		}
	}
	d.at(-1, "", -1)
	return p, nil
}

// jsonEvent decodes event i; on an event-local error it drops the event and resumes
// after it, as Decoder.events does.
func (d *Decoder) jsonEvent(i int, p []byte, b *core.Batch) ([]byte, error) {
	d.at(i, "", -1)
	start := p
	e := b.NextEvent()
	p, err := d.jsonEventBody(e, p)
	if err == nil {
		e.Standard = true
		return p, nil
	}
	p, serr := codec.JSONSkip(start)
	if serr != nil {
		if codec.Cause(serr) != codec.Cause(err) {
			d.field, d.index = "", -1
		}
		return p, serr
	}
	d.dropEvent(b, err)
	return p, nil
}

func (d *Decoder) jsonEventBody(e *core.Event, p []byte) ([]byte, error) {
	if p[0] != '{' {
		return p, ErrWrongType
	}
	p, err := jsonNextValue(p[1:])
	if err != nil {
		return p, err
	}
	var st rfcState
	if p[0] == '}' {
		return p[1:], d.finishRFC(e, &st)
	}
	for i, more := 0, true; more; i++ {
		d.field, d.index = "", i
		var key []byte
		if key, p, err = codec.JSONKey(p, &d.arena); err != nil {
			return p, err
		}
		d.index = -1
		f := rfcKey(key)
		switch {
		case f == 0:
			p, err = codec.JSONSkip(p)
		case st.seen&f != 0:
			d.field = rfcFieldName(f)
			err = ErrDuplicateField
		default:
			d.field = rfcFieldName(f)
			st.seen |= f
			p, err = d.jsonRFCField(e, &st, f, p)
		}
		if err != nil {
			return p, err
		}
		if p, more, err = codec.JSONNext(p, '}'); err != nil {
			return p, err
		}
	}
	return p, d.finishRFC(e, &st)
}

// jsonRFCField is rfcField for JSON values.
func (d *Decoder) jsonRFCField(e *core.Event, st *rfcState, f uint32, p []byte) ([]byte, error) {
	var err error
	switch f {
	case rfEventID:
		if e.EventID, p, err = jsonUint(p); err == nil {
			e.HasEventID = true
		}
		return p, err
	case rfTimestamp:
		if codec.JSONIsNull(p) {
			return codec.JSONLiteral(p, "null")
		}
		e.Timestamp, p, err = jsonUint(p)
		return p, err
	case rfEventType, rfType:
		var v []byte
		if v, p, err = codec.JSONString(p, &d.arena); err != nil {
			return p, err
		}
		if f == rfEventType {
			if st.kind = rfcEventType(v); st.kind == 0 {
				return p, ErrUnknownTag
			}
		} else if st.legacy = engineKind(v); st.legacy == 0 {
			return p, ErrUnknownTag
		}
		return p, nil
	case rfModelName, rfAdditionalSalt, rfLoraName, rfMedium, rfObjectKey, rfCacheSalt,
		rfTenantID, rfBackendID:
		if codec.JSONIsNull(p) {
			if f == rfTenantID || f == rfBackendID {
				return p, ErrWrongType
			}
			return codec.JSONLiteral(p, "null")
		}
		var v []byte
		if v, p, err = codec.JSONString(p, &d.arena); err != nil {
			return p, err
		}
		setRFCString(e, f, v)
		return p, nil
	case rfBlockSize, rfDPRank, rfBaseBlockIdx:
		if codec.JSONIsNull(p) {
			return codec.JSONLiteral(p, "null")
		}
		var v uint64
		if v, p, err = jsonUint(p); err != nil {
			return p, err
		}
		if v > math.MaxUint32 {
			return p, ErrOutOfRange
		}
		return p, setRFCU32(e, f, uint32(v), false)
	case rfSeqHashes, rfBlockHashes:
		compare := st.hashesSet
		st.hashesSet = true
		return d.jsonHashes(e, p, compare)
	case rfParentHash, rfParentBlockHash:
		var h uint64
		ok := !codec.JSONIsNull(p)
		if ok {
			h, p, err = d.jsonHash(p)
		} else {
			p, err = codec.JSONLiteral(p, "null")
		}
		if err != nil {
			return p, err
		}
		if st.parentSet {
			if ok != e.HasParent || h != e.Parent {
				return p, ErrInconsistent
			}
			return p, nil
		}
		st.parentSet = true
		e.Parent, e.HasParent = h, ok
		return p, nil
	case rfTokenIDs:
		return d.jsonTokens(e, p)
	case rfGroupID:
		switch {
		case codec.JSONIsNull(p):
			return codec.JSONLiteral(p, "null")
		case p[0] == '"':
			var v []byte
			if v, p, err = codec.JSONString(p, &d.arena); err != nil {
				return p, err
			}
			return p, setGroupID(e, v)
		}
		mag, neg, rest, err := jsonInteger(p)
		if err != nil {
			return p, err
		}
		if mag > 1<<63-1 {
			return p, ErrOutOfRange
		}
		e.GroupIdx, e.HasGroupIdx = int64(mag), true
		if neg {
			e.GroupIdx = -e.GroupIdx
		}
		return rest, nil
	}
	return codec.JSONSkip(p)
}

// jsonHashes reads a hash array into e.Hashes, or with compare checks that it equals
// e.Hashes (the block_hashes alias repeating seq_hashes).
func (d *Decoder) jsonHashes(e *core.Event, p []byte, compare bool) ([]byte, error) {
	if p[0] != '[' {
		return p, ErrWrongType
	}
	n := 0
	if compare {
		n = len(e.Hashes)
	}
	hs, rest, bad, err := codec.JSONUint64s(e.Hashes[:n], p, MaxEventHashes, codec.Hash, &d.arena)
	if err != nil {
		if err != ErrTooLarge {
			d.index = bad
		}
		return rest, err
	}
	e.Hashes = hs[:n]
	if compare {
		return rest, d.sameHashes(e.Hashes, hs[n:])
	}
	e.Hashes = hs
	return rest, nil
}

// jsonTokens reads null or an array of token ids into e.Tokens.
func (d *Decoder) jsonTokens(e *core.Event, p []byte) ([]byte, error) {
	e.Tokens = e.Tokens[:0]
	if codec.JSONIsNull(p) {
		e.HasTokens = false
		return codec.JSONLiteral(p, "null")
	}
	if p[0] != '[' {
		return p, ErrWrongType
	}
	e.HasTokens = true
	ts, rest, bad, err := codec.JSONInt32s(e.Tokens, p, MaxEventTokens)
	e.Tokens = ts
	if err != nil && err != ErrTooLarge {
		d.index = bad
	}
	return rest, err
}

// jsonInteger reads an integer as sign and magnitude. Non-numbers are ErrWrongType,
// numbers with a fraction or exponent too: integer fields are never rounded.
func jsonInteger(b []byte) (mag uint64, neg bool, rest []byte, err error) {
	if len(b) != 0 && b[0] != '-' && (b[0] < '0' || b[0] > '9') {
		return 0, false, b, ErrWrongType
	}
	n, rest, err := codec.JSONNumber(b)
	switch {
	case err != nil:
		return 0, false, b, err
	case n.Float:
		return 0, false, b, ErrWrongType
	case n.Big:
		return 0, false, b, ErrOutOfRange
	}
	return n.Mag, n.Neg, rest, nil
}

// jsonUint reads a u64: exact up to 18446744073709551615, negative is out of range.
func jsonUint(b []byte) (uint64, []byte, error) { return codec.JSONUint64(b, codec.Unsigned, nil) }

// jsonHash reads a hash (codec.Hash): a u64, a negative int64 (kept as its bit
// pattern, as in msgpack), or a decimal / 0x-hex string.
func (d *Decoder) jsonHash(b []byte) (uint64, []byte, error) {
	return codec.JSONUint64(b, codec.Hash, &d.arena)
}

// jsonNextValue skips whitespace and fails on end of input, which inside a value
// always means the payload was cut short.
func jsonNextValue(b []byte) ([]byte, error) {
	b = codec.JSONWS(b)
	if len(b) == 0 {
		return b, ErrTruncated
	}
	return b, nil
}
