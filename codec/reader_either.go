package codec

// EitherReader is the Reader over msgpack or JSON, chosen at Reset, as one
// concrete type. A decoder that reads both formats (wire's dialects) takes it
// rather than the interface: its calls are direct, Next and Kind inline into
// the caller, and the msgpack common cases — a fixstr key or string, a
// positive fixint or uint64, nil, a one-byte or fixstr value to skip — are
// read within the one call, without calling on into the format's reader. The
// nil-or-value readers (StrOrNil, Int64OrNil, Uint64OrNil) save a decoder
// the second call of Nil and then a value. Results, errors and cursor moves
// are exactly the format reader's (TestReaderWalk and its siblings run both
// modes beside JSONReader and MsgpackReader; TestEitherOrNil).
//
// In JSON mode the msgpack reader is reset to an empty input with no open
// container, so its fast paths never apply and need no format test.
//
// The zero value reads an empty msgpack input. An EitherReader is not safe
// for concurrent use.
type EitherReader struct {
	mp   MsgpackReader
	js   JSONReader
	json bool
}

var _ Reader = (*EitherReader)(nil)

// ResetMsgpack starts reading the msgpack document b.
func (r *EitherReader) ResetMsgpack(b []byte) {
	r.json = false
	r.mp.Reset(b)
}

// ResetJSON starts reading the JSON document b, unescaping strings into arena
// (JSONReader.Reset).
func (r *EitherReader) ResetJSON(b []byte, arena *[]byte) {
	r.json = true
	r.mp.Reset(nil)
	r.js.Reset(b, arena)
}

// The methods with a msgpack fast path take it first (in JSON mode it never
// applies), then call the format's reader.

// Next and Kind inline into the caller (within the inliner's budget, which
// their slow halves, kept out of line, would break), with a call only for JSON
// or, for Next, at the end of a msgpack array.
func (r *EitherReader) Next() (ok bool, err error) {
	if r.mp.left == 0 {
		ok, err = r.next()
	} else {
		r.mp.left--
		ok = true
	}
	return
}

//go:noinline
func (r *EitherReader) next() (bool, error) {
	if r.json {
		return r.js.Next()
	}
	return r.mp.Next()
}

func (r *EitherReader) Kind() Kind {
	if b := r.mp.b; len(b) != 0 {
		return mpKinds[b[0]]
	}
	return r.kind()
}

//go:noinline
func (r *EitherReader) kind() Kind {
	if r.json {
		return r.js.Kind()
	}
	return KindInvalid
}

func (r *EitherReader) NextKey() ([]byte, bool, error) {
	switch {
	case r.json: // JSONReader.NextKey, inline: a call less per JSON key
		js := &r.js
		if ok, err := js.next('}', rKey); !ok {
			return nil, false, err
		}
		key, rest, err := JSONKey(js.b, js.arena)
		js.b = rest
		return key, true, err
	case r.mp.left == 0:
		r.mp.leave()
		return nil, false, nil
	}
	if k, ok := r.mp.fixStr(); ok {
		r.mp.left--
		return k, true, nil
	}
	return r.mp.NextKey()
}

func (r *EitherReader) Nil() (bool, error) {
	if r.json {
		return r.js.Nil()
	}
	return r.mp.Nil()
}

func (r *EitherReader) Str() ([]byte, error) {
	if s, ok := r.mp.fixStr(); ok {
		return s, nil
	}
	if r.json {
		return r.js.Str()
	}
	return r.mp.Str()
}

// StrOrNil is Nil and, unless there was one, Str: a nil slice for a nil.
func (r *EitherReader) StrOrNil() ([]byte, error) {
	if s, ok := r.mp.fixStr(); ok {
		return s, nil
	}
	if isNil, _ := r.mp.Nil(); isNil {
		return nil, nil
	}
	if r.json {
		if isNil, err := r.js.Nil(); isNil || err != nil {
			return nil, err
		}
		return r.js.Str()
	}
	return r.mp.Str()
}

func (r *EitherReader) Int64() (int64, error) {
	if b := r.mp.b; len(b) != 0 && b[0] <= 0x7f {
		r.mp.b = b[1:]
		return int64(b[0]), nil
	}
	if r.json {
		return r.js.Int64()
	}
	return r.mp.Int64()
}

// Int64OrNil is Nil and, unless there was one, Int64.
func (r *EitherReader) Int64OrNil() (v int64, isNil bool, err error) {
	if b := r.mp.b; len(b) != 0 && b[0] <= 0x7f {
		r.mp.b = b[1:]
		return int64(b[0]), false, nil
	}
	if isNil, _ = r.mp.Nil(); isNil {
		return 0, true, nil
	}
	if r.json {
		if isNil, err = r.js.Nil(); isNil || err != nil {
			return 0, isNil, err
		}
		v, err = r.js.Int64()
		return v, false, err
	}
	v, err = r.mp.Int64()
	return v, false, err
}

func (r *EitherReader) Uint64(mode Mode) (uint64, error) {
	if v, ok := r.mp.fastUint(); ok {
		return v, nil
	}
	if r.json {
		return r.js.Uint64(mode)
	}
	return r.mp.Uint64(mode)
}

// Uint64OrNil is Nil and, unless there was one, Uint64.
func (r *EitherReader) Uint64OrNil(mode Mode) (v uint64, isNil bool, err error) {
	if v, ok := r.mp.fastUint(); ok {
		return v, false, nil
	}
	if isNil, _ = r.mp.Nil(); isNil {
		return 0, true, nil
	}
	if r.json {
		if isNil, err = r.js.Nil(); isNil || err != nil {
			return 0, isNil, err
		}
		v, err = r.js.Uint64(mode)
		return v, false, err
	}
	v, err = r.mp.Uint64(mode)
	return v, false, err
}

func (r *EitherReader) Skip() error {
	if r.mp.skipFast() {
		return nil
	}
	if r.json {
		return r.js.Skip()
	}
	return r.mp.Skip()
}

// PlainStr is JSONReader.PlainStr in JSON mode; in msgpack mode it reads
// nothing (ok=false).
func (r *EitherReader) PlainStr() (s []byte, ok bool) {
	if r.json {
		return r.js.PlainStr()
	}
	return nil, false
}

// The rest call the format's reader.

func (r *EitherReader) EnterMap() (int, error) {
	if r.json {
		return r.js.EnterMap()
	}
	return r.mp.enter(ReadMap(r.mp.b))
}

func (r *EitherReader) EnterArray(max int) (int, error) {
	if r.json {
		return r.js.EnterArray(max)
	}
	return r.mp.enter(ReadArray(r.mp.b, max))
}

func (r *EitherReader) Float64() (float64, error) {
	if r.json {
		return r.js.Float64()
	}
	return r.mp.Float64()
}

func (r *EitherReader) Int32s(dst []int32, max int, hi int64) ([]int32, int, error) {
	if r.json {
		return r.js.Int32s(dst, max, hi)
	}
	return r.mp.Int32s(dst, max, hi)
}

func (r *EitherReader) Uint64s(dst []uint64, max int, mode Mode) ([]uint64, int, error) {
	if r.json {
		return r.js.Uint64s(dst, max, mode)
	}
	return r.mp.Uint64s(dst, max, mode)
}

func (r *EitherReader) Value() (Value, error) {
	if r.json {
		return r.js.Value()
	}
	return r.mp.Value()
}

func (r *EitherReader) Mark() Mark {
	if r.json {
		return r.js.Mark()
	}
	return r.mp.Mark()
}

func (r *EitherReader) Restore(m Mark) {
	if r.json {
		r.js.Restore(m)
		return
	}
	r.mp.Restore(m)
}

func (r *EitherReader) Offset() int {
	if r.json {
		return r.js.Offset()
	}
	return r.mp.Offset()
}

func (r *EitherReader) End() bool {
	if r.json {
		return r.js.End()
	}
	return r.mp.End()
}
