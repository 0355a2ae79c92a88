package server

import (
	"math"
	"strconv"

	"github.com/seed-c7a81618/conductor/codec"
)

// mpReader is the msgpack dialect's reader over one map, built on codec's
// msgpack readers (tinylib/msgp's zero-copy byte readers underneath).
type mpReader struct {
	b      []byte // the unread rest
	n      uint32 // keys left
	root   bool   // nothing may follow the map
	syntax *RequestError
}

// Upstream's texts for undecodable bodies (reference §1.1).
const (
	msgInvalidMsgpack = "Invalid msgpack object"
	msgNotAMap        = "request body must be a msgpack map"
	msgKeysNotStrings = "map keys must be strings"
)

func (r *mpReader) init(b []byte, root bool) {
	*r = mpReader{b: b, root: root}
	if len(b) == 0 {
		r.fail(msgInvalidMsgpack)
		return
	}
	if !codec.IsMapLead(b[0]) {
		r.failNot(b, msgNotAMap)
		return
	}
	n, rest, err := codec.ReadMap(b)
	if err != nil {
		r.fail(msgInvalidMsgpack)
		return
	}
	r.n, r.b = uint32(n), rest
}

func (r *mpReader) Err() *RequestError { return r.syntax }

func (r *mpReader) Sub(raw []byte) Reader {
	s := &mpReader{}
	s.init(raw, true)
	return s
}

func (r *mpReader) fail(msg string) {
	if r.syntax == nil {
		r.syntax = &RequestError{Err: ErrInvalidMsgpack, Index: noIndex, Msg: msg}
	}
	r.n = 0
}

// failNot fails with msg when b starts with a whole value (of the wrong type),
// and as undecodable otherwise.
func (r *mpReader) failNot(b []byte, msg string) {
	if _, err := codec.Skip(b); err != nil {
		msg = msgInvalidMsgpack
	}
	r.fail(msg)
}

func (r *mpReader) NextKey() ([]byte, bool) {
	if r.syntax != nil {
		return nil, false
	}
	if r.n == 0 {
		if r.root && len(r.b) > 0 {
			r.fail("trailing bytes after the msgpack map")
		}
		return nil, false
	}
	r.n--
	if len(r.b) == 0 {
		r.fail(msgInvalidMsgpack)
		return nil, false
	}
	if !codec.IsStrLead(r.b[0]) {
		r.failNot(r.b, msgKeysNotStrings)
		return nil, false
	}
	key, rest, err := codec.ReadStr(r.b)
	if err != nil {
		r.fail(msgInvalidMsgpack)
		return nil, false
	}
	r.b = rest
	return key, true
}

func (r *mpReader) Skip() {
	if r.syntax != nil {
		return
	}
	rest, err := codec.Skip(r.b)
	if err != nil {
		r.fail(msgInvalidMsgpack)
		return
	}
	r.b = rest
}

func (r *mpReader) Value() Value {
	if r.syntax != nil {
		return Value{}
	}
	b := r.b
	if len(b) == 0 {
		r.fail(msgInvalidMsgpack)
		return Value{}
	}
	c := b[0]
	var v Value
	var rest []byte
	var err error
	switch {
	case c == codec.Nil:
		v, rest = Value{Kind: KindNil}, b[1:]
	case c == 0xc2 || c == 0xc3:
		v, rest = Value{Kind: KindBool, Bool: c == 0xc3}, b[1:]
	case codec.IsStrLead(c):
		v.Kind = KindStr
		v.Bytes, rest, err = codec.ReadStr(b)
	case codec.IsBinLead(c):
		v.Kind = KindBin
		v.Bytes, rest, err = codec.ReadBin(b)
	case codec.IsUintLead(c):
		var u uint64
		u, rest, err = codec.ReadUint(b)
		if u <= math.MaxInt64 {
			v = Value{Kind: KindInt, Int: int64(u)}
		} else {
			v = Value{Kind: KindUint, Uint: u}
		}
	case codec.IsIntLead(c):
		v.Kind = KindInt
		v.Int, rest, err = codec.ReadInt(b)
	default:
		rest, err = codec.Skip(b)
		switch {
		case codec.IsFloatLead(c):
			v.Kind = KindFloat
		case codec.IsMapLead(c):
			v = Value{Kind: KindMap, Bytes: b[:len(b)-len(rest)]}
		case codec.IsArrayLead(c):
			v = Value{Kind: KindArray, Bytes: b[:len(b)-len(rest)]}
		default:
			v.Kind = KindOther
		}
	}
	if err != nil {
		r.fail(msgInvalidMsgpack)
		return Value{}
	}
	r.b = rest
	return v
}

func countErr(field string, max int) *RequestError {
	return NewError(ErrOutOfRange, field, field+" has more than "+strconv.Itoa(max)+" elements")
}

// Int32s accepts an array of msgpack integers in int32 range, or a bin whose
// length is a multiple of 4 holding little-endian int32s (any bit pattern). An
// aligned bin is returned as a zero-copy view of the body.
func (r *mpReader) Int32s(buf *[]int32, field string, max int) ([]int32, *RequestError) {
	dst := (*buf)[:0]
	if r.syntax != nil {
		return dst, nil
	}
	b := r.b
	if len(b) != 0 && codec.IsBinLead(b[0]) {
		bin, rest, err := codec.ReadBin(b)
		if err != nil {
			r.fail(msgInvalidMsgpack)
			return dst, nil
		}
		r.b = rest
		if len(bin)%4 != 0 {
			return dst, NewError(ErrInvalidValue, field, field+" bin size must be a multiple of 4")
		}
		if len(bin)/4 > max {
			return dst, countErr(field, max)
		}
		return leInt32s(buf, bin), nil
	}
	n, p, fe, ok := r.arrayFor(field, " must be a bin or an array", max)
	if !ok {
		return dst, fe
	}
	if cap(dst) < n {
		dst = make([]int32, n)
	}
	dst = dst[:n]
	*buf = dst[:0]
	rest, bad, err := codec.ReadInt32s(dst, p, math.MaxInt32)
	if err != nil {
		return dst[:0], r.elemFault(err, field, bad, " element must be a 32-bit signed integer")
	}
	r.b = rest
	return dst, nil
}

// arrayFor reads the array header of field's value: n elements starting at p.
// ok=false means the caller returns fe at once: nil after a syntax error
// (recorded in r), else the field error (invalid_type with "field"+notArray,
// or too many elements) after skipping the value. Counts are checked against
// the remaining bytes before anything is allocated.
func (r *mpReader) arrayFor(field, notArray string, max int) (n int, p []byte, fe *RequestError, ok bool) {
	n, p, err := codec.ReadArray(r.b, max)
	switch err {
	case nil:
		return n, p, nil, true
	case codec.ErrWrongType:
		fe = NewError(ErrInvalidType, field, field+notArray)
	case codec.ErrTooLarge:
		fe = countErr(field, max)
	default:
		r.fail(msgInvalidMsgpack)
		return 0, nil, nil, false
	}
	if r.Skip(); r.syntax != nil {
		return 0, nil, nil, false
	}
	return 0, nil, fe, false
}

// elemFault turns codec's error for element i of the array at r.b into the
// field error, once the whole array has been skipped (a syntax error in it
// wins).
func (r *mpReader) elemFault(err error, field string, i int, rangeMsg string) *RequestError {
	switch err {
	case codec.ErrWrongType, codec.ErrOutOfRange:
		if r.Skip(); r.syntax != nil {
			return nil
		}
		if err == codec.ErrWrongType {
			return elemErr(ErrInvalidType, field, i, field+" element must be an integer")
		}
		return elemErr(ErrOutOfRange, field, i, field+rangeMsg)
	}
	r.fail(msgInvalidMsgpack)
	return nil
}

// Uint64s accepts an array of msgpack integers in 0..2^64-1 (negative →
// out_of_range, non-integer → invalid_type, both with the element index).
func (r *mpReader) Uint64s(buf *[]uint64, field string, max int) ([]uint64, *RequestError) {
	dst := (*buf)[:0]
	if r.syntax != nil {
		return dst, nil
	}
	n, p, fe, ok := r.arrayFor(field, " must be an array", max)
	if !ok {
		return dst, fe
	}
	if cap(dst) < n {
		dst = make([]uint64, n)
	}
	dst = dst[:n]
	*buf = dst[:0]
	rest, bad, err := codec.ReadUint64s(dst, p, codec.Unsigned)
	if err != nil {
		return dst[:0], r.elemFault(err, field, bad, " element must be an unsigned 64-bit integer")
	}
	r.b = rest
	return dst, nil
}
