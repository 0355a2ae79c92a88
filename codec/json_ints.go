package codec

import (
	"encoding/binary"
	"math"
	"math/bits"
)

// Integer arrays in JSON: token ids (int32) and 64-bit values (hashes). Both
// readers append to dst and stop at the first fault, returning the index of the
// element at fault (-1 when the fault is between elements) and the rest where
// it is, so that a caller can report it and re-skip the array to let a syntax
// error further on win.

// JSONInt32s reads the array at b[0] == '[' of token ids and appends at most
// max of them to dst. Elements are exact integers in -2^31..2^32-1 (token ids
// are u32 in the hashing standard; negative ids keep their int32 meaning),
// stored as their 32-bit pattern. Another kind of value (or anything that is
// not a value: the caller re-skips the array to report it), or a fraction or
// exponent, is ErrWrongType, a value outside that range ErrOutOfRange, element max+1
// ErrTooLarge; bad is that element's index.
func JSONInt32s(dst []int32, b []byte, max int) (out []int32, rest []byte, bad int, err error) {
	return jsonInt32s(dst, b, max, math.MaxUint32)
}

// jsonInt32s is JSONInt32s for elements in -2^31..hi, where hi is at least
// 999999999 (scanUint31s takes what is below that without a range check):
// math.MaxInt32 or math.MaxUint32, as for ReadInt32s.
func jsonInt32s(dst []int32, b []byte, max int, hi int64) (out []int32, rest []byte, bad int, err error) {
	base := len(dst)
	limit := math.MaxInt
	if max < limit-base {
		limit = base + max
	}
	p := len(b) - len(JSONWS(b[1:]))
	if p < len(b) && b[p] == ']' {
		return dst, b[p+1:], 0, nil
	}
	for {
		var done bool
		if dst, p, done = scanUint31s(dst, b, p, limit); done {
			return dst, b[p:], 0, nil
		}
		i := len(dst) - base
		if p >= len(b) {
			return dst, b[p:], -1, jsonErr(rUnexpected, nil)
		}
		if c := b[p]; c != '-' && !isDigit(c) {
			return dst, b[p:], i, ErrWrongType
		}
		n, r, err := JSONNumber(b[p:])
		switch {
		case err != nil:
			return dst, r, i, err
		case n.Float:
			return dst, b[p:], i, ErrWrongType
		case n.Big || (!n.Neg && n.Mag > uint64(hi)) || (n.Neg && n.Mag > 1<<31):
			return dst, b[p:], i, ErrOutOfRange
		case len(dst) >= limit:
			return dst, b[p:], i, ErrTooLarge
		}
		v := int32(uint32(n.Mag))
		if n.Neg {
			v = -v
		}
		dst = append(dst, v)
		more := false
		if r, more, err = JSONNext(r, ']'); err != nil || !more {
			return dst, r, -1, err
		}
		p = len(b) - len(r)
	}
}

// scanUint31s is JSONInt32s' fast path over the dominant shape of token
// arrays: elements of 1 to 9 ASCII digits without a leading zero (so below
// 10^9, well inside int32), each followed directly by ',' (then optional
// whitespace, as in Python's ", ") or ']'. It appends elements from b[p:] while
// they have that shape and len(dst) < limit, and returns the position after the
// last ',' and whitespace consumed, or after ']' with done=true. Anything else
// (a sign, whitespace, a fraction, a long or zero-led number, the element
// limit, the end of input) stops it at the start of that element, unconsumed,
// for the general path to accept or report. FuzzJSONInt32s checks it against
// encoding/json, TestScanUint31s pins where it stops.
//
// While 72 bytes remain it works on 64-byte windows. Where the CPU has
// AVX-512 VBMI/VBMI2, jsonWindowAVX512 takes up to 31 elements of a window at
// once. Otherwise, and for a window whose next element that step leaves,
// nonDigits64 marks every byte that is not a digit in one 64-bit mask, so an
// element's length is one trailing-zero count from its start and its value is
// read from one 8-byte load (digits8): what carries from one element to the
// next is a shift, a count and an add instead of a compare and branch per
// byte, which is what bounded the byte loop (about 20 cycles per 5-digit
// token). The byte loop still reads the last bytes of the input. All three
// accept exactly the same elements (TestScanUint31sWindows,
// TestScanUint31sRandom).
func scanUint31s(dst []int32, b []byte, p, limit int) ([]int32, int, bool) {
	for len(dst) < limit && len(b)-p >= 72 {
		if useJSONWindowAVX512 && limit-len(dst) >= 32 {
			// Up to 31 elements of the window at once; n == 0 leaves the
			// window to the scalar loop below (an element of another shape).
			var n, next int
			win := (*[64]byte)(b[p : p+64])
			if cap(dst)-len(dst) >= 32 {
				n, next = jsonWindowAVX512(win, (*[32]int32)(dst[len(dst):len(dst)+32]))
				dst = dst[:len(dst)+n]
			} else {
				var out [32]int32
				n, next = jsonWindowAVX512(win, &out)
				dst = append(dst, out[:n]...)
			}
			if n > 0 {
				p += next
				continue
			}
		}
		// One window: win[0:64] is masked, and the 8 bytes past it let an
		// element starting anywhere in it be loaded whole. Offsets below are
		// kept under 64 (the &63 is exact: it only spares bounds checks).
		win := (*[72]byte)(b[p : p+72])
		m := nonDigits64(win[:64])
		off := uint(0)
		for len(dst) < limit && off < 64 {
			n := uint(bits.TrailingZeros64(m >> off))
			if n >= 64-off { // no delimiter left in this window
				if off == 0 {
					return dst, p, false // 64 digits or more
				}
				break
			}
			if n-1 > 8 || (n > 1 && win[off] == '0') { // n == 0 wraps
				return dst, p + int(off), false
			}
			t := binary.LittleEndian.Uint64(win[off:]) ^ 0x3030303030303030
			u := digits8(t << ((64 - 8*n) & 63))
			if n == 9 {
				u = digits8(t)*10 + uint32(win[off+8]-'0')
			}
			e := (off + n) & 63
			switch win[e] {
			case ',':
				dst = append(dst, int32(u))
				off = e + 1
				if win[off] == ' ' {
					off++ // Python's ", "
				}
				if win[off] <= ' ' { // other whitespace: rare, read it byte by byte
					q := p + int(off)
					for q < len(b) && (b[q] == ' ' || b[q] == '\n' || b[q] == '\t' || b[q] == '\r') {
						q++ // the general path expects elements to start after whitespace
					}
					off = uint(q - p)
				}
			case ']':
				return append(dst, int32(u)), p + int(e) + 1, true
			default:
				return dst, p + int(off), false
			}
		}
		p += int(off)
	}
	for len(dst) < limit {
		start := p
		var u uint32
		for p < len(b) && p-start < 10 {
			d := b[p] - '0'
			if d > 9 {
				break
			}
			u = u*10 + uint32(d)
			p++
		}
		n := p - start
		if n == 0 || n > 9 || p >= len(b) || (n > 1 && b[start] == '0') {
			return dst, start, false
		}
		switch b[p] {
		case ',':
			dst = append(dst, int32(u))
			p++
			for p < len(b) && (b[p] == ' ' || b[p] == '\n' || b[p] == '\t' || b[p] == '\r') {
				p++ // the general path expects elements to start after whitespace
			}
		case ']':
			return append(dst, int32(u)), p + 1, true
		default:
			return dst, start, false
		}
	}
	return dst, p, false
}

// useJSONWindowAVX512 selects jsonWindowAVX512 where the CPU has it (tests
// turn it off to check the scalar loops alone).
var useJSONWindowAVX512 = haveJSONWindowAVX512

// JSONTokenPath names the path JSONInt32s reads token arrays with on this CPU:
// "avx512" or "scalar" (for the startup log).
func JSONTokenPath() string {
	if useJSONWindowAVX512 {
		return "avx512"
	}
	return "scalar"
}

// nonDigits64 returns a mask with bit i set when w[i] is not an ASCII digit.
// Per 8-byte word: xored with '0', digits become 0..9; a byte is not a digit
// when its low 7 bits plus 0x76 reach 0x80 (10..127) or its own top bit is set
// (128..255), and masking the top bit first keeps the add from carrying into
// the next byte. The multiply gathers the eight top bits into one byte (bit
// 8j+7 moves to bit 56+j; no other product term reaches bits 56..63).
func nonDigits64(w []byte) uint64 {
	_ = w[63]
	var m uint64
	for i := 0; i < 64; i += 8 {
		t := binary.LittleEndian.Uint64(w[i:]) ^ 0x3030303030303030
		hi := ((t & 0x7f7f7f7f7f7f7f7f) + 0x7676767676767676 | t) & 0x8080808080808080
		m |= ((hi >> 7) * 0x0102040810204080 >> 56) << uint(i)
	}
	return m
}

// digits8 is the value of eight decimal digits, one per byte of t (0..9 each,
// the most significant in the lowest byte; zero bytes below a shorter number
// are leading zeros): bytes are combined into 2-digit, then 4-digit, then the
// 8-digit value, each step one multiply that adds to each lane ten (then 100,
// then 10,000) times the lane below it, keeping every other lane. In step one
// t*(10<<8+1)>>8 equals 10t + t>>8 in every bit the mask keeps (the product's
// overflow only reaches the top byte); the other steps likewise.
func digits8(t uint64) uint32 {
	t = (t * (10<<8 + 1) >> 8) & 0x00ff00ff00ff00ff
	t = (t * (100<<16 + 1) >> 16) & 0x0000ffff0000ffff
	return uint32(t * (10000<<32 + 1) >> 32)
}

// Mode says which 64-bit values an integer reader takes, and how.
type Mode uint8

const (
	// Unsigned takes integers in 0..2^64-1; a negative one is ErrOutOfRange.
	Unsigned Mode = iota
	// Bits also takes a negative int64, as its two's-complement bit pattern
	// (Dynamo and SGLang serialise block hashes as i64 or u64).
	Bits
	// Hash is Bits, and also takes a hash written as text (JSON: a decimal or
	// 0x-hex string, for producers whose numbers are float64) or as a digest
	// (msgpack: a bin of 8 bytes or more, folded to its last 8 big-endian —
	// what vLLM's int mode publishes for the same digest; a shorter bin is
	// ErrBadHash).
	Hash
)

// jsonUint64 reads one 64-bit value in mode's forms at the start of b. Escaped
// hash strings are unescaped into *arena (only Hash mode reads strings).
// Another kind of value, or a fraction or exponent, is ErrWrongType; an
// integer beyond the mode's range ErrOutOfRange.
func jsonUint64(b []byte, mode Mode, arena *[]byte) (uint64, []byte, error) {
	if len(b) == 0 {
		return 0, b, jsonErr(rUnexpected, nil)
	}
	if c := b[0]; c != '-' && !isDigit(c) {
		if c != '"' || mode != Hash {
			return 0, b, ErrWrongType
		}
		s, rest, err := JSONString(b, arena)
		if err != nil {
			return 0, rest, err
		}
		h, ok := ParseU64Text(s)
		if !ok {
			return 0, b, ErrWrongType
		}
		return h, rest, nil
	}
	n, rest, err := JSONNumber(b)
	switch {
	case err != nil:
		return 0, rest, err
	case n.Float:
		return 0, b, ErrWrongType
	case n.Big || (n.Neg && n.Mag != 0 && (mode == Unsigned || n.Mag > 1<<63)):
		return 0, b, ErrOutOfRange
	case n.Neg:
		return -n.Mag, rest, nil // two's complement of the magnitude
	}
	return n.Mag, rest, nil
}

// JSONUint64s reads the array at b[0] == '[' of 64-bit values in mode's forms
// (Mode) and appends at most max of them to dst, exactly (no float64);
// element max+1 is ErrTooLarge. Errors are JSONInt32s'.
func JSONUint64s(dst []uint64, b []byte, max int, mode Mode, arena *[]byte) (out []uint64, rest []byte, bad int, err error) {
	base := len(dst)
	r := JSONWS(b[1:])
	if len(r) != 0 && r[0] == ']' {
		return dst, r[1:], 0, nil
	}
	for i := 0; ; i++ {
		v, after, err := jsonUint64(r, mode, arena)
		switch {
		case err == ErrWrongType || err == ErrOutOfRange:
			return dst, r, i, err
		case err != nil:
			return dst, after, i, err
		case len(dst)-base >= max:
			return dst, r, i, ErrTooLarge
		}
		dst = append(dst, v)
		more := false
		if r, more, err = JSONNext(after, ']'); err != nil || !more {
			return dst, r, -1, err
		}
	}
}
