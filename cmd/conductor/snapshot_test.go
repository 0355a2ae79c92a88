package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/bench"
)

// stopChild sends SIGTERM and waits for a clean exit.
func stopChild(t *testing.T, c *child) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-c.done:
		c.done <- err
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, tail(c.logs.String()))
		}
	case <-time.After(waitBound):
		t.Fatal("no exit after SIGTERM")
	}
}

// TestSnapshotWarmRestart: a graceful stop writes the index snapshot; the
// restarted conductor answers from it blocks that no replay ring holds any
// more, skips replayed batches the snapshot already holds, and applies newer
// live events on top (a block removed after the snapshot does not come back).
func TestSnapshotWarmRestart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	// a 4-batch ring: after the restart, replay can give back only the last
	// four stores; the first six prompts can come only from the snapshot
	e := newEngine(t, "engine-a", makePrompts(t, 10, 3), bench.PublisherOptions{Ring: 4})
	p := startFaultProc(t, "--state-dir", dir, "--snapshot-interval", "0")
	p.register(e, "")
	p.prime(e)
	for i := range e.prompts {
		e.store(i)
	}
	p.converge("before the stop", e)
	stopChild(t, p.child)
	if !strings.Contains(p.logs.String(), "index snapshot written") {
		t.Fatalf("no snapshot at shutdown:\n%s", tail(p.logs.String()))
	}

	p2 := startFaultProc(t, "--state-dir", dir, "--snapshot-interval", "0")
	if !strings.Contains(p2.logs.String(), "index snapshot restored") {
		t.Fatalf("snapshot not restored:\n%s", tail(p2.logs.String()))
	}
	// warm: every prompt answers at once, without a single new batch
	if ok, why := p2.agrees(e); !ok {
		t.Fatalf("after the restart, before any new event: %s\n%s", why, tail(p2.logs.String()))
	}
	// newer events apply on top of the snapshot
	e.remove(0)
	e.remove(7)
	p2.converge("removals after the restart", e)
	if !p2.alive() {
		t.Fatal("conductor died")
	}
}

// TestSnapshotTornIgnored: a torn snapshot with no previous generation is
// reported and moved aside; registrations still come back and the index
// refills from the replay ring.
func TestSnapshotTornIgnored(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	e := newEngine(t, "engine-a", makePrompts(t, 3, 4), bench.PublisherOptions{})
	p := startFaultProc(t, "--state-dir", dir, "--snapshot-interval", "0")
	p.register(e, "")
	p.prime(e)
	e.store(0)
	e.store(2)
	p.converge("before the stop", e)
	stopChild(t, p.child)
	snap := filepath.Join(dir, snapshotFile)
	data, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(snap, data[:len(data)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	p2 := startFaultProc(t, "--state-dir", dir, "--snapshot-interval", "0")
	logs := p2.logs.String()
	for _, want := range []string{"index snapshot is torn or corrupt", "no good index snapshot left", "restored=1"} {
		if !strings.Contains(logs, want) {
			t.Fatalf("logs lack %q:\n%s", want, tail(logs))
		}
	}
	p2.converge("refilled from the replay ring", e)
}

// TestSnapshotTornFallsBack: when the newest snapshot is torn (what a crash
// while it is written, or the two-file form's kill between its two renames,
// leaves: data that does not match its checksum), the next start restores
// the previous generation: its blocks answer at once, for a stream that can
// no longer replay anything (its engine is gone).
func TestSnapshotTornFallsBack(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	e := newEngine(t, "engine-a", makePrompts(t, 4, 5), bench.PublisherOptions{})
	args := []string{"--state-dir", dir, "--snapshot-interval", "0"}
	p := startFaultProc(t, args...)
	p.register(e, "")
	p.prime(e)
	e.store(0)
	e.store(1)
	p.converge("generation 1", e)
	stopChild(t, p.child) // writes generation 1

	p = startFaultProc(t, args...)
	p.prime(e)
	e.store(2)
	e.store(3)
	p.converge("generation 2", e)
	stopChild(t, p.child) // writes generation 2; generation 1 is the previous one

	e.pub.Close() // no live events and no replay from now on
	snap := filepath.Join(dir, snapshotFile)
	data, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(snap, data[:len(data)*2/3], 0o600); err != nil {
		t.Fatal(err)
	}
	p = startFaultProc(t, args...)
	logs := p.logs.String()
	if !strings.Contains(logs, "index snapshot restored") || !strings.Contains(logs, "restored=1") {
		t.Errorf("snapshot or registration not restored:\n%s", tail(logs))
	}
	// restored before the listener: no waiting needed
	for i, want := range []int{64, 64, 0, 0} {
		got, err := p.matched(e.prompts[i].tokens)
		if err != nil {
			t.Fatal(err)
		}
		if got[e.inst] != want {
			t.Fatalf("prompt %d: longest_matched %d, want %d (generation 1's blocks)\n%s", i, got[e.inst], want, tail(logs))
		}
	}
}

// snapGens writes the given dumps as successive snapshot generations in a
// fresh directory.
func snapGens(t *testing.T, dumps ...string) *generations {
	t.Helper()
	g := &generations{path: filepath.Join(t.TempDir(), snapshotFile)}
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
		if _, err := checkSnapshot(g.path); !errors.Is(err, errSnapshotCorrupt) {
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
	g := &generations{path: filepath.Join(dir, snapshotFile)}
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
	g = &generations{path: filepath.Join(dir, snapshotFile)}
	meta = filepath.Join(dir, snapshotLegacyMeta)
	writeLegacy("newer dump\n", "old dump\n")
	if _, ok, bad := loadSnapshot(g); ok || len(bad) != 1 || !strings.Contains(bad[0], snapshotLegacyMeta) {
		t.Fatalf("mismatch: ok %v, bad %v", ok, bad)
	}
}
