package httpd

import (
	"math"
	"strconv"
	"unicode/utf8"
)

// dialect is the key set and syntax of a request body: the C++ conductor's
// msgpack keys, the seed's JSON keys (with their aliases), or the Python
// client's RPC keys (JSON syntax, the Python API's field names, rpc.go). One
// parser per operation serves all three; the dialect only selects key names,
// defaults and whether null means "absent".
type dialect uint8

const (
	dialectMsgpack dialect = iota
	dialectJSON
	dialectRPC
)

// json reports whether the body is JSON (null then means "absent" for optional
// strings).
func (d dialect) json() bool { return d != dialectMsgpack }

// dialectOf maps the HTTP API's Content-Type choice to its dialect.
func dialectOf(json bool) dialect {
	if json {
		return dialectJSON
	}
	return dialectMsgpack
}

// kind classifies one decoded request value, dialect-neutrally.
type kind uint8

const (
	kindInvalid kind = iota // only after a syntax error
	kindNil
	kindBool
	kindInt    // value.i
	kindUint   // value.u, above math.MaxInt64
	kindBigInt // an integer literal beyond the 64-bit ranges (JSON only); value.neg gives its sign
	kindFloat
	kindStr   // value.s: the text (a view of the body or of the request scratch)
	kindBin   // value.s: the bytes (msgpack only)
	kindArray // value.s: the raw encoding
	kindMap   // value.s: the raw encoding
	kindOther // msgpack ext types
)

// value is one decoded scalar, or a validated but undecoded composite.
type value struct {
	kind kind
	b    bool
	neg  bool
	i    int64
	u    uint64
	s    []byte
}

// reader walks the top-level map (msgpack) or object (JSON) of a request body,
// key by key. Readers never allocate on valid input; slices they return alias
// the body or the request scratch and are valid for the request.
//
// A reader consumes every value it is asked about, even after the caller found a
// field error, so that a syntax error anywhere in the body wins over a field
// error (upstream decodes the whole msgpack object before validating fields).
type reader interface {
	// nextKey returns the next key; ok=false at the end of the map or after a
	// syntax error (then err is non-nil).
	nextKey() (key []byte, ok bool)
	// value decodes (and consumes) the value after the current key.
	value() value
	// skip consumes the value after the current key.
	skip()
	// int32s consumes a token array (or, in msgpack, a little-endian int32 bin)
	// and returns its elements. They are decoded into *buf (grown as needed) or,
	// for an aligned bin, viewed in place. More than max elements, or a bad
	// element, is a field error; the value is still consumed.
	int32s(buf *[]int32, field string, max int) ([]int32, *RequestError)
	// uint64s consumes an array of unsigned 64-bit integers into *buf.
	uint64s(buf *[]uint64, field string, max int) ([]uint64, *RequestError)
	// err is the sticky syntax error (reason invalid_msgpack or invalid_json).
	err() *RequestError
	// sub returns a reader over a nested map value (value.s of a kindMap).
	sub(raw []byte) reader
}

// isInt reports whether v is an integer of any range.
func (v *value) isInt() bool { return v.kind == kindInt || v.kind == kindUint || v.kind == kindBigInt }

// strField checks a required non-empty string: missing is checked by the caller;
// non-string → invalid_type, "" → invalid_value.
func strField(v *value, field string) ([]byte, *RequestError) {
	if v.kind != kindStr {
		return nil, reqErr(ErrInvalidType, field, field+" must be a string")
	}
	if len(v.s) == 0 {
		return nil, reqErr(ErrInvalidValue, field, field+" must not be empty")
	}
	if !utf8.Valid(v.s) {
		return nil, reqErr(ErrInvalidValue, field, field+" must be valid UTF-8")
	}
	return v.s, nil
}

// optStrField checks an optional string. nullOK lets null mean "absent" (the
// JSON dialect; msgpack is strict as upstream, except where the caller says).
func optStrField(v *value, field string, nullOK bool) ([]byte, *RequestError) {
	switch {
	case v.kind == kindStr:
		// Every identity (instance, model, LoRA, tenant, salt) must be valid
		// UTF-8: a registration the JSON dialect could not name again (it
		// renders invalid bytes as U+FFFD), or a context /query refuses, would
		// be unreachable.
		if !utf8.Valid(v.s) {
			return nil, reqErr(ErrInvalidValue, field, field+" must be valid UTF-8")
		}
		return v.s, nil
	case v.kind == kindNil && nullOK:
		return nil, nil
	}
	return nil, reqErr(ErrInvalidType, field, field+" must be a string")
}

// blockSizeField applies the /query rules: a positive integer up to MaxInt64;
// larger or non-positive integers are out_of_range, anything else invalid_type.
func blockSizeField(v *value, field string) (int64, *RequestError) {
	if !v.isInt() {
		return 0, reqErr(ErrInvalidType, field, field+" must be an integer")
	}
	switch {
	case v.kind == kindUint || (v.kind == kindBigInt && !v.neg) || v.i > math.MaxInt:
		return 0, reqErr(ErrOutOfRange, field, field+" must be at most "+strconv.Itoa(math.MaxInt))
	case v.kind != kindInt || v.i <= 0:
		return 0, reqErr(ErrOutOfRange, field, field+" must be greater than zero")
	}
	return v.i, nil
}
