package codec

import (
	"encoding/binary"
	"slices"
)

// MsgpackReader is the Reader over msgpack, on the Read* functions of this
// package. The zero value reads an empty input; Reset starts a document.
type MsgpackReader struct {
	in    []byte
	b     []byte // the unread rest
	left  uint32 // entries or elements of the innermost open container not yet stepped to
	depth int    // containers open
	outer [MaxDepth + 1]uint32
}

var _ Reader = (*MsgpackReader)(nil)

// Reset starts reading b, whose first value is at the cursor.
func (r *MsgpackReader) Reset(b []byte) { r.in, r.b, r.left, r.depth = b, b, 0, 0 }

// Kind classifies the lead byte.
func (r *MsgpackReader) Kind() Kind {
	if len(r.b) == 0 {
		return KindInvalid
	}
	return mpKinds[r.b[0]]
}

// mpKinds is mpKind by lead byte.
var mpKinds = func() (t [256]Kind) {
	for c := range t {
		t[c] = mpKind(byte(c))
	}
	return t
}()

func mpKind(c byte) Kind {
	switch {
	case IsIntLead(c):
		return KindInt
	case IsStrLead(c):
		return KindStr
	case IsMapLead(c):
		return KindMap
	case IsArrayLead(c):
		return KindArray
	case c == Nil:
		return KindNil
	case c == 0xc2 || c == 0xc3:
		return KindBool
	case IsBinLead(c):
		return KindBin
	case IsFloatLead(c):
		return KindFloat
	case c == 0xc1:
		return KindInvalid
	}
	return KindExt
}

// enter opens a container of n entries or elements, whose first is at rest,
// where err (ReadMap's, ReadArray's) is nil. outer keeps the counts of the
// enclosing ones. As for Skip, the depth limit counts containers that hold
// values: an empty one may sit below MaxDepth.
func (r *MsgpackReader) enter(n int, rest []byte, err error) (int, error) {
	if err != nil {
		return n, err
	}
	if r.depth >= MaxDepth && (n != 0 || r.depth > MaxDepth) {
		return n, errTooDeep
	}
	r.outer[r.depth] = r.left
	r.left = uint32(n)
	r.depth++
	r.b = rest
	return n, nil
}

// leave closes the innermost container.
func (r *MsgpackReader) leave() {
	r.depth--
	r.left = r.outer[r.depth]
}

func (r *MsgpackReader) EnterMap() (int, error) { return r.enter(ReadMap(r.b)) }

func (r *MsgpackReader) EnterArray(max int) (int, error) { return r.enter(ReadArray(r.b, max)) }

func (r *MsgpackReader) Next() (bool, error) {
	if r.left == 0 {
		r.leave()
		return false, nil
	}
	r.left--
	return true, nil
}

func (r *MsgpackReader) NextKey() ([]byte, bool, error) {
	if r.left == 0 {
		r.leave()
		return nil, false, nil
	}
	r.left--
	if key, ok := r.fixStr(); ok { // every key of every dialect
		return key, true, nil
	}
	key, rest, err := ReadStr(r.b)
	r.b = rest
	return key, true, err
}

// EitherReader's fast paths (fixStr also NextKey's): each reads the common
// case or reports false having consumed nothing.

// fixStr reads a whole fixstr (ReadStr's first case).
func (r *MsgpackReader) fixStr() ([]byte, bool) {
	if b := r.b; len(b) != 0 && b[0]&0xe0 == 0xa0 {
		if n := int(b[0]&0x1f) + 1; n <= len(b) {
			r.b = b[n:]
			return b[1:n:n], true
		}
	}
	return nil, false
}

// fastUint reads a positive fixint or a whole uint64, the forms every Mode
// takes as they are (readUint64).
func (r *MsgpackReader) fastUint() (uint64, bool) {
	switch b := r.b; {
	case len(b) != 0 && b[0] <= 0x7f:
		r.b = b[1:]
		return uint64(b[0]), true
	case len(b) >= 9 && b[0] == 0xcf:
		r.b = b[9:]
		return binary.BigEndian.Uint64(b[1:]), true
	}
	return 0, false
}

// skipFast skips a one-byte value (fixint, nil, bool) or a whole fixstr, as
// Skip (mpValueHeader) would.
func (r *MsgpackReader) skipFast() bool {
	b := r.b
	if len(b) == 0 {
		return false
	}
	switch c := b[0]; {
	case c <= 0x7f || c >= 0xe0 || c == Nil || c == 0xc2 || c == 0xc3:
		r.b = b[1:]
		return true
	case c&0xe0 == 0xa0 && int(c&0x1f) < len(b):
		r.b = b[1+int(c&0x1f):]
		return true
	}
	return false
}

func (r *MsgpackReader) Nil() (bool, error) {
	if len(r.b) != 0 && r.b[0] == Nil {
		r.b = r.b[1:]
		return true, nil
	}
	return false, nil
}

// Every Read* function returns its input on error, which leaves the cursor at
// the value.

func (r *MsgpackReader) Str() ([]byte, error) {
	s, rest, err := ReadStr(r.b)
	r.b = rest
	return s, err
}

func (r *MsgpackReader) Int64() (int64, error) {
	v, rest, err := ReadInt(r.b)
	r.b = rest
	return v, err
}

func (r *MsgpackReader) Uint64(mode Mode) (uint64, error) {
	v, rest, err := readUint64(r.b, mode)
	r.b = rest
	return v, err
}

func (r *MsgpackReader) Float64() (float64, error) {
	v, rest, err := readFloat(r.b)
	r.b = rest
	return v, err
}

func (r *MsgpackReader) Int32s(dst []int32, max int, hi int64) ([]int32, int, error) {
	n, p, err := ReadArray(r.b, max)
	if err != nil {
		return dst, -1, err
	}
	out := slices.Grow(dst, n)[:len(dst)+n]
	p, bad, err := ReadInt32s(out[len(dst):], p, hi)
	return mpFilled(r, dst, out, p, bad, err)
}

func (r *MsgpackReader) Uint64s(dst []uint64, max int, mode Mode) ([]uint64, int, error) {
	n, p, err := ReadArray(r.b, max)
	if err != nil {
		return dst, -1, err
	}
	out := slices.Grow(dst, n)[:len(dst)+n]
	p, bad, err := ReadUint64s(out[len(dst):], p, mode)
	return mpFilled(r, dst, out, p, bad, err)
}

// mpFilled ends an array reader: out, dst with the elements read, and the
// cursor after the array, or on the element reader's error dst and the
// cursor placed by failAt.
func mpFilled[T int32 | uint64](r *MsgpackReader, dst, out []T, rest []byte, bad int, err error) ([]T, int, error) {
	if err != nil {
		r.failAt(err, rest)
		return dst, bad, err
	}
	r.b = rest
	return out, -1, nil
}

// failAt moves the cursor to a syntax error's position; after a type or
// range error it stays at the value.
func (r *MsgpackReader) failAt(err error, rest []byte) {
	if !isValueErr(err) {
		r.b = rest
	}
}

func (r *MsgpackReader) Value() (Value, error) {
	b := r.b
	if len(b) == 0 {
		return Value{}, ErrTruncated
	}
	var v Value
	var rest []byte
	var err error
	switch c := b[0]; {
	case c == Nil:
		v, rest = Value{Kind: KindNil}, b[1:]
	case c == 0xc2 || c == 0xc3:
		v, rest = Value{Kind: KindBool, Bool: c == 0xc3}, b[1:]
	case IsStrLead(c):
		v.Kind = KindStr
		v.Bytes, rest, err = ReadStr(b)
	case IsBinLead(c):
		v.Kind = KindBin
		v.Bytes, rest, err = ReadBin(b)
	case IsUintLead(c):
		v.Kind = KindInt
		v.Num.Mag, rest, err = ReadUint(b)
	case IsIntLead(c):
		var i int64
		i, rest, err = ReadInt(b)
		v = Value{Kind: KindInt, Num: Number{Mag: uint64(i), Neg: i < 0}}
		if i < 0 {
			v.Num.Mag = -v.Num.Mag // two's complement: also right for math.MinInt64
		}
	default:
		rest, err = Skip(b)
		v.Kind = r.Kind()
		switch v.Kind {
		case KindFloat:
			v.Num.Float = true
		case KindMap, KindArray:
			v.Bytes = b[:len(b)-len(rest)]
		}
	}
	if err != nil {
		r.failAt(err, rest)
		return Value{}, err
	}
	r.b = rest
	return v, nil
}

func (r *MsgpackReader) Skip() error {
	rest, err := Skip(r.b)
	r.b = rest
	return err
}

func (r *MsgpackReader) Mark() Mark { return Mark{len(r.in) - len(r.b), r.depth, r.left} }

func (r *MsgpackReader) Restore(m Mark) { r.b, r.depth, r.left = r.in[m.off:], m.depth, m.left }

func (r *MsgpackReader) Offset() int { return len(r.in) - len(r.b) }

func (r *MsgpackReader) End() bool { return len(r.b) == 0 }
