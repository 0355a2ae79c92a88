package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/bench"
	"github.com/seed-c7a81618/conductor/statedir"
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
	snap := filepath.Join(dir, statedir.SnapshotFile)
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
	snap := filepath.Join(dir, statedir.SnapshotFile)
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

// TestSnapshotNegativeIntervalRestores: a negative --snapshot-interval
// writes no snapshot, but the one already in the state directory is still
// restored at start: its blocks answer at once for an engine that is gone.
func TestSnapshotNegativeIntervalRestores(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	e := newEngine(t, "engine-a", makePrompts(t, 2, 6), bench.PublisherOptions{})
	p := startFaultProc(t, "--state-dir", dir, "--snapshot-interval", "0")
	p.register(e, "")
	p.prime(e)
	e.store(0)
	e.store(1)
	p.converge("before the stop", e)
	stopChild(t, p.child) // writes the snapshot
	e.pub.Close()         // no live events and no replay from now on

	p = startFaultProc(t, "--state-dir", dir, "--snapshot-interval", "-1s")
	logs := p.logs.String()
	if !strings.Contains(logs, "index snapshot restored") {
		t.Fatalf("--snapshot-interval -1s did not restore the snapshot:\n%s", tail(logs))
	}
	for i := range e.prompts {
		got, err := p.matched(e.prompts[i].tokens)
		if err != nil {
			t.Fatal(err)
		}
		if got[e.inst] != 64 {
			t.Fatalf("prompt %d: longest_matched %d, want 64 (the snapshot's)\n%s", i, got[e.inst], tail(logs))
		}
	}
	stopChild(t, p.child)
	if strings.Contains(p.logs.String(), "index snapshot written") {
		t.Fatalf("--snapshot-interval -1s wrote a snapshot:\n%s", tail(p.logs.String()))
	}
}

// TestSnapshotWarmRestartEngineRestarted: the engine restarts (its sequence
// back to 0) while conductor is down. The restarted conductor restores the
// snapshot and must then neither keep the old incarnation's blocks nor skip
// the new incarnation's batches, whose sequences are below the snapshot's:
// whether the new incarnation's ring holds a store when conductor connects
// (skipped by the connect replay as the snapshot's, then applied once the
// first live message shows the restart) or is empty.
func TestSnapshotWarmRestartEngineRestarted(t *testing.T) {
	for _, ring := range []bool{true, false} {
		t.Run(map[bool]string{true: "ring", false: "live"}[ring], func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state")
			e := newEngine(t, "engine-a", makePrompts(t, 10, 3), bench.PublisherOptions{})
			p := startFaultProc(t, "--state-dir", dir, "--snapshot-interval", "0")
			p.register(e, "")
			p.prime(e)
			for i := range e.prompts {
				e.store(i)
			}
			for i := 0; i < 20; i++ { // the snapshot's sequence well above the new incarnation's below
				if _, err := e.pub.Publish(bench.AppendVLLMBatch(nil, bench.EraMap, 1, 0)); err != nil {
					t.Fatal(err)
				}
			}
			p.converge("before the stop", e)
			stopChild(t, p.child)

			ep, rep := e.pub.Endpoint(), e.pub.ReplayEndpoint()
			e.pub.Close()
			pub, err := bench.NewPublisher(bench.PublisherOptions{Endpoint: ep, ReplayEndpoint: rep})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { pub.Close() })
			e.mu.Lock()
			e.pub, e.held = pub, map[int]bool{}
			e.mu.Unlock()
			if ring {
				e.store(1) // before conductor is back: only the ring has it
			}
			p2 := startFaultProc(t, "--state-dir", dir, "--snapshot-interval", "0")
			// Empty batches, as an engine sends, until the stream is live: its
			// first live sequence is far below the snapshot's.
			deadline := time.Now().Add(waitBound)
			for {
				ok, why := p2.agrees(e)
				if ok {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the restarted engine's blocks, none of the old incarnation's: %s\n%s", why, tail(p2.logs.String()))
				}
				if _, err := e.pub.Publish(bench.AppendVLLMBatch(nil, bench.EraMap, 1, 0)); err != nil {
					t.Fatal(err)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if !strings.Contains(p2.logs.String(), "publisher restarted while conductor was down") {
				t.Errorf("no restart logged:\n%s", tail(p2.logs.String()))
			}
			p2.prime(e) // past ZMQ's slow-joiner window
			e.store(4)  // live, on top
			p2.converge("a live store after the restart", e)
		})
	}
}
