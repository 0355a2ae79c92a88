package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/bench/sim"
	"github.com/seed-c7a81618/conductor/internal/syncbuf"
)

// TestCrashRestart runs the harness against a conductor binary with
// -snapshot-at and -crash-at: conductor is stopped gracefully after 150
// requests (its snapshot), then killed with SIGKILL after 200 and restarted
// on the same ports and state directory. Each engine publishes a message per
// request, and keeps a ring of 16: fewer than the 50 it published before the
// kill (without the snapshot, device exact is 0.32 and the run fails
// -min-exact device=1,cpu_local=1), more than the 13 after the snapshot, so
// its tiers come back exact. The store master, which has no replay, lost
// its messages since the snapshot: under the default gap policy (keep) its
// pool stays as the snapshot held it, which is not what it holds now; under
// clear conductor holds its sentinel only.
func TestCrashRestart(t *testing.T) {
	bin := conductorBinary(t)
	for _, tc := range []struct {
		policy string // "" runs the default
		check  func(indexed, truth int64) bool
		want   string
	}{
		{"", func(in, tr int64) bool { return in > 1 && in != tr }, "the snapshot's pool: more than the sentinel, not the true count"},
		{"clear", func(in, tr int64) bool { return in == 1 && tr > 1 }, "the sentinel only"},
	} {
		name := tc.policy
		if name == "" {
			name = "default"
		}
		t.Run(name, func(t *testing.T) {
			after := crashRun(t, bin, tc.policy)
			in, tr := after.IndexedBlocks, after.TruthBlocks
			if in[0] != tr[0] || in[1] != tr[1] || in[3] != tr[3] || in[0] == 0 {
				t.Errorf("engine tiers after the restart: indexed %v, true %v", *in, *tr)
			}
			if !tc.check(in[2], tr[2]) {
				t.Errorf("store blocks after the restart: indexed %d, true %d; want %s", in[2], tr[2], tc.want)
			}
		})
	}
}

// crashRun runs the crash scenario under gap policy policy ("" for
// conductor's default) and returns its "after crash" accuracy point.
func crashRun(t *testing.T, bin, policy string) *sim.AccuracyPoint {
	t.Helper()
	out := filepath.Join(t.TempDir(), "crash.json")
	var stdout, logs syncbuf.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := []string{"-spawn", bin, "-engines", "4", "-device", "4096", "-host", "4096", "-disk", "8192", "-store", "8192",
		"-policy", "round-robin", "-requests", "300", "-verify", "-verify-every", "100", "-query-only", "200ms", "-quiet",
		"-replay-ring", "16", "-snapshot-at", "150", "-crash-at", "200",
		"-min-exact", "device=1,cpu_local=1", "-json", out}
	if policy != "" {
		args = append(args, "-gap-policy", policy)
	}
	if code := run(ctx, args, &stdout, &logs); code != 0 {
		t.Fatalf("exit %d\n%s", code, logs.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep sim.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Faults.SnapshotAt != 150 || rep.Faults.CrashAt != 200 {
		t.Fatalf("faults %+v", rep.Faults)
	}
	if !bytes.Contains([]byte(stdout.String()), []byte("SIGKILL after request 200")) {
		t.Errorf("report does not name the crash:\n%s", stdout.String())
	}
	for i := range rep.Accuracy {
		if pt := &rep.Accuracy[i]; pt.Label == "after crash" {
			if pt.Requests != 200 || pt.IndexedBlocks == nil {
				t.Fatalf("after-crash point %+v", pt)
			}
			return pt
		}
	}
	t.Fatal("no after-crash point")
	return nil
}
