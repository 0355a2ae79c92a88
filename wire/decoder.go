package wire

import (
	"math"

	"github.com/seed-c7a81618/conductor/codec"
	"github.com/seed-c7a81618/conductor/core"
)

// Decoder decodes publisher payloads into a caller-owned core.Batch.
//
// The zero value is ready to use. A Decoder holds only per-call scratch, so one per
// subscription goroutine is the intended use; it is not safe for concurrent use.
type Decoder struct {
	dialect Dialect
	json    bool // the payload is JSON (DecodeStandardJSON)
	// Error context of the value being decoded, turned into a *DecodeError only when
	// something fails, so the success path builds no error values.
	event int
	field string
	index int
	// extraKeys is the entry count of the current event's extra_keys, checked against
	// its hash count once the whole event is read (map keys come in any order).
	extraKeys int
	r         codec.EitherReader
	// arena holds unescaped JSON strings; reset per payload, so the slices handed out
	// stay valid until the next decode.
	arena []byte
}

// Decode decodes one msgpack payload of the given dialect into b, which it resets
// first.
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
	d.dialect, d.json = dialect, false
	d.at(-1, "", -1)
	if len(payload) == 0 {
		return d.newError(ErrEmptyPayload)
	}
	r := &d.r
	r.ResetMsgpack(payload)
	var err error
	switch dialect {
	case DialectVLLM, DialectSGLang:
		err = d.engineBatch(r, b)
	case DialectMooncake:
		err = d.mooncakeBatch(r, b)
	case DialectStandard:
		err = d.standardBatch(r, b)
	default:
		err = ErrUnknownDialect
	}
	return d.finish(r, err)
}

// finish turns the outcome of a payload's decode into Decode's result.
func (d *Decoder) finish(r *codec.EitherReader, err error) error {
	if err != nil {
		return d.newError(err)
	}
	if !r.End() {
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

// Batch envelopes. Only msgpack has the positional `[ts, events, rank]` batch
// (engineBatch, mooncakeBatch, standardBatch); batch maps, event lists and
// events are read the same way in both formats.

// engineBatch decodes vLLM's and SGLang's `[ts, events, dp_rank]`. vLLM also gets the
// 2-element form (batches from before data_parallel_rank existed). Both get a batch
// map, the encoding of their EventBatch without array_like: vLLM's
// {ts, events, data_parallel_rank} (upstream vLLM sends it: testdata/captures) and
// SGLang's {ts, events, attn_dp_rank} (TestEnvelopeForms says who sends which form).
func (d *Decoder) engineBatch(r *codec.EitherReader, b *core.Batch) error {
	if r.Kind() == codec.KindMap {
		t := vllmBatchFields
		if d.dialect == DialectSGLang {
			t = sglBatchFields
		}
		return d.mapBatch(r, b, t, true)
	}
	n, err := r.EnterArray(math.MaxUint32)
	if err != nil {
		return err
	}
	if n < 2 || n > 3 || (n == 2 && d.dialect != DialectVLLM) {
		return ErrArity
	}
	rank := "data_parallel_rank"
	if d.dialect == DialectSGLang {
		rank = "attn_dp_rank"
	}
	return d.arrayBatch(r, b, rank)
}

// arrayBatch decodes the elements (2 or 3, checked by the caller) of a
// `[ts, events, rank?]` batch whose array r has entered; rank names the third
// in errors.
func (d *Decoder) arrayBatch(r *codec.EitherReader, b *core.Batch, rank string) error {
	for i, field := range [...]string{"ts", "events", rank} {
		ok, err := r.Next()
		if !ok {
			return err
		}
		d.field = field
		switch i {
		case 0:
			err = readBatchTS(r, b, true)
		case 1:
			err = d.eventList(r, b)
		default:
			err = readBatchRank(r, b)
		}
		if err != nil {
			return err
		}
	}
	_, err := r.Next()
	return err
}

// mooncakeBatch decodes the store master's `[ts, events, dp_rank]`: exactly three
// elements; the timestamp is integer milliseconds (as the master sends) or float
// seconds (as engines send, and as the seed says the master's format is theirs).
func (d *Decoder) mooncakeBatch(r *codec.EitherReader, b *core.Batch) error {
	n, err := r.EnterArray(math.MaxUint32)
	if err != nil {
		return err
	}
	if n != 3 {
		return ErrArity
	}
	return d.arrayBatch(r, b, "dp_rank")
}

// standardBatch decodes RFC #1527 events in msgpack: a `[ts, events, dp_rank?]` batch,
// a bare array of event maps, a `{"events": [...]}` wrapper map, or one event map.
func (d *Decoder) standardBatch(r *codec.EitherReader, b *core.Batch) error {
	switch r.Kind() {
	case codec.KindMap:
		if hasKey(r, "events") {
			return d.mapBatch(r, b, rfcBatchFields, false)
		}
		return d.oneEvent(r, 0, b)
	case codec.KindArray:
		start := r.Mark()
		n, err := r.EnterArray(math.MaxUint32)
		if err != nil {
			return err
		}
		// An array of events is told from a batch by its first element.
		ok, _ := r.Next()
		events := !ok || r.Kind() == codec.KindMap
		if r.Restore(start); events {
			return d.eventList(r, b)
		}
		if n > 3 || n < 2 {
			return ErrArity
		}
		if _, err = r.EnterArray(math.MaxUint32); err != nil {
			return err
		}
		return d.arrayBatch(r, b, "dp_rank")
	}
	return ErrWrongType
}

// Batch map keys: vLLM's ts, events and data_parallel_rank, SGLang's ts, events and
// attn_dp_rank, and in the RFC wrapper also timestamp and dp_rank for the same
// fields.
const (
	bfTS uint32 = 1 << iota
	bfEvents
	bfRank
)

var (
	vllmBatchFields = &fieldTable{mkTS: bfTS, mkEvents: bfEvents, mkDataParallelRank: bfRank}
	sglBatchFields  = &fieldTable{mkTS: bfTS, mkEvents: bfEvents, mkAttnDPRank: bfRank}
	rfcBatchFields  = &fieldTable{mkTS: bfTS, mkTimestamp: bfTS, mkEvents: bfEvents,
		mkDataParallelRank: bfRank, mkDPRank: bfRank}
)

// mapBatch decodes a batch encoded as a map: vLLM's {ts, events, data_parallel_rank}
// or SGLang's {ts, events, attn_dp_rank} (requireTS; the rank is left out while
// unset), or the RFC wrapper {events, ts|timestamp, dp_rank|data_parallel_rank}
// (keys optional but events). Unknown keys are ignored; a repeated field fails the
// batch.
func (d *Decoder) mapBatch(r *codec.EitherReader, b *core.Batch, t *fieldTable, requireTS bool) error {
	seen, err := d.walkMap(r, t, "", func(f uint32) error {
		switch f {
		case bfTS:
			// The RFC's timestamp is integer milliseconds; msgpack publishers
			// also get float seconds there, as engines send ts.
			return readBatchTS(r, b, d.field == "ts" || !d.json)
		case bfEvents:
			return d.eventList(r, b)
		}
		return readBatchRank(r, b)
	})
	if err != nil {
		return err
	}
	d.at(-1, "", -1)
	if seen&bfEvents == 0 {
		d.field = "events"
		return ErrMissingField
	}
	if requireTS && seen&bfTS == 0 {
		d.field = "ts"
		return ErrMissingField
	}
	return nil
}

// readBatchTS reads the batch timestamp: engines send float64 Unix seconds, Mooncake
// integer milliseconds (the only form without floatOK). Negative or non-finite times
// are corrupt envelopes.
func readBatchTS(r *codec.EitherReader, b *core.Batch, floatOK bool) error {
	if floatOK && r.Kind() == codec.KindFloat {
		f, err := r.Float64()
		if err != nil {
			return err
		}
		if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
			return ErrOutOfRange
		}
		b.TimestampF = f
		return nil
	}
	u, err := r.Uint64(codec.Unsigned)
	if err != nil {
		return err
	}
	b.TimestampU, b.TimestampF = u, float64(u)
	return nil
}

// readBatchRank reads nil or a rank in [0, 2^32-1].
func readBatchRank(r *codec.EitherReader, b *core.Batch) error {
	v, isNil, err := readU32OrNil(r)
	if err != nil {
		return err
	}
	b.DPRank, b.HasDPRank = v, !isNil
	return nil
}

// eventList reads an array of events; after it the error context is the list's
// own (the caller's field, event -1).
func (d *Decoder) eventList(r *codec.EitherReader, b *core.Batch) error {
	if _, err := r.EnterArray(math.MaxUint32); err != nil {
		return err
	}
	field := d.field
	for i := 0; ; i++ {
		ok, err := r.Next()
		if err != nil {
			if i > 0 { // a bad separator after an event; a list cut short at its '[' keeps the caller's context
				d.at(-1, "events", -1)
			}
			return err
		}
		if !ok {
			break
		}
		if err = d.oneEvent(r, i, b); err != nil {
			return err
		}
	}
	d.at(-1, field, -1)
	return nil
}

// oneEvent decodes event i. An event that fails on its own is dropped and the decoder
// resumes after it, found by skipping its bytes from its start; if even that fails
// the payload is cut short or garbled and the batch fails.
func (d *Decoder) oneEvent(r *codec.EitherReader, i int, b *core.Batch) error {
	d.at(i, "", -1)
	d.extraKeys = 0
	start := r.Mark()
	e := b.NextEvent()
	var err error
	switch d.dialect {
	case DialectVLLM, DialectSGLang:
		err = d.engineEvent(r, e)
	default:
		err = d.rfcEvent(r, e)
		e.Standard = true
	}
	if err == nil {
		return nil
	}
	r.Restore(start)
	if serr := r.Skip(); serr != nil {
		if codec.Cause(serr) != codec.Cause(err) {
			d.field, d.index = "", -1
		}
		return serr
	}
	d.dropEvent(b, err)
	return nil
}

// hasKey reports whether the map at the cursor has a top-level string key equal
// to key, leaving the cursor where it was. Malformed maps report false and fail
// later, in the decoder proper, with context.
func hasKey(r *codec.EitherReader, key string) bool {
	start := r.Mark()
	defer r.Restore(start)
	if _, err := r.EnterMap(); err != nil {
		return false
	}
	for {
		k, ok, err := r.NextKey()
		if !ok || err != nil {
			return false
		}
		if string(k) == key {
			return true
		}
		if r.Skip() != nil {
			return false
		}
	}
}
