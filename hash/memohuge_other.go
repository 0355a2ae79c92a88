//go:build !linux

package hash

// adviseHuge is a no-op where transparent huge pages are not requested.
func adviseHuge([]memoSlot) {}
