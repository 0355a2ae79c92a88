package server

import (
	"math"
	"strconv"

	"github.com/seed-c7a81618/conductor/codec"
)

// Reader walks the top-level map (msgpack) or object (JSON) of a request
// body, key by key, on codec's reader for either format (codec.EitherReader:
// strict RFC 8259 JSON, msgpack through tinylib/msgp's zero-copy readers; u64
// values exact, never through float64; nesting and every other limit are
// codec's). What it adds is the request's: the syntax error as a
// *RequestError (reason invalid_json with codec's reason and the offset, or
// upstream's invalid_msgpack texts), field errors naming the element index,
// and the token-array rules of each syntax.
//
// A Reader consumes every value it is asked about, even after the caller
// found a field error, so that a syntax error anywhere in the body wins over
// a field error (upstream decodes the whole msgpack object before validating
// fields). After a syntax error (Err) NextKey reports the end and the other
// methods read nothing.
//
// Readers never allocate on valid input. Slices they return alias the body
// or, for JSON strings with escapes, the request scratch, which only grows
// during a request (earlier views stay valid because old backing arrays are
// never overwritten): they are valid for the request. A Reader is not safe
// for concurrent use.
type Reader struct {
	r       codec.EitherReader
	in      []byte
	scratch *[]byte // unescaped JSON strings
	syntax  *RequestError
	json    bool
	done    bool // the map has ended, or a syntax error was found
}

// Upstream's texts for undecodable msgpack bodies (reference §1.1).
const (
	msgInvalidMsgpack = "Invalid msgpack object"
	msgNotAMap        = "request body must be a msgpack map"
	msgKeysNotStrings = "map keys must be strings"
)

// reset starts reading the map (msgpack) or object (JSON) b, which nothing
// but (JSON) whitespace may follow. scratch receives unescaped JSON strings.
func (r *Reader) reset(b []byte, json bool, scratch *[]byte) {
	r.in, r.scratch, r.syntax, r.json, r.done = b, scratch, nil, json, false
	if json {
		r.r.ResetJSON(b, scratch)
	} else {
		r.r.ResetMsgpack(b)
	}
	switch {
	case r.r.End():
		r.fail("empty body", msgInvalidMsgpack)
	case r.r.Kind() != codec.KindMap:
		r.failNot("request body must be a JSON object", msgNotAMap)
	default:
		if _, err := r.r.EnterMap(); err != nil {
			r.failErr(err)
		}
	}
}

// Err is the sticky syntax error (reason invalid_msgpack or invalid_json).
func (r *Reader) Err() *RequestError { return r.syntax }

// Sub returns a reader over the nested map raw (Value.Bytes of a KindMap).
func (r *Reader) Sub(raw []byte) *Reader {
	s := &Reader{}
	s.reset(raw, r.json, r.scratch)
	return s
}

// fail records the first syntax error: for JSON jsonMsg at the cursor's
// offset, for msgpack mpMsg.
func (r *Reader) fail(jsonMsg, mpMsg string) {
	r.failAt(jsonMsg, mpMsg, r.r.Offset())
}

func (r *Reader) failAt(jsonMsg, mpMsg string, off int) {
	r.done = true
	switch {
	case r.syntax != nil:
	case r.json:
		r.syntax = &RequestError{Err: ErrInvalidJSON, Index: noIndex,
			Msg: "Invalid JSON object: " + jsonMsg + " at offset " + strconv.Itoa(off)}
	default:
		r.syntax = &RequestError{Err: ErrInvalidMsgpack, Index: noIndex, Msg: mpMsg}
	}
}

// failErr records codec's error err as the syntax error: its reason for JSON,
// undecodable for msgpack.
func (r *Reader) failErr(err error) { r.fail(err.Error(), msgInvalidMsgpack) }

// failNot fails with the msg of the format when the cursor is at a whole value
// (of the wrong type), and as undecodable otherwise (msgpack; a JSON value
// there is not checked).
func (r *Reader) failNot(jsonMsg, mpMsg string) {
	if !r.json && r.r.Skip() != nil {
		mpMsg = msgInvalidMsgpack
	}
	r.fail(jsonMsg, mpMsg)
}

// NextKey returns the next key; ok=false at the end of the map or after a
// syntax error (then Err is non-nil).
func (r *Reader) NextKey() (key []byte, ok bool) {
	if r.done {
		return nil, false
	}
	key, ok, err := r.r.NextKey()
	switch {
	case err == nil && ok:
		return key, true
	case err == nil:
		r.done = true
		if !r.r.End() {
			r.trailing()
		}
	case ok && err == codec.ErrWrongType: // a msgpack key that is not a string
		r.failNot(err.Error(), msgKeysNotStrings)
	default:
		r.failErr(err)
	}
	return nil, false
}

// trailing fails for the bytes after the map; JSON names the offset of the
// first that is not whitespace.
func (r *Reader) trailing() {
	off := r.r.Offset()
	if r.json {
		off = len(r.in) - len(codec.JSONWS(r.in[off:]))
	}
	r.failAt("trailing data after the JSON object", "trailing bytes after the msgpack map", off)
}

// Value decodes (and consumes) the value after the current key.
func (r *Reader) Value() Value {
	if r.done {
		return Value{}
	}
	v, err := r.r.Value()
	if err != nil {
		r.failErr(err)
		return Value{}
	}
	if v.Kind == codec.KindInt {
		return numberValue(v.Num)
	}
	return Value{Kind: kinds[v.Kind], Bool: v.Bool, Bytes: v.Bytes}
}

// kinds maps codec's kinds but KindInt (numberValue) onto Value's.
var kinds = [...]Kind{
	codec.KindInvalid: KindInvalid,
	codec.KindNil:     KindNil,
	codec.KindBool:    KindBool,
	codec.KindFloat:   KindFloat,
	codec.KindStr:     KindStr,
	codec.KindBin:     KindBin,
	codec.KindArray:   KindArray,
	codec.KindMap:     KindMap,
	codec.KindExt:     KindOther,
}

// numberValue classifies an integer: exact over the whole int64 ∪ uint64
// range, beyond it (JSON only) KindBigInt; anything with a fraction or
// exponent is KindFloat.
func numberValue(n codec.Number) Value {
	switch i, ok := n.Int64(); {
	case n.Float:
		return Value{Kind: KindFloat}
	case ok:
		return Value{Kind: KindInt, Int: i}
	case n.Big || n.Neg:
		return Value{Kind: KindBigInt, Neg: n.Neg}
	default:
		return Value{Kind: KindUint, Uint: n.Mag}
	}
}

// Skip consumes the value after the current key.
func (r *Reader) Skip() {
	if r.done {
		return
	}
	if err := r.r.Skip(); err != nil {
		r.failErr(err)
	}
}

// StrValue reads the value after the current key when it is a string, as
// Value does, and reports whether it was one; anything else it leaves
// unread. A JSON string without escapes, control characters or bytes above
// 0x7f is found at memchr speed (codec.JSONPlainString: the RPC's long base64
// token_ids).
func (r *Reader) StrValue() (Value, bool) {
	if r.done || r.r.Kind() != codec.KindStr {
		return Value{}, false
	}
	if s, ok := r.r.PlainStr(); ok {
		return Value{Kind: KindStr, Bytes: s}, true
	}
	return r.Value(), true
}

// Int32s consumes a token array and returns its elements, decoded into *buf
// (grown as needed). JSON takes exact integers in -2^31..2^32-1, stored as
// their 32-bit pattern (the hashing standard's token ids are u32); msgpack
// integers in int32 range, or a bin whose length is a multiple of 4 holding
// little-endian int32s (any bit pattern), viewed in place when aligned. More
// than max elements is out_of_range; a bad element is invalid_type (not an
// integer: a fraction or exponent, a string, ...) or out_of_range, naming
// its index. The value is still consumed.
func (r *Reader) Int32s(buf *[]int32, field string, max int) ([]int32, *RequestError) {
	dst := (*buf)[:0]
	if r.done {
		return dst, nil
	}
	if r.json {
		out, bad, err := r.r.Int32s(dst, max, math.MaxUint32)
		*buf = out[:0]
		return out, r.arrayErr(err, field, bad, max, " must be an array", " element must be a 32-bit integer (-2147483648..4294967295)")
	}
	if r.r.Kind() == codec.KindBin {
		bin := r.Value().Bytes
		switch {
		case r.done:
			return dst, nil
		case len(bin)%4 != 0:
			return dst, NewError(ErrInvalidValue, field, field+" bin size must be a multiple of 4")
		case len(bin)/4 > max:
			return dst, countErr(field, max)
		}
		return leInt32s(buf, bin), nil
	}
	out, bad, err := r.r.Int32s(dst, max, math.MaxInt32)
	*buf = out[:0]
	return out, r.arrayErr(err, field, bad, max, " must be a bin or an array", " element must be a 32-bit signed integer")
}

// Uint64s consumes an array of unsigned 64-bit integers into *buf (exact, no
// float64): negatives and values above 2^64-1 are out_of_range, anything else
// but an integer invalid_type, each naming the element index.
func (r *Reader) Uint64s(buf *[]uint64, field string, max int) ([]uint64, *RequestError) {
	return r.words(buf, field, max, codec.Unsigned, " element must be an unsigned 64-bit integer")
}

// HashBits consumes an array of 64-bit integers, signed or unsigned, keeping
// each as its 64-bit pattern (Dynamo serialises block hashes as i64 or u64).
func (r *Reader) HashBits(buf *[]uint64, field string, max int) ([]uint64, *RequestError) {
	return r.words(buf, field, max, codec.Bits, " element must fit 64 bits")
}

func (r *Reader) words(buf *[]uint64, field string, max int, mode codec.Mode, rangeMsg string) ([]uint64, *RequestError) {
	dst := (*buf)[:0]
	if r.done {
		return dst, nil
	}
	out, bad, err := r.r.Uint64s(dst, max, mode)
	*buf = out[:0]
	return out, r.arrayErr(err, field, bad, max, " must be an array", rangeMsg)
}

// arrayErr turns codec's error err for an integer array (element bad, or -1
// for the array itself) into the field error: field+notArray for a value
// that is no array, the count error, or the element's, with rangeMsg for one
// out of range. A type or range error left the cursor at the array, which is
// then skipped, so that a syntax error in it or after it wins; any other
// error is a syntax error.
func (r *Reader) arrayErr(err error, field string, bad, max int, notArray, rangeMsg string) *RequestError {
	switch err {
	case nil:
		return nil
	case codec.ErrWrongType, codec.ErrOutOfRange, codec.ErrTooLarge:
	default:
		r.failErr(err)
		return nil
	}
	if r.Skip(); r.syntax != nil {
		return nil
	}
	switch {
	case err == codec.ErrTooLarge:
		return countErr(field, max)
	case err == codec.ErrOutOfRange:
		return elemErr(ErrOutOfRange, field, bad, field+rangeMsg)
	case bad < 0:
		return NewError(ErrInvalidType, field, field+notArray)
	}
	return elemErr(ErrInvalidType, field, bad, field+" element must be an integer")
}

func countErr(field string, max int) *RequestError {
	return NewError(ErrOutOfRange, field, field+" has more than "+strconv.Itoa(max)+" elements")
}
