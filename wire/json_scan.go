package wire

import (
	"math"
	"unicode/utf8"
)

// Lexical layer of the JSON reader: whitespace, strings (validated, unescaped into
// the decoder's arena only when they hold escapes), numbers (RFC 8259 grammar,
// integers parsed from their digits) and validated skipping of unknown values.

// maxJSONDepth bounds the nesting of skipped values; the reader recurses only there.
const maxJSONDepth = 256

func jsonWS(b []byte) []byte {
	for len(b) != 0 && (b[0] == ' ' || b[0] == '\n' || b[0] == '\r' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}

// jsonNext skips whitespace and fails on end of input, which inside a value always
// means the payload was cut short.
func jsonNext(b []byte) ([]byte, error) {
	b = jsonWS(b)
	if len(b) == 0 {
		return b, ErrTruncated
	}
	return b, nil
}

// jsonAfterValue consumes the separator after a member or element: it reports
// whether the container goes on (',') or ended (close).
func jsonAfterValue(b []byte, close byte) (rest []byte, more bool, err error) {
	if b, err = jsonNext(b); err != nil {
		return b, false, err
	}
	switch b[0] {
	case ',':
		b, err = jsonNext(b[1:])
		return b, true, err
	case close:
		return b[1:], false, nil
	}
	return b, false, ErrSyntax
}

// jsonKey reads `"key" :` and returns the key and the value's first byte position.
func (d *Decoder) jsonKey(b []byte) ([]byte, []byte, error) {
	if b[0] != '"' {
		return nil, b, ErrSyntax
	}
	key, b, err := d.jsonString(b)
	if err != nil {
		return nil, b, err
	}
	if b, err = jsonNext(b); err != nil {
		return nil, b, err
	}
	if b[0] != ':' {
		return nil, b, ErrSyntax
	}
	b, err = jsonNext(b[1:])
	return key, b, err
}

// jsonLiteral consumes lit (true, false, null).
func jsonLiteral(b []byte, lit string) ([]byte, error) {
	if len(b) < len(lit) {
		if string(b) == lit[:len(b)] {
			return b, ErrTruncated
		}
		return b, ErrSyntax
	}
	if string(b[:len(lit)]) != lit {
		return b, ErrSyntax
	}
	return b[len(lit):], nil
}

func jsonIsNull(b []byte) bool { return len(b) != 0 && b[0] == 'n' }

// jsonStringEnd validates the string starting at b[0] == '"' and returns the index
// of its closing quote and whether it holds escapes.
func jsonStringEnd(b []byte) (int, bool, error) {
	escaped := false
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i, escaped, nil
		case c < 0x20:
			return 0, false, ErrSyntax
		case c == '\\':
			escaped = true
			if i+1 >= len(b) {
				return 0, false, ErrTruncated
			}
			i++
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(b) {
					return 0, false, ErrTruncated
				}
				for _, h := range b[i+1 : i+5] {
					if hexVal(h) < 0 {
						return 0, false, ErrSyntax
					}
				}
				i += 4
			default:
				return 0, false, ErrSyntax
			}
		}
	}
	return 0, false, ErrTruncated
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

// jsonString reads a string value: a sub-slice of b when it has no escapes,
// otherwise its unescaped form in d.arena. Arena slices are capped so that appending
// to one cannot overwrite its neighbour; when the arena grows, earlier slices keep
// pointing at the old array, which nothing writes any more.
func (d *Decoder) jsonString(b []byte) ([]byte, []byte, error) {
	if len(b) == 0 {
		return nil, b, ErrTruncated
	}
	if b[0] != '"' {
		return nil, b, ErrWrongType
	}
	end, escaped, err := jsonStringEnd(b)
	if err != nil {
		return nil, b, err
	}
	if !escaped {
		return b[1:end:end], b[end+1:], nil
	}
	start := len(d.arena)
	for i := 1; i < end; i++ {
		c := b[i]
		if c != '\\' {
			d.arena = append(d.arena, c)
			continue
		}
		i++
		switch b[i] {
		case 'b':
			d.arena = append(d.arena, '\b')
		case 'f':
			d.arena = append(d.arena, '\f')
		case 'n':
			d.arena = append(d.arena, '\n')
		case 'r':
			d.arena = append(d.arena, '\r')
		case 't':
			d.arena = append(d.arena, '\t')
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
			d.arena = utf8.AppendRune(d.arena, r)
		default: // '"', '\\', '/'
			d.arena = append(d.arena, b[i])
		}
	}
	n := len(d.arena)
	return d.arena[start:n:n], b[end+1:], nil
}

func hex4(b []byte) rune {
	return rune(hexVal(b[0])<<12 | hexVal(b[1])<<8 | hexVal(b[2])<<4 | hexVal(b[3]))
}

func utf16IsHigh(r rune) bool { return r >= 0xd800 && r <= 0xdbff }
func utf16IsLow(r rune) bool  { return r >= 0xdc00 && r <= 0xdfff }

// jsonNumber scans a JSON number per RFC 8259's grammar and reports whether it is
// an integer (no fraction, no exponent).
func jsonNumber(b []byte) (tok []byte, isInt bool, rest []byte, err error) {
	i := 0
	if i < len(b) && b[i] == '-' {
		i++
	}
	digits := func() bool {
		j := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i > j
	}
	if i >= len(b) {
		return nil, false, b, ErrTruncated
	}
	switch {
	case b[i] == '0':
		i++
	case b[i] >= '1' && b[i] <= '9':
		digits()
	default:
		return nil, false, b, ErrSyntax
	}
	isInt = true
	if i < len(b) && b[i] == '.' {
		i++
		isInt = false
		if !digits() {
			return nil, false, b, truncOrSyntax(b, i)
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		isInt = false
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return nil, false, b, truncOrSyntax(b, i)
		}
	}
	return b[:i], isInt, b[i:], nil
}

func truncOrSyntax(b []byte, i int) error {
	if i >= len(b) {
		return ErrTruncated
	}
	return ErrSyntax
}

// jsonInteger reads an integer as sign and magnitude. Non-numbers are ErrWrongType,
// numbers with a fraction or exponent too: integer fields are never rounded.
func jsonInteger(b []byte) (mag uint64, neg bool, rest []byte, err error) {
	if len(b) == 0 {
		return 0, false, b, ErrTruncated
	}
	if c := b[0]; c != '-' && (c < '0' || c > '9') {
		return 0, false, b, ErrWrongType
	}
	tok, isInt, rest, err := jsonNumber(b)
	if err != nil {
		return 0, false, b, err
	}
	if !isInt {
		return 0, false, b, ErrWrongType
	}
	neg = tok[0] == '-'
	if neg {
		tok = tok[1:]
	}
	mag, ok := parseDecimal(tok)
	if !ok {
		return 0, false, b, ErrOutOfRange
	}
	return mag, neg, rest, nil
}

// jsonUint reads a u64: exact up to 18446744073709551615, negative is out of range.
func jsonUint(b []byte) (uint64, []byte, error) {
	mag, neg, rest, err := jsonInteger(b)
	if err != nil {
		return 0, b, err
	}
	if neg && mag != 0 {
		return 0, b, ErrOutOfRange
	}
	return mag, rest, nil
}

// jsonHash reads a hash: a u64, a negative int64 (kept as its bit pattern, as in
// msgpack), or a decimal / 0x-hex string.
func (d *Decoder) jsonHash(b []byte) (uint64, []byte, error) {
	if len(b) != 0 && b[0] == '"' {
		s, rest, err := d.jsonString(b)
		if err != nil {
			return 0, b, err
		}
		h, ok := parseU64Text(s)
		if !ok {
			return 0, b, ErrWrongType
		}
		return h, rest, nil
	}
	mag, neg, rest, err := jsonInteger(b)
	if err != nil {
		return 0, b, err
	}
	if neg {
		if mag > 1<<63 {
			return 0, b, ErrOutOfRange
		}
		return -mag, rest, nil // two's complement of the magnitude
	}
	return mag, rest, nil
}

func jsonToken(b []byte) (int32, []byte, error) {
	mag, neg, rest, err := jsonInteger(b)
	if err != nil {
		return 0, b, err
	}
	if neg {
		if mag > 1<<31 {
			return 0, b, ErrOutOfRange
		}
		return int32(-int64(mag)), rest, nil
	}
	if mag > math.MaxUint32 {
		return 0, b, ErrOutOfRange
	}
	return int32(uint32(mag)), rest, nil
}

// jsonSkip skips one value, validating it.
func (d *Decoder) jsonSkip(b []byte, depth int) ([]byte, error) {
	b, err := jsonNext(b)
	if err != nil {
		return b, err
	}
	switch c := b[0]; {
	case c == '{' || c == '[':
		if depth >= maxJSONDepth {
			return b, ErrTooLarge
		}
		close := byte('}')
		if c == '[' {
			close = ']'
		}
		if b, err = jsonNext(b[1:]); err != nil {
			return b, err
		}
		if b[0] == close {
			return b[1:], nil
		}
		for more := true; more; {
			if c == '{' {
				if _, b, err = d.jsonKey(b); err != nil {
					return b, err
				}
			}
			if b, err = d.jsonSkip(b, depth+1); err != nil {
				return b, err
			}
			if b, more, err = jsonAfterValue(b, close); err != nil {
				return b, err
			}
		}
		return b, nil
	case c == '"':
		end, _, err := jsonStringEnd(b)
		if err != nil {
			return b, err
		}
		return b[end+1:], nil
	case c == 't':
		return jsonLiteral(b, "true")
	case c == 'f':
		return jsonLiteral(b, "false")
	case c == 'n':
		return jsonLiteral(b, "null")
	case c == '-' || (c >= '0' && c <= '9'):
		_, _, rest, err := jsonNumber(b)
		return rest, err
	}
	return b, ErrSyntax
}
