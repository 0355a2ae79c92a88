package codec

import (
	"bytes"
	"encoding/binary"
	"math"
	"unicode/utf8"
)

// JSON lexical layer: whitespace, strings (validated; unescaped into a caller's
// arena only when they hold escapes), numbers (RFC 8259 grammar, integers exact
// from their digits) and validated skipping. Every function takes the input at
// the value's first byte and returns the rest after it; on error the rest starts
// where the input went wrong (httpd reports that offset).

// JSONWS returns b after leading JSON whitespace.
func JSONWS(b []byte) []byte {
	for len(b) != 0 && (b[0] == ' ' || b[0] == '\n' || b[0] == '\r' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}

func isDigit(c byte) bool { return c-'0' < 10 }

// JSONLiteral consumes lit (true, false or null) at the start of b.
func JSONLiteral(b []byte, lit string) ([]byte, error) {
	if len(b) < len(lit) {
		if string(b) == lit[:len(b)] {
			return b[len(b):], jsonErr(rLiteral, nil)
		}
		return b, jsonErr(rLiteral, b)
	}
	if string(b[:len(lit)]) != lit {
		return b, jsonErr(rLiteral, b)
	}
	return b[len(lit):], nil
}

// jsonIsNull reports whether the value at b is (or starts like) null.
func jsonIsNull(b []byte) bool { return len(b) != 0 && b[0] == 'n' }

// jsonStringEnd validates the string at b[0] == '"' (escapes, control
// characters, UTF-8) and returns the index of its closing quote and whether it
// holds escapes. On error, at is the offending offset.
func jsonStringEnd(b []byte) (end int, escaped bool, at int, err error) {
	high := false
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			if high && !utf8.Valid(b[1:i]) {
				return 0, false, 1, jsonErr(rUTF8, b[1:])
			}
			return i, escaped, 0, nil
		case c < 0x20:
			return 0, false, i, jsonErr(rControl, b[i:])
		case c >= utf8.RuneSelf:
			high = true
		case c == '\\':
			escaped = true
			if i+1 >= len(b) {
				return 0, false, len(b), jsonErr(rUnterminated, nil)
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				for k := i + 2; k < i+6; k++ {
					if k >= len(b) {
						return 0, false, len(b), jsonErr(rUEscape, nil)
					}
					if hexVal(b[k]) < 0 {
						return 0, false, i, jsonErr(rUEscape, b[i:])
					}
				}
				i += 5
			default:
				return 0, false, i, jsonErr(rEscape, b[i:])
			}
		}
	}
	return 0, false, len(b), jsonErr(rUnterminated, nil)
}

func hexVal(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// JSONString reads the string at the start of b: a sub-slice of b when it has
// no escapes, otherwise its unescaped form appended to *arena. Arena slices are
// capped so that appending to one cannot overwrite its neighbour; when the
// arena grows, earlier slices keep pointing at the old array, which nothing
// writes any more. Invalid UTF-8 is a syntax error (RFC 8259 §8.1); a lone
// surrogate escape becomes U+FFFD. A value that is not a string is ErrWrongType.
func JSONString(b []byte, arena *[]byte) (s, rest []byte, err error) {
	if len(b) == 0 {
		return nil, b, jsonErr(rUnexpected, nil)
	}
	if b[0] != '"' {
		return nil, b, ErrWrongType
	}
	end, escaped, at, err := jsonStringEnd(b)
	if err != nil {
		return nil, b[at:], err
	}
	if !escaped {
		return b[1:end:end], b[end+1:], nil
	}
	a := *arena
	start := len(a)
	for i := 1; i < end; i++ {
		c := b[i]
		if c != '\\' {
			a = append(a, c)
			continue
		}
		i++
		switch b[i] {
		case 'b':
			a = append(a, '\b')
		case 'f':
			a = append(a, '\f')
		case 'n':
			a = append(a, '\n')
		case 'r':
			a = append(a, '\r')
		case 't':
			a = append(a, '\t')
		case 'u':
			r := hex4(b[i+1:])
			i += 4
			if utf16IsHigh(r) && i+6 < end && b[i+1] == '\\' && b[i+2] == 'u' {
				if r2 := hex4(b[i+3:]); utf16IsLow(r2) {
					r = 0x10000 + (r-0xd800)<<10 + (r2 - 0xdc00)
					i += 6
				}
			}
			if r >= 0xd800 && r <= 0xdfff {
				r = utf8.RuneError // lone surrogate
			}
			a = utf8.AppendRune(a, r)
		default: // '"', '\\', '/'
			a = append(a, b[i])
		}
	}
	*arena = a
	n := len(a)
	return a[start:n:n], b[end+1:], nil
}

func hex4(b []byte) rune {
	return rune(hexVal(b[0])<<12 | hexVal(b[1])<<8 | hexVal(b[2])<<4 | hexVal(b[3]))
}

func utf16IsHigh(r rune) bool { return r >= 0xd800 && r <= 0xdbff }
func utf16IsLow(r rune) bool  { return r >= 0xdc00 && r <= 0xdfff }

// JSONPlainString is JSONString's fast path for long strings: when the string
// at b[0] == '"' has no escapes, control characters or bytes above 0x7f, it
// returns its text and the rest, finding the end with bytes.IndexByte (memchr
// speed: the RPC's base64 token_ids are long). ok=false consumes nothing; the
// caller then uses JSONString, which validates and unescapes.
func JSONPlainString(b []byte) (s, rest []byte, ok bool) {
	n := bytes.IndexByte(b[1:], '"')
	if n < 0 {
		return nil, b, false
	}
	s = b[1 : 1+n]
	if bytes.IndexByte(s, '\\') >= 0 || !printableASCII(s) {
		return nil, b, false
	}
	return s, b[n+2:], true
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

// Number is a scanned JSON number. Integers are exact over the whole
// int64 ∪ uint64 range, with no float64 on the way.
type Number struct {
	Mag   uint64 // the integer's magnitude (when neither Float nor Big)
	Neg   bool   // a leading '-'
	Float bool   // a fraction or exponent: never an integer, whatever its value
	Big   bool   // an integer whose magnitude exceeds 2^64-1
}

// Int64 returns n as an int64 when it is an integer in range.
func (n Number) Int64() (int64, bool) {
	switch {
	case n.Float || n.Big:
		return 0, false
	case n.Neg:
		return int64(-n.Mag), n.Mag <= 1<<63 // -(1<<63) wraps to MinInt64 exactly
	}
	return int64(n.Mag), n.Mag <= math.MaxInt64
}

// JSONNumber scans the number at the start of b per RFC 8259's grammar.
func JSONNumber(b []byte) (n Number, rest []byte, err error) {
	p := 0
	if p < len(b) && b[p] == '-' {
		n.Neg = true
		p++
	}
	if p >= len(b) || !isDigit(b[p]) {
		return Number{}, b[p:], jsonErr(rNumber, b[p:])
	}
	if b[p] == '0' {
		p++
	} else {
		for ; p < len(b) && isDigit(b[p]); p++ {
			d := uint64(b[p] - '0')
			if n.Mag > (math.MaxUint64-d)/10 {
				n.Big = true
			} else if !n.Big {
				n.Mag = n.Mag*10 + d
			}
		}
	}
	if p < len(b) && b[p] == '.' {
		if p, err = jsonDigits(b, p+1); err != nil {
			return Number{}, b[p:], err
		}
		n.Float = true
	}
	if p < len(b) && (b[p] == 'e' || b[p] == 'E') {
		p++
		if p < len(b) && (b[p] == '+' || b[p] == '-') {
			p++
		}
		if p, err = jsonDigits(b, p); err != nil {
			return Number{}, b[p:], err
		}
		n.Float = true
	}
	if n.Float || n.Big {
		n.Mag = 0
	}
	return n, b[p:], nil
}

// jsonDigits returns the position after the digits at b[p:], of which there
// must be one at least.
func jsonDigits(b []byte, p int) (int, error) {
	if p >= len(b) || !isDigit(b[p]) {
		return p, jsonErr(rNumber, b[p:])
	}
	for p < len(b) && isDigit(b[p]) {
		p++
	}
	return p, nil
}

// JSONSkip returns b after the JSON value at its start (after whitespace),
// validating it. Nesting is bounded by MaxDepth.
func JSONSkip(b []byte) ([]byte, error) { return jsonSkip(JSONWS(b), 0) }

func jsonSkip(b []byte, depth int) ([]byte, error) {
	if len(b) == 0 {
		return b, jsonErr(rUnexpected, nil)
	}
	switch c := b[0]; {
	case c == '{' || c == '[':
		if depth >= MaxDepth {
			return b, errTooDeep
		}
		end, sep := byte('}'), rObjectSep
		if c == '[' {
			end, sep = ']', rArraySep
		}
		b = JSONWS(b[1:])
		if len(b) != 0 && b[0] == end {
			return b[1:], nil
		}
		for {
			var err error
			if c == '{' {
				if b, err = jsonSkipKey(b); err != nil {
					return b, err
				}
			}
			if b, err = jsonSkip(b, depth+1); err != nil {
				return b, err
			}
			b = JSONWS(b)
			switch {
			case len(b) == 0:
				return b, jsonErr(sep, nil)
			case b[0] == ',':
				b = JSONWS(b[1:])
			case b[0] == end:
				return b[1:], nil
			default:
				return b, jsonErr(sep, b)
			}
		}
	case c == '"':
		end, _, at, err := jsonStringEnd(b)
		if err != nil {
			return b[at:], err
		}
		return b[end+1:], nil
	case c == 't':
		return JSONLiteral(b, "true")
	case c == 'f':
		return JSONLiteral(b, "false")
	case c == 'n':
		return JSONLiteral(b, "null")
	case c == '-' || isDigit(c):
		_, rest, err := JSONNumber(b)
		return rest, err
	}
	return b, jsonErr(rUnexpected, b)
}

// jsonSkipKey consumes `"key" :` and the whitespace after it.
func jsonSkipKey(b []byte) ([]byte, error) {
	if len(b) == 0 || b[0] != '"' {
		return b, jsonErr(rKey, b)
	}
	end, _, at, err := jsonStringEnd(b)
	if err != nil {
		return b[at:], err
	}
	return jsonColon(b[end+1:])
}

// jsonColon consumes the ':' after an object key and the whitespace around it;
// a value must follow.
func jsonColon(b []byte) ([]byte, error) {
	b = JSONWS(b)
	if len(b) == 0 || b[0] != ':' {
		return b, jsonErr(rColon, b)
	}
	return jsonMore(JSONWS(b[1:]))
}

// jsonMore fails when nothing is left where a value must follow.
func jsonMore(b []byte) ([]byte, error) {
	if len(b) == 0 {
		return b, jsonErr(rUnexpected, nil)
	}
	return b, nil
}

// JSONKey reads `"key" :` at the start of b and returns the key and the rest at
// the value's first byte.
func JSONKey(b []byte, arena *[]byte) (key, rest []byte, err error) {
	if len(b) == 0 || b[0] != '"' {
		return nil, b, jsonErr(rKey, b)
	}
	if key, b, err = JSONString(b, arena); err != nil {
		return nil, b, err
	}
	b, err = jsonColon(b)
	return key, b, err
}

// JSONNext consumes the separator after a member (close '}') or element (close
// ']') and the whitespace after it: more=true after ',' (and something follows),
// false after close.
func JSONNext(b []byte, close byte) (rest []byte, more bool, err error) {
	b = JSONWS(b)
	sep := rArraySep
	if close == '}' {
		sep = rObjectSep
	}
	switch {
	case len(b) == 0:
		return b, false, jsonErr(sep, nil)
	case b[0] == ',':
		b, err = jsonMore(JSONWS(b[1:]))
		return b, err == nil, err
	case b[0] == close:
		return b[1:], false, nil
	}
	return b, false, jsonErr(sep, b)
}
