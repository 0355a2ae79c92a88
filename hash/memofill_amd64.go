package hash

// memoFill performs steps 3 and 4 of Memo's put on a slot the caller has
// claimed (step 2 left seq odd): it stores the key words, then the digest
// words, then seq, the even value that publishes the slot.
//
// Safety: x86-64 orders stores (TSO: a store is never made visible before an
// older one, and aligned 8-byte MOVs are single-copy atomic), so a reader
// that loads the new seq also sees every word stored before it, and one that
// loads a word of this write also loads a seq other than the one it started
// from (its loads are not reordered with each other: get's atomic loads are
// plain MOVs). The routine is assembly, so the compiler cannot move these
// stores across it: they stay after the CompareAndSwap that claimed the slot
// and before whatever the caller does next. Atomic stores (an XCHG each, a
// full fence) would add about 45 ns a put. It runs in every build, -race
// included (the detector sees get's atomic loads and put's CompareAndSwap,
// not these stores); TestMemoConcurrentExact and TestMemoSlotProtocol check
// the protocol under -race.
//
//go:noescape
func memoFill(s *memoSlot, k0, k1, d0, d1, d2, d3, seq uint64)
