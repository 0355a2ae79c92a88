package core

import "testing"

// TestHashBlockKeySpread: sequential and stride keys (the worst case for a
// weak mix) spread evenly over 1024 buckets taken from bits 7-16 (xsync's
// bucket index skips the 7 low bits it keeps for the in-bucket meta byte),
// and the seed changes the hash.
func TestHashBlockKeySpread(t *testing.T) {
	const n, buckets = 1 << 16, 1024
	for _, stride := range []uint64{1, 1 << 7, 1 << 32} {
		var count [buckets]int
		for i := uint64(0); i < n; i++ {
			count[(hashBlockKey(i*stride, 12345)>>7)%buckets]++
		}
		for b, c := range count {
			if c > 3*n/buckets || c < n/buckets/3 {
				t.Fatalf("stride %d: bucket %d holds %d of %d keys", stride, b, c, n)
			}
		}
	}
	if hashBlockKey(42, 1) == hashBlockKey(42, 2) {
		t.Fatal("seed ignored")
	}
}
