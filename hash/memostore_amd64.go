//go:build amd64 && !race

package hash

import (
	"sync/atomic"
	"unsafe"
)

// storeInSlot writes one word of a memo slot that the caller owns (its seq is
// odd after the caller's CompareAndSwap): a key or digest word, or last the
// even seq that publishes the slot. It is a plain MOV instead of
// atomic.Uint64.Store, which is an XCHG on amd64 (a full fence per word; the
// fences after a SHA-256 cost more than the hash they save on a miss).
//
// Safety: x86-64 is TSO: stores become visible in program order and are never
// reordered with older stores, and aligned 8-byte MOVs are single-copy atomic.
// The Go compiler threads plain stores and atomic intrinsics through one memory
// chain, so these stores stay between the CompareAndSwap that opens the slot
// and the final seq store that publishes it (a plain store is a release on
// TSO: no reader sees the new seq before the data), and readers (atomic loads:
// plain MOVs, loads not reordered with loads) see the seqlock protocol of Memo
// intact. The race
// detector does not model this, so -race builds and other architectures use the
// atomic store (memostore_other.go); TestMemoConcurrentExact exercises both.
func storeInSlot(p *atomic.Uint64, v uint64) {
	*(*uint64)(unsafe.Pointer(p)) = v
}
