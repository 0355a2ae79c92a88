package dump

import (
	"errors"
	"strconv"

	"github.com/seed-c7a81618/conductor/codec"
)

// object walks one JSON object of a dump (an event, a stream head, a nested
// object of an event) key by key on codec's strict reader, without
// encoding/json: integers are exact, strings without escapes are views of
// the input and escaped ones are unescaped into *arena. The first syntax
// error is kept in err and ends the walk; nesting and every other limit are
// codec's.
type object struct {
	b     []byte // the input the object is in
	pos   int    // the read position in b
	state uint8  // 0: before the first key, 1: after a key or value, 2: done
	root  bool   // only whitespace may follow the object
	err   error
	arena *[]byte
}

// member is one decoded value: s is a string's text or the raw encoding of
// an array or object; n is a number.
type member struct {
	kind memberKind
	s    []byte
	n    codec.Number
	b    bool
}

type memberKind uint8

const (
	mInvalid memberKind = iota // after a syntax error
	mNull
	mBool
	mNumber
	mString
	mArray
	mObject
)

// openObject returns a reader over the object raw (nothing may follow it).
func openObject(raw []byte, arena *[]byte) *object {
	o := &object{b: raw, root: true, arena: arena}
	o.at(codec.JSONWS(raw))
	switch {
	case o.pos >= len(raw):
		o.fail("empty body")
	case raw[o.pos] != '{':
		o.fail("not a JSON object")
	default:
		o.pos++
	}
	return o
}

// openArray returns a reader positioned on the array raw, for arrayStart.
func openArray(raw []byte, arena *[]byte) *object {
	return &object{b: raw, root: true, arena: arena}
}

// fail records the first syntax error, at the read position.
func (o *object) fail(msg string) {
	if o.err == nil {
		o.err = errors.New("invalid JSON: " + msg + " at offset " + strconv.Itoa(o.pos))
	}
	o.state = 2
}

// failAt records codec's err, found where rest begins.
func (o *object) failAt(err error, rest []byte) {
	o.at(rest)
	o.fail(err.Error())
}

func (o *object) rest() []byte   { return o.b[o.pos:] }
func (o *object) at(rest []byte) { o.pos = len(o.b) - len(rest) }

// peek returns the byte at the read position, or 0 at the end.
func (o *object) peek() byte {
	if o.pos < len(o.b) {
		return o.b[o.pos]
	}
	return 0
}

// next returns the next key; ok=false at the end of the object or after a
// syntax error. The caller consumes the key's value (value, skip, uint64s or
// enter) before it asks for the next key.
func (o *object) next() (key []byte, ok bool) {
	if o.state == 2 {
		return nil, false
	}
	b := codec.JSONWS(o.rest())
	end := false
	switch {
	case o.state == 1:
		var more bool
		var err error
		if b, more, err = codec.JSONNext(b, '}'); err != nil {
			o.failAt(err, b)
			return nil, false
		}
		end = !more
	case len(b) != 0 && b[0] == '}':
		b, end = b[1:], true
	}
	if end {
		o.at(b)
		o.state = 2
		if o.root && len(codec.JSONWS(b)) != 0 {
			o.at(codec.JSONWS(b))
			o.fail("trailing data after the JSON object")
		}
		return nil, false
	}
	key, b, err := codec.JSONKey(b, o.arena)
	if err != nil {
		o.failAt(err, b)
		return nil, false
	}
	o.at(b)
	o.state = 1
	return key, true
}

// value decodes the value at the read position.
func (o *object) value() member {
	if o.err != nil {
		return member{}
	}
	b := o.rest()
	var m member
	var rest []byte
	var err error
	switch c := o.peek(); {
	case c == '"':
		m.kind = mString
		m.s, rest, err = codec.JSONString(b, o.arena)
	case c == '{' || c == '[':
		m.kind = mArray
		if c == '{' {
			m.kind = mObject
		}
		rest, err = codec.JSONSkip(b)
		m.s = b[:len(b)-len(rest)]
	case c == 't' || c == 'f':
		m = member{kind: mBool, b: c == 't'}
		lit := "false"
		if m.b {
			lit = "true"
		}
		rest, err = codec.JSONLiteral(b, lit)
	case c == 'n':
		m.kind = mNull
		rest, err = codec.JSONLiteral(b, "null")
	case c == '-' || c-'0' < 10:
		m.kind = mNumber
		m.n, rest, err = codec.JSONNumber(b)
	default:
		o.fail("unexpected character")
		return member{}
	}
	if err != nil {
		o.failAt(err, rest)
		return member{}
	}
	o.at(rest)
	return m
}

// skip consumes and validates the value at the read position.
func (o *object) skip() {
	if o.err != nil {
		return
	}
	rest, err := codec.JSONSkip(o.rest())
	if err != nil {
		o.failAt(err, rest)
		return
	}
	o.at(rest)
}

// uint64s appends the array of unsigned 64-bit integers at the read
// position to dst. A value that is not such an array (not an array, a wrong
// element, more than max elements) is consumed and reported as bad.
func (o *object) uint64s(dst []uint64, max int) (out []uint64, bad bool) {
	if o.err != nil {
		return dst, false
	}
	if o.peek() != '[' {
		o.skip()
		return dst, true
	}
	out, rest, _, err := codec.JSONUint64s(dst, o.rest(), max, codec.Unsigned, o.arena)
	switch {
	case err == nil:
		o.at(rest)
		return out, false
	case err == codec.ErrWrongType || err == codec.ErrOutOfRange || err == codec.ErrTooLarge:
		o.skip()
		return out, o.err == nil
	}
	o.failAt(err, rest)
	return out, false
}

// arrayStart consumes '[' and reports whether the array is empty (then ']'
// is consumed too). A value that is not an array is consumed: ok=false.
func (o *object) arrayStart() (empty, ok bool) {
	if o.peek() != '[' {
		o.skip()
		return false, false
	}
	o.pos++
	o.at(codec.JSONWS(o.rest()))
	if o.peek() == ']' {
		o.pos++
		return true, true
	}
	return false, true
}

// arrayNext consumes the separator after an element: more=false after ']'.
func (o *object) arrayNext() (more bool) {
	rest, more, err := codec.JSONNext(o.rest(), ']')
	if err != nil {
		o.failAt(err, rest)
		return false
	}
	o.at(rest)
	return more
}

// enter returns a reader over the object at the read position that reads it
// in place (no skip and re-read); ok=false (and the value skipped) when the
// value is not an object. Once the sub-reader has returned its last key,
// o.leave(&sub) continues after the object.
func (o *object) enter() (sub object, ok bool) {
	if o.err != nil {
		return object{}, false
	}
	if o.peek() != '{' {
		o.skip()
		return object{}, false
	}
	return object{b: o.b, pos: o.pos + 1, arena: o.arena}, true
}

// leave resumes o after an object read through enter.
func (o *object) leave(sub *object) {
	switch {
	case sub.err != nil:
		if o.err == nil {
			o.err = sub.err
		}
		o.state = 2
	case sub.state != 2:
		o.fail("nested object not read to its end")
	default:
		o.pos = sub.pos
	}
}

// u64 is m as an unsigned 64-bit integer (0, false when it is none).
func (m *member) u64() (uint64, bool) {
	switch i, ok := m.n.Int64(); {
	case m.kind != mNumber:
	case ok && i >= 0:
		return uint64(i), true
	case !ok && !m.n.Float && !m.n.Big && !m.n.Neg:
		return m.n.Mag, true
	}
	return 0, false
}

// int32 is m as a non-negative 32-bit integer (0, false when it is none).
func (m *member) int32() (int32, bool) {
	if i, ok := m.n.Int64(); m.kind == mNumber && ok && i >= 0 && i <= 1<<31-1 {
		return int32(i), true
	}
	return 0, false
}
