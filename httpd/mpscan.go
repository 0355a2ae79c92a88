package httpd

import (
	"encoding/binary"
	"math"
	"strconv"

	"github.com/tinylib/msgp/msgp"
)

// maxMsgpackDepth bounds nesting inside skipped msgpack values.
const maxMsgpackDepth = 64

// mpReader is the msgpack dialect's reader over one map, built on tinylib/msgp's
// zero-copy byte readers plus a hand-rolled token loop.
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
	if !isMapPrefix(b[0]) {
		if _, ok := mpSkip(b, 0); ok {
			r.fail(msgNotAMap)
		} else {
			r.fail(msgInvalidMsgpack)
		}
		return
	}
	n, rest, err := msgp.ReadMapHeaderBytes(b)
	if err != nil {
		r.fail(msgInvalidMsgpack)
		return
	}
	r.n, r.b = n, rest
}

func (r *mpReader) err() *RequestError { return r.syntax }

func (r *mpReader) sub(raw []byte) reader {
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

func isMapPrefix(c byte) bool { return c&0xf0 == 0x80 || c == 0xde || c == 0xdf }
func isStrPrefix(c byte) bool { return c&0xe0 == 0xa0 || (c >= 0xd9 && c <= 0xdb) }

func (r *mpReader) nextKey() ([]byte, bool) {
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
	if !isStrPrefix(r.b[0]) {
		if _, ok := mpSkip(r.b, 0); ok {
			r.fail(msgKeysNotStrings)
		} else {
			r.fail(msgInvalidMsgpack)
		}
		return nil, false
	}
	key, rest, err := msgp.ReadStringZC(r.b)
	if err != nil {
		r.fail(msgInvalidMsgpack)
		return nil, false
	}
	r.b = rest
	return key, true
}

func (r *mpReader) skip() {
	if r.syntax != nil {
		return
	}
	rest, ok := mpSkip(r.b, 0)
	if !ok {
		r.fail(msgInvalidMsgpack)
		return
	}
	r.b = rest
}

func (r *mpReader) value() value {
	if r.syntax != nil {
		return value{}
	}
	b := r.b
	if len(b) == 0 {
		r.fail(msgInvalidMsgpack)
		return value{}
	}
	c := b[0]
	var v value
	var rest []byte
	var err error
	switch {
	case c <= 0x7f:
		v, rest = value{kind: kindInt, i: int64(c)}, b[1:]
	case c >= 0xe0:
		v, rest = value{kind: kindInt, i: int64(int8(c))}, b[1:]
	case c == 0xc0:
		v, rest = value{kind: kindNil}, b[1:]
	case c == 0xc2 || c == 0xc3:
		v, rest = value{kind: kindBool, b: c == 0xc3}, b[1:]
	case isStrPrefix(c):
		v.kind = kindStr
		v.s, rest, err = msgp.ReadStringZC(b)
	case c >= 0xc4 && c <= 0xc6:
		v.kind = kindBin
		v.s, rest, err = msgp.ReadBytesZC(b)
	case c >= 0xcc && c <= 0xcf:
		var u uint64
		u, rest, err = msgp.ReadUint64Bytes(b)
		if u <= math.MaxInt64 {
			v = value{kind: kindInt, i: int64(u)}
		} else {
			v = value{kind: kindUint, u: u}
		}
	case c >= 0xd0 && c <= 0xd3:
		v.kind = kindInt
		v.i, rest, err = msgp.ReadInt64Bytes(b)
	default:
		var ok bool
		rest, ok = mpSkip(b, 0)
		if !ok {
			r.fail(msgInvalidMsgpack)
			return value{}
		}
		switch {
		case c == 0xca || c == 0xcb:
			v.kind = kindFloat
		case isMapPrefix(c):
			v = value{kind: kindMap, s: b[:len(b)-len(rest)]}
		case c&0xf0 == 0x90 || c == 0xdc || c == 0xdd:
			v = value{kind: kindArray, s: b[:len(b)-len(rest)]}
		default:
			v.kind = kindOther
		}
	}
	if err != nil {
		r.fail(msgInvalidMsgpack)
		return value{}
	}
	r.b = rest
	return v
}

// mpSkip returns b after one complete msgpack object, or ok=false when b does
// not start with one. Every length is checked against the bytes left before it
// is used, and nesting is bounded by maxMsgpackDepth.
func mpSkip(b []byte, depth int) ([]byte, bool) {
	if len(b) == 0 {
		return b, false
	}
	c := b[0]
	hdr, payload, children := 1, 0, 0
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
	case c <= 0x8f:
		children = 2 * int(c&0x0f)
	case c <= 0x9f:
		children = int(c & 0x0f)
	case c <= 0xbf:
		payload = int(c & 0x1f)
	default:
		var lenBytes int
		switch c {
		case 0xc4, 0xd9:
			lenBytes = 1
		case 0xc5, 0xda:
			lenBytes = 2
		case 0xc6, 0xdb:
			lenBytes = 4
		case 0xc7: // ext8: len, type
			lenBytes, payload = 1, 1
		case 0xc8:
			lenBytes, payload = 2, 1
		case 0xc9:
			lenBytes, payload = 4, 1
		case 0xca:
			payload = 4
		case 0xcb:
			payload = 8
		case 0xcc, 0xd0:
			payload = 1
		case 0xcd, 0xd1:
			payload = 2
		case 0xce, 0xd2:
			payload = 4
		case 0xcf, 0xd3:
			payload = 8
		case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1,2,4,8,16 (+1 type byte)
			payload = 1 + 1<<(c-0xd4)
		case 0xdc, 0xde:
			lenBytes = 2
		case 0xdd, 0xdf:
			lenBytes = 4
		default: // 0xc1: never used
			return b, false
		}
		if len(b) < 1+lenBytes {
			return b, false
		}
		var n int
		switch lenBytes {
		case 1:
			n = int(b[1])
		case 2:
			n = int(binary.BigEndian.Uint16(b[1:]))
		case 4:
			n = int(binary.BigEndian.Uint32(b[1:]))
		}
		hdr += lenBytes
		switch c {
		case 0xdc, 0xdd:
			children = n
		case 0xde, 0xdf:
			children = 2 * n
		default:
			payload += n
		}
	}
	if len(b)-hdr < payload {
		return b, false
	}
	b = b[hdr+payload:]
	if children == 0 {
		return b, true
	}
	if depth >= maxMsgpackDepth || children > len(b) { // every child takes ≥ 1 byte
		return b, false
	}
	for ; children > 0; children-- {
		var ok bool
		if b, ok = mpSkip(b, depth+1); !ok {
			return b, false
		}
	}
	return b, true
}

// arrayHeader decodes an array header at b, or ok=false when b holds no array
// prefix. n is not yet checked against the bytes left.
func arrayHeader(b []byte) (n int, rest []byte, isArray, ok bool) {
	if len(b) == 0 {
		return 0, b, false, false
	}
	switch c := b[0]; {
	case c&0xf0 == 0x90:
		return int(c & 0x0f), b[1:], true, true
	case c == 0xdc:
		if len(b) < 3 {
			return 0, b, true, false
		}
		return int(binary.BigEndian.Uint16(b[1:])), b[3:], true, true
	case c == 0xdd:
		if len(b) < 5 {
			return 0, b, true, false
		}
		return int(binary.BigEndian.Uint32(b[1:])), b[5:], true, true
	}
	return 0, b, false, true
}

// mpInt decodes one msgpack integer at b[p:]. isInt=false for any other type;
// ok=false when the bytes are cut short. Values above MaxInt64 are reported
// with big=true (their magnitude does not fit v).
func mpInt(b []byte, p int) (v int64, u uint64, next int, isInt, big, ok bool) {
	c := b[p]
	switch {
	case c <= 0x7f:
		return int64(c), uint64(c), p + 1, true, false, true
	case c >= 0xe0:
		return int64(int8(c)), 0, p + 1, true, false, true
	}
	var size int
	switch c {
	case 0xcc, 0xd0:
		size = 1
	case 0xcd, 0xd1:
		size = 2
	case 0xce, 0xd2:
		size = 4
	case 0xcf, 0xd3:
		size = 8
	default:
		return 0, 0, p, false, false, true
	}
	if len(b)-p-1 < size {
		return 0, 0, p, true, false, false
	}
	d := b[p+1:]
	next = p + 1 + size
	switch c {
	case 0xcc:
		return int64(d[0]), uint64(d[0]), next, true, false, true
	case 0xcd:
		x := binary.BigEndian.Uint16(d)
		return int64(x), uint64(x), next, true, false, true
	case 0xce:
		x := binary.BigEndian.Uint32(d)
		return int64(x), uint64(x), next, true, false, true
	case 0xcf:
		x := binary.BigEndian.Uint64(d)
		return int64(x), x, next, true, x > math.MaxInt64, true
	case 0xd0:
		return int64(int8(d[0])), 0, next, true, false, true
	case 0xd1:
		return int64(int16(binary.BigEndian.Uint16(d))), 0, next, true, false, true
	case 0xd2:
		return int64(int32(binary.BigEndian.Uint32(d))), 0, next, true, false, true
	default: // 0xd3
		return int64(binary.BigEndian.Uint64(d)), 0, next, true, false, true
	}
}

func countErr(field string, max int) *RequestError {
	return reqErr(ErrOutOfRange, field, field+" has more than "+strconv.Itoa(max)+" elements")
}

// int32s accepts an array of msgpack integers in int32 range, or a bin whose
// length is a multiple of 4 holding little-endian int32s (any bit pattern). An
// aligned bin is returned as a zero-copy view of the body.
func (r *mpReader) int32s(buf *[]int32, field string, max int) ([]int32, *RequestError) {
	dst := (*buf)[:0]
	if r.syntax != nil {
		return dst, nil
	}
	b := r.b
	if len(b) == 0 {
		r.fail(msgInvalidMsgpack)
		return dst, nil
	}
	if c := b[0]; c >= 0xc4 && c <= 0xc6 {
		bin, rest, err := msgp.ReadBytesZC(b)
		if err != nil {
			r.fail(msgInvalidMsgpack)
			return dst, nil
		}
		r.b = rest
		if len(bin)%4 != 0 {
			return dst, reqErr(ErrInvalidValue, field, field+" bin size must be a multiple of 4")
		}
		n := len(bin) / 4
		if n > max {
			return dst, countErr(field, max)
		}
		if v, ok := int32View(bin); ok {
			return v, nil
		}
		if cap(dst) < n {
			dst = make([]int32, n)
		}
		dst = dst[:n]
		if littleEndian {
			copy(int32Bytes(dst), bin) // unaligned bin: one memmove
		} else {
			for i := range dst {
				dst[i] = int32(binary.LittleEndian.Uint32(bin[4*i:]))
			}
		}
		*buf = dst[:0]
		return dst, nil
	}
	n, p, aerr, ok := r.arrayFor(field, " must be a bin or an array", max)
	if !ok {
		return dst, aerr
	}
	if cap(dst) < n {
		dst = make([]int32, n)
	}
	dst = dst[:n]
	*buf = dst[:0]
	off, fe := decodeInt32Array(dst, p)
	switch {
	case off < 0:
		r.fail(msgInvalidMsgpack)
		return dst[:0], nil
	case fe.reason != nil:
		msg := field + " element must be a 32-bit signed integer"
		if fe.reason == ErrInvalidType {
			msg = field + " element must be an integer"
		}
		return dst[:0], r.failElems(p, off, n-fe.index-fe.skipFrom, elemErr(fe.reason, field, fe.index, msg))
	}
	r.b = p[off:]
	return dst, nil
}

// arrayFor reads the array header of field's value: n elements starting at p.
// ok=false means the caller returns fe at once: nil after a syntax error
// (recorded in r), else the field error (invalid_type with "field"+notArray,
// or too many elements) after skipping the value. Counts are checked against
// the remaining bytes before anything is allocated.
func (r *mpReader) arrayFor(field, notArray string, max int) (n int, p []byte, fe *RequestError, ok bool) {
	n, p, isArray, ok := arrayHeader(r.b)
	switch {
	case !ok:
		r.fail(msgInvalidMsgpack)
		return 0, nil, nil, false
	case !isArray:
		r.skip()
		return 0, nil, reqErr(ErrInvalidType, field, field+notArray), false
	case n > len(p):
		r.fail(msgInvalidMsgpack)
		return 0, nil, nil, false
	case n > max:
		r.skip()
		return 0, nil, countErr(field, max), false
	}
	return n, p, nil, true
}

// failElems skips the remaining k array elements starting at p[off:] and
// returns fe (or records a syntax error, which wins).
func (r *mpReader) failElems(p []byte, off, k int, fe *RequestError) *RequestError {
	p = p[off:]
	for ; k > 0; k-- {
		var ok bool
		if p, ok = mpSkip(p, 1); !ok {
			r.fail(msgInvalidMsgpack)
			return nil
		}
	}
	r.b = p
	return fe
}

// uint64s accepts an array of msgpack integers in 0..2^64-1 (negative →
// out_of_range, non-integer → invalid_type, both with the element index).
func (r *mpReader) uint64s(buf *[]uint64, field string, max int) ([]uint64, *RequestError) {
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
	off := 0
	for i := 0; i < n; i++ {
		if off >= len(p) {
			r.fail(msgInvalidMsgpack)
			return dst[:0], nil
		}
		v, u, next, isInt, big, ok := mpInt(p, off)
		switch {
		case !ok:
			r.fail(msgInvalidMsgpack)
			return dst[:0], nil
		case !isInt:
			return dst[:0], r.failElems(p, off, n-i, elemErr(ErrInvalidType, field, i, field+" element must be an integer"))
		case big:
			dst[i] = u
		case v < 0:
			return dst[:0], r.failElems(p, next, n-i-1, elemErr(ErrOutOfRange, field, i, field+" element must be an unsigned 64-bit integer"))
		default:
			dst[i] = uint64(v)
		}
		off = next
	}
	r.b = p[off:]
	return dst, nil
}

// elemFault describes the first bad element of a token array: reason, index,
// and whether the element itself is still to be skipped (skipFrom 0) or was
// consumed (1).
type elemFault struct {
	reason   error
	index    int
	skipFrom int
}

// decodeInt32Array decodes len(dst) msgpack integers from p into dst and
// returns the offset after them. off < 0 means p is cut short or malformed; a
// fault leaves off at the element to skip from. Every integer encoding is
// decoded inline (encoders differ: Python's msgpack writes uint8/16/32 for
// positive ids, tinylib/msgp int16/int32); only 64-bit forms and non-integers
// take the slow path.
func decodeInt32Array(dst []int32, p []byte) (off int, fe elemFault) {
	for i := range dst {
		// Fast path: with 5 bytes left every fixint / 8-16-32-bit form is in
		// bounds, and one slice expression covers all the loads.
		if len(p)-off >= 5 {
			q := p[off : off+5 : off+5]
			switch c := q[0]; {
			case c <= 0x7f:
				dst[i] = int32(c)
				off++
				continue
			case c == 0xd2:
				dst[i] = int32(binary.BigEndian.Uint32(q[1:]))
				off += 5
				continue
			case c == 0xce:
				if v := binary.BigEndian.Uint32(q[1:]); v <= math.MaxInt32 {
					dst[i] = int32(v)
					off += 5
					continue
				}
			case c == 0xcd:
				dst[i] = int32(uint16(q[1])<<8 | uint16(q[2]))
				off += 3
				continue
			case c == 0xd1:
				dst[i] = int32(int16(uint16(q[1])<<8 | uint16(q[2])))
				off += 3
				continue
			}
		}
		if off >= len(p) {
			return -1, fe
		}
		c := p[off]
		if c <= 0x7f {
			dst[i] = int32(c)
			off++
			continue
		}
		if c >= 0xe0 {
			dst[i] = int32(int8(c))
			off++
			continue
		}
		switch c {
		case 0xcc, 0xd0:
			if len(p)-off < 2 {
				return -1, fe
			}
			if c == 0xcc {
				dst[i] = int32(p[off+1])
			} else {
				dst[i] = int32(int8(p[off+1]))
			}
			off += 2
		case 0xcd, 0xd1:
			if len(p)-off < 3 {
				return -1, fe
			}
			v := uint16(p[off+1])<<8 | uint16(p[off+2])
			if c == 0xcd {
				dst[i] = int32(v)
			} else {
				dst[i] = int32(int16(v))
			}
			off += 3
		case 0xce, 0xd2:
			if len(p)-off < 5 {
				return -1, fe
			}
			v := binary.BigEndian.Uint32(p[off+1 : off+5])
			if c == 0xce && v > math.MaxInt32 {
				return off + 5, elemFault{reason: ErrOutOfRange, index: i, skipFrom: 1}
			}
			dst[i] = int32(v)
			off += 5
		default:
			v, _, next, isInt, big, ok := mpInt(p, off)
			switch {
			case !ok:
				return -1, fe
			case !isInt:
				return off, elemFault{reason: ErrInvalidType, index: i}
			case big || v > math.MaxInt32 || v < math.MinInt32:
				return next, elemFault{reason: ErrOutOfRange, index: i, skipFrom: 1}
			}
			dst[i] = int32(v)
			off = next
		}
	}
	return off, fe
}
