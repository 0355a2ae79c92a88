#include "textflag.h"

// func memoFill(s *memoSlot, k0, k1, d0, d1, d2, d3, seq uint64)
// Steps 3 and 4 of Memo's put: the key words, the digest words, then seq,
// as seven plain stores in this order (memoSlot's layout is pinned by
// TestMemoSlotLayout).
TEXT ·memoFill(SB), NOSPLIT, $0-64
	MOVQ s+0(FP), AX
	MOVQ k0+8(FP), BX
	MOVQ BX, 8(AX)
	MOVQ k1+16(FP), BX
	MOVQ BX, 16(AX)
	MOVQ d0+24(FP), BX
	MOVQ BX, 24(AX)
	MOVQ d1+32(FP), BX
	MOVQ BX, 32(AX)
	MOVQ d2+40(FP), BX
	MOVQ BX, 40(AX)
	MOVQ d3+48(FP), BX
	MOVQ BX, 48(AX)
	MOVQ seq+56(FP), BX
	MOVQ BX, 0(AX)
	RET
