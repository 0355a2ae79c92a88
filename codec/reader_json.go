package codec

import (
	"math"
	"strconv"
)

// JSONReader is the Reader over JSON (RFC 8259), on the JSON* functions of
// this package. Strings with escapes are unescaped into the arena given to
// Reset (JSONString). The zero value reads an empty input; Reset starts a
// document.
type JSONReader struct {
	in    []byte
	b     []byte // the unread rest; at a value's first byte between calls
	arena *[]byte
	depth int              // containers open
	fresh uint64           // bit i: open container i has not been stepped into yet
	left  [MaxDepth]uint32 // per open container: elements it may still have (EnterArray's max)
}

var _ Reader = (*JSONReader)(nil)

// Reset starts reading b, whose first value follows optional whitespace;
// arena receives unescaped strings and may be nil when no string the caller
// reads has escapes.
func (r *JSONReader) Reset(b []byte, arena *[]byte) {
	*r = JSONReader{in: b, b: JSONWS(b), arena: arena}
}

// Kind classifies the value at the cursor by its first byte; for a number it
// scans the number (KindInvalid when that is malformed).
func (r *JSONReader) Kind() Kind {
	if len(r.b) == 0 {
		return KindInvalid
	}
	switch c := r.b[0]; {
	case c == '"':
		return KindStr
	case c == '{':
		return KindMap
	case c == '[':
		return KindArray
	case c == 'n':
		return KindNil
	case c == 't' || c == 'f':
		return KindBool
	case c == '-' || isDigit(c):
		n, _, err := JSONNumber(r.b)
		switch {
		case err != nil:
			return KindInvalid
		case n.Float:
			return KindFloat
		}
		return KindInt
	}
	return KindInvalid
}

// enter opens the container at the cursor, whose first byte is open.
func (r *JSONReader) enter(open byte, max int) error {
	if len(r.b) == 0 {
		return jsonErr(rUnexpected, nil)
	}
	if r.b[0] != open {
		return ErrWrongType
	}
	if r.depth == MaxDepth {
		return errTooDeep
	}
	r.fresh |= uint64(1) << r.depth
	r.left[r.depth] = uint32(min(max, math.MaxUint32))
	r.depth++
	r.b = r.b[1:]
	return nil
}

func (r *JSONReader) EnterMap() (int, error) { return -1, r.enter('{', math.MaxUint32) }

func (r *JSONReader) EnterArray(max int) (int, error) { return -1, r.enter('[', max) }

// Next and NextKey consume the separator before an element or entry (none
// before the first) and the whitespace after it, or the container's close.
// The input ending where an element or entry must follow is the error reading
// it would give.
func (r *JSONReader) Next() (bool, error) { return r.next(']', rUnexpected) }

func (r *JSONReader) NextKey() ([]byte, bool, error) {
	if ok, err := r.next('}', rKey); !ok {
		return nil, false, err
	}
	key, rest, err := JSONKey(r.b, r.arena)
	r.b = rest
	return key, true, err
}

func (r *JSONReader) next(close byte, missing int) (bool, error) {
	i := r.depth - 1
	bit := uint64(1) << i
	if r.fresh&bit != 0 {
		r.b = JSONWS(r.b)
		switch {
		case len(r.b) == 0:
			return false, jsonErr(missing, nil)
		case r.b[0] == close:
			r.b, r.depth = r.b[1:], i
			return false, nil
		}
		r.fresh &^= bit
	} else {
		rest, more, err := JSONNext(r.b, close)
		r.b = rest
		if err != nil {
			return false, err
		}
		if !more {
			r.depth = i
			return false, nil
		}
	}
	if r.left[i] == 0 {
		return false, ErrTooLarge
	}
	r.left[i]--
	return true, nil
}

func (r *JSONReader) Nil() (bool, error) {
	if !jsonIsNull(r.b) {
		return false, nil
	}
	rest, err := JSONLiteral(r.b, "null")
	r.b = rest
	return err == nil, err
}

// The JSON* functions return their input on a type or range error, which
// leaves the cursor at the value, and the rest at the fault on a syntax error.

func (r *JSONReader) Str() ([]byte, error) {
	s, rest, err := JSONString(r.b, r.arena)
	r.b = rest
	return s, err
}

// PlainStr is JSONPlainString at the cursor: the string there when it has no
// escapes, control characters or bytes above 0x7f, found at memchr speed (long
// base64 strings). ok=false consumes nothing; Str then reads the string.
func (r *JSONReader) PlainStr() (s []byte, ok bool) {
	if len(r.b) == 0 || r.b[0] != '"' {
		return nil, false
	}
	s, rest, ok := JSONPlainString(r.b)
	r.b = rest
	return s, ok
}

// number scans the number at the cursor without consuming it.
func (r *JSONReader) number() (n Number, rest []byte, err error) {
	if len(r.b) == 0 {
		return Number{}, r.b, jsonErr(rUnexpected, nil)
	}
	if c := r.b[0]; c != '-' && !isDigit(c) {
		return Number{}, r.b, ErrWrongType
	}
	n, rest, err = JSONNumber(r.b)
	if err != nil {
		r.b = rest
	}
	return n, rest, err
}

func (r *JSONReader) Int64() (int64, error) {
	n, rest, err := r.number()
	if err != nil {
		return 0, err
	}
	if n.Float {
		return 0, ErrWrongType
	}
	v, ok := n.Int64()
	if !ok {
		return 0, ErrOutOfRange
	}
	r.b = rest
	return v, nil
}

func (r *JSONReader) Uint64(mode Mode) (v uint64, err error) {
	v, r.b, err = jsonUint64(r.b, mode, r.arena)
	return
}

func (r *JSONReader) Float64() (float64, error) {
	n, rest, err := r.number()
	if err != nil {
		return 0, err
	}
	if !n.Float {
		return 0, ErrWrongType
	}
	f, err := strconv.ParseFloat(string(r.b[:len(r.b)-len(rest)]), 64)
	if err != nil {
		return 0, ErrOutOfRange // the grammar was checked: only the range is left
	}
	r.b = rest
	return f, nil
}

func (r *JSONReader) Int32s(dst []int32, max int, hi int64) ([]int32, int, error) {
	return jsonInts(r, dst, func(dst []int32, b []byte) ([]int32, []byte, int, error) { return jsonInt32s(dst, b, max, hi) })
}

func (r *JSONReader) Uint64s(dst []uint64, max int, mode Mode) ([]uint64, int, error) {
	return jsonInts(r, dst, func(dst []uint64, b []byte) ([]uint64, []byte, int, error) {
		return JSONUint64s(dst, b, max, mode, r.arena)
	})
}

// jsonInts has read, an array reader (JSONInt32s, JSONUint64s), read the
// array at the cursor into dst.
func jsonInts[T int32 | uint64](r *JSONReader, dst []T, read func([]T, []byte) ([]T, []byte, int, error)) ([]T, int, error) {
	if err := r.arrayStart(); err != nil {
		return dst, -1, err
	}
	out, rest, bad, err := read(dst, r.b)
	if err != nil {
		return dst, r.arrayFault(err, rest, bad), err
	}
	r.b = rest
	return out, -1, nil
}

// arrayStart checks that an array is at the cursor, for the array readers.
func (r *JSONReader) arrayStart() error {
	switch {
	case len(r.b) == 0:
		return jsonErr(rUnexpected, nil)
	case r.b[0] != '[':
		return ErrWrongType
	}
	return nil
}

// arrayFault places the cursor after an array reader's error and returns the
// index of the element at fault (-1 for the length).
func (r *JSONReader) arrayFault(err error, rest []byte, bad int) int {
	switch {
	case err == ErrTooLarge:
		return -1
	case !isValueErr(err):
		r.b = rest
	}
	return bad
}

func (r *JSONReader) Value() (Value, error) {
	b := r.b
	if len(b) == 0 {
		return Value{}, jsonErr(rUnexpected, nil)
	}
	var v Value
	var rest []byte
	var err error
	switch c := b[0]; {
	case c == '"':
		v.Kind = KindStr
		v.Bytes, rest, err = JSONString(b, r.arena)
	case c == '{' || c == '[':
		v.Kind = KindArray
		if c == '{' {
			v.Kind = KindMap
		}
		rest, err = JSONSkip(b)
		v.Bytes = b[:len(b)-len(rest)]
	case c == 't':
		v = Value{Kind: KindBool, Bool: true}
		rest, err = JSONLiteral(b, "true")
	case c == 'f':
		v.Kind = KindBool
		rest, err = JSONLiteral(b, "false")
	case c == 'n':
		v.Kind = KindNil
		rest, err = JSONLiteral(b, "null")
	case c == '-' || isDigit(c):
		v.Kind = KindInt
		v.Num, rest, err = JSONNumber(b)
		if v.Num.Float {
			v.Kind = KindFloat
		}
	default:
		return Value{}, jsonErr(rUnexpected, b)
	}
	r.b = rest
	if err != nil {
		return Value{}, err
	}
	return v, nil
}

func (r *JSONReader) Skip() error {
	rest, err := JSONSkip(r.b)
	r.b = rest
	return err
}

func (r *JSONReader) Mark() Mark { return Mark{off: len(r.in) - len(r.b), depth: r.depth} }

func (r *JSONReader) Restore(m Mark) { r.b, r.depth = r.in[m.off:], m.depth }

func (r *JSONReader) Offset() int { return len(r.in) - len(r.b) }

func (r *JSONReader) End() bool { return len(JSONWS(r.b)) == 0 }
