//go:build !amd64

package hash

// memoFill performs steps 3 and 4 of Memo's put on a slot the caller has
// claimed: the key words, the digest words, then seq, each an atomic store
// (sequentially consistent, so the order holds on every architecture).
func memoFill(s *memoSlot, k0, k1, d0, d1, d2, d3, seq uint64) {
	s.k[0].Store(k0)
	s.k[1].Store(k1)
	s.d[0].Store(d0)
	s.d[1].Store(d1)
	s.d[2].Store(d2)
	s.d[3].Store(d3)
	s.seq.Store(seq)
}
