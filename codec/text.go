package codec

import "math/bits"

// ParseU64Text parses a u64 written as decimal or as 0x/0X-prefixed hex (1 to 16
// digits): the forms the Mooncake master uses for object keys that are seq hashes,
// and JSON publishers for hashes a float64 number would round.
func ParseU64Text(s []byte) (uint64, bool) {
	if len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		s = s[2:]
		if len(s) > 16 {
			return 0, false
		}
		var v uint64
		for _, c := range s {
			switch {
			case c >= '0' && c <= '9':
				c -= '0'
			case c >= 'a' && c <= 'f':
				c -= 'a' - 10
			case c >= 'A' && c <= 'F':
				c -= 'A' - 10
			default:
				return 0, false
			}
			v = v<<4 | uint64(c)
		}
		return v, true
	}
	return ParseDecimal(s)
}

// ParseDecimal parses 1 to 20 ASCII digits as a u64, failing on overflow.
func ParseDecimal(s []byte) (uint64, bool) {
	if len(s) == 0 || len(s) > 20 {
		return 0, false
	}
	var v uint64
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		hi, lo := bits.Mul64(v, 10)
		lo, carry := bits.Add64(lo, uint64(c-'0'), 0)
		if hi != 0 || carry != 0 {
			return 0, false
		}
		v = lo
	}
	return v, true
}
