package server

import (
	"strconv"

	"github.com/seed-c7a81618/conductor/codec"
)

// JSONReader is the JSON dialect's reader: it walks one object key by key on
// codec's strict RFC 8259 reader, without encoding/json and without
// allocations on valid input.
//
// Strings without escapes are returned as views of the body; escaped strings are
// unescaped into *scratch, which only grows during a request (earlier views stay
// valid because old backing arrays are never overwritten). Invalid UTF-8 in a
// string is a syntax error (RFC 8259 §8.1); nesting and every other limit are
// codec's (its package documentation).
type JSONReader struct {
	b       []byte
	pos     int
	state   uint8 // 0: before the first key, 1: after a key or value, 2: done
	root    bool  // the object must be followed by whitespace only
	syntax  *RequestError
	scratch *[]byte
}

// init starts reading the object b. scratch receives unescaped strings.
func (r *JSONReader) init(b []byte, scratch *[]byte, root bool) {
	*r = JSONReader{b: b, root: root, scratch: scratch}
	r.ws()
	switch {
	case r.pos >= len(b):
		r.fail("empty body")
	case b[r.pos] != '{':
		r.fail("request body must be a JSON object")
	default:
		r.pos++
	}
}

// Err is the sticky syntax error (reason invalid_json).
func (r *JSONReader) Err() *RequestError { return r.syntax }

// Sub returns a reader over the nested object raw.
func (r *JSONReader) Sub(raw []byte) Reader {
	s := &JSONReader{}
	s.init(raw, r.scratch, true)
	return s
}

// fail records the first syntax error.
func (r *JSONReader) fail(msg string) {
	if r.syntax != nil {
		return
	}
	r.syntax = &RequestError{Err: ErrInvalidJSON, Index: noIndex,
		Msg: "Invalid JSON object: " + msg + " at offset " + strconv.Itoa(r.pos)}
	r.state = 2
}

// failAt records codec's error err, which it found where rest begins.
func (r *JSONReader) failAt(err error, rest []byte) {
	r.pos = len(r.b) - len(rest)
	r.fail(err.Error())
}

// rest is the unread input; at moves the position to where rest begins.
func (r *JSONReader) rest() []byte   { return r.b[r.pos:] }
func (r *JSONReader) at(rest []byte) { r.pos = len(r.b) - len(rest) }
func (r *JSONReader) ws()            { r.at(codec.JSONWS(r.rest())) }

// peek returns the current byte, or 0 at the end.
func (r *JSONReader) peek() byte {
	if r.pos < len(r.b) {
		return r.b[r.pos]
	}
	return 0
}

// NextKey returns the next key (Reader.NextKey).
func (r *JSONReader) NextKey() ([]byte, bool) {
	if r.state == 2 {
		return nil, false
	}
	b := codec.JSONWS(r.rest())
	end := false
	if r.state == 1 {
		more, err := false, error(nil)
		if b, more, err = codec.JSONNext(b, '}'); err != nil {
			r.failAt(err, b)
			return nil, false
		}
		end = !more
	} else if len(b) != 0 && b[0] == '}' {
		b, end = b[1:], true
	}
	if end {
		r.at(b)
		r.finish()
		return nil, false
	}
	key, b, err := codec.JSONKey(b, r.scratch)
	if err != nil {
		r.failAt(err, b)
		return nil, false
	}
	r.at(b)
	r.state = 1
	return key, true
}

func (r *JSONReader) finish() {
	r.state = 2
	if r.root {
		r.ws()
		if r.pos != len(r.b) {
			r.fail("trailing data after the JSON object")
		}
	}
}

// Value decodes and consumes the value after the current key.
func (r *JSONReader) Value() Value {
	if r.syntax != nil {
		return Value{}
	}
	b := r.rest()
	var v Value
	var rest []byte
	var err error
	switch c := r.peek(); c {
	case '"':
		v.Kind = KindStr
		v.Bytes, rest, err = codec.JSONString(b, r.scratch)
	case '{', '[':
		v.Kind = KindArray
		if c == '{' {
			v.Kind = KindMap
		}
		rest, err = codec.JSONSkip(b)
		v.Bytes = b[:len(b)-len(rest)]
	case 't':
		v = Value{Kind: KindBool, Bool: true}
		rest, err = codec.JSONLiteral(b, "true")
	case 'f':
		v.Kind = KindBool
		rest, err = codec.JSONLiteral(b, "false")
	case 'n':
		v.Kind = KindNil
		rest, err = codec.JSONLiteral(b, "null")
	default:
		if c != '-' && !isDigit(c) {
			r.fail("unexpected character")
			return Value{}
		}
		var n codec.Number
		n, rest, err = codec.JSONNumber(b)
		v = numberValue(n)
	}
	if err != nil {
		r.failAt(err, rest)
		return Value{}
	}
	r.at(rest)
	return v
}

// numberValue classifies a JSON number: integers are exact over the whole
// int64 ∪ uint64 range; anything with a fraction or exponent is KindFloat.
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
func (r *JSONReader) Skip() {
	if r.syntax == nil {
		r.skipValue()
	}
}

func isDigit(c byte) bool { return c-'0' < 10 }

// skipValue consumes and validates one value at r.pos.
func (r *JSONReader) skipValue() {
	rest, err := codec.JSONSkip(r.rest())
	if err != nil {
		r.failAt(err, rest)
		return
	}
	r.at(rest)
}

// plainString is codec.JSONPlainString at r.pos (which holds '"'): ok=false
// consumes nothing, and the caller uses Value().
func (r *JSONReader) plainString() (Value, bool) {
	if r.syntax != nil {
		return Value{}, false
	}
	s, rest, ok := codec.JSONPlainString(r.rest())
	if ok {
		r.at(rest)
	}
	return Value{Kind: KindStr, Bytes: s}, ok
}

// elemErr's texts for the integer arrays, by codec error.
func intArrayErr(err error, field string, i, max int, rangeMsg string) *RequestError {
	switch err {
	case codec.ErrWrongType:
		return elemErr(ErrInvalidType, field, i, field+" element must be an integer")
	case codec.ErrTooLarge:
		return countErr(field, max)
	}
	return elemErr(ErrOutOfRange, field, i, field+rangeMsg)
}

// intArray runs read, one of codec's integer array readers, on the value at
// r.pos. A field error (a bad element, too many) is returned once the whole
// array has been validated, so that a syntax error further on wins.
func (r *JSONReader) intArray(field string, read func(b []byte) ([]byte, int, error), max int, rangeMsg string) *RequestError {
	if r.syntax != nil {
		return nil
	}
	if r.peek() != '[' {
		r.skipValue()
		return NewError(ErrInvalidType, field, field+" must be an array")
	}
	rest, bad, err := read(r.rest())
	switch {
	case err == nil:
		r.at(rest)
		return nil
	case err == codec.ErrWrongType || err == codec.ErrOutOfRange || err == codec.ErrTooLarge:
		if r.skipValue(); r.syntax != nil {
			return nil
		}
		return intArrayErr(err, field, bad, max, rangeMsg)
	}
	r.failAt(err, rest)
	return nil
}

// Int32s parses a JSON array of token ids with codec.JSONInt32s' rules:
// exact integers in -2^31..2^32-1 stored as their 32-bit pattern; a fraction
// or exponent is invalid_type, values outside that range are out_of_range,
// both naming the element index.
func (r *JSONReader) Int32s(buf *[]int32, field string, max int) ([]int32, *RequestError) {
	dst := (*buf)[:0]
	fe := r.intArray(field, func(b []byte) (rest []byte, bad int, err error) {
		dst, rest, bad, err = codec.JSONInt32s(dst, b, max)
		return rest, bad, err
	}, max, " element must be a 32-bit integer (-2147483648..4294967295)")
	*buf = dst[:0]
	return dst, fe
}

// Uint64s parses a JSON array of unsigned 64-bit integers, exactly (no float64):
// negatives and values above 2^64-1 are out_of_range, fractions or exponents
// invalid_type, each naming the element index.
func (r *JSONReader) Uint64s(buf *[]uint64, field string, max int) ([]uint64, *RequestError) {
	return r.words(buf, field, max, codec.Unsigned, " element must be an unsigned 64-bit integer")
}

// HashBits parses a JSON array of 64-bit integers, signed or unsigned, keeping
// each as its 64-bit pattern (Dynamo serialises block hashes as i64 or u64).
func (r *JSONReader) HashBits(buf *[]uint64, field string, max int) ([]uint64, *RequestError) {
	return r.words(buf, field, max, codec.Bits, " element must fit 64 bits")
}

func (r *JSONReader) words(buf *[]uint64, field string, max int, mode codec.Mode, rangeMsg string) ([]uint64, *RequestError) {
	dst := (*buf)[:0]
	fe := r.intArray(field, func(b []byte) (rest []byte, bad int, err error) {
		dst, rest, bad, err = codec.JSONUint64s(dst, b, max, mode, r.scratch)
		return rest, bad, err
	}, max, rangeMsg)
	*buf = dst[:0]
	return dst, fe
}
