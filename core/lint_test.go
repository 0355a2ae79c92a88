package core

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unsafe"
)

// TestRawAtomics enforces the house rule that concurrency code uses typed
// atomics (atomic.Uint64, atomic.Pointer, ...) rather than the function forms,
// whose operands can be read non-atomically elsewhere by mistake. It scans
// every Go file of the module.
func TestRawAtomics(t *testing.T) {
	raw := regexp.MustCompile(`\batomic\.(Add|Load|Store|Swap|CompareAndSwap)(Int32|Int64|Uint32|Uint64|Uintptr|Pointer)\(`)
	root := ".."
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != root || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if raw.MatchString(line) && !strings.Contains(line, "regexp.MustCompile") {
				t.Errorf("%s:%d: raw atomic function; use a typed atomic: %s", path, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCountersPadded: every index-wide counter sits alone on a 64-byte cache
// line (the appliers of different subscriptions write them concurrently).
func TestCountersPadded(t *testing.T) {
	if s := unsafe.Sizeof(padU64{}); s != 64 {
		t.Fatalf("padU64 is %d bytes", s)
	}
	if s := unsafe.Sizeof(padI64{}); s != 64 {
		t.Fatalf("padI64 is %d bytes", s)
	}
}
