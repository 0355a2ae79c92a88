package server

import (
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/seed-c7a81618/conductor/internal/suggest"
)

// Dialect is the key set and syntax of a request body: the C++ conductor's
// msgpack keys, the seed's JSON keys (with their aliases), or the Python
// client's RPC keys (JSON syntax, the Python API's field names). One parser
// per operation serves all three; the dialect only selects key names,
// defaults and whether null means "absent".
type Dialect uint8

const (
	DialectMsgpack Dialect = iota
	DialectJSON
	DialectRPC
)

// JSON reports whether the body is JSON (null then means "absent" for
// optional strings).
func (d Dialect) JSON() bool { return d != DialectMsgpack }

// DialectOf maps the Mooncake API's Content-Type choice to its dialect.
func DialectOf(json bool) Dialect {
	if json {
		return DialectJSON
	}
	return DialectMsgpack
}

// Kind classifies one decoded request value, dialect-neutrally.
type Kind uint8

const (
	KindInvalid Kind = iota // only after a syntax error
	KindNil
	KindBool
	KindInt    // Value.Int
	KindUint   // Value.Uint, above math.MaxInt64
	KindBigInt // an integer literal beyond the 64-bit ranges (JSON only); Value.Neg gives its sign
	KindFloat
	KindStr   // Value.Bytes: the text (a view of the body or of the request scratch)
	KindBin   // Value.Bytes: the bytes (msgpack only)
	KindArray // Value.Bytes: the raw encoding
	KindMap   // Value.Bytes: the raw encoding
	KindOther // msgpack ext types
)

// Value is one decoded scalar, or a validated but undecoded composite.
type Value struct {
	Kind  Kind
	Bool  bool
	Neg   bool
	Int   int64
	Uint  uint64
	Bytes []byte
}

// IsInt reports whether v is an integer of any range.
func (v *Value) IsInt() bool { return v.Kind == KindInt || v.Kind == KindUint || v.Kind == KindBigInt }

// StrField checks a required non-empty string: missing is checked by the
// caller; non-string → invalid_type, "" → invalid_value.
func StrField(v *Value, field string) ([]byte, *RequestError) {
	if v.Kind != KindStr {
		return nil, NewError(ErrInvalidType, field, field+" must be a string")
	}
	if len(v.Bytes) == 0 {
		return nil, NewError(ErrInvalidValue, field, field+" must not be empty")
	}
	if !utf8.Valid(v.Bytes) {
		return nil, NewError(ErrInvalidValue, field, field+" must be valid UTF-8")
	}
	return v.Bytes, nil
}

// OptStrField checks an optional string. nullOK lets null mean "absent" (the
// JSON dialect; msgpack is strict as upstream, except where the caller says).
func OptStrField(v *Value, field string, nullOK bool) ([]byte, *RequestError) {
	switch {
	case v.Kind == KindStr:
		// Every identity (instance, model, LoRA, tenant, salt) must be valid
		// UTF-8: a registration the JSON dialect could not name again (it
		// renders invalid bytes as U+FFFD), or a context /query refuses, would
		// be unreachable.
		if !utf8.Valid(v.Bytes) {
			return nil, NewError(ErrInvalidValue, field, field+" must be valid UTF-8")
		}
		return v.Bytes, nil
	case v.Kind == KindNil && nullOK:
		return nil, nil
	}
	return nil, NewError(ErrInvalidType, field, field+" must be a string")
}

// BlockSizeField applies the /query rules: a positive integer up to MaxInt64;
// larger or non-positive integers are out_of_range, anything else
// invalid_type.
func BlockSizeField(v *Value, field string) (int64, *RequestError) {
	if !v.IsInt() {
		return 0, NewError(ErrInvalidType, field, field+" must be an integer")
	}
	switch {
	case v.Kind == KindUint || (v.Kind == KindBigInt && !v.Neg) || v.Int > math.MaxInt:
		return 0, NewError(ErrOutOfRange, field, field+" must be at most "+strconv.Itoa(math.MaxInt))
	case v.Kind != KindInt || v.Int <= 0:
		return 0, NewError(ErrOutOfRange, field, field+" must be greater than zero")
	}
	return v.Int, nil
}

// SuggestKey adds to an unknown_field error the key of known nearest to the
// unknown one ("unknown field replay_endpont; did you mean
// replay_endpoint?"), when one is near enough (suggest.Nearest); it returns
// fe, and any other error unchanged.
func SuggestKey(fe *RequestError, known []string) *RequestError {
	if fe == nil || fe.Err != ErrUnknownField {
		return fe
	}
	if n := suggest.Nearest(fe.Field, known); n != "" {
		fe.Msg += "; did you mean " + n + "?"
	}
	return fe
}

// ScanFields reads every key of the map r is in, strictly: lookup maps a key
// to its slot (id < 0: unknown; skip: accepted and ignored); the first
// unknown or repeated key becomes the error ("unknown "/"duplicate " + what +
// "field K") and every later value is skipped; store receives the others,
// with seen[id] already set. A syntax error anywhere (r.Err) wins.
func ScanFields(r *Reader, what string, seen []bool, lookup func(key []byte) (id int, skip bool), store func(id int, key []byte)) *RequestError {
	var fe *RequestError
	for {
		key, ok := r.NextKey()
		if !ok {
			break
		}
		id, skip := lookup(key)
		switch {
		case skip || fe != nil:
			r.Skip()
		case id < 0:
			fe = NewError(ErrUnknownField, string(key), "unknown "+what+"field "+string(key))
			r.Skip()
		case seen[id]:
			fe = NewError(ErrInvalidValue, string(key), "duplicate "+what+"field "+string(key))
			r.Skip()
		default:
			seen[id] = true
			store(id, key)
		}
	}
	if err := r.Err(); err != nil {
		return err
	}
	return fe
}
