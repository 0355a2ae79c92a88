package hash

import (
	"syscall"
	"unsafe"
)

// adviseHuge asks Linux to back the memo table with transparent huge pages
// (MADV_HUGEPAGE; the common "madvise" THP mode applies them only on request).
// Probes land on random buckets of a table of tens of MiB, so with 4 KiB pages
// nearly every miss also misses the TLB. Failure is harmless and ignored.
//
// Safety: the byte view covers exactly the slots' backing array (len*64 bytes),
// is only passed to madvise, which reads no bytes, and is not retained.
func adviseHuge(slots []memoSlot) {
	if len(slots)*memoSlotSize < 2<<20 {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(&slots[0])), len(slots)*memoSlotSize)
	_ = syscall.Madvise(b, syscall.MADV_HUGEPAGE)
}
