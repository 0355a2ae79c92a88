//go:build !amd64 || race

package hash

import "sync/atomic"

// storeInSlot writes one key or digest word of a memo slot the caller owns; see
// memostore_amd64.go for the amd64 fast path.
func storeInSlot(p *atomic.Uint64, v uint64) { p.Store(v) }
