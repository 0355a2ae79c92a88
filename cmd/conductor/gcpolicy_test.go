package main

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"syscall"
	"testing"

	"github.com/seed-c7a81618/conductor/bench"
)

func TestParseSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"0", 0}, {"1", 1}, {"512B", 512}, {"4k", 4096}, {"4KiB", 4096}, {"3MiB", 3 << 20},
		{"8GiB", 8 << 30}, {"8gb", 8 << 30}, {" 2 GiB ", 2 << 30}, {"1TiB", 1 << 40},
	} {
		got, err := parseSize(c.in)
		if err != nil || got != c.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "GiB", "-1", "1.5GiB", "8XB", "9999999999TiB"} {
		if n, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", bad, n)
		}
	}
}

func TestResolveGCPolicy(t *testing.T) {
	p, err := resolveGCPolicy("", "", "0")
	if err != nil || p.limit != -1 || p.gogc != gogcUnset || p.floor != 0 {
		t.Fatalf("empty flags: %+v, %v (want the runtime's defaults left alone)", p, err)
	}
	p, err = resolveGCPolicy("2GiB", "50", DefaultGCHeapFloor)
	if err != nil || p.limit != 2<<30 || p.gogc != 50 || p.floor != 64<<20 {
		t.Fatalf("2GiB/50/default floor: %+v, %v", p, err)
	}
	p, err = resolveGCPolicy("2GiB", "off", "1GiB")
	if err != nil || p.gogc != -1 || p.floor != 1<<30 {
		t.Fatalf("2GiB/off/1GiB: %+v, %v", p, err)
	}
	for _, c := range [][3]string{{"", "off", "0"}, {"0", "off", "0"}, {"", "0", "0"}, {"", "-5", "0"}, {"", "x", "0"}, {"lots", "", "0"},
		{"", "", ""}, {"", "", "-1"}, {"", "", "64 megs"}, {"", "", "5GiB"}, {"1GiB", "", "1GiB"}, {"1GiB", "off", "2GiB"}} {
		if p, err := resolveGCPolicy(c[0], c[1], c[2]); err == nil {
			t.Errorf("--memory-limit=%q --gogc=%q --gc-heap-floor=%q: %+v, want an error", c[0], c[1], c[2], p)
		}
	}
	if _, err := parseFlags([]string{"--gogc", "off"}, io.Discard); err == nil || !strings.Contains(err.Error(), "--memory-limit") {
		t.Fatalf("parseFlags --gogc off alone: %v", err)
	}
}

// TestGCPolicyApply sets the runtime's limit and GC percent and restores them.
func TestGCPolicyApply(t *testing.T) {
	oldLimit, oldGC := debug.SetMemoryLimit(-1), debug.SetGCPercent(-1)
	debug.SetGCPercent(oldGC)
	t.Cleanup(func() { debug.SetMemoryLimit(oldLimit); debug.SetGCPercent(oldGC) })
	log := slog.New(slog.DiscardHandler)
	p, err := resolveGCPolicy("3GiB", "75", "0")
	if err != nil {
		t.Fatal(err)
	}
	p.apply(log)
	if l := debug.SetMemoryLimit(-1); l != 3<<30 {
		t.Fatalf("memory limit %d, want %d", l, int64(3<<30))
	}
	if g := debug.SetGCPercent(75); g != 75 {
		t.Fatalf("GC percent %d, want 75", g)
	}
	p, _ = resolveGCPolicy("0", "", "0")
	p.apply(log)
	if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
		t.Fatalf("--memory-limit=0: limit %d, want none", l)
	}
	// A floor at or above a limit from the environment (GOMEMLIMIT, which the
	// flags cannot check) is applied and warned about.
	t.Cleanup(func() { gcFloor = nil })
	debug.SetMemoryLimit(48 << 20)
	var buf bytes.Buffer
	p, _ = resolveGCPolicy("", "", "64MiB")
	p.apply(slog.New(slog.NewTextHandler(&buf, nil)))
	debug.SetMemoryLimit(math.MaxInt64)
	if !strings.Contains(buf.String(), "not below the memory limit") || len(gcFloor) != 64<<20 {
		t.Fatalf("floor above GOMEMLIMIT: floor %d bytes, log:\n%s", len(gcFloor), buf.String())
	}
}

// TestGCHeapFloor: a floor keeps the heap goal at least (1 + GOGC/100) times
// its size after a collection, without adding resident memory; a floor of 0
// drops it. It runs in a fresh test process, as conductor applies its policy
// at start: there the floor's pages come fresh from the OS, where in a
// process whose heap already freed that much the allocator would clear reused
// pages, making them resident.
func TestGCHeapFloor(t *testing.T) {
	if os.Getenv(gcFloorChildEnv) == "" {
		// The child's GC settings are the test's own, not the caller's.
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "GOMEMLIMIT=") && !strings.HasPrefix(kv, "GOGC=") {
				env = append(env, kv)
			}
		}
		out, startErr, err := rerunTest(t.Name(), append(env, gcFloorChildEnv+"=1"), nil)
		if startErr != nil || err != nil {
			t.Fatalf("in a fresh process: %v %v\n%s", startErr, err, out)
		}
		return
	}
	oldGC, oldLimit := debug.SetGCPercent(100), debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetGCPercent(oldGC); debug.SetMemoryLimit(oldLimit); gcFloor = nil })
	log := slog.New(slog.DiscardHandler)
	goal := func() uint64 {
		runtime.GC()
		s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	const floor = 512 << 20
	rss0, rssErr := bench.ProcRSS(os.Getpid())
	p, err := resolveGCPolicy("", "", "512MiB")
	if err != nil {
		t.Fatal(err)
	}
	p.apply(log)
	if g := goal(); g < 2*floor {
		t.Fatalf("heap goal %d with a %d-byte floor at GOGC=100, want at least %d", g, floor, 2*floor)
	}
	if rssErr == nil { // where /proc has it
		rss, err := bench.ProcRSS(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if grew := rss - rss0; grew > 64<<20 {
			t.Fatalf("resident memory grew by %d bytes with the floor, want it untouched", grew)
		}
	}
	p, _ = resolveGCPolicy("", "", "0")
	p.apply(log)
	if g := goal(); g >= floor {
		t.Fatalf("heap goal %d after the floor was dropped, want under %d", g, floor)
	}
}

// gcFloorChildEnv marks TestGCHeapFloor's fresh process.
const gcFloorChildEnv = "CONDUCTOR_TEST_GC_FLOOR_CHILD"

// rerunTest runs test name of this binary again in a child process with env
// and attr (nil: none) and returns its output. startErr is the child's start
// failure; err is its failure, or the lack of a PASS line for name.
func rerunTest(name string, env []string, attr *syscall.SysProcAttr) (out string, startErr, err error) {
	cmd := exec.Command(os.Args[0], "-test.run", "^"+name+"$", "-test.count=1", "-test.v")
	cmd.Env, cmd.SysProcAttr = env, attr
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	if startErr = cmd.Start(); startErr != nil {
		return "", startErr, nil
	}
	err = cmd.Wait()
	if err == nil && !strings.Contains(b.String(), "--- PASS: "+name) {
		err = fmt.Errorf("%s: no PASS line", name)
	}
	return b.String(), nil, err
}

// TestGOGCOffTakesGOMEMLIMIT: --gogc off needs a memory limit, and the
// runtime's own (GOMEMLIMIT, read at start) is one; --memory-limit 0 (no
// limit) is not.
func TestGOGCOffTakesGOMEMLIMIT(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	debug.SetMemoryLimit(math.MaxInt64)
	if _, err := resolveGCPolicy("", "off", "0"); err == nil || !strings.Contains(err.Error(), "GOMEMLIMIT") {
		t.Fatalf("--gogc off with no limit at all: %v", err)
	}
	debug.SetMemoryLimit(2 << 30) // as GOMEMLIMIT=2GiB sets it
	if p, err := resolveGCPolicy("", "off", "0"); err != nil || p.gogc != -1 || p.limit != -1 {
		t.Fatalf("--gogc off under GOMEMLIMIT: %+v, %v", p, err)
	}
	if _, err := resolveGCPolicy("0", "off", "0"); err == nil {
		t.Fatal("--gogc off with --memory-limit 0 (no limit) was accepted")
	}
}
