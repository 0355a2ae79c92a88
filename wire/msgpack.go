package wire

import (
	"encoding/binary"
	"math"
	"slices"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/tinylib/msgp/msgp"
)

// Value readers shared by every msgpack dialect. Each takes the unread payload and
// returns the rest; on error they return a sentinel and, for array elements, leave the
// element index in d.index. Dispatch is on the lead byte so that a valid payload never
// takes msgp's error path (msgp's error values allocate).

const mpNil = 0xc0

func isMapLead(c byte) bool   { return c&0xf0 == 0x80 || c == 0xde || c == 0xdf }
func isArrayLead(c byte) bool { return c&0xf0 == 0x90 || c == 0xdc || c == 0xdd }
func isStrLead(c byte) bool   { return c&0xe0 == 0xa0 || (c >= 0xd9 && c <= 0xdb) }
func isBinLead(c byte) bool   { return c >= 0xc4 && c <= 0xc6 }
func isFloatLead(c byte) bool { return c == 0xca || c == 0xcb }

// isUintLead: positive fixint and the uint8..uint64 families.
func isUintLead(c byte) bool { return c <= 0x7f || (c >= 0xcc && c <= 0xcf) }

// isIntLead: any integer encoding, signed or not.
func isIntLead(c byte) bool { return isUintLead(c) || c >= 0xe0 || (c >= 0xd0 && c <= 0xd3) }

// wrongType is the error for a value of another type than expected: ErrWrongType,
// unless the lead byte is 0xc1, which msgpack never uses — garbage, not a type.
func wrongType(c byte) error {
	if c == 0xc1 {
		return ErrSyntax
	}
	return ErrWrongType
}

// readArray reads an array header whose count may be at most max, checking the count
// against the bytes left: every element takes at least one byte, so a larger count
// can only be a lie and must not size anything. The cap is checked first so that an
// honest but oversized event reports ErrTooLarge.
func readArray(b []byte, max int) (int, []byte, error) {
	if len(b) == 0 {
		return 0, b, ErrTruncated
	}
	if !isArrayLead(b[0]) {
		return 0, b, wrongType(b[0])
	}
	sz, rest, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return 0, b, mpErr(err)
	}
	if uint64(sz) > uint64(max) {
		return 0, b, ErrTooLarge
	}
	if uint64(sz) > uint64(len(rest)) {
		return 0, b, ErrTruncated
	}
	return int(sz), rest, nil
}

// readMap reads a map header; a map of n entries needs at least 2n bytes.
func readMap(b []byte) (int, []byte, error) {
	if len(b) == 0 {
		return 0, b, ErrTruncated
	}
	if !isMapLead(b[0]) {
		return 0, b, wrongType(b[0])
	}
	sz, rest, err := msgp.ReadMapHeaderBytes(b)
	if err != nil {
		return 0, b, mpErr(err)
	}
	if 2*uint64(sz) > uint64(len(rest)) {
		return 0, b, ErrTruncated
	}
	return int(sz), rest, nil
}

// readStr reads a str value without copying.
func readStr(b []byte) ([]byte, []byte, error) {
	if len(b) == 0 {
		return nil, b, ErrTruncated
	}
	// fixstr inline: every map key and tag of every dialect is shorter than 32 bytes,
	// and the call into msgp per key showed as a fifth of a single-block event's
	// decode time in profiles.
	if c := b[0]; c&0xe0 == 0xa0 {
		n := int(c&0x1f) + 1
		if n > len(b) {
			return nil, b, ErrTruncated
		}
		return b[1:n:n], b[n:], nil
	}
	if !isStrLead(b[0]) {
		return nil, b, wrongType(b[0])
	}
	v, rest, err := msgp.ReadStringZC(b)
	if err != nil {
		return nil, b, mpErr(err)
	}
	return v, rest, nil
}

// readStrOrNil reads str or nil; nil yields a nil slice, "" a non-nil empty one.
func readStrOrNil(b []byte) ([]byte, []byte, error) {
	if len(b) != 0 && b[0] == mpNil {
		return nil, b[1:], nil
	}
	return readStr(b)
}

// readInt reads any msgpack integer that fits int64.
func readInt(b []byte) (int64, []byte, error) {
	if len(b) == 0 {
		return 0, b, ErrTruncated
	}
	if !isIntLead(b[0]) {
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
	if !isFloatLead(b[0]) {
		return 0, b, wrongType(b[0])
	}
	f, rest, err := msgp.ReadFloat64Bytes(b)
	if err != nil {
		return 0, b, mpErr(err)
	}
	return f, rest, nil
}

// readUint reads a non-negative msgpack integer (u64); a negative one is out of range.
func readUint(b []byte) (uint64, []byte, error) {
	if len(b) == 0 {
		return 0, b, ErrTruncated
	}
	if !isIntLead(b[0]) {
		return 0, b, wrongType(b[0])
	}
	if !isUintLead(b[0]) {
		// Signed encodings may still hold a non-negative value (int8 5).
		v, rest, err := readInt(b)
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

// readU32OrNil reads nil or an integer in [0, 2^32-1] (RFC #1527 u32 fields, ranks).
func readU32OrNil(b []byte) (v uint32, isNil bool, rest []byte, err error) {
	if len(b) != 0 && b[0] == mpNil {
		return 0, true, b[1:], nil
	}
	u, rest, err := readUint(b)
	if err != nil {
		return 0, false, b, err
	}
	if u > math.MaxUint32 {
		return 0, false, b, ErrOutOfRange
	}
	return uint32(u), false, rest, nil
}

// readHash reads one block hash and folds it to u64: an unsigned int as is, a
// negative int as its two's-complement bit pattern (SGLang publishes signed int64,
// vLLM's old builtin hash() did too), a bin digest as its last 8 bytes big-endian —
// what vLLM's int mode publishes for the same digest, so a block has one name in
// both of vLLM's hash modes. A bin shorter than 8 bytes has no such name: ErrBadHash.
func readHash(b []byte) (uint64, []byte, error) {
	if len(b) == 0 {
		return 0, b, ErrTruncated
	}
	c := b[0]
	switch {
	case c <= 0x7f:
		return uint64(c), b[1:], nil
	case c >= 0xe0:
		return uint64(int64(int8(c))), b[1:], nil
	case c >= 0xcc && c <= 0xcf:
		v, rest, err := msgp.ReadUint64Bytes(b)
		if err != nil {
			return 0, b, mpErr(err)
		}
		return v, rest, nil
	case c >= 0xd0 && c <= 0xd3:
		v, rest, err := msgp.ReadInt64Bytes(b)
		if err != nil {
			return 0, b, mpErr(err)
		}
		return uint64(v), rest, nil
	case isBinLead(c):
		v, rest, err := msgp.ReadBytesZC(b)
		if err != nil {
			return 0, b, mpErr(err)
		}
		if len(v) < 8 {
			return 0, b, ErrBadHash
		}
		return binary.BigEndian.Uint64(v[len(v)-8:]), rest, nil
	}
	return 0, b, wrongType(c)
}

// readHashes reads an array of hashes into e.Hashes (replacing its contents).
func (d *Decoder) readHashes(e *core.Event, b []byte) ([]byte, error) {
	n, b, err := readArray(b, MaxEventHashes)
	if err != nil {
		return b, err
	}
	hs := slices.Grow(e.Hashes[:0], n)[:n]
	for i := range hs {
		// Real hashes are uniform u64: almost all take the 9-byte uint64 form.
		if len(b) >= 9 && b[0] == 0xcf {
			hs[i] = binary.BigEndian.Uint64(b[1:])
			b = b[9:]
			continue
		}
		if hs[i], b, err = readHash(b); err != nil {
			e.Hashes, d.index = hs[:0], i
			return b, err
		}
	}
	e.Hashes = hs
	return b, nil
}

// readHashOrNil reads nil (ok=false) or a hash.
func readHashOrNil(b []byte) (h uint64, ok bool, rest []byte, err error) {
	if len(b) != 0 && b[0] == mpNil {
		return 0, false, b[1:], nil
	}
	h, rest, err = readHash(b)
	return h, err == nil, rest, err
}

// readParent reads nil (a chain root) or a hash into e.Parent.
func readParent(e *core.Event, b []byte) ([]byte, error) {
	h, ok, rest, err := readHashOrNil(b)
	if err != nil {
		return b, err
	}
	e.Parent, e.HasParent = h, ok
	return rest, nil
}

// readToken reads one token id. Engines send them as ints; ids are u32 in the RFC and
// int32 in vLLM, so both ranges are accepted and stored as the int32 bit pattern.
func readToken(b []byte) (int32, []byte, error) {
	v, rest, err := readInt(b)
	if err != nil {
		return 0, b, err
	}
	if v < math.MinInt32 || v > math.MaxUint32 {
		return 0, b, ErrOutOfRange
	}
	return int32(v), rest, nil
}

// readTokens reads nil or an array of token ids into e.Tokens. With bigram set (SGLang)
// the array may instead hold [a, b] pairs (EAGLE), which are flattened
// [a0, b0, a1, b1, …] and mark the event Bigram.
func (d *Decoder) readTokens(e *core.Event, b []byte, bigram bool) ([]byte, error) {
	if len(b) != 0 && b[0] == mpNil {
		e.Tokens, e.HasTokens = e.Tokens[:0], false
		return b[1:], nil
	}
	n, b, err := readArray(b, MaxEventTokens)
	if err != nil {
		return b, err
	}
	e.HasTokens = true
	if bigram && n > 0 && isArrayLead(b[0]) {
		return d.readBigrams(e, b, n)
	}
	ts := slices.Grow(e.Tokens[:0], n)[:n]
	// Tokens are most of a BlockStored's bytes (16 per block against one hash), so
	// the encodings real payloads use — msgspec's uint8/16/32 and msgp's int8/16/32 —
	// are decoded inline with an index instead of a call per token that returns the
	// rest of the slice; anything else (64-bit forms, wrong types) takes readToken.
	i := 0
	for k := range ts {
		if i >= len(b) {
			e.Tokens, d.index = ts[:0], k
			return b[i:], ErrTruncated
		}
		c := b[i]
		switch {
		case c <= 0x7f:
			ts[k] = int32(c)
			i++
			continue
		case c >= 0xe0:
			ts[k] = int32(int8(c))
			i++
			continue
		case c == 0xcd && i+3 <= len(b):
			ts[k] = int32(binary.BigEndian.Uint16(b[i+1:]))
			i += 3
			continue
		case c == 0xce && i+5 <= len(b):
			ts[k] = int32(binary.BigEndian.Uint32(b[i+1:]))
			i += 5
			continue
		case c == 0xd2 && i+5 <= len(b):
			ts[k] = int32(binary.BigEndian.Uint32(b[i+1:]))
			i += 5
			continue
		case c == 0xd1 && i+3 <= len(b):
			ts[k] = int32(int16(binary.BigEndian.Uint16(b[i+1:])))
			i += 3
			continue
		case c == 0xcc && i+2 <= len(b):
			ts[k] = int32(b[i+1])
			i += 2
			continue
		case c == 0xd0 && i+2 <= len(b):
			ts[k] = int32(int8(b[i+1]))
			i += 2
			continue
		}
		t, rest, err := readToken(b[i:])
		if err != nil {
			e.Tokens, d.index = ts[:0], k
			return b[i:], err
		}
		ts[k] = t
		i = len(b) - len(rest)
	}
	e.Tokens = ts
	return b[i:], nil
}

func (d *Decoder) readBigrams(e *core.Event, b []byte, n int) ([]byte, error) {
	if 2*n > MaxEventTokens {
		return b, ErrTooLarge
	}
	ts := slices.Grow(e.Tokens[:0], 2*n)[:2*n]
	e.Bigram = true
	var err error
	var m int
	for i := 0; i < n; i++ {
		if m, b, err = readArray(b, 2); err == nil && m != 2 {
			err = ErrWrongType
		}
		if err == ErrTooLarge {
			err = ErrWrongType // a 3-element "pair" is a shape error, not a size one
		}
		if err == nil {
			if ts[2*i], b, err = readToken(b); err == nil {
				ts[2*i+1], b, err = readToken(b)
			}
		}
		if err != nil {
			e.Tokens, d.index = ts[:0], i
			return b, err
		}
	}
	e.Tokens = ts
	return b, nil
}

// skipValue returns b after the msgpack value at its start. It keeps a count of the
// values still to skip instead of recursing, so nesting depth costs no stack, and it
// fails as soon as that count exceeds the bytes left, so a lying header cannot make it
// loop. It replaces msgp.Skip, which recurses up to 100 000 levels deep.
func skipValue(b []byte) ([]byte, error) {
	pending := uint64(1)
	for pending > 0 {
		if pending > uint64(len(b)) {
			return b, ErrTruncated
		}
		pending--
		c := b[0]
		var size uint64 // bytes of this value's own encoding (header + payload)
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
			size = 1
		case c <= 0x8f: // fixmap
			size, pending = 1, pending+2*uint64(c&0x0f)
		case c <= 0x9f: // fixarray
			size, pending = 1, pending+uint64(c&0x0f)
		case c <= 0xbf: // fixstr
			size = 1 + uint64(c&0x1f)
		default:
			hdr, ok := mpFixedSize(c)
			if !ok {
				return b, ErrSyntax
			}
			if uint64(len(b)) < hdr.n {
				return b, ErrTruncated
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
				size, pending = hdr.n, pending+l
			case kindMap:
				size, pending = hdr.n, pending+2*l
			default:
				size = hdr.n
			}
		}
		if size > uint64(len(b)) {
			return b, ErrTruncated
		}
		b = b[size:]
	}
	return b, nil
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
