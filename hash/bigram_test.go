package hash

import (
	"slices"
	"testing"
)

// TestUnflattenBigram: EAGLE pairs over a token run give the run back,
// appended to dst; pairs that do not chain, and odd or short inputs, are
// refused. (core's hash self-check test runs the chain over the result.)
func TestUnflattenBigram(t *testing.T) {
	f := func(pairs, want []int32, ok bool) {
		t.Helper()
		dst := make([]int32, 0, 16)
		got, gotOK := UnflattenBigram(dst[:0], pairs)
		if gotOK != ok || (ok && !slices.Equal(got, want)) {
			t.Fatalf("UnflattenBigram(%v) = %v %v, want %v %v", pairs, got, gotOK, want, ok)
		}
		if ok && &got[0] != &dst[:1][0] {
			t.Fatal("did not append to dst")
		}
	}
	f([]int32{10, 11, 11, 12, 12, 13, 13, 14}, []int32{10, 11, 12, 13, 14}, true)
	f([]int32{7, 8}, []int32{7, 8}, true)
	f([]int32{1, 2, 3, 4}, nil, false)
	f([]int32{1, 2, 2}, nil, false)
	f([]int32{1}, nil, false)
	f(nil, nil, false)
}
