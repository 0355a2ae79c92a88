package main

import (
	"io"
	"log/slog"
	"runtime"
	"testing"
)

func TestIngestNiceFlag(t *testing.T) {
	s, err := parseFlags(nil, io.Discard)
	if err != nil || s.ingestNice != defaultIngestNice {
		t.Fatalf("default: %d, %v; want %d", s.ingestNice, err, defaultIngestNice)
	}
	for _, c := range []struct {
		arg  string
		want int
	}{{"0", 0}, {"1", 1}, {"19", 19}} {
		s, err := parseFlags([]string{"--ingest-nice", c.arg}, io.Discard)
		if err != nil || s.ingestNice != c.want {
			t.Errorf("--ingest-nice %s: %d, %v", c.arg, s.ingestNice, err)
		}
	}
	for _, bad := range []string{"-1", "20", "x"} {
		if _, err := parseFlags([]string{"--ingest-nice", bad}, io.Discard); err == nil {
			t.Errorf("--ingest-nice %s accepted", bad)
		}
	}
}

// TestSchedPolicyGOMAXPROCS: a positive --ingest-nice doubles the runtime's
// own GOMAXPROCS, idempotently, unless $GOMAXPROCS is set; 0 leaves the
// runtime's value.
func TestSchedPolicyGOMAXPROCS(t *testing.T) {
	old := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(old) })
	log := slog.New(slog.DiscardHandler)
	noEnv := func(string) (string, bool) { return "", false }
	withEnv := func(k string) (string, bool) { return "2", k == "GOMAXPROCS" }
	for _, c := range []struct {
		nice int
		env  func(string) (string, bool)
		want int
	}{
		{3, noEnv, 2 * startProcs},
		{3, noEnv, 2 * startProcs}, // applied twice: still double, not four times
		{0, noEnv, startProcs},
		{19, withEnv, startProcs},
	} {
		applySchedPolicy(c.nice, c.env, log)
		if got := runtime.GOMAXPROCS(0); got != c.want {
			t.Errorf("nice %d: GOMAXPROCS %d, want %d", c.nice, got, c.want)
		}
	}
}
