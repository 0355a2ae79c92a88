package statedir

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestLockDir: a locked state directory is refused to a second store
// (flock belongs to the open file, so even in this process), with the
// directory, the holder's pid and the way out in the error; the lock file
// holds the pid; closing releases the lock.
func TestLockDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	st, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b, err := os.ReadFile(filepath.Join(dir, LockFile))
	if pid := strconv.Itoa(os.Getpid()); err != nil || string(b) != pid+"\n" {
		t.Fatalf("lock file %q (%v), want pid %s", b, err, pid)
	}
	_, err = Open(dir)
	if !errors.Is(err, ErrInUse) {
		t.Fatalf("second store: %v", err)
	}
	for _, want := range []string{dir, "pid " + strconv.Itoa(os.Getpid()), "--state-dir DIR", "--state-dir ''"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error lacks %q: %v", want, err)
		}
	}
	st.Close()
	st2, err := Open(dir)
	if err != nil {
		t.Fatalf("after close: %v", err)
	}
	st2.Close()
	st2.Close() // twice is harmless

	// a lock file left behind (a dead holder's) does not block a start
	if err := os.WriteFile(filepath.Join(dir, LockFile), []byte("999999999\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	st3, err := Open(dir)
	if err != nil {
		t.Fatalf("with a stale lock file: %v", err)
	}
	st3.Close()
}
