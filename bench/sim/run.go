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
}

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
func Run(ctx context.Context, o RunOptions) (*Report, error) {
	o.ensureDefaults()
	if len(o.Groups) == 0 || o.Source == nil {
		return nil, errors.New("sim: Run needs groups and a source")
	}
	qaddr := o.QueryAddr
	if qaddr == "" {
		qaddr = o.Addr
	}
	factory, err := NewClient(o.Surface, qaddr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	rep := &Report{Date: time.Now().UTC().Format(time.RFC3339), Machine: ThisMachine(), Addr: o.Addr, Surface: o.Surface}
	rep.Verify.Enabled = o.Verify
	wallStart := time.Now()

	ctl, err := factory() // the driver's own connection: routing, quiesce, verify
	if err != nil {
		return nil, err
	}
	defer ctl.Close()
	for _, g := range o.Groups {
		register := func() error { return Register(o.Addr, g.Registrations()) }
		if o.Surface == "dynamo" { // the Dynamo registry must know the workers
			register = func() error { return RegisterDynamo(qaddr, g.Registrations()) }
		}
		if err := register(); err != nil {
			return nil, err
		}
	}
	for _, g := range o.Groups {
		if err := g.Quiesce(ctl, o.QuiesceTimeout); err != nil {
			return nil, err
		}
	}

	rng := rand.New(rand.NewPCG(o.Seed, 0x72756e))
	recents := make([]*recent, len(o.Groups))
	for i := range recents {
		recents[i] = &recent{}
	}
	var (
		ingestTime time.Duration
		requests   int
		history    [][]int32 // prompts for quiescent verification (reservoir)
		seen       int
	)
	cpu := func() time.Duration {
		if o.ServerPID <= 0 {
			return 0
		}
		d, _ := ProcCPU(o.ServerPID)
		return d
	}
	counts := func() (stored, removed, msgs int64) {
		for _, g := range o.Groups {
			stored += g.Stats.Stored + g.Stats.StoreStored
			removed += g.Stats.Removed
			msgs += g.Stats.Messages
		}
		return
	}
	quiesce := func() error {
		for _, g := range o.Groups {
			if err := g.Quiesce(ctl, o.QuiesceTimeout); err != nil {
				return err
			}
		}
		return nil
	}
	verifyPoint := func() error {
		rep.Verify.Points++
		var want, got Answer
		for _, p := range verifyPrompts(history, o.VerifySample, rng) {
			for _, g := range o.Groups {
				if err := g.Expect(p, &want); err != nil {
					return err
				}
				q := &Query{Model: g.cfg.Model, BlockSize: g.cfg.BlockSize, Tokens: p}
				rep.Verify.Checked++
				err := ctl.Query(q, &got)
				d := ""
				if err != nil {
					d = err.Error()
				} else {
					d = Diff(&want, &got)
				}
				if d != "" {
					rep.Verify.Mismatches++
					if len(rep.Verify.Examples) < maxKept {
						rep.Verify.Examples = append(rep.Verify.Examples, describe(q, d))
					}
				}
			}
		}
		return nil
	}

	// Progress.
	progressDone := make(chan struct{})
	var progressWG sync.WaitGroup
	var progMu sync.Mutex
	phase := "ingest"
	var progBlocks int64
	var progVerify VerifyReport
	if o.Progress != nil {
		progressWG.Add(1)
		go func() {
			defer progressWG.Done()
			t := time.NewTicker(o.ProgressEvery)
			defer t.Stop()
			for {
				select {
				case <-progressDone:
					return
				case <-t.C:
				}
				progMu.Lock()
				line := progressLine(phase, requests, o.Requests, progBlocks, progVerify, time.Since(wallStart))
				progMu.Unlock()
				fmt.Fprintln(o.Progress, line)
			}
		}()
	}
	defer func() {
		close(progressDone)
		progressWG.Wait()
	}()

	// Ingest: an ingest-only part, then the mixed part with the query load.
	ingestOnly := int(float64(o.Requests) * o.IngestOnly)
	var deadline time.Time
	if o.Duration > 0 {
		deadline = time.Now().Add(o.Duration)
	}
	var (
		loadCancel       context.CancelFunc
		loadDone         chan LoadResult
		cpuMixed0        time.Duration
		blkMixed0        int64
		cpuIngest0       = cpu()
		ingestOnlyBlocks int64
		ingestOnlyCPU    time.Duration
	)
	startLoad := func() {
		st, rm, _ := counts()
		blkMixed0 = st + rm
		cpuMixed0 = cpu()
		lctx, cancel := context.WithCancel(ctx)
		loadCancel = cancel
		loadDone = make(chan LoadResult, 1)
		go func() {
			res, _ := RunLoad(lctx, LoadOptions{Factory: factory, Concurrency: o.Concurrency, Rate: o.QueryRate,
				Duration: 24 * time.Hour, Seed: o.Seed + 1, Next: func(w int, rng *rand.Rand) *Query {
					i := rng.IntN(len(o.Groups))
					g := o.Groups[i]
					p := recents[i].pick(rng)
					return &Query{Model: g.cfg.Model, BlockSize: g.cfg.BlockSize, Tokens: p}
				}})
			loadDone <- res
		}()
	}
	interval := time.Duration(0)
	if o.IngestRate > 0 {
		interval = time.Duration(float64(time.Second) / o.IngestRate)
	}
	segStart := time.Now()
	ingestStart, nextAt := segStart, segStart
	var runErr error
	for ctx.Err() == nil && (o.Requests <= 0 || requests < o.Requests) && (deadline.IsZero() || time.Now().Before(deadline)) {
		if loadDone == nil && requests >= ingestOnly && requests > 0 {
			// End of the ingest-only part: quiesce so its CPU is all accounted.
			if runErr = quiesce(); runErr != nil {
				break
			}
			if ingestOnly > 0 { // a duration-bounded run has no ingest-only part
				st, rm, _ := counts()
				ingestOnlyBlocks, ingestOnlyCPU = st+rm, cpu()-cpuIngest0
			}
			startLoad()
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
		for i, g := range o.Groups {
			if _, err := g.Serve(p, ctl); err != nil {
				runErr = err
				break
			}
			recents[i].add(p)
		}
		if runErr != nil {
			break
		}
		st, rm, _ := counts()
		progMu.Lock()
		requests++
		progBlocks, progVerify = st+rm, rep.Verify
		progMu.Unlock()
		// Reservoir of prompts for verification.
		seen++
		if len(history) < 4*o.VerifySample {
			history = append(history, p)
		} else if j := rng.IntN(seen); j < len(history) {
			history[j] = p
		}
		if o.Verify && o.VerifyEvery > 0 && requests%o.VerifyEvery == 0 {
			if runErr = quiesce(); runErr != nil {
				break
			}
			ingestTime += time.Since(segStart)
			if runErr = verifyPoint(); runErr != nil {
				break
			}
			segStart = time.Now()
		}
	}
	if runErr == nil {
		runErr = quiesce()
	}
	ingestTime += time.Since(segStart)
	ingestCPU, ingestWall := cpu()-cpuIngest0, time.Since(ingestStart)
	if loadCancel != nil {
		cpuMixed := cpu() - cpuMixed0
		loadCancel()
		res := <-loadDone
		st, rm, _ := counts()
		rep.Mixed = PhaseReport{LoadResult: res, ServerCPUSeconds: cpuMixed.Seconds()}
		if res.Queries > 0 && ingestOnlyBlocks > 0 && o.ServerPID > 0 {
			perBlock := float64(ingestOnlyCPU) / float64(ingestOnlyBlocks)
			est := float64(cpuMixed) - perBlock*float64(st+rm-blkMixed0)
			rep.Mixed.ServerCPUPerQueryUs = max(0, est) / float64(res.Queries) / 1e3
		}
	}
	if runErr != nil {
		return rep, runErr
	}
	st, rm, msgs := counts()
	rep.Ingest = IngestReport{Requests: int64(requests), Messages: msgs, BlocksStored: st, BlocksRemoved: rm,
		Seconds: ingestTime.Seconds()}
	if o.ServerPID > 0 && ingestWall > 0 {
		rep.Ingest.ServerCPUUtilization = ingestCPU.Seconds() / ingestWall.Seconds()
	}
	if ingestTime > 0 {
		rep.Ingest.BlocksPerSecond = float64(st+rm) / ingestTime.Seconds()
	}
	if ingestOnlyBlocks > 0 && o.ServerPID > 0 {
		rep.Ingest.ServerCPUPerBlockNs = float64(ingestOnlyCPU) / float64(ingestOnlyBlocks)
	}
	if o.Verify {
		if err := verifyPoint(); err != nil {
			return rep, err
		}
	}

	// Query-only phase on the quiescent index: every answer can be checked.
	if o.QueryOnly > 0 && len(history) > 0 {
		progMu.Lock()
		phase = "query-only"
		progMu.Unlock()
		qo := LoadOptions{Factory: factory, Concurrency: o.Concurrency, Rate: o.QueryRate, Duration: o.QueryOnly,
			Seed: o.Seed + 2, Next: func(w int, rng *rand.Rand) *Query {
				g := o.Groups[rng.IntN(len(o.Groups))]
				return &Query{Model: g.cfg.Model, BlockSize: g.cfg.BlockSize, Tokens: history[rng.IntN(len(history))]}
			}}
		if o.Verify {
			want := make([]truthCache, len(o.Groups))
			for i := range want {
				want[i] = truthCache{g: o.Groups[i], m: map[promptID]*Answer{}}
			}
			var mu sync.Mutex
			qo.Check = func(q *Query, a *Answer) error {
				mu.Lock()
				defer mu.Unlock()
				for i := range want {
					if want[i].g.cfg.Model == q.Model {
						w, err := want[i].get(q.Tokens)
						if err != nil {
							return err
						}
						if d := Diff(w, a); d != "" {
							return errors.New(describe(q, d))
						}
						return nil
					}
				}
				return fmt.Errorf("sim: no group for model %q", q.Model)
			}
		}
		c0 := cpu()
		res, err := RunLoad(ctx, qo)
		if err != nil {
			return rep, err
		}
		c := cpu() - c0
		rep.QueryOnly = PhaseReport{LoadResult: res, ServerCPUSeconds: c.Seconds()}
		if res.Queries > 0 && o.ServerPID > 0 {
			rep.QueryOnly.ServerCPUPerQueryUs = float64(c) / float64(res.Queries) / 1e3
		}
		if o.Verify {
			rep.Verify.Checked += res.Queries - res.Errors
			rep.Verify.Mismatches += res.Mismatches
			for _, m := range res.Mismatch {
				if len(rep.Verify.Examples) < maxKept {
					rep.Verify.Examples = append(rep.Verify.Examples, m)
				}
			}
		}
	}
	if len(history) > 0 {
		if o.SweepTime <= 0 {
			o.SweepTime = 2 * time.Second
		}
		for _, rate := range o.SweepRates {
			progMu.Lock()
			phase = fmt.Sprintf("sweep %.0f q/s", rate)
			progMu.Unlock()
			c0 := cpu()
			res, err := RunLoad(ctx, LoadOptions{Factory: factory, Concurrency: o.Concurrency, Rate: rate, Duration: o.SweepTime,
				Seed: o.Seed + 3, Next: func(w int, rng *rand.Rand) *Query {
					g := o.Groups[rng.IntN(len(o.Groups))]
					return &Query{Model: g.cfg.Model, BlockSize: g.cfg.BlockSize, Tokens: history[rng.IntN(len(history))]}
				}})
			if err != nil {
				return rep, err
			}
			l := res.Latency
			pt := SweepPoint{Rate: rate, QPS: res.QPS, P50: l.P50, P90: l.P90, P99: l.P99, P999: l.P999, MaxUs: l.MaxUs, Errors: res.Errors}
			if c := cpu() - c0; res.Queries > 0 && o.ServerPID > 0 {
				pt.ServerCPUPerQueryUs = float64(c) / float64(res.Queries) / 1e3
			}
			rep.Sweep = append(rep.Sweep, pt)
		}
	}
	for _, g := range o.Groups {
		rep.Groups = append(rep.Groups, g.report())
	}
	rep.WallSeconds = time.Since(wallStart).Seconds()
	if o.Verify && rep.Verify.Mismatches > 0 {
		return rep, fmt.Errorf("%w: %d of %d", ErrMismatch, rep.Verify.Mismatches, rep.Verify.Checked)
	}
	return rep, nil
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
