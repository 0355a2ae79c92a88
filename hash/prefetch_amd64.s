#include "textflag.h"

// func prefetch(p *memoSlot)
// Prefetches the memoWays (4) cache lines of the bucket starting at p.
TEXT ·prefetch(SB), NOSPLIT, $0-8
	MOVQ p+0(FP), AX
	PREFETCHT0 (AX)
	PREFETCHT0 64(AX)
	PREFETCHT0 128(AX)
	PREFETCHT0 192(AX)
	RET
