package wire

import (
	"errors"
	"strconv"

	"github.com/seed-c7a81618/conductor/codec"
)

// Sentinel errors; the value-level ones are codec's (the readers the decoders are
// built on return them). Decoders wrap them in a *DecodeError naming the dialect, event,
// field and element; the framing functions wrap ErrFrameCount, ErrSeqLength and
// ErrNoDelimiter with the offending frame and size.
var (
	// Envelope-level (whole payload).
	ErrEmptyPayload  = errors.New("conductor: empty payload")
	ErrTrailingBytes = errors.New("conductor: trailing bytes after payload")
	ErrTruncated     = codec.ErrTruncated
	ErrSyntax        = codec.ErrSyntax
	ErrArity         = errors.New("conductor: wrong number of batch elements")

	// Value-level (envelope or event).
	ErrWrongType       = codec.ErrWrongType
	ErrOutOfRange      = codec.ErrOutOfRange
	ErrTooLarge        = codec.ErrTooLarge
	ErrMissingField    = errors.New("conductor: missing required field")
	ErrDuplicateField  = errors.New("conductor: duplicate field")
	ErrUnexpectedField = errors.New("conductor: field not allowed for this event type")
	ErrInconsistent    = errors.New("conductor: inconsistent field values")
	ErrUnknownTag      = errors.New("conductor: unknown event type")
	ErrBadHash         = codec.ErrBadHash

	// Configuration.
	ErrUnknownDialect = errors.New("conductor: unknown publisher type")

	// ZMQ framing.
	ErrFrameCount  = errors.New("conductor: wrong number of ZMQ frames")
	ErrSeqLength   = errors.New("conductor: sequence frame is not 8 bytes")
	ErrNoDelimiter = errors.New("conductor: replay reply lacks the empty delimiter frame")
)

// MaxBatchErrors is how many per-event errors a Batch keeps; Batch.Skipped counts on
// past it. Eight is enough to diagnose a misbehaving publisher without letting a
// batch of 100k broken events allocate 100k errors.
const MaxBatchErrors = 8

// Per-event limits. They bound what one event can make the decoder append (a real
// event covers a request's new blocks: thousands, not millions) and are far above
// anything vLLM or SGLang send.
const (
	MaxEventHashes = 1 << 20
	MaxEventTokens = 1 << 24
)

// DecodeError is the error Decode returns for a rejected payload and records in
// Batch.Errors for each dropped event.
type DecodeError struct {
	Dialect Dialect
	// Event is the index of the event in the batch's event list, or -1 when the error
	// concerns the envelope. Decode can return an error naming an event when that
	// event cuts the payload short or garbles it (ErrTruncated, ErrSyntax, and in
	// ErrTooLarge for nesting deeper than codec.MaxDepth): nothing after it can be located,
	// so the batch fails.
	Event int
	// Field is the wire name of the offending field ("ts", "block_hashes", "type", …),
	// or "" when the value itself (the event or the batch) is wrong.
	Field string
	// Index is the element index within Field (a hash, a token, a map entry), or -1.
	Index int
	// Err is one of the Err* sentinels.
	Err error
}

func (e *DecodeError) Error() string {
	b := make([]byte, 0, 96)
	b = append(b, "wire: "...)
	b = append(b, e.Dialect.String()...)
	if e.Event < 0 {
		b = append(b, " batch"...)
	} else {
		b = append(b, " event "...)
		b = strconv.AppendInt(b, int64(e.Event), 10)
	}
	if e.Field != "" {
		b = append(b, " field="...)
		b = strconv.AppendQuote(b, e.Field)
	}
	if e.Index >= 0 {
		b = append(b, '[')
		b = strconv.AppendInt(b, int64(e.Index), 10)
		b = append(b, ']')
	}
	b = append(b, ": "...)
	b = append(b, e.Err.Error()...)
	return string(b)
}

func (e *DecodeError) Unwrap() error { return e.Err }
