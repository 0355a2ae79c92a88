package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/seed-c7a81618/conductor/bench"
)

// RunOptions configure a harness run: replay a workload through groups of
// simulated engines into an indexer while a query load runs, check answers
// against the ground truth, and report.
type RunOptions struct {
	Addr    string // indexer host:port (registrations, quiescing, and queries unless QueryAddr)
	Surface string // query surface (Surfaces); default msgpack
	// QueryAddr is where the query surface listens when that is not Addr
	// (the rpc surface's rpc_server_port). Default Addr.
	QueryAddr string
	Groups    []*Group
	Source    Source
	// Requests bounds the workload (0: until Source ends or Duration).
	Requests int
	// Duration bounds the ingest phases (0: none).
	Duration time.Duration
	// IngestRate paces requests per second (0: as fast as the engines go).
	IngestRate float64
	// IngestOnly is the fraction of requests replayed before the query load
	// starts, to measure the server's CPU per ingested block alone (default 0.25).
	IngestOnly float64

	// Query load during ingest and in the query-only phase.
	Concurrency int     // default 4
	QueryRate   float64 // open loop q/s; 0 = closed loop
	// QueryOnly is the length of the final query-only phase (default 3s;
	// negative skips it). In verify mode every one of its answers is checked.
	QueryOnly time.Duration

	// Verify checks answers against the ground truth: VerifySample prompts
	// (default 64) at a quiescent point every VerifyEvery requests (default:
	// only at the end), and every answer of the query-only phase.
	Verify       bool
	VerifyEvery  int
	VerifySample int

	// SweepRates, after the query-only phase, runs an open-loop query load at
	// each rate (q/s) for SweepTime (default 2s) each: the latency/throughput
	// curve (Report.Sweep, PlotSVG).
	SweepRates []float64
	SweepTime  time.Duration

	// ServerPID > 0 reads that local process's CPU time per phase.
	ServerPID int
	// Progress, when set, gets a status line every ProgressEvery (default 1s).
	Progress      io.Writer
	ProgressEvery time.Duration
	Seed          uint64
	// QuiesceTimeout bounds each wait for the indexer to catch up (default 60s).
	QuiesceTimeout time.Duration

	// Thresholds, when any bound is set, replace "any mismatch fails" in
	// verify mode: the run fails (ErrBelowThreshold) when the accuracy over
	// the answers of its quiescent verify points (Report.AccuracyQuiescent)
	// misses a bound.
	Thresholds Thresholds

	// Faults (fault.go). Restarts restarts that many engine ranks
	// (Group.RestartRank) after requests drawn at random from the replay.
	Restarts int
	// FaultSeed seeds the restart schedule and the ranks restarted.
	FaultSeed uint64
	// CrashAt > 0: after that many requests, Run calls Crash, which must end
	// the indexer (SIGKILL) and start it again on the same address and
	// state, returning once it serves; Run then quiesces and, in verify
	// mode, measures the accuracy at once (the "after crash" point).
	CrashAt int
	Crash   func(context.Context) error
	// SnapshotAt > 0: after that many requests (before CrashAt), Run
	// quiesces and calls Snapshot, which must have the indexer write a
	// snapshot of its state as it is then (conductor: stop it gracefully and
	// start it again), and quiesces again. With no other snapshot between the two (conductor's
	// --snapshot-interval 0), a crash at CrashAt then restarts from exactly
	// the state after SnapshotAt requests.
	SnapshotAt int
	Snapshot   func(context.Context) error

	// MetricsAddr is the host:port of the queried indexer's /metrics
	// (default Addr). At each verify point Run reads, when present,
	// conductor_blocks per tier and a replica's conductor_replica_lag_messages.
	MetricsAddr string
}

func (o *RunOptions) ensureDefaults() {
	if o.Surface == "" {
		o.Surface = "msgpack"
	}
	if o.IngestOnly <= 0 || o.IngestOnly > 1 {
		o.IngestOnly = 0.25
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 4
	}
	if o.QueryOnly == 0 {
		o.QueryOnly = 3 * time.Second
	}
	if o.VerifySample <= 0 {
		o.VerifySample = 64
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = time.Second
	}
	if o.QuiesceTimeout <= 0 {
		o.QuiesceTimeout = 60 * time.Second
	}
	if o.SweepTime <= 0 {
		o.SweepTime = 2 * time.Second
	}
	if o.MetricsAddr == "" {
		o.MetricsAddr = o.Addr
	}
}

// validate lists every bad option.
func (o *RunOptions) validate() error {
	var errs []error
	if len(o.Groups) == 0 || o.Source == nil {
		errs = append(errs, errors.New("sim: Run needs groups and a source"))
	}
	if err := o.Thresholds.Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.Restarts < 0 {
		errs = append(errs, fmt.Errorf("sim: Restarts %d: want ≥ 0", o.Restarts))
	}
	if o.Restarts > 0 && o.Requests <= 1 {
		errs = append(errs, errors.New("sim: Restarts needs Requests > 1 (the schedule is drawn over them)"))
	}
	if o.CrashAt < 0 || (o.CrashAt > 0 && o.Crash == nil) {
		errs = append(errs, fmt.Errorf("sim: CrashAt %d needs a Crash function", o.CrashAt))
	}
	if o.CrashAt > 0 && o.Requests > 0 && o.CrashAt >= o.Requests {
		errs = append(errs, fmt.Errorf("sim: CrashAt %d: want fewer than the %d requests", o.CrashAt, o.Requests))
	}
	if o.SnapshotAt < 0 || (o.SnapshotAt > 0 && o.Snapshot == nil) {
		errs = append(errs, fmt.Errorf("sim: SnapshotAt %d needs a Snapshot function", o.SnapshotAt))
	}
	if o.SnapshotAt > 0 && o.CrashAt > 0 && o.SnapshotAt >= o.CrashAt {
		errs = append(errs, fmt.Errorf("sim: SnapshotAt %d: want it before CrashAt %d", o.SnapshotAt, o.CrashAt))
	}
	return errors.Join(errs...)
}

// maxKept bounds the mismatch reports a run keeps.
const maxKept = 5

// ErrMismatch is returned by Run when verify mode found a disagreement.
var ErrMismatch = errors.New("sim: answers disagree with the ground truth")

// recent keeps the last prompts per group for the query load (shared with
// the load workers).
type recent struct {
	mu      sync.Mutex
	prompts [][]int32
	next    int
}

func (r *recent) add(p []int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	const keep = 512
	if len(r.prompts) < keep {
		r.prompts = append(r.prompts, p)
		return
	}
	r.prompts[r.next] = p
	r.next = (r.next + 1) % keep
}

func (r *recent) pick(rng *rand.Rand) []int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.prompts) == 0 {
		return nil
	}
	return r.prompts[rng.IntN(len(r.prompts))]
}

// Run executes the run described by o. It returns the report and, in verify
// mode, ErrMismatch (wrapped) when any answer disagreed.
//
// Its phases: register the groups and quiesce; replay the workload (an
// ingest-only part, then the rest under the query load); a verify point on
// the quiescent index; the query-only phase; the sweep.
func Run(ctx context.Context, o RunOptions) (*Report, error) {
	o.ensureDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	r, err := newRun(o)
	if err != nil {
		return nil, err
	}
	defer r.ctl.Close()
	if err := r.register(); err != nil {
		return nil, err
	}
	defer r.startProgress()()
	if err := r.ingest(ctx); err != nil {
		return r.rep, err
	}
	if o.Verify {
		if err := r.verifyPoint("end"); err != nil {
			return r.rep, err
		}
	}
	if err := r.queryOnly(ctx); err != nil {
		return r.rep, err
	}
	if err := r.sweep(ctx); err != nil {
		return r.rep, err
	}
	for _, g := range o.Groups {
		r.rep.Groups = append(r.rep.Groups, g.report())
	}
	r.rep.WallSeconds = time.Since(r.start).Seconds()
	if !o.Verify {
		return r.rep, nil
	}
	if o.Thresholds.Any() {
		return r.rep, o.Thresholds.Check(&r.rep.AccuracyQuiescent)
	}
	if r.rep.Verify.Mismatches > 0 {
		return r.rep, fmt.Errorf("%w: %d of %d", ErrMismatch, r.rep.Verify.Mismatches, r.rep.Verify.Checked)
	}
	return r.rep, nil
}

// run is the state of one Run, driven by Run's goroutine; the fields under
// mu are also read by the progress goroutine.
type run struct {
	o       RunOptions
	qaddr   string // the query surface's address
	factory ClientFactory
	ctl     Client // the driver's own connection: routing, quiesce, verify
	rep     *Report
	rng     *rand.Rand
	recents []*recent // per group: prompts for the query load during ingest
	history [][]int32 // reservoir of prompts: verification and the query-only phase
	seen    int       // prompts offered to history
	start   time.Time
	faults  *faults

	mu       sync.Mutex // guards the progress fields below
	phase    string
	requests int   // replayed so far (written by the driver only)
	blocks   int64 // published so far
	verified VerifyReport
}

func newRun(o RunOptions) (*run, error) {
	r := &run{o: o, qaddr: o.QueryAddr, start: time.Now(), phase: "ingest", rng: rand.New(rand.NewPCG(o.Seed, 0x72756e))}
	if r.qaddr == "" {
		r.qaddr = o.Addr
	}
	var err error
	if r.factory, err = NewClient(o.Surface, r.qaddr, 10*time.Second); err != nil {
		return nil, err
	}
	r.rep = &Report{Date: r.start.UTC().Format(time.RFC3339), Machine: ThisMachine(), Addr: o.Addr, Surface: o.Surface}
	r.rep.Verify.Enabled = o.Verify
	if r.ctl, err = r.factory(); err != nil {
		return nil, err
	}
	r.recents = make([]*recent, len(o.Groups))
	for i := range r.recents {
		r.recents[i] = &recent{}
	}
	r.faults = newFaults(&r.o, r.rep)
	return r, nil
}

// register registers every group (through the Dynamo port for the dynamo
// surface, whose registry must know the workers) and waits until the indexer
// has subscribed to all of them.
func (r *run) register() error {
	for _, g := range r.o.Groups {
		register := func() error { return Register(r.o.Addr, g.Registrations()) }
		if r.o.Surface == "dynamo" {
			register = func() error { return RegisterDynamo(r.qaddr, g.Registrations()) }
		}
		if err := register(); err != nil {
			return err
		}
	}
	return r.quiesce()
}

// cpu is the server's CPU time so far (0 without ServerPID).
func (r *run) cpu() time.Duration {
	if r.o.ServerPID <= 0 {
		return 0
	}
	d, _ := bench.ProcCPU(r.o.ServerPID)
	return d
}

// counts sums what the groups published.
func (r *run) counts() (stored, removed, msgs int64) {
	for _, g := range r.o.Groups {
		stored += g.Stats.Stored + g.Stats.StoreStored
		removed += g.Stats.Removed
		msgs += g.Stats.Messages
	}
	return
}

func (r *run) quiesce() error {
	for _, g := range r.o.Groups {
		if err := g.Quiesce(r.ctl, r.o.QuiesceTimeout); err != nil {
			return err
		}
	}
	return nil
}

// verifyPoint compares VerifySample prompts per group with the ground truth
// and adds an accuracy point labelled label; the index must be quiescent.
func (r *run) verifyPoint(label string) error {
	v := &r.rep.Verify
	v.Points++
	pt := AccuracyPoint{Label: label, Requests: r.requests}
	var want, got Answer
	for _, p := range verifyPrompts(r.history, r.o.VerifySample, r.rng) {
		for _, g := range r.o.Groups {
			if err := g.Expect(p, &want); err != nil {
				return err
			}
			q := &Query{Model: g.cfg.Model, BlockSize: g.cfg.BlockSize, Tokens: p}
			v.Checked++
			d := ""
			if err := r.ctl.Query(q, &got); err != nil {
				d = err.Error()
				pt.Accuracy.AddError()
			} else {
				d = pt.Accuracy.Add(&want, &got)
			}
			if d != "" {
				v.Mismatches++
				if len(v.Examples) < maxKept {
					v.Examples = append(v.Examples, describe(q, d))
				}
			}
		}
	}
	r.observe(&pt)
	r.rep.addPoint(pt)
	return nil
}

// startProgress prints a status line every ProgressEvery until the returned
// function is called (nothing without Progress).
func (r *run) startProgress() (stop func()) {
	if r.o.Progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(r.o.ProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			r.mu.Lock()
			line := progressLine(r.phase, r.requests, r.o.Requests, r.blocks, r.verified, time.Since(r.start))
			r.mu.Unlock()
			fmt.Fprintln(r.o.Progress, line)
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

func (r *run) setPhase(phase string) {
	r.mu.Lock()
	r.phase = phase
	r.mu.Unlock()
}

// ingest replays the workload: an ingest-only part (IngestOnly of Requests;
// its server CPU per block is measured alone), then the rest with the query
// load running, verifying every VerifyEvery requests. It ends on a quiescent
// index and fills rep.Ingest and rep.Mixed.
func (r *run) ingest(ctx context.Context) error {
	o := &r.o
	ingestOnly := int(float64(o.Requests) * o.IngestOnly)
	var deadline time.Time
	if o.Duration > 0 {
		deadline = time.Now().Add(o.Duration)
	}
	var (
		mixed      *mixedLoad
		cpu0       = r.cpu()
		only       ingestOnlyCost
		ingestTime time.Duration // replaying, verification pauses excluded
		interval   time.Duration
		err        error
	)
	if o.IngestRate > 0 {
		interval = time.Duration(float64(time.Second) / o.IngestRate)
	}
	segStart := time.Now()
	ingestStart, nextAt := segStart, segStart
	for ctx.Err() == nil && (o.Requests <= 0 || r.requests < o.Requests) && (deadline.IsZero() || time.Now().Before(deadline)) {
		if mixed == nil && r.requests >= ingestOnly && r.requests > 0 {
			// End of the ingest-only part: quiesce so its CPU is all accounted.
			if err = r.quiesce(); err != nil {
				break
			}
			if ingestOnly > 0 { // a duration-bounded run has no ingest-only part
				st, rm, _ := r.counts()
				only = ingestOnlyCost{blocks: st + rm, cpu: r.cpu() - cpu0}
			}
			mixed = r.startMixed(ctx)
		}
		p, ok := o.Source.Next()
		if !ok {
			break
		}
		if interval > 0 {
			if d := time.Until(nextAt); d > 0 {
				time.Sleep(d)
			}
			nextAt = nextAt.Add(interval)
		}
		if err = r.serve(p); err != nil {
			break
		}
		var paused time.Duration
		if paused, err = r.faults.after(ctx, r); err != nil {
			break
		}
		ingestTime -= paused
		if o.Verify && o.VerifyEvery > 0 && r.requests%o.VerifyEvery == 0 {
			if err = r.quiesce(); err != nil {
				break
			}
			ingestTime += time.Since(segStart)
			if err = r.verifyPoint("verify"); err != nil {
				break
			}
			segStart = time.Now()
		}
	}
	if err == nil {
		err = r.quiesce()
	}
	ingestTime += time.Since(segStart)
	ingestCPU, ingestWall := r.cpu()-cpu0, time.Since(ingestStart)
	if mixed != nil {
		r.stopMixed(mixed, only)
	}
	if err != nil {
		return err
	}
	r.reportIngest(ingestTime, ingestCPU, ingestWall, only)
	return nil
}

// serve replays one prompt into every group and keeps it for the query load
// and verification.
func (r *run) serve(p []int32) error {
	for i, g := range r.o.Groups {
		if _, err := g.Serve(p, r.ctl); err != nil {
			return err
		}
		r.recents[i].add(p)
	}
	st, rm, _ := r.counts()
	r.mu.Lock()
	r.requests++
	r.blocks, r.verified = st+rm, r.rep.Verify
	r.mu.Unlock()
	// Reservoir of prompts for verification.
	r.seen++
	if len(r.history) < 4*r.o.VerifySample {
		r.history = append(r.history, p)
	} else if j := r.rng.IntN(r.seen); j < len(r.history) {
		r.history[j] = p
	}
	return nil
}

// ingestOnlyCost is what the ingest-only part published and the server's CPU
// for it.
type ingestOnlyCost struct {
	blocks int64
	cpu    time.Duration
}

func (r *run) reportIngest(ingestTime, ingestCPU, ingestWall time.Duration, only ingestOnlyCost) {
	st, rm, msgs := r.counts()
	in := &r.rep.Ingest
	*in = IngestReport{Requests: int64(r.requests), Messages: msgs, BlocksStored: st, BlocksRemoved: rm,
		Seconds: ingestTime.Seconds()}
	if r.o.ServerPID > 0 && ingestWall > 0 {
		in.ServerCPUUtilization = ingestCPU.Seconds() / ingestWall.Seconds()
	}
	if ingestTime > 0 {
		in.BlocksPerSecond = float64(st+rm) / ingestTime.Seconds()
	}
	if only.blocks > 0 && r.o.ServerPID > 0 {
		in.ServerCPUPerBlockNs = float64(only.cpu) / float64(only.blocks)
	}
}

// mixedLoad is the query load running during ingest.
type mixedLoad struct {
	cancel  context.CancelFunc
	done    chan bench.LoadResult
	cpu0    time.Duration
	blocks0 int64
}

// startMixed starts the query load over the groups' recent prompts.
func (r *run) startMixed(ctx context.Context) *mixedLoad {
	st, rm, _ := r.counts()
	m := &mixedLoad{done: make(chan bench.LoadResult, 1), cpu0: r.cpu(), blocks0: st + rm}
	lctx, cancel := context.WithCancel(ctx)
	m.cancel = cancel
	load := queryLoad{Factory: r.factory, Seed: r.o.Seed + 1, Next: func(w int, rng *rand.Rand) *Query {
		i := rng.IntN(len(r.o.Groups))
		g := r.o.Groups[i]
		return &Query{Model: g.cfg.Model, BlockSize: g.cfg.BlockSize, Tokens: r.recents[i].pick(rng)}
	}}
	go func() {
		res, _ := load.run(lctx, r.o.Concurrency, r.o.QueryRate, 24*time.Hour)
		m.done <- res
	}()
	return m
}

// stopMixed ends the query load and fills rep.Mixed; its server CPU per query
// is the phase's CPU less what its ingested blocks cost at the ingest-only
// rate.
func (r *run) stopMixed(m *mixedLoad, only ingestOnlyCost) {
	cpuMixed := r.cpu() - m.cpu0
	m.cancel()
	res := <-m.done
	st, rm, _ := r.counts()
	r.rep.Mixed = PhaseReport{LoadResult: res}
	if r.o.ServerPID > 0 {
		r.rep.Mixed.ServerCPUSeconds = cpuMixed.Seconds()
	}
	if res.Requests > 0 && only.blocks > 0 && r.o.ServerPID > 0 {
		perBlock := float64(only.cpu) / float64(only.blocks)
		est := float64(cpuMixed) - perBlock*float64(st+rm-m.blocks0)
		r.rep.Mixed.ServerCPUPerQueryUs = max(0, est) / float64(res.Requests) / 1e3
	}
}

// historyQuery is a query of a random group for a random prompt of history.
func (r *run) historyQuery(_ int, rng *rand.Rand) *Query {
	g := r.o.Groups[rng.IntN(len(r.o.Groups))]
	return &Query{Model: g.cfg.Model, BlockSize: g.cfg.BlockSize, Tokens: r.history[rng.IntN(len(r.history))]}
}

// queryOnly runs the query load on the quiescent index, where every answer
// can be checked (verify mode), and fills rep.QueryOnly.
func (r *run) queryOnly(ctx context.Context) error {
	o := &r.o
	if o.QueryOnly <= 0 || len(r.history) == 0 {
		return nil
	}
	r.setPhase("query-only")
	load := queryLoad{Factory: r.factory, Seed: o.Seed + 2, Next: r.historyQuery}
	pt := AccuracyPoint{Label: queryOnlyLabel, Requests: r.requests}
	if o.Verify {
		load.Check = r.truthCheck(&pt.Accuracy)
	}
	c0 := r.cpu()
	res, err := load.run(ctx, o.Concurrency, o.QueryRate, o.QueryOnly)
	if err != nil {
		return err
	}
	c := r.cpu() - c0
	r.rep.QueryOnly = PhaseReport{LoadResult: res}
	if o.ServerPID > 0 {
		r.rep.QueryOnly.ServerCPUSeconds = c.Seconds()
	}
	if res.Requests > 0 && o.ServerPID > 0 {
		r.rep.QueryOnly.ServerCPUPerQueryUs = float64(c) / float64(res.Requests) / 1e3
	}
	if o.Verify {
		for i := int64(0); i < res.Errors; i++ {
			pt.Accuracy.AddError() // failed queries (answers are tallied by truthCheck)
		}
		r.observe(&pt)
		r.rep.addPoint(pt)
		v := &r.rep.Verify
		v.Checked += res.Requests - res.Errors
		v.Mismatches += res.Mismatches
		for _, m := range res.Mismatch {
			if len(v.Examples) < maxKept {
				v.Examples = append(v.Examples, m)
			}
		}
	}
	return nil
}

// truthCheck compares an answer with the ground truth of its group (the
// index must stay quiescent) and tallies it in acc; safe for concurrent use.
func (r *run) truthCheck(acc *Accuracy) func(q *Query, a *Answer) error {
	want := make([]truthCache, len(r.o.Groups))
	for i := range want {
		want[i] = truthCache{g: r.o.Groups[i], m: map[promptID]*Answer{}}
	}
	var mu sync.Mutex // guards want's caches
	return func(q *Query, a *Answer) error {
		mu.Lock()
		defer mu.Unlock()
		for i := range want {
			if want[i].g.cfg.Model == q.Model {
				w, err := want[i].get(q.Tokens)
				if err != nil {
					return err
				}
				if d := acc.Add(w, a); d != "" {
					return errors.New(describe(q, d))
				}
				return nil
			}
		}
		return fmt.Errorf("sim: no group for model %q", q.Model)
	}
}

// sweep runs the open-loop query load at each SweepRates rate and fills
// rep.Sweep.
func (r *run) sweep(ctx context.Context) error {
	o := &r.o
	if len(r.history) == 0 {
		return nil
	}
	for _, rate := range o.SweepRates {
		r.setPhase(fmt.Sprintf("sweep %.0f q/s", rate))
		c0 := r.cpu()
		res, err := queryLoad{Factory: r.factory, Seed: o.Seed + 3, Next: r.historyQuery}.run(ctx, o.Concurrency, rate, o.SweepTime)
		if err != nil {
			return err
		}
		pt := SweepPoint{Rate: rate, QPS: res.RPS, P50: us(res.P50), P90: us(res.P90), P99: us(res.P99), P999: us(res.P999),
			MaxUs: us(res.Max), Errors: res.Errors}
		if c := r.cpu() - c0; res.Requests > 0 && o.ServerPID > 0 {
			pt.ServerCPUPerQueryUs = float64(c) / float64(res.Requests) / 1e3
		}
		r.rep.Sweep = append(r.rep.Sweep, pt)
	}
	return nil
}

// truthCache memoises Expect per prompt while the index is quiescent. A
// prompt is identified by its backing array and length (history prompts are
// never modified).
type truthCache struct {
	g *Group
	m map[promptID]*Answer
}

type promptID struct {
	p *int32
	n int
}

func (c *truthCache) get(p []int32) (*Answer, error) {
	a := &Answer{}
	if len(p) == 0 {
		return a, c.g.Expect(p, a)
	}
	id := promptID{&p[0], len(p)}
	if a, ok := c.m[id]; ok {
		return a, nil
	}
	if err := c.g.Expect(p, a); err != nil {
		return nil, err
	}
	c.m[id] = a
	return a, nil
}

// verifyPrompts picks n prompts: whole prompts from history, their prefixes
// cut at random points (partial hits), and fresh random prompts (misses).
func verifyPrompts(history [][]int32, n int, rng *rand.Rand) [][]int32 {
	var out [][]int32
	for i := 0; i < n; i++ {
		switch {
		case len(history) == 0 || i%8 == 7:
			out = append(out, randomTokens(nil, 16+rng.IntN(512), rng))
		case i%2 == 1:
			p := history[rng.IntN(len(history))]
			out = append(out, p[:rng.IntN(len(p)+1)])
		default:
			out = append(out, history[rng.IntN(len(history))])
		}
	}
	return out
}

func describe(q *Query, diff string) string {
	return fmt.Sprintf("query model=%s block_size=%d tokens=%d (first %v): %s", q.Model, q.BlockSize, len(q.Tokens),
		q.Tokens[:min(4, len(q.Tokens))], strings.TrimSpace(diff))
}

func progressLine(phase string, done, total int, blocks int64, v VerifyReport, el time.Duration) string {
	bar := ""
	if total > 0 {
		const w = 30
		f := min(w, done*w/total)
		bar = "[" + strings.Repeat("#", f) + strings.Repeat(".", w-f) + "] "
	}
	return fmt.Sprintf("%s%s %d/%d requests, %d blocks published, %.0f blocks/s, verify %d checked %d mismatches, %v",
		bar, phase, done, total, blocks, float64(blocks)/el.Seconds(), v.Checked, v.Mismatches, el.Round(time.Second))
}
