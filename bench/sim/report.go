package sim

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
)

// Machine describes where a run happened.
type Machine struct {
	CPU       string
	NumCPU    int
	GoVersion string
	OS        string
}

// ThisMachine reads the CPU model from /proc/cpuinfo (when present).
func ThisMachine() Machine {
	m := Machine{NumCPU: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

// WriteMarkdown writes the report as Markdown tables.
func (r *Report) WriteMarkdown(w io.Writer) error {
	b := &strings.Builder{}
	fmt.Fprintf(b, "Run of %s against %s (%s surface), %s, %d CPUs, %s.\n\n", r.Date, r.Addr, r.Surface, r.Machine.CPU, r.Machine.NumCPU, r.Machine.GoVersion)
	fmt.Fprintf(b, "| group | profile | engines | policy | requests | device hit | cached hit | blocks device / cpu_local / cpu_share / disk |\n|---|---|---|---|---:|---:|---:|---|\n")
	for _, g := range r.Groups {
		fmt.Fprintf(b, "| %s (B=%d) | %s | %s | %s | %d | %.1f%% | %.1f%% | %d / %d / %d / %d |\n", g.Model, g.BlockSize, g.Profile,
			strings.Join(g.Engines, ", "), g.Policy, g.Requests, 100*g.DeviceHitRatio, 100*g.CachedHitRatio,
			g.TierBlocks[0], g.TierBlocks[1], g.TierBlocks[2], g.TierBlocks[3])
	}
	in := &r.Ingest
	fmt.Fprintf(b, "\n| ingest | value |\n|---|---:|\n")
	fmt.Fprintf(b, "| requests replayed | %d |\n| ZMQ messages | %d |\n| blocks stored / removed | %d / %d |\n", in.Requests, in.Messages, in.BlocksStored, in.BlocksRemoved)
	fmt.Fprintf(b, "| ingest blocks/s (publish → applied, incl. removals) | %.0f |\n", in.BlocksPerSecond)
	if in.ServerCPUPerBlockNs > 0 {
		fmt.Fprintf(b, "| server CPU per block (ingest-only phase) | %.0f ns |\n", in.ServerCPUPerBlockNs)
	}
	fmt.Fprintf(b, "\n| query phase | queries | q/s | p50 µs | p90 µs | p99 µs | p99.9 µs | max µs | errors | server CPU/query µs |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range []struct {
		name string
		r    *PhaseReport
	}{{"during ingest", &r.Mixed}, {"quiescent (query only)", &r.QueryOnly}} {
		l := &p.r.Latency
		cpu := "n/a"
		if p.r.ServerCPUPerQueryUs > 0 {
			cpu = fmt.Sprintf("%.1f", p.r.ServerCPUPerQueryUs)
			if p.r == &r.Mixed {
				cpu += " (est.)"
			}
		}
		fmt.Fprintf(b, "| %s | %d | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %d | %s |\n", p.name, p.r.Queries, p.r.QPS,
			l.P50, l.P90, l.P99, l.P999, l.MaxUs, p.r.Errors, cpu)
	}
	if r.Verify.Enabled {
		fmt.Fprintf(b, "\nVerify: %d answers compared with the ground truth at %d quiescent points and in the query-only phase: %d mismatches (%.4f%% agreement).\n",
			r.Verify.Checked, r.Verify.Points, r.Verify.Mismatches, 100*r.Verify.Agreement())
		for _, e := range r.Verify.Examples {
			fmt.Fprintf(b, "- %s\n", e)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
