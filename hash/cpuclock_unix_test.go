//go:build unix

package hash

import (
	"syscall"
	"time"
)

// processCPU is this process's user+system CPU time. The benchmarks report CPU
// per block beside wall time because a shared machine deschedules them: a
// descheduled benchmark loses wall time but not CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
