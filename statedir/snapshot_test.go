package statedir

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/core"
)

// snapGens writes the given dumps as successive snapshot generations in a
// fresh directory.
func snapGens(t *testing.T, dumps ...string) *generations {
	t.Helper()
	g := &generations{path: filepath.Join(t.TempDir(), SnapshotFile)}
	for _, d := range dumps {
		n, err := writeSnapshotFile(g, func(w *bufio.Writer) error { _, err := w.WriteString(d); return err })
		if err != nil || n != int64(len(d)) {
			t.Fatalf("write %q: %d %v", d, n, err)
		}
	}
	return g
}

// loadedDump is the dump of the snapshot loadSnapshot picks ("" for none).
func loadedDump(t *testing.T, g *generations) (string, []string) {
	t.Helper()
	info, ok, bad := loadSnapshot(g)
	if !ok {
		return "", bad
	}
	f, err := os.Open(info.path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, 0, info.bytes))
	if err != nil {
		t.Fatal(err)
	}
	return string(b), bad
}

// TestSnapshotFile: the snapshot verifies on its own (no side file); a flipped
// byte, a cut, or a file too short for a trailer is torn or corrupt, reported
// and moved aside, and the previous generation is used.
func TestSnapshotFile(t *testing.T) {
	g := snapGens(t, "gen 1 dump\n", "gen 2 dump\n")
	if got, bad := loadedDump(t, g); got != "gen 2 dump\n" || len(bad) != 0 {
		t.Fatalf("loaded %q, bad %v", got, bad)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(g.path), snapshotLegacyMeta)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a meta file was written: %v", err)
	}
	info, err := checkSnapshot(g.path)
	if err != nil || info.bytes != 11 || info.legacy || time.Since(info.written) > time.Hour {
		t.Fatalf("%+v %v", info, err)
	}
	data, _ := os.ReadFile(g.path)
	f := func(name string, bad []byte) {
		t.Helper()
		if err := os.WriteFile(g.path, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := checkSnapshot(g.path); !errors.Is(err, ErrSnapshotCorrupt) {
			t.Fatalf("%s: %v", name, err)
		}
	}
	flipped := bytes.Clone(data)
	flipped[3] ^= 1
	f("flipped dump byte", flipped)
	flipped = bytes.Clone(data)
	flipped[len(data)-40] ^= 1 // the written time, inside the trailer
	f("flipped trailer byte", flipped)
	f("cut", data[:len(data)-1])
	f("cut to the dump", data[:11])
	f("shorter than a trailer", data[:5])
	f("empty", nil)
	got, bad := loadedDump(t, g)
	if got != "gen 1 dump\n" || len(bad) != 1 || !strings.Contains(bad[0], "moved to") {
		t.Fatalf("torn current: loaded %q, bad %v", got, bad)
	}
	// both bad: none, both kept aside
	if err := os.WriteFile(g.path+".prev", []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, bad := loadedDump(t, g); got != "" || len(bad) != 1 {
		t.Fatalf("both torn: loaded %q, bad %v", got, bad)
	}
	aside, _ := filepath.Glob(g.path + "*.corrupt-*")
	if len(aside) != 2 {
		t.Fatalf("kept aside: %v", aside)
	}
}

// TestSnapshotCrashWindow: a snapshot write killed after any of its steps
// leaves a snapshot that the next start restores: the new one once it is in
// place, else the previous one; never none.
func TestSnapshotCrashWindow(t *testing.T) {
	for step := 1; step <= 4; step++ {
		g := snapGens(t, "gen 1 dump\n", "gen 2 dump\n")
		g.crashAfter = func(s int) bool { return s == step }
		if _, err := writeSnapshotFile(g, func(w *bufio.Writer) error { _, err := w.WriteString("gen 3 dump\n"); return err }); !errors.Is(err, errCrashed) {
			t.Fatalf("step %d: %v", step, err)
		}
		want := "gen 2 dump\n"
		if step >= 3 {
			want = "gen 3 dump\n"
		}
		if got, bad := loadedDump(t, &generations{path: g.path}); got != want || len(bad) != 0 {
			t.Fatalf("killed after step %d: loaded %q, bad %v, want %q", step, got, bad, want)
		}
	}
}

// TestSnapshotLegacyForm: a snapshot of the earlier two-file form is restored
// when it matches its index.snapshot.meta, and its meta file is removed once
// no generation needs it; one that does not match (torn, or killed between
// its two renames) is reported and moved aside, not restored, no crash.
func TestSnapshotLegacyForm(t *testing.T) {
	dir := t.TempDir()
	g := &generations{path: filepath.Join(dir, SnapshotFile)}
	meta := filepath.Join(dir, snapshotLegacyMeta)
	writeLegacy := func(dump, metaOf string) {
		t.Helper()
		sum := sha256.Sum256([]byte(metaOf))
		m, _ := json.Marshal(legacyMeta{Version: 1, SHA256: hex.EncodeToString(sum[:]), Bytes: int64(len(metaOf)),
			Written: "2026-01-02T03:04:05Z"})
		if os.WriteFile(g.path, []byte(dump), 0o600) != nil || os.WriteFile(meta, m, 0o600) != nil {
			t.Fatal("write")
		}
	}
	writeLegacy("old dump\n", "old dump\n")
	info, ok, bad := loadSnapshot(g)
	if !ok || !info.legacy || info.bytes != 9 || info.written.Year() != 2026 || len(bad) != 0 {
		t.Fatalf("%+v %v %v", info, ok, bad)
	}
	write := func(d string) {
		t.Helper()
		if _, err := writeSnapshotFile(g, func(w *bufio.Writer) error { _, err := w.WriteString(d); return err }); err != nil {
			t.Fatal(err)
		}
	}
	write("new dump 1\n") // the legacy file is now the previous generation
	if _, err := os.Stat(meta); err != nil {
		t.Fatalf("meta removed while the previous generation needs it: %v", err)
	}
	if info, err := checkSnapshot(g.path + ".prev"); err != nil || !info.legacy {
		t.Fatalf("previous generation: %+v %v", info, err)
	}
	write("new dump 2\n")
	if _, err := os.Stat(meta); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("meta kept with no legacy generation left: %v", err)
	}

	// new data under the old meta: reported, moved aside, nothing restored
	dir = t.TempDir()
	g = &generations{path: filepath.Join(dir, SnapshotFile)}
	meta = filepath.Join(dir, snapshotLegacyMeta)
	writeLegacy("newer dump\n", "old dump\n")
	if _, ok, bad := loadSnapshot(g); ok || len(bad) != 1 || !strings.Contains(bad[0], snapshotLegacyMeta) {
		t.Fatalf("mismatch: ok %v, bad %v", ok, bad)
	}
}

// TestSnapshotSpacing: periodic snapshots wait the interval, or SnapshotDuty
// times the last write's duration when that is longer, logged once each time
// the wait starts or stops being stretched; the metrics report the last
// write and failures.
func TestSnapshotSpacing(t *testing.T) {
	var logs bytes.Buffer
	s := NewSnapshots(t.TempDir(), 30*time.Second, core.New(core.Options{}), slog.New(slog.NewTextHandler(&logs, nil)))
	for _, c := range []struct {
		took, want time.Duration
		logged     string
	}{
		{0, 30 * time.Second, ""},
		{time.Second, 30 * time.Second, ""},
		{8 * time.Second, 72 * time.Second, "spaced out"},
		{9 * time.Second, 81 * time.Second, ""},
		{2 * time.Second, 30 * time.Second, "back at their interval"},
	} {
		logs.Reset()
		s.took.Store(int64(c.took))
		if got := s.next(); got != c.want {
			t.Errorf("last write %v: next snapshot after %v, want %v", c.took, got, c.want)
		}
		if (c.logged == "") != (logs.Len() == 0) || !strings.Contains(logs.String(), c.logged) {
			t.Errorf("last write %v: logged %q, want %q", c.took, logs.String(), c.logged)
		}
	}
	// A periodic snapshot is skipped only while nothing it holds changed.
	v := indexVersion(s.ix)
	if indexVersion(s.ix) != v {
		t.Fatal("the index version moved with nothing applied or registered")
	}
	reg := sampleRegs(t)[2]
	_, _, err := s.ix.Register(reg)
	if err != nil {
		t.Fatal(err)
	}
	if indexVersion(s.ix) == v {
		t.Fatal("a registration left the index version as it was")
	}
	v = indexVersion(s.ix)
	if _, err := s.ix.Unregister(reg.Key()); err != nil {
		t.Fatal(err)
	}
	if indexVersion(s.ix) == v {
		t.Fatal("an unregistration left the index version as it was")
	}
	s.Save("test")
	if s.version != indexVersion(s.ix) {
		t.Fatal("the snapshot written does not record the version it holds")
	}
	var b bytes.Buffer
	s.Metrics().WritePrometheus(&b)
	m := b.String()
	if strings.Contains(m, "conductor_snapshot_last_written_timestamp_seconds 0\n") ||
		!strings.Contains(m, "conductor_snapshot_failures_total 0\n") || !strings.Contains(m, "conductor_snapshot_last_write_seconds ") {
		t.Fatalf("metrics after one snapshot:\n%s", m)
	}
	s.dir = filepath.Join(s.dir, "missing", "dir")
	s.Save("test")
	b.Reset()
	s.Metrics().WritePrometheus(&b)
	if !strings.Contains(b.String(), "conductor_snapshot_failures_total 1\n") {
		t.Fatalf("metrics after a failed snapshot:\n%s", b.String())
	}
}
