//go:build !unix

package hash

import "time"

// processCPU is unavailable here; reportPerBlock then omits cpu-ns/block.
func processCPU() time.Duration { return 0 }
