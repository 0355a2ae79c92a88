package codec

import (
	"encoding/binary"
	"math"
)

// ReadInt32s decodes len(dst) msgpack integers from b into dst (the elements of
// an array whose header the caller read) and returns the rest after them.
// Values may be as large as hi (math.MaxInt32, or math.MaxUint32 where token
// ids are u32) and as small as math.MinInt32, and are stored as their low 32
// bits. On error bad is the element's index and rest starts at it: ErrWrongType
// for a non-integer, ErrOutOfRange, ErrTruncated, ErrSyntax (lead byte 0xc1).
//
// Every integer encoding is decoded inline (encoders differ: Python's msgpack
// and msgspec write uint8/16/32 for positive ids, tinylib/msgp int8/16/32);
// only 64-bit forms and non-integers take the slow path.
func ReadInt32s(dst []int32, b []byte, hi int64) (rest []byte, bad int, err error) {
	off := 0
	for i := range dst {
		// Fast path: with 5 bytes left every fixint / 8-16-32-bit form is in
		// bounds, and one slice expression covers all the loads.
		if len(b)-off >= 5 {
			q := b[off : off+5 : off+5]
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
				if v := binary.BigEndian.Uint32(q[1:]); int64(v) <= hi {
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
		if off >= len(b) {
			return b[off:], i, ErrTruncated
		}
		switch c := b[off]; {
		case c <= 0x7f:
			dst[i] = int32(c)
			off++
		case c >= 0xe0:
			dst[i] = int32(int8(c))
			off++
		case c == 0xcc && len(b)-off >= 2:
			dst[i] = int32(b[off+1])
			off += 2
		case c == 0xd0 && len(b)-off >= 2:
			dst[i] = int32(int8(b[off+1]))
			off += 2
		default:
			v, r, err := ReadInt(b[off:])
			switch {
			case err != nil:
				return b[off:], i, err
			case v > hi || v < math.MinInt32:
				return b[off:], i, ErrOutOfRange
			}
			dst[i] = int32(v)
			off = len(b) - len(r)
		}
	}
	return b[off:], 0, nil
}

// readUint64 reads one 64-bit value in mode's forms (Mode): an unsigned
// integer as is; in Bits and Hash mode a negative one as its two's-complement
// bit pattern; in Hash mode a bin digest as its last 8 bytes big-endian.
func readUint64(b []byte, mode Mode) (uint64, []byte, error) {
	if len(b) == 0 {
		return 0, b, ErrTruncated
	}
	switch c := b[0]; {
	case IsUintLead(c) || mode == Unsigned:
		return ReadUint(b)
	case IsIntLead(c):
		v, rest, err := ReadInt(b)
		return uint64(v), rest, err
	case IsBinLead(c) && mode == Hash:
		v, rest, err := ReadBin(b)
		if err != nil {
			return 0, b, err
		}
		if len(v) < 8 {
			return 0, b, ErrBadHash
		}
		return binary.BigEndian.Uint64(v[len(v)-8:]), rest, nil
	}
	return 0, b, wrongType(b[0])
}

// ReadUint64s decodes len(dst) values in mode's forms (Mode) from b into
// dst and returns the rest after them; errors are ReadInt32s'.
func ReadUint64s(dst []uint64, b []byte, mode Mode) (rest []byte, bad int, err error) {
	for i := range dst {
		// Real hashes are uniform u64: almost all take the 9-byte uint64 form.
		if len(b) >= 9 && b[0] == 0xcf {
			dst[i] = binary.BigEndian.Uint64(b[1:])
			b = b[9:]
			continue
		}
		r, err := b, error(nil)
		if dst[i], r, err = readUint64(b, mode); err != nil {
			return b, i, err
		}
		b = r
	}
	return b, 0, nil
}
