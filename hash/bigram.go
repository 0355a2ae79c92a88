package hash

// UnflattenBigram turns SGLang's flattened EAGLE bigram pairs
// [a0,b0,a1,b1,...] (as package wire decodes them) back into the token run
// [a0,a1,...,an,bn] they were formed from, where each b_i is a_{i+1}: the
// tokens a Sample of a sglang_bigram chain takes. It appends to dst; ok is
// false when the pairs do not chain so (or are not pairs).
func UnflattenBigram(dst, pairs []int32) ([]int32, bool) {
	if len(pairs) < 2 || len(pairs)%2 != 0 {
		return dst, false
	}
	for i := 0; i+2 < len(pairs); i += 2 {
		if pairs[i+1] != pairs[i+2] {
			return dst, false
		}
		dst = append(dst, pairs[i])
	}
	return append(dst, pairs[len(pairs)-2], pairs[len(pairs)-1]), true
}
