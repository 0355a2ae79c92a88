package codec

import "slices"

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
	switch c := r.b[0]; {
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

// enter opens a container of n entries or elements, whose first is at rest.
// outer keeps the counts of the enclosing ones. As for Skip, the depth limit
// counts containers that hold values: an empty one may sit below MaxDepth.
func (r *MsgpackReader) enter(n int, rest []byte) error {
	if r.depth >= MaxDepth && (n != 0 || r.depth > MaxDepth) {
		return errTooDeep
	}
	r.outer[r.depth] = r.left
	r.left = uint32(n)
	r.depth++
	r.b = rest
	return nil
}

// leave closes the innermost container.
func (r *MsgpackReader) leave() {
	r.depth--
	r.left = r.outer[r.depth]
}

func (r *MsgpackReader) EnterMap() (int, error) {
	n, rest, err := ReadMap(r.b)
	if err == nil {
		err = r.enter(n, rest)
	}
	return n, err
}

func (r *MsgpackReader) EnterArray(max int) (int, error) {
	n, rest, err := ReadArray(r.b, max)
	if err == nil {
		err = r.enter(n, rest)
	}
	return n, err
}

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
	// ReadStr's fixstr case again, inline: every key of every dialect is one.
	if b := r.b; len(b) != 0 && b[0]&0xe0 == 0xa0 {
		if n := int(b[0]&0x1f) + 1; n <= len(b) {
			r.b = b[n:]
			return b[1:n:n], true, nil
		}
	}
	key, rest, err := ReadStr(r.b)
	r.b = rest
	return key, true, err
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
	return mpInts(r, dst, max, func(out []int32, p []byte) ([]byte, int, error) { return ReadInt32s(out, p, hi) })
}

func (r *MsgpackReader) Uint64s(dst []uint64, max int, mode Mode) ([]uint64, int, error) {
	return mpInts(r, dst, max, func(out []uint64, p []byte) ([]byte, int, error) { return ReadUint64s(out, p, mode) })
}

// mpInts reads an array header and has read decode its elements into dst's
// new tail (ReadInt32s, ReadUint64s).
func mpInts[T int32 | uint64](r *MsgpackReader, dst []T, max int, read func([]T, []byte) ([]byte, int, error)) ([]T, int, error) {
	n, p, err := ReadArray(r.b, max)
	if err != nil {
		return dst, -1, err
	}
	base := len(dst)
	out := slices.Grow(dst, n)[:base+n]
	rest, bad, err := read(out[base:], p)
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
