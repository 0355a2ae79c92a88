package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/seed-c7a81618/conductor/bench/sim"
	"github.com/seed-c7a81618/conductor/internal/syncbuf"
)

const gapsUsage = `Usage: conductor-bench gaps -trace FILE [flags]

Measures how conductor's gap policies answer when messages are lost where
no replay can heal them, and what a SIGKILL loses. For each policy and each
loss rate it replays the first -trace-limit records of the trace through 8
simulated vLLM engines (both dialects) with host, disk and a shared store
into a fresh conductor (--gap-policy), losing that fraction of the store
master's messages, then separately of the engines' (registered without a
replay endpoint), and reports the accuracy per tier against the ground
truth. Then, per policy and snapshot interval, it kills conductor with
SIGKILL 100 records before the end of -crash-limit records, its last
snapshot written as long before as the interval on the trace's clock, and
reports what the restarted index lacks and the accuracy right after and over
the run. One Markdown table of each goes to stdout (and -md).

`

// gapsOptions are the gaps driver's flags.
type gapsOptions struct {
	conductor, trace, md string
	limit, crashLimit    int
	policies, rates      []string
	intervals            []string
	expireAfter          time.Duration
	ring                 int
	faultSeed            uint64
	seeds                int
}

// runGaps is `conductor-bench gaps`.
func runGaps(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o gapsOptions
	fs := flag.NewFlagSet("conductor-bench gaps", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		io.WriteString(stderr, gapsUsage)
		fs.PrintDefaults()
	}
	var policies, rates, intervals string
	fs.StringVar(&o.conductor, "conductor", conductorBesideMe(), "conductor binary to start for each run")
	fs.StringVar(&o.trace, "trace", "", "Mooncake-format JSONL trace (required)")
	fs.IntVar(&o.limit, "trace-limit", 400, "trace records per run")
	fs.StringVar(&policies, "policies", "clear", "comma-separated --gap-policy values (clear, keep, expire); clear runs on a conductor without the flag")
	fs.DurationVar(&o.expireAfter, "expire-after", 30*time.Second, "--gap-expire-after for the expire policy")
	fs.StringVar(&rates, "rates", "0.001,0.01,0.1", "comma-separated loss probabilities")
	fs.StringVar(&intervals, "snapshot-intervals", "5m,10s,2s,1s", "comma-separated snapshot intervals of the crash case (empty: no crash case)")
	fs.IntVar(&o.crashLimit, "crash-limit", 1200, "crash case: trace records per run (killed 100 before the end; the 5m row needs the trace to span more than 5 minutes before the kill)")
	fs.IntVar(&o.ring, "replay-ring", 10000, "crash case: messages each engine rank keeps for replay (vLLM's default buffer_steps)")
	fs.Uint64Var(&o.faultSeed, "fault-seed", 1, "seed of the losses (the first, with -seeds)")
	fs.IntVar(&o.seeds, "seeds", 1, "loss runs per cell, with fault seeds -fault-seed, +1, ...: the accuracy over all their answers")
	fs.StringVar(&o.md, "md", "", "also write the tables to this file")
	fail := func(code int, err error) int {
		fmt.Fprintln(stderr, "conductor-bench gaps:", err)
		return code
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return fail(2, err)
	}
	o.policies, o.rates, o.intervals = splitList(policies), splitList(rates), splitList(intervals)
	if err := o.validate(fs.NArg()); err != nil {
		return fail(2, err)
	}
	var b strings.Builder
	if err := o.run(ctx, &b, stderr); err != nil {
		return fail(1, err)
	}
	io.WriteString(stdout, b.String())
	if o.md != "" {
		if err := os.WriteFile(o.md, []byte(b.String()), 0o644); err != nil {
			return fail(1, err)
		}
	}
	return 0
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// validate lists every bad flag.
func (o *gapsOptions) validate(nargs int) error {
	var errs []error
	if nargs > 0 {
		errs = append(errs, errors.New("unexpected arguments"))
	}
	if o.trace == "" {
		errs = append(errs, errors.New("-trace is required"))
	}
	if o.limit < 8 {
		errs = append(errs, fmt.Errorf("-trace-limit %d: want at least 8", o.limit))
	}
	if len(o.policies) == 0 {
		errs = append(errs, errors.New("-policies: none"))
	}
	for _, p := range o.policies {
		if p != "clear" && p != "keep" && p != "expire" {
			errs = append(errs, fmt.Errorf("-policies: unknown policy %q (want clear, keep, expire)", p))
		}
	}
	for _, r := range o.rates {
		if v, err := strconv.ParseFloat(r, 64); err != nil || v <= 0 || v >= 1 {
			errs = append(errs, fmt.Errorf("-rates: %q: want a probability in (0, 1)", r))
		}
	}
	for _, d := range o.intervals {
		if v, err := time.ParseDuration(d); err != nil || v <= 0 {
			errs = append(errs, fmt.Errorf("-snapshot-intervals: %q: want a positive duration", d))
		}
	}
	if len(o.intervals) > 0 && o.crashLimit < 200 {
		errs = append(errs, fmt.Errorf("-crash-limit %d: want at least 200", o.crashLimit))
	}
	if o.seeds < 1 {
		errs = append(errs, fmt.Errorf("-seeds %d: want at least 1", o.seeds))
	}
	if o.ring <= 0 {
		errs = append(errs, fmt.Errorf("-replay-ring %d: want > 0", o.ring))
	}
	return errors.Join(errs...)
}

// args are the harness flags of one run: the fleet, the trace, verification
// at four points and a short query-only phase, round-robin routing (so the
// messages, and which are lost, depend only on the trace and the seed).
func (o *gapsOptions) args(policy string, limit int, seed uint64, extra ...string) []string {
	a := []string{"-spawn", o.conductor, "-engines", "8", "-dialects", "vllm-map,vllm-array", "-trace", o.trace,
		"-trace-limit", strconv.Itoa(limit), "-host", "32768", "-disk", "65536", "-store", "131072",
		"-policy", "round-robin", "-verify", "-verify-every", strconv.Itoa(max(1, limit/4)), "-verify-sample", "128", "-query-only", "1s",
		"-quiet", "-fault-seed", strconv.FormatUint(seed, 10), "-gap-policy", policy,
		"-spawn-args", "--log-level ERROR"}
	if policy == "expire" {
		a = append(a, "-gap-expire-after", o.expireAfter.String())
	}
	return append(a, extra...)
}

// one runs the harness with args; a run that measured (whatever its
// mismatches) returns its report.
func (o *gapsOptions) one(ctx context.Context, label string, args []string, stderr io.Writer) (*sim.Report, error) {
	f, err := parse(args, stderr)
	if err != nil {
		return nil, err
	}
	var logs syncbuf.Buffer // also the spawned processes' stderr, copied by exec's goroutines
	t0 := time.Now()
	rep, _, err := runBench(ctx, f, io.Discard, &logs)
	// Disagreeing with the ground truth is what is measured; any other
	// failure means the run did not measure what it was to.
	if (err != nil && !errors.Is(err, sim.ErrMismatch)) || rep == nil || len(rep.Accuracy) == 0 {
		return nil, fmt.Errorf("%s: run %v failed (%v):\n%s", label, args, err, logs.String())
	}
	fmt.Fprintf(stderr, "conductor-bench gaps: %s: %.0fs\n", label, time.Since(t0).Seconds())
	return rep, nil
}

func (o *gapsOptions) run(ctx context.Context, b *strings.Builder, stderr io.Writer) error {
	seeds := fmt.Sprintf("fault seed %d", o.faultSeed)
	if o.seeds > 1 {
		seeds = fmt.Sprintf("fault seeds %d to %d, the accuracy over all their answers", o.faultSeed, o.faultSeed+uint64(o.seeds)-1)
	}
	fmt.Fprintf(b, "Loss that no replay heals: the first %d records of %s, 8 vLLM engines (map and array), host, disk and a shared store, round-robin, %s. "+
		"Per tier: exact (instance, tier) pairs / mean over-reported / mean under-reported tokens per pair, over the answers of 4 quiescent points (128 prompts each, fixed by the seeds).\n\n",
		o.limit, o.trace, seeds)
	fmt.Fprintf(b, "| policy | stream | loss | messages lost | exact answers | device | cpu_local | cpu_share | disk |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range o.policies {
		for _, stream := range []string{"store", "engines"} {
			for _, rate := range o.rates {
				extra := []string{"-loss-store", rate}
				if stream == "engines" {
					extra = []string{"-engine-replay=false", "-loss-engines", rate}
				}
				var a sim.Accuracy
				var lost, msgs int64
				for k := 0; k < o.seeds; k++ {
					seed := o.faultSeed + uint64(k)
					rep, err := o.one(ctx, fmt.Sprintf("policy %s, loss %s on the %s stream, fault seed %d", p, rate, stream, seed),
						o.args(p, o.limit, seed, extra...), stderr)
					if err != nil {
						return err
					}
					g := &rep.Groups[0]
					if stream == "engines" {
						lost, msgs = lost+g.Lost, msgs+g.Messages
					} else {
						lost, msgs = lost+g.StoreLost, msgs+g.StoreMessages
					}
					a.Merge(&rep.AccuracyQuiescent)
				}
				fmt.Fprintf(b, "| %s | %s | %s | %d of %d | %.1f%% |%s\n", policyLabel(p, o.expireAfter), stream, rate, lost, msgs,
					100*a.ExactAnswers(), tierCells(&a))
			}
		}
	}
	if len(o.intervals) == 0 {
		return nil
	}
	return o.crashCase(ctx, b, stderr)
}

// snapshotPoint is the request after which the last snapshot before a kill
// after request n was written, when snapshots come every interval and the
// kill comes just before the next one (the most a crash loses), on the
// trace's own clock: the first request m whose timestamp is within interval
// of request n's. 0 when the trace up to n spans less than interval (no
// snapshot before the kill).
func snapshotPoint(ts []int64, n int, interval time.Duration) int {
	last := ts[n-1]
	if last-ts[0] < interval.Milliseconds() {
		return 0
	}
	for m := 1; m < n; m++ {
		if last-ts[m-1] <= interval.Milliseconds() {
			return m
		}
	}
	return n - 1
}

// crashCase: per policy and snapshot interval, conductor is killed with
// SIGKILL after crashLimit−100 records, its last snapshot as old as the
// interval on the trace's clock (-snapshot-at: a graceful restart writes it,
// and no other is written), and restarted on its state directory.
func (o *gapsOptions) crashCase(ctx context.Context, b *strings.Builder, stderr io.Writer) error {
	fh, err := os.Open(o.trace)
	if err != nil {
		return err
	}
	recs, err := sim.ReadTrace(fh, o.crashLimit)
	fh.Close()
	if err != nil {
		return err
	}
	if len(recs) < 200 {
		return fmt.Errorf("the crash case needs 200 trace records, %s has %d", o.trace, len(recs))
	}
	ts := make([]int64, len(recs))
	for i := range recs {
		ts[i] = recs[i].Timestamp
	}
	n := len(recs) - 100
	fmt.Fprintf(b, "\nSIGKILL after %d of %d records, the last snapshot written as long before the kill as the interval on the trace's clock (the most a crash loses; %.1f requests/s), "+
		"restart on the same state directory; engines with replay rings of %d messages, the store master without. "+
		"Blocks indexed / true per tier right after the restart, then the accuracy right after it and over the run's quiescent points (per tier: exact / mean over / mean under tokens).\n\n",
		n, len(recs), float64(n-1)/(float64(ts[n-1]-ts[0])/1000), o.ring)
	fmt.Fprintf(b, "| policy | snapshot interval | requests since the snapshot | blocks device | cpu_local | cpu_share | disk | after: exact answers | device | cpu_local | cpu_share | disk | run: exact answers | device | cpu_local | cpu_share | disk |\n")
	fmt.Fprintf(b, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range o.policies {
		for _, iv := range o.intervals {
			d, _ := time.ParseDuration(iv)
			m := snapshotPoint(ts, n, d)
			extra := []string{"-replay-ring", strconv.Itoa(o.ring), "-crash-at", strconv.Itoa(n)}
			since := fmt.Sprintf("%d (no snapshot)", n)
			if m > 0 {
				extra = append(extra, "-snapshot-at", strconv.Itoa(m))
				since = fmt.Sprintf("%d (%.1f s)", n-m, float64(ts[n-1]-ts[m-1])/1000)
			} else {
				extra = append(extra, "-snapshot-interval", "-1s") // never
			}
			rep, err := o.one(ctx, fmt.Sprintf("policy %s, SIGKILL %s after the snapshot", p, iv), o.args(p, len(recs), o.faultSeed, extra...), stderr)
			if err != nil {
				return err
			}
			var after *sim.AccuracyPoint
			for i := range rep.Accuracy {
				if rep.Accuracy[i].Label == "after crash" {
					after = &rep.Accuracy[i]
				}
			}
			if after == nil || after.IndexedBlocks == nil {
				return fmt.Errorf("crash run (%s, %s) has no after-crash point with block counts", p, iv)
			}
			fmt.Fprintf(b, "| %s | %s | %s |", policyLabel(p, o.expireAfter), iv, since)
			for t := range after.IndexedBlocks {
				fmt.Fprintf(b, " %d / %d |", after.IndexedBlocks[t], after.TruthBlocks[t])
			}
			fmt.Fprintf(b, " %.1f%% |%s %.1f%% |%s\n", 100*after.Accuracy.ExactAnswers(), tierCells(&after.Accuracy),
				100*rep.AccuracyQuiescent.ExactAnswers(), tierCells(&rep.AccuracyQuiescent))
		}
	}
	return nil
}

func policyLabel(p string, expire time.Duration) string {
	if p == "expire" {
		return "expire " + expire.String()
	}
	return p
}

// tierCells: " exact% / over / under |" per tier.
func tierCells(a *sim.Accuracy) string {
	var b strings.Builder
	for t := range a.Tiers {
		ta := &a.Tiers[t]
		fmt.Fprintf(&b, " %.1f%% / %.0f / %.0f |", 100*ta.ExactFraction(), ta.OverMean(), ta.UnderMean())
	}
	return b.String()
}
