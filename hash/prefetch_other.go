//go:build !amd64

package hash

// prefetch is a no-op where no prefetch instruction is wired up.
func prefetch(*memoSlot) {}
