package codec

import (
	"encoding/binary"

	"github.com/tinylib/msgp/msgp"
)

// msgpack readers, built on tinylib/msgp's zero-copy Read*Bytes functions. Each
// takes the unread input and returns the rest. Dispatch is on the lead byte so
// that a valid input never takes msgp's error path (msgp's error values
// allocate).

// Nil is msgpack's nil.
const Nil = 0xc0

// IsMapLead and its siblings classify a lead byte: map, array, str, bin, float.
func IsMapLead(c byte) bool { return c&0xf0 == 0x80 || c == 0xde || c == 0xdf }

// IsArrayLead: fixarray, array16, array32.
func IsArrayLead(c byte) bool { return c&0xf0 == 0x90 || c == 0xdc || c == 0xdd }

// IsStrLead: fixstr, str8, str16, str32.
func IsStrLead(c byte) bool { return c&0xe0 == 0xa0 || (c >= 0xd9 && c <= 0xdb) }

// IsBinLead: bin8, bin16, bin32.
func IsBinLead(c byte) bool { return c >= 0xc4 && c <= 0xc6 }

// IsFloatLead: float32, float64.
func IsFloatLead(c byte) bool { return c == 0xca || c == 0xcb }

// IsUintLead: positive fixint and the uint8..uint64 families.
func IsUintLead(c byte) bool { return c <= 0x7f || (c >= 0xcc && c <= 0xcf) }

// IsIntLead: any integer encoding, signed or not.
func IsIntLead(c byte) bool { return IsUintLead(c) || c >= 0xe0 || (c >= 0xd0 && c <= 0xd3) }

// wrongType is the error for a value of another type than expected:
// ErrWrongType, unless the lead byte is 0xc1, which msgpack never uses —
// garbage, not a type.
func wrongType(c byte) error {
	if c == 0xc1 {
		return ErrSyntax
	}
	return ErrWrongType
}

// ReadArray reads an array header whose count may be at most max, checking the
// count against the bytes left: every element takes at least one byte, so a
// larger count can only be a lie and must not size anything. The cap is checked
// first so that an honest but oversized value reports ErrTooLarge.
func ReadArray(b []byte, max int) (int, []byte, error) {
	if len(b) == 0 {
		return 0, b, ErrTruncated
	}
	if !IsArrayLead(b[0]) {
		return 0, b, wrongType(b[0])
	}
	sz, rest, ok := containerHeader(b)
	if !ok {
		return 0, b, ErrTruncated
	}
	if uint64(sz) > uint64(max) {
		return 0, b, ErrTooLarge
	}
	if uint64(sz) > uint64(len(rest)) {
		return 0, b, ErrTruncated
	}
	return int(sz), rest, nil
}

// ReadMap reads a map header; a map of n entries needs at least 2n bytes.
func ReadMap(b []byte) (int, []byte, error) {
	if len(b) == 0 {
		return 0, b, ErrTruncated
	}
	if !IsMapLead(b[0]) {
		return 0, b, wrongType(b[0])
	}
	sz, rest, ok := containerHeader(b)
	if !ok {
		return 0, b, ErrTruncated
	}
	if 2*uint64(sz) > uint64(len(rest)) {
		return 0, b, ErrTruncated
	}
	return int(sz), rest, nil
}

// containerHeader decodes the header of the map or array whose lead byte
// b[0] is (fix, 16-bit or 32-bit count, as msgp.ReadArrayHeaderBytes and
// ReadMapHeaderBytes do, without the call); ok=false: b ends inside it.
func containerHeader(b []byte) (n uint32, rest []byte, ok bool) {
	switch c := b[0]; c {
	case 0xdc, 0xde:
		if len(b) < 3 {
			return 0, b, false
		}
		return uint32(binary.BigEndian.Uint16(b[1:])), b[3:], true
	case 0xdd, 0xdf:
		if len(b) < 5 {
			return 0, b, false
		}
		return binary.BigEndian.Uint32(b[1:]), b[5:], true
	default:
		return uint32(c & 0x0f), b[1:], true
	}
}

// ReadStr reads a str value without copying (the result aliases b).
func ReadStr(b []byte) ([]byte, []byte, error) {
	if len(b) == 0 {
		return nil, b, ErrTruncated
	}
	// fixstr inline: every map key and tag of every dialect is shorter than 32
	// bytes, and a call into msgp per key would be a large share of a
	// single-block event's decode.
	if c := b[0]; c&0xe0 == 0xa0 {
		n := int(c&0x1f) + 1
		if n > len(b) {
			return nil, b, ErrTruncated
		}
		return b[1:n:n], b[n:], nil
	}
	if !IsStrLead(b[0]) {
		return nil, b, wrongType(b[0])
	}
	v, rest, err := msgp.ReadStringZC(b)
	if err != nil {
		return nil, b, mpErr(err)
	}
	return v, rest, nil
}

// ReadBin reads a bin value without copying.
func ReadBin(b []byte) ([]byte, []byte, error) {
	if len(b) == 0 {
		return nil, b, ErrTruncated
	}
	if !IsBinLead(b[0]) {
		return nil, b, wrongType(b[0])
	}
	v, rest, err := msgp.ReadBytesZC(b)
	if err != nil {
		return nil, b, mpErr(err)
	}
	return v, rest, nil
}

// ReadInt reads any msgpack integer that fits int64.
func ReadInt(b []byte) (int64, []byte, error) {
	if len(b) == 0 {
		return 0, b, ErrTruncated
	}
	if !IsIntLead(b[0]) {
		return 0, b, wrongType(b[0])
	}
	v, rest, err := msgp.ReadInt64Bytes(b)
	if err != nil {
		return 0, b, mpErr(err)
	}
	return v, rest, nil
}

// readFloat reads a float32 or float64.
func readFloat(b []byte) (float64, []byte, error) {
	if len(b) == 0 {
		return 0, b, ErrTruncated
	}
	if !IsFloatLead(b[0]) {
		return 0, b, wrongType(b[0])
	}
	f, rest, err := msgp.ReadFloat64Bytes(b)
	if err != nil {
		return 0, b, mpErr(err)
	}
	return f, rest, nil
}

// ReadUint reads a non-negative msgpack integer (u64); a negative one is
// ErrOutOfRange.
func ReadUint(b []byte) (uint64, []byte, error) {
	if len(b) == 0 {
		return 0, b, ErrTruncated
	}
	if !IsIntLead(b[0]) {
		return 0, b, wrongType(b[0])
	}
	if !IsUintLead(b[0]) {
		// Signed encodings may still hold a non-negative value (int8 5).
		v, rest, err := ReadInt(b)
		if err != nil {
			return 0, b, err
		}
		if v < 0 {
			return 0, b, ErrOutOfRange
		}
		return uint64(v), rest, nil
	}
	v, rest, err := msgp.ReadUint64Bytes(b)
	if err != nil {
		return 0, b, mpErr(err)
	}
	return v, rest, nil
}

// Skip returns b after the msgpack value at its start, validating its framing.
// It keeps, per open container, the count of values still to skip instead of
// recursing, so nesting costs no stack; it fails as soon as the values pending
// exceed the bytes left (each needs one), so a lying header cannot make it
// loop, and at a container nested deeper than MaxDepth (ErrTooLarge). It
// replaces msgp.Skip, which recurses up to 100 000 levels deep.
func Skip(b []byte) ([]byte, error) {
	size, children, err := mpValueHeader(b)
	switch {
	case err != nil:
		return b, err
	case children == 0: // a scalar, str or bin: no stack to set up
		return b[size:], nil
	}
	return skipNested(b)
}

// skipNested is Skip for a container.
func skipNested(b []byte) ([]byte, error) {
	var open [MaxDepth]uint64 // values left in each enclosing container
	depth := 0
	pending := uint64(1) // values left at this depth
	total := uint64(1)   // values left at every depth
	for {
		for pending == 0 {
			if depth == 0 {
				return b, nil
			}
			depth--
			pending = open[depth]
		}
		if total > uint64(len(b)) {
			return b, ErrTruncated
		}
		pending--
		total--
		size, children, err := mpValueHeader(b)
		if err != nil {
			return b, err
		}
		b = b[size:]
		if children != 0 {
			if depth == MaxDepth {
				return b, errTooDeep
			}
			open[depth] = pending
			depth++
			pending = children
			total += children
		}
	}
}

// mpValueHeader decodes the encoding of the value at b[0]: size is the bytes of
// its own encoding (header and payload, within b), children the values it
// contains (2n for a map of n entries).
func mpValueHeader(b []byte) (size, children uint64, err error) {
	if len(b) == 0 {
		return 0, 0, ErrTruncated
	}
	c := b[0]
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		size = 1
	case c <= 0x8f: // fixmap
		size, children = 1, 2*uint64(c&0x0f)
	case c <= 0x9f: // fixarray
		size, children = 1, uint64(c&0x0f)
	case c <= 0xbf: // fixstr
		size = 1 + uint64(c&0x1f)
	default:
		hdr, ok := mpFixedSize(c)
		if !ok {
			return 0, 0, ErrSyntax
		}
		if uint64(len(b)) < hdr.n {
			return 0, 0, ErrTruncated
		}
		var l uint64 // every length field starts right after the lead byte
		switch hdr.lenBytes {
		case 1:
			l = uint64(b[1])
		case 2:
			l = uint64(binary.BigEndian.Uint16(b[1:]))
		case 4:
			l = uint64(binary.BigEndian.Uint32(b[1:]))
		}
		switch hdr.kind {
		case kindBytes:
			size = hdr.n + l
		case kindArray:
			size, children = hdr.n, l
		case kindMap:
			size, children = hdr.n, 2*l
		default:
			size = hdr.n
		}
	}
	if size > uint64(len(b)) {
		return 0, 0, ErrTruncated
	}
	return size, children, nil
}

const (
	kindScalar = iota
	kindBytes  // header then l payload bytes (str, bin, ext)
	kindArray  // header then l values
	kindMap    // header then 2l values
)

type mpHeader struct {
	n        uint64 // header bytes (incl. lead; for scalars the whole value)
	lenBytes uint8  // trailing length field width within the header
	kind     uint8
}

// mpFixedSize describes the non-fix lead bytes 0xc1..0xdf.
func mpFixedSize(c byte) (mpHeader, bool) {
	switch c {
	case 0xc4, 0xd9: // bin8, str8
		return mpHeader{2, 1, kindBytes}, true
	case 0xc5, 0xda: // bin16, str16
		return mpHeader{3, 2, kindBytes}, true
	case 0xc6, 0xdb: // bin32, str32
		return mpHeader{5, 4, kindBytes}, true
	case 0xc7: // ext8: lead, len, type
		return mpHeader{3, 1, kindBytes}, true
	case 0xc8: // ext16
		return mpHeader{4, 2, kindBytes}, true
	case 0xc9: // ext32
		return mpHeader{6, 4, kindBytes}, true
	case 0xca, 0xce, 0xd2: // float32, uint32, int32
		return mpHeader{5, 0, kindScalar}, true
	case 0xcb, 0xcf, 0xd3: // float64, uint64, int64
		return mpHeader{9, 0, kindScalar}, true
	case 0xcc, 0xd0:
		return mpHeader{2, 0, kindScalar}, true
	case 0xcd, 0xd1:
		return mpHeader{3, 0, kindScalar}, true
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1,2,4,8,16 (+ lead and type byte)
		return mpHeader{2 + 1<<(c-0xd4), 0, kindScalar}, true
	case 0xdc:
		return mpHeader{3, 2, kindArray}, true
	case 0xdd:
		return mpHeader{5, 4, kindArray}, true
	case 0xde:
		return mpHeader{3, 2, kindMap}, true
	case 0xdf:
		return mpHeader{5, 4, kindMap}, true
	}
	return mpHeader{}, false // 0xc1 is never used
}
