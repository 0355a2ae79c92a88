package codec

import "math"

// Integer arrays in JSON: token ids (int32) and hashes (u64). Both readers
// append to dst and stop at the first bad element, returning its index and the
// rest at that element, so that a caller can report it and re-skip the array
// to let a syntax error further on win.

// JSONInt32s reads the array at b[0] == '[' of token ids and appends at most
// max of them to dst. Elements are exact integers in -2^31..2^32-1 (token ids
// are u32 in the hashing standard; negative ids keep their int32 meaning),
// stored as their 32-bit pattern. Another kind of value, or a fraction or exponent, is
// ErrWrongType, a value outside that range ErrOutOfRange, element max+1
// ErrTooLarge; bad is that element's index.
func JSONInt32s(dst []int32, b []byte, max int) (out []int32, rest []byte, bad int, err error) {
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
			return dst, b[p:], i, jsonErr(rUnexpected, nil)
		}
		if c := b[p]; c != '-' && !isDigit(c) {
			return dst, b[p:], i, notNumber(b[p:])
		}
		n, r, err := JSONNumber(b[p:])
		switch {
		case err != nil:
			return dst, r, i, err
		case n.Float:
			return dst, b[p:], i, ErrWrongType
		case n.Big || n.Mag > math.MaxUint32 || (n.Neg && n.Mag > 1<<31):
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
			return dst, r, i, err
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
// for the general path to accept or report. Keeping the loop state in locals
// (no calls) is what makes it fast; FuzzJSONInt32s checks it against
// encoding/json.
func scanUint31s(dst []int32, b []byte, p, limit int) ([]int32, int, bool) {
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

// JSONUint64s reads the array at b[0] == '[' of 64-bit integers and appends at
// most max of them to dst, exactly (no float64). With signed=false elements are
// in 0..2^64-1 (a negative one is ErrOutOfRange); with signed=true a negative
// int64 is kept as its bit pattern (Dynamo serialises block hashes as i64 or
// u64). Other errors are JSONInt32s'.
func JSONUint64s(dst []uint64, b []byte, max int, signed bool) (out []uint64, rest []byte, bad int, err error) {
	base := len(dst)
	r := JSONWS(b[1:])
	if len(r) != 0 && r[0] == ']' {
		return dst, r[1:], 0, nil
	}
	for i := 0; ; i++ {
		if len(r) == 0 {
			return dst, r, i, jsonErr(rUnexpected, nil)
		}
		if c := r[0]; c != '-' && !isDigit(c) {
			return dst, r, i, notNumber(r)
		}
		n, after, err := JSONNumber(r)
		switch {
		case err != nil:
			return dst, after, i, err
		case n.Float:
			return dst, r, i, ErrWrongType
		case n.Big || (n.Neg && n.Mag != 0 && (!signed || n.Mag > 1<<63)):
			return dst, r, i, ErrOutOfRange
		case len(dst)-base >= max:
			return dst, r, i, ErrTooLarge
		}
		v := n.Mag
		if n.Neg {
			v = -v // two's complement of the magnitude
		}
		dst = append(dst, v)
		more := false
		if r, more, err = JSONNext(after, ']'); err != nil || !more {
			return dst, r, i, err
		}
	}
}

// notNumber is the error for an array element that is not a number: ErrWrongType
// for another kind of value, a syntax error for a byte no value starts with.
func notNumber(b []byte) error {
	switch b[0] {
	case '"', '{', '[', 't', 'f', 'n':
		return ErrWrongType
	}
	return jsonErr(rUnexpected, b)
}
