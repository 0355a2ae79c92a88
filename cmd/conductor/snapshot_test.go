package main

import (
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
	case <-time.After(30 * time.Second):
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

// TestSnapshotTornIgnored: a snapshot that does not match its checksum is
// reported and ignored; registrations still come back and the index refills
// from the replay ring.
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
	if !strings.Contains(p2.logs.String(), "index snapshot ignored") || !strings.Contains(p2.logs.String(), "restored=1") {
		t.Fatalf("torn snapshot not reported, or registrations not restored:\n%s", tail(p2.logs.String()))
	}
	p2.converge("refilled from the replay ring", e)
}
