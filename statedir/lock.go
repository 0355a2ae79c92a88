package statedir

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// The state directory belongs to one conductor at a time. At start,
// before any port is bound or anything subscribed, conductor takes an
// exclusive, non-blocking flock on DIR/lock and writes its pid into it; a
// second conductor on the same directory exits 1 with one line naming the
// directory and the holder's pid. Two processes on one directory would each
// rewrite registrations.json with only their own registrations (the other's
// are lost at the next restart) and race on the temporary files.
//
// The lock is held for the life of the process (the open file is the lock)
// and the kernel drops it when the process exits, however it exits: a lock
// file left by a dead process never blocks a start, and needs no cleanup. The
// pid in the file is informational (the holder's, once it has written it).
// A directory this process cannot write (read-only, no permission) is used
// unlocked: nothing can be written there, so nothing can be lost to a second
// process, and writes fail as docs/operations.md, "Durable registrations",
// says.
// Proved by TestLockDir here and cmd/conductor's TestStateDirOneConductor.
const LockFile = "lock"

// ErrInUse: another process holds the state directory's lock.
var ErrInUse = errors.New("conductor: state directory in use")

// lockDir locks dir (which exists) for this process. The returned file
// holds the lock until it is closed; it is nil when dir is not writable.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("state dir %s: lock: %w", dir, err)
	}
	if err := flockExclusive(f); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked by conductor pid %s (%s); to run several conductors give each its own --state-dir DIR, or --state-dir '' to run without durable state",
				ErrInUse, dir, lockHolder(path), path)
		}
		return nil, fmt.Errorf("state dir %s: lock: %w", dir, err)
	}
	// Best effort: a full disk must not stop the start (state writes then
	// fail with state_not_saved). The line goes in first and the file is cut
	// to it after, so a reader never sees an empty first line.
	line := strconv.Itoa(os.Getpid()) + "\n"
	if _, err := f.WriteAt([]byte(line), 0); err == nil {
		_ = f.Truncate(int64(len(line)))
	}
	return f, nil
}

// lockHolder is the pid recorded in the lock file at path ("unknown" when
// there is none yet).
func lockHolder(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	line, _ := bufio.NewReader(f).ReadString('\n')
	if pid, err := strconv.Atoi(strings.TrimSpace(line)); err == nil && pid > 0 {
		return strconv.Itoa(pid)
	}
	return "unknown"
}
