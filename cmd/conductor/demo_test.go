package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDemo runs `conductor --demo`: the embedded engines register and publish,
// the per-second summary shows indexed blocks, both routing policies' hit
// ratios and an example answer, and cancelling (Ctrl-C) exits 0 with no demo
// error.
func TestDemo(t *testing.T) {
	dir := t.TempDir()
	out, logs := &syncBuffer{}, &syncBuffer{}
	args := []string{"--demo", "--http-port", "0", "--rpc-port", "0", "--listen", "127.0.0.1", "--shutdown-timeout", "5s"}
	a, code := newApp(args, envOf(map[string]string{"CONDUCTOR_CONFIG_PATH": filepath.Join(dir, "none.json"), "HOME": dir}), out, logs)
	if a == nil {
		t.Fatalf("newApp: exit %d\n%s", code, logs)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- a.serve(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "example: demo-aware") {
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("no summary within 30s\nstdout:\n%s\nlogs:\n%s", out, logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d\n%s", code, logs)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("did not stop within 20s of cancellation")
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
}
