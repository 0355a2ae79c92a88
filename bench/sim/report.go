package sim

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/seed-c7a81618/conductor/bench"
)

// Report is a run's result (JSON-encodable).
type Report struct {
	Date        string
	Machine     Machine
	Addr        string
	Surface     string
	Groups      []GroupReport
	Ingest      IngestReport
	Mixed       PhaseReport // query load while the workload is replayed
	QueryOnly   PhaseReport // query load on a quiescent index
	Verify      VerifyReport
	Sweep       []SweepPoint `json:",omitempty"`
	WallSeconds float64
}

// SweepPoint is one open-loop rate of the sweep.
type SweepPoint struct {
	Rate, QPS                  float64
	P50, P90, P99, P999, MaxUs float64
	Errors                     int64
	ServerCPUPerQueryUs        float64 `json:",omitempty"`
}

// GroupReport describes one group after the run.
type GroupReport struct {
	Model          string
	BlockSize      int
	Profile        string
	Policy         string
	Engines        []string // id:dialect×ranks
	Store          bool
	Requests       int64
	DeviceHitRatio float64
	CachedHitRatio float64
	TierBlocks     [numTiers]int
	Cleared        int64
	RouteErrors    int64
}

// IngestReport: blocks are (block, tier) stores and removals the engines
// published; Seconds runs from the first request to the indexer showing the
// last event (final quiesce), excluding verification pauses.
type IngestReport struct {
	Requests, Messages, BlocksStored, BlocksRemoved int64
	Seconds                                         float64
	BlocksPerSecond                                 float64 // stored + removed
	// ServerCPUPerBlockNs is measured over the ingest-only phase: no query
	// load, but it includes the routing /query per request of the cache-aware
	// policy and the quiesce polls.
	ServerCPUPerBlockNs float64 `json:",omitempty"`
	// ServerCPUUtilization is the server's CPU time over the wall time of the
	// whole replay (queries and verification pauses included), in cores: well
	// below the machine's cores means the rate was bounded elsewhere.
	ServerCPUUtilization float64 `json:",omitempty"`
}

// PhaseReport is one query phase.
type PhaseReport struct {
	bench.LoadResult
	// ServerCPUPerQueryUs: query-only phase: server CPU / queries. Mixed
	// phase: (server CPU − ingested blocks × the ingest-only CPU per block) /
	// queries, an estimate of what a query costs under concurrent ingest.
	ServerCPUPerQueryUs float64 `json:",omitempty"`
	ServerCPUSeconds    float64 `json:",omitempty"`
}

// VerifyReport counts answers compared with the ground truth.
type VerifyReport struct {
	Enabled    bool
	Points     int   // quiescent points
	Checked    int64 // answers compared (quiescent points + query-only phase)
	Mismatches int64
	Examples   []string `json:",omitempty"`
}

// Agreement is the fraction of checked answers equal to the ground truth.
func (v *VerifyReport) Agreement() float64 {
	if v.Checked == 0 {
		return 0
	}
	return float64(v.Checked-v.Mismatches) / float64(v.Checked)
}

func (g *Group) report() GroupReport {
	r := GroupReport{Model: g.cfg.Model, BlockSize: g.cfg.BlockSize, Profile: g.profile.Spec.Strategy + "/" + g.profile.Spec.Algorithm,
		Policy: g.cfg.Policy.String(), Store: g.store != nil, Requests: g.Stats.Requests,
		DeviceHitRatio: g.Stats.DeviceHitRatio(), CachedHitRatio: g.Stats.CachedHitRatio(), TierBlocks: g.TierBlocks(),
		Cleared: g.Stats.Cleared, RouteErrors: g.Stats.RouteErrors}
	for _, e := range g.engines {
		r.Engines = append(r.Engines, fmt.Sprintf("%s:%s×%d", e.cfg.ID, e.cfg.Dialect, len(e.ranks)))
	}
	return r
}

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
	if in.ServerCPUUtilization > 0 {
		fmt.Fprintf(b, "| server CPU during the replay (incl. its queries) | %.2f cores |\n", in.ServerCPUUtilization)
	}
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
		fmt.Fprintf(b, "| %s | %d | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %d | %s |\n", p.name, p.r.Requests, p.r.RPS,
			us(l.P50), us(l.P90), us(l.P99), us(l.P999), us(l.Max), p.r.Errors, cpu)
	}
	if len(r.Sweep) > 0 {
		fmt.Fprintf(b, "\nOpen-loop sweep on the quiescent index (latency from each query's scheduled start):\n\n")
		fmt.Fprintf(b, "| target q/s | achieved q/s | p50 µs | p90 µs | p99 µs | p99.9 µs | max µs | errors | server CPU/query µs |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, p := range r.Sweep {
			cpu := "n/a"
			if p.ServerCPUPerQueryUs > 0 {
				cpu = fmt.Sprintf("%.1f", p.ServerCPUPerQueryUs)
			}
			fmt.Fprintf(b, "| %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %d | %s |\n", p.Rate, p.QPS, p.P50, p.P90, p.P99, p.P999, p.MaxUs, p.Errors, cpu)
		}
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

// us is d in microseconds, the unit of the report's latencies.
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
