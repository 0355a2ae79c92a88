package hash

// prefetch hints the CPU to bring the bucket (memoWays cache lines) at p into cache without
// waiting for it (PREFETCHT0), so a memo probe issued one block ahead overlaps
// its DRAM latency with the current block's SHA-256. It never faults.
//
//go:noescape
func prefetch(p *memoSlot)
