package main

import (
	"context"
	"github.com/seed-c7a81618/conductor/internal/syncbuf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// conductorBinary is $BENCH_CONDUCTOR_BIN, or cmd/conductor built into a
// temporary directory.
func conductorBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("BENCH_CONDUCTOR_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "conductor")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/seed-c7a81618/conductor/cmd/conductor").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestDemo runs `conductor-bench demo` against a conductor binary: the
// simulated engines register and publish, the per-second summary shows
// indexed blocks, both routing policies' hit ratios and an example answer,
// and cancelling (Ctrl-C) stops conductor and exits 0 with no demo error.
func TestDemo(t *testing.T) {
	bin := conductorBinary(t)
	dir := t.TempDir()
	t.Setenv("CONDUCTOR_CONFIG_PATH", filepath.Join(dir, "none.json"))
	t.Setenv("HOME", dir)
	out, logs := &syncbuf.Buffer{}, &syncbuf.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"demo", "-conductor", bin, "-http-port", "0", "--", "--rpc-port", "0", "--shutdown-timeout", "5s"}, out, logs)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "example: demo-aware") {
		select {
		case code := <-done:
			t.Fatalf("exit %d before a summary\nstdout:\n%s\nstderr:\n%s", code, out, logs)
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("no summary within 30s\nstdout:\n%s\nstderr:\n%s", out, logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d\n%s", code, logs)
		}
	case <-time.After(2 * time.Minute): // a failure bound only
		t.Fatal("did not stop within 2 minutes of cancellation")
	}
	s := out.String()
	for _, want := range []string{"events", "indexed blocks: device", "cache-aware", "vs random", "ground truth:", "{device "} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(logs.String(), "demo stopped") || strings.Contains(logs.String(), "demo: cannot") {
		t.Errorf("demo error in logs:\n%s", logs)
	}
	if !strings.Contains(logs.String(), "conductor stopped") {
		t.Errorf("conductor did not log its orderly stop:\n%s", logs)
	}
}
