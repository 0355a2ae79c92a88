package httpd

import (
	"bytes"
	"encoding/binary"
	"math"
	"strconv"
	"unicode/utf8"
)

// maxJSONDepth bounds nesting inside skipped JSON values (recursion is bounded,
// so no input can exhaust the stack).
const maxJSONDepth = 64

// jsonReader is the JSON dialect's reader: a strict RFC 8259 scanner over one
// object, without encoding/json and without allocations on valid input.
//
// Strings without escapes are returned as views of the body; escaped strings are
// unescaped into *scratch, which only grows during a request (earlier views stay
// valid because old backing arrays are never overwritten). Invalid UTF-8 in a
// string is a syntax error (RFC 8259 §8.1).
type jsonReader struct {
	b       []byte
	pos     int
	state   uint8 // 0: before the first key, 1: after a key or value, 2: done
	root    bool  // the object must be followed by whitespace only
	syntax  *RequestError
	scratch *[]byte
}

// init starts reading the object b. scratch receives unescaped strings.
func (r *jsonReader) init(b []byte, scratch *[]byte, root bool) {
	*r = jsonReader{b: b, root: root, scratch: scratch}
	r.ws()
	switch {
	case r.pos >= len(b):
		r.fail("empty body")
	case b[r.pos] != '{':
		r.fail("request body must be a JSON object")
	default:
		r.pos++
	}
}

func (r *jsonReader) err() *RequestError { return r.syntax }

func (r *jsonReader) sub(raw []byte) reader {
	s := &jsonReader{}
	s.init(raw, r.scratch, true)
	return s
}

// fail records the first syntax error.
func (r *jsonReader) fail(msg string) {
	if r.syntax != nil {
		return
	}
	r.syntax = &RequestError{Err: ErrInvalidJSON, Index: noIndex,
		Msg: "Invalid JSON object: " + msg + " at offset " + strconv.Itoa(r.pos)}
	r.state = 2
}

func (r *jsonReader) ws() {
	for r.pos < len(r.b) {
		switch r.b[r.pos] {
		case ' ', '\t', '\n', '\r':
			r.pos++
		default:
			return
		}
	}
}

// peek returns the current byte, or 0 at the end.
func (r *jsonReader) peek() byte {
	if r.pos < len(r.b) {
		return r.b[r.pos]
	}
	return 0
}

func (r *jsonReader) nextKey() ([]byte, bool) {
	if r.state == 2 {
		return nil, false
	}
	r.ws()
	if r.state == 1 {
		switch r.peek() {
		case ',':
			r.pos++
			r.ws()
		case '}':
			r.pos++
			r.finish()
			return nil, false
		default:
			r.fail("expected ',' or '}' after an object value")
			return nil, false
		}
	} else if r.peek() == '}' {
		r.pos++
		r.finish()
		return nil, false
	}
	if r.peek() != '"' {
		r.fail("expected a string key")
		return nil, false
	}
	key := r.str()
	if r.syntax != nil {
		return nil, false
	}
	r.ws()
	if r.peek() != ':' {
		r.fail("expected ':' after an object key")
		return nil, false
	}
	r.pos++
	r.ws()
	r.state = 1
	return key, true
}

func (r *jsonReader) finish() {
	r.state = 2
	if r.root {
		r.ws()
		if r.pos != len(r.b) {
			r.fail("trailing data after the JSON object")
		}
	}
}

func (r *jsonReader) value() value {
	if r.syntax != nil {
		return value{}
	}
	switch c := r.peek(); c {
	case '"':
		s := r.str()
		return value{kind: kindStr, s: s}
	case '{', '[':
		start := r.pos
		r.skipValue(0)
		k := kindArray
		if c == '{' {
			k = kindMap
		}
		return value{kind: k, s: r.b[start:r.pos]}
	case 't':
		r.literal("true")
		return value{kind: kindBool, b: true}
	case 'f':
		r.literal("false")
		return value{kind: kindBool}
	case 'n':
		r.literal("null")
		return value{kind: kindNil}
	default:
		if c == '-' || isDigit(c) {
			return r.number()
		}
		r.fail("unexpected character")
		return value{}
	}
}

func (r *jsonReader) skip() {
	if r.syntax == nil {
		r.skipValue(0)
	}
}

func isDigit(c byte) bool { return c-'0' < 10 }

func (r *jsonReader) literal(lit string) {
	if len(r.b)-r.pos < len(lit) || string(r.b[r.pos:r.pos+len(lit)]) != lit {
		r.fail("invalid literal")
		return
	}
	r.pos += len(lit)
}

// number scans one JSON number and classifies it. Integers are exact over the
// whole int64 ∪ uint64 range (no float64 on the way); anything with a fraction
// or exponent is kindFloat.
func (r *jsonReader) number() value {
	b, p := r.b, r.pos
	neg := false
	if p < len(b) && b[p] == '-' {
		neg = true
		p++
	}
	if p >= len(b) || !isDigit(b[p]) {
		r.pos = p
		r.fail("invalid number")
		return value{}
	}
	var u uint64
	overflow := false
	if b[p] == '0' {
		p++
	} else {
		for p < len(b) && isDigit(b[p]) {
			d := uint64(b[p] - '0')
			if u > (math.MaxUint64-d)/10 {
				overflow = true
			} else if !overflow {
				u = u*10 + d
			}
			p++
		}
	}
	isFloat := false
	if p < len(b) && b[p] == '.' {
		p++
		if p >= len(b) || !isDigit(b[p]) {
			r.pos = p
			r.fail("invalid number")
			return value{}
		}
		for p < len(b) && isDigit(b[p]) {
			p++
		}
		isFloat = true
	}
	if p < len(b) && (b[p] == 'e' || b[p] == 'E') {
		p++
		if p < len(b) && (b[p] == '+' || b[p] == '-') {
			p++
		}
		if p >= len(b) || !isDigit(b[p]) {
			r.pos = p
			r.fail("invalid number")
			return value{}
		}
		for p < len(b) && isDigit(b[p]) {
			p++
		}
		isFloat = true
	}
	r.pos = p
	switch {
	case isFloat:
		return value{kind: kindFloat}
	case overflow:
		return value{kind: kindBigInt, neg: neg}
	case neg && u <= 1<<63:
		return value{kind: kindInt, i: int64(-u)} // -(1<<63) wraps to MinInt64 exactly
	case neg:
		return value{kind: kindBigInt, neg: true}
	case u <= math.MaxInt64:
		return value{kind: kindInt, i: int64(u)}
	default:
		return value{kind: kindUint, u: u}
	}
}

// str scans a string at r.pos (which holds '"') and returns its text.
func (r *jsonReader) str() []byte {
	b := r.b
	start := r.pos + 1
	high := false
	for i := start; i < len(b); i++ {
		c := b[i]
		switch {
		case c == '"':
			r.pos = i + 1
			s := b[start:i]
			if high && !utf8.Valid(s) {
				r.pos = start
				r.fail("invalid UTF-8 in string")
				return nil
			}
			return s
		case c == '\\':
			return r.strSlow(start, i)
		case c < 0x20:
			r.pos = i
			r.fail("control character in string")
			return nil
		case c >= utf8.RuneSelf:
			high = true
		}
	}
	r.pos = len(b)
	r.fail("unterminated string")
	return nil
}

// plainString consumes the string at r.pos (which holds '"') when it has no
// escapes, control characters or bytes above 0x7f, finding its end with
// bytes.IndexByte (memchr speed: the RPC's base64 token_ids are long); it
// returns ok=false without consuming anything otherwise, and the caller uses
// value(), which validates and unescapes.
func (r *jsonReader) plainString() (value, bool) {
	if r.syntax != nil {
		return value{}, false
	}
	start := r.pos + 1
	n := bytes.IndexByte(r.b[start:], '"')
	if n < 0 {
		return value{}, false
	}
	s := r.b[start : start+n]
	if bytes.IndexByte(s, '\\') >= 0 || !printableASCII(s) {
		return value{}, false
	}
	r.pos = start + n + 1
	return value{kind: kindStr, s: s}, true
}

// printableASCII reports whether every byte of s is in 0x20..0x7f, eight at a
// time. It may answer false for some such inputs (a borrow crossing bytes);
// callers then take the validating path. TestPrintableASCII.
func printableASCII(s []byte) bool {
	const lo, hi = 0x2020202020202020, 0x8080808080808080
	i := 0
	for ; i+8 <= len(s); i += 8 {
		w := binary.LittleEndian.Uint64(s[i:])
		// a byte < 0x20 borrows in w-lo; a byte >= 0x80, or one that became
		// >= 0x80 by the subtraction, sets its high bit.
		if (w|(w-lo))&hi != 0 {
			return false
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 {
			return false
		}
	}
	return true
}

// strSlow unescapes a string whose first escape is at b[i] into the scratch.
func (r *jsonReader) strSlow(start, i int) []byte {
	b := r.b
	dst := *r.scratch
	mark := len(dst)
	dst = append(dst, b[start:i]...)
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			r.pos = i + 1
			*r.scratch = dst
			s := dst[mark:len(dst):len(dst)]
			if !utf8.Valid(s) {
				r.pos = start
				r.fail("invalid UTF-8 in string")
				return nil
			}
			return s
		case c < 0x20:
			r.pos = i
			r.fail("control character in string")
			*r.scratch = dst
			return nil
		case c != '\\':
			dst = append(dst, c)
			i++
			continue
		}
		// escape
		if i+1 >= len(b) {
			break
		}
		e := b[i+1]
		i += 2
		switch e {
		case '"', '\\', '/':
			dst = append(dst, e)
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r1, ok := hex4(b, i)
			if !ok {
				r.pos = i
				r.fail("invalid \\u escape")
				*r.scratch = dst
				return nil
			}
			i += 4
			if utf16IsHigh(r1) {
				if i+6 <= len(b) && b[i] == '\\' && b[i+1] == 'u' {
					if r2, ok := hex4(b, i+2); ok && utf16IsLow(r2) {
						dst = utf8.AppendRune(dst, 0x10000+(r1-0xD800)<<10+(r2-0xDC00))
						i += 6
						continue
					}
				}
				r1 = utf8.RuneError
			} else if utf16IsLow(r1) {
				r1 = utf8.RuneError
			}
			dst = utf8.AppendRune(dst, r1)
		default:
			r.pos = i - 1
			r.fail("invalid escape")
			*r.scratch = dst
			return nil
		}
	}
	*r.scratch = dst
	r.pos = len(b)
	r.fail("unterminated string")
	return nil
}

func utf16IsHigh(r rune) bool { return r >= 0xD800 && r < 0xDC00 }
func utf16IsLow(r rune) bool  { return r >= 0xDC00 && r < 0xE000 }

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var v rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return v, true
}

// skipValue consumes and validates one value at r.pos.
func (r *jsonReader) skipValue(depth int) {
	if depth > maxJSONDepth {
		r.fail("nesting deeper than 64 levels")
		return
	}
	switch c := r.peek(); c {
	case '{':
		r.pos++
		r.ws()
		if r.peek() == '}' {
			r.pos++
			return
		}
		for {
			if r.peek() != '"' {
				r.fail("expected a string key")
				return
			}
			r.skipString()
			r.ws()
			if r.peek() != ':' {
				r.fail("expected ':' after an object key")
				return
			}
			r.pos++
			r.ws()
			r.skipValue(depth + 1)
			if r.syntax != nil {
				return
			}
			r.ws()
			switch r.peek() {
			case ',':
				r.pos++
				r.ws()
			case '}':
				r.pos++
				return
			default:
				r.fail("expected ',' or '}' after an object value")
				return
			}
		}
	case '[':
		r.pos++
		r.ws()
		if r.peek() == ']' {
			r.pos++
			return
		}
		for {
			r.skipValue(depth + 1)
			if r.syntax != nil {
				return
			}
			r.ws()
			switch r.peek() {
			case ',':
				r.pos++
				r.ws()
			case ']':
				r.pos++
				return
			default:
				r.fail("expected ',' or ']' after an array element")
				return
			}
		}
	case '"':
		r.skipString()
	default:
		r.value()
	}
}

// skipString validates a string at r.pos without unescaping it.
func (r *jsonReader) skipString() {
	b := r.b
	start := r.pos + 1
	high := false
	for i := start; i < len(b); i++ {
		c := b[i]
		switch {
		case c == '"':
			if high && !utf8.Valid(b[start:i]) {
				r.pos = start
				r.fail("invalid UTF-8 in string")
				return
			}
			r.pos = i + 1
			return
		case c == '\\':
			if i+1 >= len(b) {
				r.pos = i
				r.fail("unterminated string")
				return
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if _, ok := hex4(b, i+2); !ok {
					r.pos = i
					r.fail("invalid \\u escape")
					return
				}
				i += 5
			default:
				r.pos = i
				r.fail("invalid escape")
				return
			}
		case c < 0x20:
			r.pos = i
			r.fail("control character in string")
			return
		case c >= utf8.RuneSelf:
			high = true
		}
	}
	r.pos = len(b)
	r.fail("unterminated string")
}

// arrayStart consumes '[' and reports whether the array is empty (then ']' is
// consumed too). When the value is not an array it is consumed and ok=false.
func (r *jsonReader) arrayStart() (empty, ok bool) {
	if r.peek() != '[' {
		r.skipValue(0)
		return false, false
	}
	r.pos++
	r.ws()
	if r.peek() == ']' {
		r.pos++
		return true, true
	}
	return false, true
}

// arrayNext consumes the separator after an element: more=false after ']'.
func (r *jsonReader) arrayNext() (more bool) {
	r.ws()
	switch r.peek() {
	case ',':
		r.pos++
		r.ws()
		return true
	case ']':
		r.pos++
		return false
	}
	r.fail("expected ',' or ']' after an array element")
	return false
}

// int32s parses a JSON array of token ids. Elements are exact integers in
// -2^31..2^32-1 (token ids are u32 in the hashing standard; negative ids keep
// their int32 meaning), stored as their 32-bit pattern; a fraction or exponent
// is invalid_type, values outside that range are out_of_range, both naming the
// element index.
func (r *jsonReader) int32s(buf *[]int32, field string, max int) ([]int32, *RequestError) {
	dst := (*buf)[:0]
	if r.syntax != nil {
		return dst, nil
	}
	empty, ok := r.arrayStart()
	if !ok {
		return dst, reqErr(ErrInvalidType, field, field+" must be an array")
	}
	if empty {
		return dst, nil
	}
	var fe *RequestError
	b := r.b
	for i := 0; ; i++ {
		if fe == nil {
			var done bool
			dst, r.pos, done = scanUint31s(dst, b, r.pos, max)
			i = len(dst) // every element so far was appended
			if done {
				break
			}
		}
		if fe != nil {
			r.skipValue(1)
		} else if c := r.peek(); c == '-' || isDigit(c) {
			v, kindOK := r.int32Elem()
			switch {
			case r.syntax != nil:
			case !kindOK:
				fe = elemErr(ErrInvalidType, field, i, field+" element must be an integer")
			case v > math.MaxUint32 || v < math.MinInt32:
				fe = elemErr(ErrOutOfRange, field, i, field+" element must be a 32-bit integer (-2147483648..4294967295)")
			case len(dst) >= max:
				fe = reqErr(ErrOutOfRange, field, field+" has more than "+strconv.Itoa(max)+" elements")
			default:
				dst = append(dst, int32(uint32(v)))
			}
		} else {
			r.skipValue(1)
			fe = elemErr(ErrInvalidType, field, i, field+" element must be an integer")
		}
		if r.syntax != nil {
			break
		}
		// fast path for the common ", " / "," separators
		if p := r.pos; p < len(b) && b[p] == ',' {
			r.pos++
			if p+1 < len(b) && b[p+1] == ' ' {
				r.pos++
			}
			r.ws()
			continue
		}
		if !r.arrayNext() {
			break
		}
	}
	*buf = dst[:0]
	return dst, fe
}

// scanUint31s is int32s' fast path over the dominant shape of token arrays:
// elements of 1 to 9 ASCII digits without a leading zero (so below 10^9, well
// inside int32), each followed directly by ',' (then optional whitespace, as in
// Python's ", ") or ']'. It appends elements from b[p:] while they have that
// shape and len(dst) < max, and returns the position after the last ',' and
// whitespace consumed, or after ']' with done=true. Anything
// else (a sign, whitespace, a fraction, a long or zero-led number, the element
// limit, the end of input) stops it at the start of that element, unconsumed,
// for the general path to accept or report. Keeping the loop state in locals
// (no method calls, no writes through r) is what makes it fast; FuzzJSONInt32s
// checks it against encoding/json.
func scanUint31s(dst []int32, b []byte, p, max int) ([]int32, int, bool) {
	for len(dst) < max {
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

// int32Elem scans one number for int32s. It returns the value saturated
// beyond the int32 range (still out of range), or ok=false for a number with a
// fraction or exponent.
func (r *jsonReader) int32Elem() (v int64, ok bool) {
	b, p := r.b, r.pos
	start := p
	neg := false
	if b[p] == '-' {
		neg = true
		p++
		if p >= len(b) || !isDigit(b[p]) {
			r.pos = p
			r.fail("invalid number")
			return 0, false
		}
	}
	var u uint64
	if b[p] == '0' {
		p++
	} else {
		for p < len(b) {
			d := b[p] - '0'
			if d > 9 {
				break
			}
			if u < 1<<32 {
				u = u*10 + uint64(d)
			}
			p++
		}
	}
	if p < len(b) && (b[p] == '.' || b[p] == 'e' || b[p] == 'E') {
		r.pos = start
		r.number() // validate and consume
		return 0, false
	}
	r.pos = p
	if neg {
		return -int64(u), true
	}
	return int64(u), true
}

// uint64s parses a JSON array of unsigned 64-bit integers, exactly (no float64):
// negatives and values above 2^64-1 are out_of_range, fractions or exponents
// invalid_type, each naming the element index.
func (r *jsonReader) uint64s(buf *[]uint64, field string, max int) ([]uint64, *RequestError) {
	return r.words(buf, field, max, false)
}

// hashBits parses a JSON array of 64-bit integers, signed or unsigned, keeping
// each as its 64-bit pattern (Dynamo serialises block hashes as i64 or u64).
func (r *jsonReader) hashBits(buf *[]uint64, field string, max int) ([]uint64, *RequestError) {
	return r.words(buf, field, max, true)
}

// words is uint64s (signed false) and hashBits (signed true: a negative
// int64 is kept as its bit pattern).
func (r *jsonReader) words(buf *[]uint64, field string, max int, signed bool) ([]uint64, *RequestError) {
	dst := (*buf)[:0]
	if r.syntax != nil {
		return dst, nil
	}
	empty, ok := r.arrayStart()
	if !ok {
		return dst, reqErr(ErrInvalidType, field, field+" must be an array")
	}
	if empty {
		return dst, nil
	}
	var fe *RequestError
	for i := 0; ; i++ {
		if fe != nil {
			r.skipValue(1)
		} else if c := r.peek(); c == '-' || isDigit(c) {
			v := r.number()
			switch {
			case r.syntax != nil:
			case v.kind == kindFloat:
				fe = elemErr(ErrInvalidType, field, i, field+" element must be an integer")
			case v.kind == kindBigInt && signed:
				fe = elemErr(ErrOutOfRange, field, i, field+" element must fit 64 bits")
			case v.kind == kindBigInt || (v.kind == kindInt && v.i < 0 && !signed):
				fe = elemErr(ErrOutOfRange, field, i, field+" element must be an unsigned 64-bit integer")
			case len(dst) >= max:
				fe = reqErr(ErrOutOfRange, field, field+" has more than "+strconv.Itoa(max)+" elements")
			case v.kind == kindInt:
				dst = append(dst, uint64(v.i))
			default:
				dst = append(dst, v.u)
			}
		} else {
			r.skipValue(1)
			fe = elemErr(ErrInvalidType, field, i, field+" element must be an integer")
		}
		if r.syntax != nil || !r.arrayNext() {
			break
		}
	}
	*buf = dst[:0]
	return dst, fe
}

// AppendJSONInt32s parses src, one JSON array of int32 integers surrounded by
// optional whitespace, and appends its elements to dst. It is the /query
// token_ids scanner: exact integers only (a fraction or exponent is an
// ErrInvalidType, a value outside int32 an ErrOutOfRange, both naming the
// element index), no float64, no allocation when dst has room. Errors are
// *RequestError.
func AppendJSONInt32s(dst []int32, src []byte) ([]int32, error) {
	var scratch []byte
	r := jsonReader{b: src, scratch: &scratch, root: true}
	r.ws()
	spare := dst[len(dst):]
	got, fe := r.int32s(&spare, "token_ids", math.MaxInt)
	if err := r.arrayEnd(); err != nil {
		return dst, err
	}
	if fe != nil {
		return dst, fe
	}
	return append(dst, got...), nil
}

// AppendJSONUint64s is AppendJSONInt32s for unsigned 64-bit integers (the
// seq_hashes scanner): every value in 0..2^64-1 is exact.
func AppendJSONUint64s(dst []uint64, src []byte) ([]uint64, error) {
	var scratch []byte
	r := jsonReader{b: src, scratch: &scratch, root: true}
	r.ws()
	spare := dst[len(dst):]
	got, fe := r.uint64s(&spare, "seq_hashes", math.MaxInt)
	if err := r.arrayEnd(); err != nil {
		return dst, err
	}
	if fe != nil {
		return dst, fe
	}
	return append(dst, got...), nil
}

// arrayEnd checks that only whitespace follows a standalone array value.
func (r *jsonReader) arrayEnd() *RequestError {
	if r.syntax == nil {
		r.ws()
		if r.pos != len(r.b) {
			r.fail("trailing data after the JSON array")
		}
	}
	return r.syntax
}
