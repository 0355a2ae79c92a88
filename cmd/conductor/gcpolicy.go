package main

import (
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"strconv"
	"strings"
)

// GC policy (docs/performance.md, "Query latency under ingest, memory and GC"). conductor's heap is dominated by
// the block maps, which live as long as their blocks: a GC cycle marks all of
// them, so its cost grows with the index while the garbage it frees (decode and
// apply temporaries, old map tables after a resize) does not. GOGC trades RSS
// for GC CPU: at 100 (the Go default, kept here) the heap may reach about
// twice the live set before a cycle; lower values keep RSS nearer the live
// heap and run more cycles. --memory-limit sets the runtime's soft limit
// (debug.SetMemoryLimit): below it GOGC rules; near it the GC runs as often as
// it must to stay under it, so RSS follows the live heap instead of doubling.
// It is a soft limit: a live set above it is not an error, the GC then runs
// continuously (capped at about half the CPU by the runtime), which costs ingest and
// query throughput, so size it with headroom above the index's live heap
// (about 60 B per held block).
//
// --gc-heap-floor keeps the collector from running its cycles while the heap
// is small: a heap that starts near empty and grows to the index's size would
// otherwise be collected at every doubling (4, 8, 16, ... MiB), each cycle
// marking everything live. The floor is one allocation of that size, never
// written, that the collector counts as live: the heap goal stays at least
// (1 + GOGC/100) times the floor. Its pages are never touched, so it adds no
// resident memory (TestGCHeapFloor), but it counts toward --memory-limit like
// any heap, so it must be below the limit, and it is at most maxGCHeapFloor.

// DefaultGCHeapFloor is --gc-heap-floor's default, 64 MiB.
const DefaultGCHeapFloor = "64MiB"

// maxGCHeapFloor bounds --gc-heap-floor: past a few GiB of heap, cycles are
// rare anyway, and a floor larger than the address space the runtime can
// reserve would stop the process at start.
const maxGCHeapFloor = 4 << 30

// gcPolicy is the resolved policy: what to set and where it came from.
type gcPolicy struct {
	limit    int64 // bytes; < 0: leave the runtime's (GOMEMLIMIT or none)
	limitSrc string
	gogc     int // percent; -1 = off; gogcUnset: leave the runtime's (GOGC or 100)
	gogcSrc  string
	floor    int64 // bytes of the heap floor; 0 = none
}

// gcFloor holds the heap floor's allocation for the life of the process (an
// apply replaces it).
var gcFloor []byte

const gogcUnset = math.MinInt

// resolveGCPolicy reads --memory-limit, --gogc and --gc-heap-floor. The
// first two left empty leave the runtime's own defaults, which already
// honour GOMEMLIMIT and GOGC from the environment.
func resolveGCPolicy(memoryLimit, gogc, floor string) (gcPolicy, error) {
	p := gcPolicy{limit: -1, gogc: gogcUnset}
	n, err := parseSize(floor)
	if err != nil {
		return p, fmt.Errorf("--gc-heap-floor=%q: %w", floor, err)
	}
	if n > maxGCHeapFloor {
		return p, fmt.Errorf("--gc-heap-floor=%q: want at most 4GiB", floor)
	}
	p.floor = n
	if memoryLimit != "" {
		n, err := parseSize(memoryLimit)
		if err != nil {
			return p, fmt.Errorf("--memory-limit=%q: %w", memoryLimit, err)
		}
		p.limit, p.limitSrc = n, "--memory-limit"
	}
	switch g := strings.TrimSpace(gogc); {
	case g == "":
	case strings.EqualFold(g, "off"):
		p.gogc, p.gogcSrc = -1, "--gogc"
	default:
		n, err := strconv.Atoi(g)
		if err != nil || n <= 0 {
			return p, fmt.Errorf("--gogc=%q: want a percentage > 0 or off", gogc)
		}
		p.gogc, p.gogcSrc = n, "--gogc"
	}
	if p.gogc == -1 && p.limit <= 0 && (p.limit == 0 || debug.SetMemoryLimit(-1) == math.MaxInt64) {
		// Without --memory-limit the runtime's own limit (GOMEMLIMIT) counts.
		return p, fmt.Errorf("--gogc=off needs --memory-limit or GOMEMLIMIT (the heap would grow without bound)")
	}
	if p.floor > 0 && p.limit > 0 && p.floor >= p.limit {
		return p, fmt.Errorf("--gc-heap-floor=%q must be below --memory-limit=%q (the floor counts as heap)", floor, memoryLimit)
	}
	return p, nil
}

// apply sets the policy on the runtime and logs the effective values.
func (p gcPolicy) apply(log *slog.Logger) {
	if p.limit >= 0 {
		limit := p.limit
		if limit == 0 {
			limit = math.MaxInt64 // 0 = no limit
		}
		debug.SetMemoryLimit(limit)
	}
	if p.gogc != gogcUnset {
		debug.SetGCPercent(p.gogc)
	}
	gcFloor = nil
	if p.floor > 0 {
		gcFloor = make([]byte, p.floor)
	}
	limit := debug.SetMemoryLimit(-1) // reads without changing
	gogc := debug.SetGCPercent(-1)
	debug.SetGCPercent(gogc)
	attrs := []any{"gogc", gogc, "heap_floor_bytes", len(gcFloor)}
	if len(gcFloor) > 0 && int64(len(gcFloor)) >= limit {
		log.Warn("the GC heap floor is not below the memory limit: the GC will run continuously; lower --gc-heap-floor or raise the limit",
			"heap_floor_bytes", len(gcFloor), "memory_limit_bytes", limit)
	}
	if limit == math.MaxInt64 {
		attrs = append(attrs, "memory_limit", "none")
	} else {
		attrs = append(attrs, "memory_limit_bytes", limit)
	}
	log.Info("GC policy", attrs...)
}

// parseSize parses a byte count: a non-negative integer with an optional
// suffix B, K/KB/KiB, M/MB/MiB, G/GB/GiB, T/TB/TiB (all powers of 1024, as
// GOMEMLIMIT's suffixes are), in any case; "0" means no limit.
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("want a byte count such as 8GiB")
	}
	n, err := strconv.ParseInt(t[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("want a byte count such as 8GiB")
	}
	var shift uint
	switch strings.ToLower(strings.TrimSpace(t[i:])) {
	case "", "b":
	case "k", "kb", "kib":
		shift = 10
	case "m", "mb", "mib":
		shift = 20
	case "g", "gb", "gib":
		shift = 30
	case "t", "tb", "tib":
		shift = 40
	default:
		return 0, fmt.Errorf("unknown unit %q (want B, KiB, MiB, GiB or TiB)", t[i:])
	}
	if n > math.MaxInt64>>shift {
		return 0, fmt.Errorf("too large")
	}
	return n << shift, nil
}
