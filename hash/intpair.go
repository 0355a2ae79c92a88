package hash

// The 4-token vector encoders (cborInts4, pickleInts4 on amd64) write each
// pair of tokens with one byte shuffle of a 16-byte source
//
//	bytes 0-3 token 0's argument, little-endian; 4-7 token 1's;
//	byte 8 token 0's head (CBOR) or opcode (pickle); byte 12 token 1's
//
// by the row of an intPairTab picked by the pair's two width classes. The
// tables are built here from each encoding's byte layout per class, the same
// layouts the scalar loops write (TestPutCBORInts, TestPutPickleInts).

// intHead marks the head (or opcode) byte in a class layout; other entries
// are argument byte indexes, 0 the least significant.
const intHead = -1

// cborIntBytes lists, per CBOR width class (0: inline, 1, 2, 3: one, two,
// four argument bytes), the bytes a token writes: the head, then its argument
// most significant byte first.
func cborIntBytes(class int) []int8 {
	return [4][]int8{{intHead}, {intHead, 0}, {intHead, 1, 0}, {intHead, 3, 2, 1, 0}}[class]
}

// pickleIntBytes is cborIntBytes for pickle: BININT1, BININT2 and BININT
// (class 3 does not occur; it is given BININT's), the int little-endian.
func pickleIntBytes(class int) []int8 {
	return [4][]int8{{intHead, 0}, {intHead, 0, 1}, {intHead, 0, 1, 2, 3}, {intHead, 0, 1, 2, 3}}[class]
}

// intPairTab returns the 16 shuffle rows, indexed code0 | code1<<2 where a
// token's code is -class & 3 (what the vector code has at hand: the sum of
// its compare masks). A row gives the source byte of each output byte (0x80
// for none: VPSHUFB writes zero) and, in byte 15, the pair's length in bytes
// (at most 10, so the output's byte 15 is never one of the pair's).
func intPairTab(layout func(class int) []int8) [16][16]byte {
	var tab [16][16]byte
	for row := range tab {
		r := &tab[row]
		for i := range r {
			r[i] = 0x80
		}
		n := 0
		for tok := range 2 {
			code := row >> (2 * tok) & 3
			for _, b := range layout((4 - code) & 3) {
				if b == intHead {
					r[n] = byte(8 + 4*tok)
				} else {
					r[n] = byte(4*tok + int(b))
				}
				n++
			}
		}
		r[15] = byte(n)
	}
	return tab
}

// The shuffle rows of cborInts4 and pickleInts4, which take them as an
// argument.
var (
	cborPairTab   = intPairTab(cborIntBytes)
	picklePairTab = intPairTab(pickleIntBytes)
)
