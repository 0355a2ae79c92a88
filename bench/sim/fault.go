package sim

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// minRestartSeq is how many messages a publisher incarnation must have
// published before the harness restarts it. An indexer tells a new
// incarnation by its sequence going back; the new one's first messages can
// be lost before the indexer reconnects (a PUB socket drops what it sends
// with no subscriber), and if as many were lost as the old one had published
// the sequence would read as a continuation. Restarts wait for Quiesce's
// sentinels to be seen, which takes a few sentinels at most, so 16 leaves a
// wide margin.
const minRestartSeq = 16

// faults carries out RunOptions' faults during the replay; driven by Run's
// goroutine.
type faults struct {
	o        *RunOptions // the run's own
	rep      *FaultReport
	rng      *rand.Rand
	restarts []int // request counts still due, ascending
}

func newFaults(o *RunOptions, rep *Report) *faults {
	rng := rand.New(rand.NewPCG(o.FaultSeed, 0x6661756c74)) // "fault"
	f := &faults{o: o, rep: &rep.Faults, rng: rng, restarts: restartSchedule(o.Restarts, o.Requests, rng)}
	f.rep.Seed = o.FaultSeed
	f.rep.CrashAt, f.rep.SnapshotAt = o.CrashAt, o.SnapshotAt
	return f
}

// restartSchedule draws n distinct request counts in [1, requests) after
// which a rank restarts, ascending; all of them when n ≥ requests−1.
func restartSchedule(n, requests int, rng *rand.Rand) []int {
	if n <= 0 || requests < 2 {
		return nil
	}
	pts := rng.Perm(requests - 1)
	if n < len(pts) {
		pts = pts[:n]
	}
	for i := range pts {
		pts[i]++
	}
	slices.Sort(pts)
	return pts
}

// after runs the faults due once r.requests requests have been replayed:
// rank restarts (then a quiesce, which proves the indexer reconnected to each
// new incarnation), the snapshot (then a quiesce) and the crash (then a
// quiesce and, in verify mode, the "after crash" accuracy point). It returns
// the time it took.
func (f *faults) after(ctx context.Context, r *run) (time.Duration, error) {
	t0 := time.Now()
	restarted := false
	for len(f.restarts) > 0 && f.restarts[0] <= r.requests {
		ok, err := f.restartOne(r)
		if err != nil {
			return time.Since(t0), err
		}
		if !ok {
			break // no rank has published enough yet: try after the next request
		}
		f.restarts = f.restarts[1:]
		restarted = true
	}
	if restarted {
		if err := r.quiesce(); err != nil {
			return time.Since(t0), fmt.Errorf("sim: after a restart: %w", err)
		}
	}
	if f.o.SnapshotAt > 0 && r.requests == f.o.SnapshotAt {
		// Everything published so far applied, so the snapshot holds it.
		if err := r.quiesce(); err != nil {
			return time.Since(t0), fmt.Errorf("sim: before the snapshot: %w", err)
		}
		if err := f.o.Snapshot(ctx); err != nil {
			return time.Since(t0), fmt.Errorf("sim: snapshot at request %d: %w", r.requests, err)
		}
		r.o.ServerPID = 0 // as after a crash: the process measured is gone
		if err := r.quiesce(); err != nil {
			return time.Since(t0), fmt.Errorf("sim: after the snapshot: %w", err)
		}
	}
	if f.o.CrashAt > 0 && r.requests == f.o.CrashAt {
		c0 := time.Now()
		if err := f.o.Crash(ctx); err != nil {
			return time.Since(t0), fmt.Errorf("sim: crash at request %d: %w", r.requests, err)
		}
		// The process whose CPU time was read is gone: the run reports no
		// server CPU figures.
		r.o.ServerPID = 0
		if err := r.quiesce(); err != nil {
			return time.Since(t0), fmt.Errorf("sim: after the crash: %w", err)
		}
		f.rep.CrashSeconds = time.Since(c0).Seconds()
		if f.o.Verify {
			if err := r.verifyPoint("after crash"); err != nil {
				return time.Since(t0), err
			}
		}
	}
	return time.Since(t0), nil
}

// restartOne restarts a rank drawn from those whose publisher has sent at
// least minRestartSeq messages; ok is false when there is none.
func (f *faults) restartOne(r *run) (ok bool, err error) {
	type cand struct {
		g *Group
		r Rank
	}
	var cs []cand
	for _, g := range f.o.Groups {
		for _, rk := range g.Ranks() {
			if g.PublishedSeq(rk) >= minRestartSeq {
				cs = append(cs, cand{g, rk})
			}
		}
	}
	if len(cs) == 0 {
		return false, nil
	}
	c := cs[f.rng.IntN(len(cs))]
	ev := RestartEvent{Request: r.requests, Model: c.g.cfg.Model, Instance: c.g.engines[c.r.Engine].cfg.ID, Rank: c.r.Rank,
		Messages: c.g.PublishedSeq(c.r)}
	if err := c.g.RestartRank(c.r); err != nil {
		return false, err
	}
	f.rep.Restarts = append(f.rep.Restarts, ev)
	return true, nil
}

// FaultReport records the faults a run injected.
type FaultReport struct {
	Seed     uint64         // RunOptions.FaultSeed
	Restarts []RestartEvent `json:",omitempty"`
	CrashAt  int            `json:",omitempty"` // requests replayed when the indexer was killed
	// SnapshotAt: requests replayed when the indexer wrote the snapshot it
	// restarted from.
	SnapshotAt int `json:",omitempty"`
	// CrashSeconds runs from the kill to the restarted indexer showing every
	// stream's sentinel.
	CrashSeconds float64 `json:",omitempty"`
}

// RestartEvent is one rank restart.
type RestartEvent struct {
	Request         int // requests replayed when it restarted
	Model, Instance string
	Rank            int
	Messages        uint64 // messages the old incarnation had published
}

// observe adds to pt what the indexer's /metrics says (best effort: an
// indexer without them leaves the fields empty) and the ground truth's block
// counts.
func (r *run) observe(pt *AccuracyPoint) {
	if blocks, err := scrapeBlocks(r.o.MetricsAddr); err == nil {
		pt.IndexedBlocks = &blocks
		var truth [numTiers]int64
		for _, g := range r.o.Groups {
			for t, n := range g.TierBlocks() {
				truth[t] += int64(n)
			}
			for _, e := range g.engines {
				for _, rs := range e.ranks {
					if rs.hasSentinel {
						truth[tierDevice]++
					}
				}
			}
			if g.store != nil && g.store.hasSentinel {
				truth[tierShare]++
			}
		}
		pt.TruthBlocks = &truth
	}
	if lag, err := scrapeGauge(r.o.MetricsAddr, "conductor_replica_lag_messages"); err == nil {
		l := int64(lag)
		pt.ReplicaLag = &l
	}
}

// scrapeGauge reads the unlabelled series name from addr's /metrics.
func scrapeGauge(addr, name string) (float64, error) {
	cl := http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("sim: no %s series on %s/metrics", name, addr)
}
