package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestMakeStampsVersion: every conductor binary the Makefile builds carries
// the checkout's `git describe` as main.version, and --version prints
// main.version when it is set (a renamed variable would make -X a silent
// no-op: this test would no longer compile).
func TestMakeStampsVersion(t *testing.T) {
	describe, err := exec.Command("git", "-C", "../..", "describe", "--tags", "--always", "--dirty").Output()
	if err != nil {
		t.Fatalf("git describe: %v", err)
	}
	want := "-X main.version=" + strings.TrimSpace(string(describe))
	for _, target := range []string{"build", "python-test", "bin/conductor"} {
		cmd := exec.Command("make", "--no-print-directory", "-n", "-B", target)
		cmd.Dir = "../.."
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("make -n %s: %v", target, err)
		}
		n := 0
		for _, line := range strings.Split(string(out), "\n") {
			if !strings.Contains(line, " build ") || !strings.HasSuffix(strings.TrimSpace(line), "./cmd/conductor") {
				continue
			}
			n++
			if !strings.Contains(line, want) {
				t.Errorf("make %s builds conductor without %q:\n%s", target, want, line)
			}
		}
		if n == 0 {
			t.Errorf("make -n %s builds no conductor:\n%s", target, out)
		}
	}
	old := version
	defer func() { version = old }()
	version = "v1.2.3-4-gabcdef0"
	if got := buildVersion(); got != version {
		t.Fatalf("buildVersion() = %q with main.version %q", got, version)
	}
}
