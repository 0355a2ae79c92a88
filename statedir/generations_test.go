package statedir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// checkGen is the tests' load check: a generation is "gen N\n", whole.
func checkGen(p string) error {
	b, err := os.ReadFile(p)
	if err != nil || !strings.HasPrefix(string(b), "gen ") || !strings.HasSuffix(string(b), "\n") {
		return fmt.Errorf("torn: %q %v", b, err)
	}
	return nil
}

// writeGen replaces g's file by s.
func writeGen(g *generations, s string) error {
	return g.replace(func(f *os.File) error { _, err := f.WriteString(s); return err })
}

// wantLoad checks that a fresh load of g's path finds a good generation
// holding want, after a crash after step crashAfter.
func wantLoad(t *testing.T, g *generations, crashAfter int, want string) {
	t.Helper()
	from, bad := (&generations{path: g.path}).load(checkGen)
	if len(bad) != 0 || from == "" {
		t.Fatalf("crash after step %d: from %q, bad %v", crashAfter, from, bad)
	}
	if got, _ := os.ReadFile(from); string(got) != want {
		t.Fatalf("crash after step %d: loaded %q from %s, want %q", crashAfter, got, from, want)
	}
}

// TestGenerationsCrash: a crash after any step of replace (or a write that
// fails part-way) leaves a complete generation that load finds: the new one
// once it is renamed into place, else the previous one; never none.
func TestGenerationsCrash(t *testing.T) {
	f := func(crashAfter int, want string) {
		t.Helper()
		dir := t.TempDir()
		g := &generations{path: filepath.Join(dir, "file")}
		for _, s := range []string{"gen 1\n", "gen 2\n"} {
			if err := writeGen(g, s); err != nil {
				t.Fatal(err)
			}
		}
		g.crashAfter = func(step int) bool { return step == crashAfter }
		var err error
		if crashAfter == 0 {
			err = g.replace(func(f *os.File) error { // fails part-way
				f.WriteString("gen 3 (torn")
				return errors.New("disk full")
			})
		} else {
			err = writeGen(g, "gen 3\n")
		}
		if err == nil {
			t.Fatalf("crash after step %d: replace returned nil", crashAfter)
		}
		wantLoad(t, g, crashAfter, want)
	}
	f(0, "gen 2\n") // the write failed: the current file is untouched
	f(1, "gen 2\n") // written, not rotated
	f(2, "gen 2\n") // PATH.prev linked to PATH
	f(3, "gen 3\n") // renamed into place
	f(4, "gen 3\n") // and the directory synced
}

// TestGenerationsCrashAfterCorrupt: once load moved a corrupt PATH aside,
// PATH.prev is the only good generation; a crash after any step of the next
// replace still leaves one that load finds (replace once deleted PATH.prev
// before the new PATH was in place, leaving neither).
func TestGenerationsCrashAfterCorrupt(t *testing.T) {
	f := func(crashAfter int, want string) {
		t.Helper()
		g := &generations{path: filepath.Join(t.TempDir(), "file")}
		for _, s := range []string{"gen 1\n", "garbage\n"} {
			if err := writeGen(g, s); err != nil {
				t.Fatal(err)
			}
		}
		if from, bad := g.load(checkGen); len(bad) != 1 || from != g.path+".prev" {
			t.Fatalf("setup: loaded from %q, bad %v", from, bad)
		}
		g.crashAfter = func(step int) bool { return step == crashAfter }
		if err := writeGen(g, "gen 3\n"); err == nil {
			t.Fatalf("crash after step %d: replace returned nil", crashAfter)
		}
		wantLoad(t, g, crashAfter, want)
	}
	f(1, "gen 1\n") // written, not rotated
	f(2, "gen 1\n") // no PATH to keep: PATH.prev stays
	f(3, "gen 3\n") // renamed into place
}

// TestGenerationsAlwaysPresent: while one goroutine replaces the file over
// and over, another never finds PATH missing, and every read of it is a
// whole generation; PATH.prev holds the generation before PATH's.
func TestGenerationsAlwaysPresent(t *testing.T) {
	g := &generations{path: filepath.Join(t.TempDir(), "file")}
	write := func(n int) error {
		return g.replace(func(f *os.File) error { _, err := fmt.Fprintf(f, "gen %d\n", n); return err })
	}
	if err := write(0); err != nil {
		t.Fatal(err)
	}
	const n = 300
	done := make(chan error, 1)
	go func() {
		for i := 1; i <= n; i++ {
			if err := write(i); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	reads, last := 0, -1
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			cur, _ := os.ReadFile(g.path)
			prev, _ := os.ReadFile(g.path + ".prev")
			if string(cur) != fmt.Sprintf("gen %d\n", n) || string(prev) != fmt.Sprintf("gen %d\n", n-1) {
				t.Fatalf("after %d generations: PATH %q, PATH.prev %q", n, cur, prev)
			}
			t.Logf("%d reads while replacing", reads)
			return
		default:
		}
		b, err := os.ReadFile(g.path)
		if err != nil {
			t.Fatalf("read %d: %v", reads, err)
		}
		var gen int
		if _, err := fmt.Sscanf(string(b), "gen %d\n", &gen); err != nil || gen < last {
			t.Fatalf("read %d: %q after generation %d", reads, b, last)
		}
		last = gen
		reads++
	}
}
