package wire

import (
	"github.com/seed-c7a81618/conductor/codec"
	"math"

	"github.com/seed-c7a81618/conductor/core"
)

// Decoder decodes publisher payloads into a caller-owned core.Batch.
//
// The zero value is ready to use. A Decoder holds only per-call scratch, so one per
// subscription goroutine is the intended use; it is not safe for concurrent use.
type Decoder struct {
	dialect Dialect
	// Error context of the value being decoded, turned into a *DecodeError only when
	// something fails, so the success path builds no error values.
	event int
	field string
	index int
	// extraKeys is the entry count of the current event's extra_keys, checked against
	// its hash count once the whole event is read (map keys come in any order).
	extraKeys int
	// arena holds unescaped JSON strings; reset per payload, so the slices handed out
	// stay valid until the next decode.
	arena []byte
}

// Decode decodes one payload of the given dialect into b, which it resets first.
//
// On success b holds the decoded events in payload order; events that failed on their
// own were dropped and are counted in b.Skipped, the first MaxBatchErrors of their
// errors kept in b.Errors. A non-nil error is a *DecodeError for the whole payload,
// and b's contents are then undefined.
//
// Byte-slice fields of the events alias payload: they are valid until the payload
// buffer is reused. Hashes and Tokens live in b's reused slices.
func (d *Decoder) Decode(dialect Dialect, payload []byte, b *core.Batch) error {
	b.Reset()
	d.dialect = dialect
	d.at(-1, "", -1)
	if len(payload) == 0 {
		return d.newError(ErrEmptyPayload)
	}
	var rest []byte
	var err error
	switch dialect {
	case DialectVLLM, DialectSGLang:
		rest, err = d.engineBatch(payload, b)
	case DialectMooncake:
		rest, err = d.mooncakeBatch(payload, b)
	case DialectStandard:
		rest, err = d.standardBatch(payload, b)
	default:
		err = ErrUnknownDialect
	}
	if err != nil {
		return d.newError(err)
	}
	if len(rest) != 0 {
		d.at(-1, "", -1)
		return d.newError(ErrTrailingBytes)
	}
	return nil
}

// at sets the error context.
func (d *Decoder) at(event int, field string, index int) {
	d.event, d.field, d.index = event, field, index
}

func (d *Decoder) newError(err error) *DecodeError {
	return &DecodeError{Dialect: d.dialect, Event: d.event, Field: d.field, Index: d.index, Err: codec.Cause(err)}
}

// dropEvent removes the event just started from b and records err against it.
func (d *Decoder) dropEvent(b *core.Batch, err error) {
	b.Events = b.Events[:len(b.Events)-1]
	b.Skipped++
	if len(b.Errors) < MaxBatchErrors {
		b.Errors = append(b.Errors, d.newError(err))
	}
}

// engineBatch decodes vLLM's and SGLang's `[ts, events, dp_rank]`. vLLM also gets the
// 2-element form (batches from before data_parallel_rank existed) and a map batch (a
// fork without array_like, see the reference's §A.4 note).
func (d *Decoder) engineBatch(p []byte, b *core.Batch) ([]byte, error) {
	if codec.IsMapLead(p[0]) && d.dialect == DialectVLLM {
		return d.mapBatch(p, b, true)
	}
	n, p, err := codec.ReadArray(p, math.MaxUint32)
	if err != nil {
		return p, err
	}
	if n < 2 || n > 3 || (n == 2 && d.dialect != DialectVLLM) {
		return p, ErrArity
	}
	rank := "data_parallel_rank"
	if d.dialect == DialectSGLang {
		rank = "attn_dp_rank"
	}
	return d.arrayBatch(p, b, n, rank)
}

// arrayBatch decodes the n elements (2 or 3, checked by the caller) of a
// `[ts, events, rank?]` batch; rank names the third in errors.
func (d *Decoder) arrayBatch(p []byte, b *core.Batch, n int, rank string) ([]byte, error) {
	d.field = "ts"
	p, err := readBatchTS(p, b)
	if err != nil {
		return p, err
	}
	d.field = "events"
	if p, err = d.eventList(p, b); err != nil {
		return p, err
	}
	if n == 3 {
		d.field = rank
		return readBatchRank(p, b)
	}
	return p, nil
}

// mooncakeBatch decodes the store master's `[ts, events, dp_rank]`: exactly three
// elements; the timestamp is integer milliseconds (as the master sends) or float
// seconds (as engines send).
func (d *Decoder) mooncakeBatch(p []byte, b *core.Batch) ([]byte, error) {
	n, p, err := codec.ReadArray(p, math.MaxUint32)
	if err != nil {
		return p, err
	}
	if n != 3 {
		return p, ErrArity
	}
	// The master sends integer milliseconds; float seconds (the engines'
	// batch format, which the seed says the master shares) are accepted too.
	return d.arrayBatch(p, b, n, "dp_rank")
}

// standardBatch decodes RFC #1527 events in msgpack: a `[ts, events, dp_rank?]` batch,
// a bare array of event maps, a `{"events": [...]}` wrapper map, or one event map.
func (d *Decoder) standardBatch(p []byte, b *core.Batch) ([]byte, error) {
	switch {
	case codec.IsMapLead(p[0]):
		if mapHasKey(p, "events") {
			return d.mapBatch(p, b, false)
		}
		return d.events(1, p, b)
	case codec.IsArrayLead(p[0]):
		n, q, err := codec.ReadArray(p, math.MaxUint32)
		if err != nil {
			return q, err
		}
		if n == 0 {
			return q, nil
		}
		if codec.IsMapLead(q[0]) {
			return d.events(n, q, b)
		}
		if n > 3 || n < 2 {
			return q, ErrArity
		}
		return d.arrayBatch(q, b, n, "dp_rank")
	}
	return p, ErrWrongType
}

// The keys of a batch map (msgpack) or wrapper object (JSON).
const (
	seenTS = 1 << iota
	seenEvents
	seenRank
)

// batchKey names a batch key: vLLM's ts, events and data_parallel_rank, and with
// rfc also the RFC wrapper's timestamp and dp_rank. bit is 0 for any other key.
func batchKey(key []byte, rfc bool) (bit int, name string) {
	switch string(key) {
	case "ts":
		return seenTS, "ts"
	case "events":
		return seenEvents, "events"
	case "data_parallel_rank":
		return seenRank, "data_parallel_rank"
	case "timestamp":
		if rfc {
			return seenTS, "timestamp"
		}
	case "dp_rank":
		if rfc {
			return seenRank, "dp_rank"
		}
	}
	return 0, ""
}

// mapBatch decodes a batch encoded as a map: vLLM's {ts, events, data_parallel_rank}
// (requireTS) or the RFC wrapper {events, ts|timestamp, dp_rank} (keys optional but
// events). Unknown keys are ignored; a repeated known key fails the batch.
func (d *Decoder) mapBatch(p []byte, b *core.Batch, requireTS bool) ([]byte, error) {
	n, p, err := codec.ReadMap(p)
	if err != nil {
		return p, err
	}
	seen := 0
	for i := 0; i < n; i++ {
		d.at(-1, "", i)
		var key []byte
		if key, p, err = codec.ReadStr(p); err != nil {
			return p, err
		}
		d.index = -1
		bit, name := batchKey(key, !requireTS)
		if bit == 0 {
			if p, err = codec.Skip(p); err != nil {
				return p, err
			}
			continue
		}
		d.field = name
		if seen&bit != 0 {
			return p, ErrDuplicateField
		}
		seen |= bit
		switch bit {
		case seenTS:
			p, err = readBatchTS(p, b)
		case seenEvents:
			p, err = d.eventList(p, b)
		case seenRank:
			p, err = readBatchRank(p, b)
		}
		if err != nil {
			return p, err
		}
	}
	d.at(-1, "", -1)
	if seen&seenEvents == 0 {
		d.field = "events"
		return p, ErrMissingField
	}
	if requireTS && seen&seenTS == 0 {
		d.field = "ts"
		return p, ErrMissingField
	}
	return p, nil
}

// readBatchTS reads the batch timestamp: engines send float64 Unix seconds, Mooncake
// integer milliseconds. Negative or non-finite times are corrupt envelopes.
func readBatchTS(p []byte, b *core.Batch) ([]byte, error) {
	if len(p) == 0 {
		return p, ErrTruncated
	}
	if codec.IsFloatLead(p[0]) {
		f, rest, err := codec.ReadFloat(p)
		if err != nil {
			return p, err
		}
		return rest, setBatchTSFloat(b, f)
	}
	u, rest, err := codec.ReadUint(p)
	if err != nil {
		return p, err
	}
	setBatchTS(b, u)
	return rest, nil
}

// setBatchTSFloat sets a batch time given in float seconds (both formats): negative
// or non-finite times are corrupt envelopes.
func setBatchTSFloat(b *core.Batch, f float64) error {
	if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return ErrOutOfRange
	}
	b.TimestampF = f
	return nil
}

// setBatchTS sets a batch time given as an integer (seconds or Mooncake's ms).
func setBatchTS(b *core.Batch, u uint64) { b.TimestampU, b.TimestampF = u, float64(u) }

// readBatchRank reads nil or a rank in [0, 2^32-1].
func readBatchRank(p []byte, b *core.Batch) ([]byte, error) {
	r, isNil, rest, err := readU32OrNil(p)
	if err != nil {
		return p, err
	}
	b.DPRank, b.HasDPRank = r, !isNil
	return rest, nil
}

// eventList reads the events array header and its events.
func (d *Decoder) eventList(p []byte, b *core.Batch) ([]byte, error) {
	n, p, err := codec.ReadArray(p, math.MaxUint32)
	if err != nil {
		return p, err
	}
	return d.events(n, p, b)
}

// events decodes n consecutive events. An event that fails on its own is dropped and
// the decoder resumes after it, found by skipping its bytes from its start; if even
// that fails the payload is cut short or garbled and the batch fails.
func (d *Decoder) events(n int, p []byte, b *core.Batch) ([]byte, error) {
	for i := 0; i < n; i++ {
		d.at(i, "", -1)
		d.extraKeys = 0
		start := p
		e := b.NextEvent()
		var err error
		switch d.dialect {
		case DialectVLLM, DialectSGLang:
			p, err = d.engineEvent(e, p)
		default:
			p, err = d.rfcEvent(e, p)
			e.Standard = true
		}
		if err == nil {
			continue
		}
		var serr error
		if p, serr = codec.Skip(start); serr != nil {
			if codec.Cause(serr) != codec.Cause(err) {
				d.field, d.index = "", -1
			}
			return p, serr
		}
		d.dropEvent(b, err)
	}
	d.at(-1, "", -1)
	return p, nil
}

// mapHasKey reports whether the map at p has a top-level str key equal to key.
// Malformed maps report false and fail later, in the event decoder, with context.
func mapHasKey(p []byte, key string) bool {
	n, p, err := codec.ReadMap(p)
	if err != nil {
		return false
	}
	for i := 0; i < n; i++ {
		var k []byte
		if k, p, err = codec.ReadStr(p); err != nil {
			return false
		}
		if string(k) == key {
			return true
		}
		if p, err = codec.Skip(p); err != nil {
			return false
		}
	}
	return false
}
