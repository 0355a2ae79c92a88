package wire

import (
	"github.com/seed-c7a81618/conductor/codec"
	"github.com/seed-c7a81618/conductor/core"
)

// JSON carries RFC #1527 events from publishers that cannot speak msgpack (and from
// test tools). encoding/json is not used: it would route every number through
// float64 (or a string per number) and hashes are u64 that must survive exactly, so
// the events are read with codec's strict JSON reader, by the same decoder as
// msgpack ones. Integers are parsed from their digits; a fraction or exponent in an
// integer field is ErrWrongType, never rounded.

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
	d.dialect, d.json = DialectStandard, true
	d.at(-1, "", -1)
	d.arena = d.arena[:0]
	r := &d.r
	r.ResetJSON(payload, &d.arena)
	if r.End() {
		return d.newError(ErrEmptyPayload)
	}
	var err error
	switch r.Kind() {
	case codec.KindMap:
		if hasKey(r, "events") {
			err = d.mapBatch(r, b, rfcBatchFields, false)
		} else {
			err = d.oneEvent(r, 0, b)
		}
	case codec.KindArray:
		err = d.eventList(r, b)
	default:
		err = ErrWrongType
	}
	return d.finish(r, err)
}
