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
	Date      string
	Machine   Machine
	Addr      string
	Surface   string
	Groups    []GroupReport
	Ingest    IngestReport
	Mixed     PhaseReport // query load while the workload is replayed
	QueryOnly PhaseReport // query load on a quiescent index
	Verify    VerifyReport
	// Accuracy has one point per verify point and one for the query-only
	// phase. AccuracyQuiescent sums the verify points (what Thresholds are
	// checked against: their prompts and the index state they see are fixed
	// by the seeds, while how many queries the query-only phase fits depends
	// on the machine); AccuracyTotal sums every point.
	Accuracy          []AccuracyPoint `json:",omitempty"`
	AccuracyQuiescent Accuracy
	AccuracyTotal     Accuracy
	Faults            FaultReport
	Sweep             []SweepPoint `json:",omitempty"`
	WallSeconds       float64
}

// AccuracyPoint is the accuracy measured at one point of a run.
type AccuracyPoint struct {
	// Label: "verify" (every VerifyEvery requests), "after crash", "end"
	// (the quiescent index after the replay) or "query-only".
	Label    string
	Requests int // requests replayed when measured
	Accuracy Accuracy
	// IndexedBlocks is the indexer's conductor_blocks per tier and
	// TruthBlocks what it holds when right: the simulator's blocks plus one
	// sentinel per stream (absent when the indexer has no such metrics).
	IndexedBlocks, TruthBlocks *[numTiers]int64 `json:",omitempty"`
	// ReplicaLag is a replica's conductor_replica_lag_messages (absent
	// elsewhere).
	ReplicaLag *int64 `json:",omitempty"`
}

func (r *Report) addPoint(pt AccuracyPoint) {
	r.Accuracy = append(r.Accuracy, pt)
	r.AccuracyTotal.Merge(&pt.Accuracy)
	if pt.Label != queryOnlyLabel {
		r.AccuracyQuiescent.Merge(&pt.Accuracy)
	}
}

const queryOnlyLabel = "query-only"

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
	Restarts       int64
	// Engine messages published (sequence numbers consumed), how many of them
	// were lost, and the largest one's bytes.
	Messages, Lost, MaxMessageBytes int64
	// The store's messages, lost ones, the largest one's bytes and how many
	// exceeded 1 MiB (0 without a store).
	StoreMessages, StoreLost, StoreMaxBytes, StoreOverMiB int64
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
		Cleared: g.Stats.Cleared, RouteErrors: g.Stats.RouteErrors, Restarts: g.Stats.Restarts,
		Messages: g.Stats.Messages, Lost: g.Stats.Lost, MaxMessageBytes: g.Stats.MaxMessageBytes,
		StoreMessages: g.Stats.StoreMessages, StoreLost: g.Stats.StoreLost, StoreMaxBytes: g.Stats.StoreMaxBytes,
		StoreOverMiB: g.Stats.StoreOverMiB}
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
	r.writeMessages(b)
	r.writeFaults(b)
	if r.Verify.Enabled {
		fmt.Fprintf(b, "\nVerify: %d answers compared with the ground truth at %d quiescent points and in the query-only phase: %d mismatches (%.4f%% agreement).\n",
			r.Verify.Checked, r.Verify.Points, r.Verify.Mismatches, 100*r.Verify.Agreement())
		for _, e := range r.Verify.Examples {
			fmt.Fprintf(b, "- %s\n", e)
		}
		r.writeAccuracy(b)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeMessages: the message sizes and losses per group.
func (r *Report) writeMessages(b *strings.Builder) {
	fmt.Fprintf(b, "\n| group | engine messages | lost | largest | store messages | lost | largest | over 1 MiB | rank restarts |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, g := range r.Groups {
		fmt.Fprintf(b, "| %s | %d | %d | %d B | %d | %d | %d B | %d | %d |\n", g.Model, g.Messages, g.Lost, g.MaxMessageBytes,
			g.StoreMessages, g.StoreLost, g.StoreMaxBytes, g.StoreOverMiB, g.Restarts)
	}
}

// writeFaults: the seed and the restarts and crash injected.
func (r *Report) writeFaults(b *strings.Builder) {
	f := &r.Faults
	if len(f.Restarts) == 0 && f.CrashAt == 0 && f.SnapshotAt == 0 {
		return
	}
	fmt.Fprintf(b, "\nFaults (seed %d):", f.Seed)
	for _, e := range f.Restarts {
		fmt.Fprintf(b, " restart %s/%d after request %d (%d messages);", e.Instance, e.Rank, e.Request, e.Messages)
	}
	if f.SnapshotAt > 0 {
		fmt.Fprintf(b, " snapshot written after request %d;", f.SnapshotAt)
	}
	if f.CrashAt > 0 {
		fmt.Fprintf(b, " SIGKILL after request %d, restarted and caught up in %.1f s", f.CrashAt, f.CrashSeconds)
	}
	b.WriteString("\n")
}

// writeAccuracy: one row per accuracy point and the total; per tier the
// exact (row, tier) pairs, and the mean over- and under-reported tokens.
func (r *Report) writeAccuracy(b *strings.Builder) {
	fmt.Fprintf(b, "\nAccuracy per point (per tier: exact pairs %% / mean over-reported / mean under-reported tokens per instance row):\n\n")
	fmt.Fprintf(b, "| point | requests | answers | exact answers |")
	for _, n := range TierNames {
		fmt.Fprintf(b, " %s |", n)
	}
	b.WriteString(" indexed / true blocks | replica lag |\n|---|---:|---:|---:|---:|---:|---:|---:|---|---:|\n")
	row := func(label string, req string, a *Accuracy, pt *AccuracyPoint) {
		fmt.Fprintf(b, "| %s | %s | %d | %.2f%% |", label, req, a.Answers, 100*a.ExactAnswers())
		for t := range a.Tiers {
			ta := &a.Tiers[t]
			fmt.Fprintf(b, " %.2f%% / %.1f / %.1f |", 100*ta.ExactFraction(), ta.OverMean(), ta.UnderMean())
		}
		blocks, lag := "", ""
		if pt != nil && pt.IndexedBlocks != nil && pt.TruthBlocks != nil {
			var parts []string
			for t := range pt.IndexedBlocks {
				parts = append(parts, fmt.Sprintf("%d/%d", pt.IndexedBlocks[t], pt.TruthBlocks[t]))
			}
			blocks = strings.Join(parts, " ")
		}
		if pt != nil && pt.ReplicaLag != nil {
			lag = fmt.Sprint(*pt.ReplicaLag)
		}
		fmt.Fprintf(b, " %s | %s |\n", blocks, lag)
	}
	for i := range r.Accuracy {
		pt := &r.Accuracy[i]
		row(pt.Label, fmt.Sprint(pt.Requests), &pt.Accuracy, pt)
	}
	row("**quiescent points**", "", &r.AccuracyQuiescent, nil)
	row("**total**", "", &r.AccuracyTotal, nil)
}

// us is d in microseconds, the unit of the report's latencies.
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
