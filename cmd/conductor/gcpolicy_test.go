package main

import (
	"io"
	"log/slog"
	"math"
	"runtime/debug"
	"strings"
	"testing"
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
	p, err := resolveGCPolicy("", "")
	if err != nil || p.limit != -1 || p.gogc != gogcUnset {
		t.Fatalf("empty flags: %+v, %v (want the runtime's defaults left alone)", p, err)
	}
	p, err = resolveGCPolicy("2GiB", "50")
	if err != nil || p.limit != 2<<30 || p.gogc != 50 {
		t.Fatalf("2GiB/50: %+v, %v", p, err)
	}
	p, err = resolveGCPolicy("1GiB", "off")
	if err != nil || p.gogc != -1 {
		t.Fatalf("1GiB/off: %+v, %v", p, err)
	}
	for _, c := range [][2]string{{"", "off"}, {"0", "off"}, {"", "0"}, {"", "-5"}, {"", "x"}, {"lots", ""}} {
		if p, err := resolveGCPolicy(c[0], c[1]); err == nil {
			t.Errorf("--memory-limit=%q --gogc=%q: %+v, want an error", c[0], c[1], p)
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
	p, err := resolveGCPolicy("3GiB", "75")
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
	p, _ = resolveGCPolicy("0", "")
	p.apply(log)
	if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
		t.Fatalf("--memory-limit=0: limit %d, want none", l)
	}
}
