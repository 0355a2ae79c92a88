//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package statedir

import (
	"errors"
	"os"
	"syscall"
)

// flockExclusive takes f's exclusive flock without waiting (EWOULDBLOCK when
// another open file holds it). flock locks belong to the open file, not the
// process: a second open of the same path in this process is refused too.
func flockExclusive(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
