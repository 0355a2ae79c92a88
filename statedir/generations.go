package statedir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// generations is a file replaced only as a whole: PATH is the current
// generation, PATH.prev the one before it, PATH.tmp the next one while it is
// written. replace writes the next generation in four steps:
//
//  1. PATH.tmp is written and fsynced;
//  2. PATH.prev becomes a hard link to PATH, if any (the old PATH.prev
//     removed first; without a PATH the old PATH.prev stays);
//  3. PATH.tmp is renamed over PATH, which the kernel does atomically;
//  4. the directory is fsynced.
//
// Once written, PATH never goes missing, so a reader of the directory (an
// operator, a backup, a test) always finds a complete generation there. On
// a filesystem without hard links step 2 renames PATH to PATH.prev instead,
// and PATH is absent until step 3. A crash after any step leaves a complete,
// fsynced generation at PATH or, in that fallback between steps 2 and 3
// only, at PATH.prev; PATH.tmp is never read. load
// tries PATH then PATH.prev with the caller's check (which must detect a torn
// or corrupt file: a checksum inside the file), moves each file that fails it
// aside to FILE.corrupt-<unix time> and stops at the first that passes. The
// registration state and the index snapshot both use it (TestGenerationsCrash
// kills replace after every step).
type generations struct {
	path string
	// crashAfter, when set, is called after each step of replace (1..4);
	// true ends replace there as a SIGKILL would (tests only).
	crashAfter func(step int) bool
}

// errCrashed is what replace returns where crashAfter stopped it.
var errCrashed = errors.New("conductor: simulated crash")

// replace writes the next generation with write, which gets PATH.tmp open
// for writing; the file is fsynced and closed by replace.
func (g *generations) replace(write func(f *os.File) error) error {
	tmp := g.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	err = write(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if g.crashed(1) {
		return errCrashed
	}
	if err := g.keepPrevious(); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("keep previous generation: %w", err)
	}
	if g.crashed(2) {
		return errCrashed
	}
	if err := os.Rename(tmp, g.path); err != nil {
		return err
	}
	if g.crashed(3) {
		return errCrashed
	}
	if err := syncDir(filepath.Dir(g.path)); err != nil {
		return fmt.Errorf("sync dir: %w", err)
	}
	if g.crashed(4) {
		return errCrashed
	}
	return nil
}

// keepPrevious makes PATH.prev the current generation (step 2 of replace):
// a hard link where the filesystem has them, else a rename.
func (g *generations) keepPrevious() error {
	prev := g.path + ".prev"
	if _, err := os.Lstat(g.path); errors.Is(err, os.ErrNotExist) {
		// No current generation (never written, or load moved a corrupt
		// one aside): PATH.prev may be the only good one, so it stays
		// until the new PATH is in place (TestGenerationsCrashAfterCorrupt).
		return nil
	}
	if err := os.Remove(prev); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	err := os.Link(g.path, prev)
	if err == nil || errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := os.Rename(g.path, prev); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func (g *generations) crashed(step int) bool { return g.crashAfter != nil && g.crashAfter(step) }

// load returns the newest generation that passes check ("" when none does)
// and a line for each file that failed it (moved aside).
func (g *generations) load(check func(path string) error) (from string, bad []string) {
	for _, p := range []string{g.path, g.path + ".prev"} {
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err := check(p); err != nil {
			aside := fmt.Sprintf("%s.corrupt-%d", p, time.Now().Unix())
			_ = os.Rename(p, aside)
			bad = append(bad, fmt.Sprintf("%s: %v (moved to %s)", p, err, aside))
			continue
		}
		return p, bad
	}
	return "", bad
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
