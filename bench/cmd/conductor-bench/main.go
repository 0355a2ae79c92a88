// Command conductor-bench is conductor's load harness: it starts simulated
// inference engines (real ZMQ publishers speaking vLLM, SGLang or RFC #1527
// events, with DP ranks, device/host/disk pools and an optional shared
// Mooncake store), registers them with an indexer, replays a workload (a
// Mooncake-format trace or the built-in synthetic chat workload) routed by a
// policy, runs a query load during and after ingest, and reports ingest
// blocks/s, query latency percentiles, server CPU per query and, in verify
// mode, whether every checked answer equals the simulator's ground truth.
//
// Point it at any indexer that speaks the Mooncake indexer API (-addr), or let
// it start a conductor binary on a free loopback port (-spawn), which also
// lets it read the server's CPU time from /proc. Running the same command
// against two servers gives a side-by-side comparison.
//
//	conductor-bench -spawn bin/conductor -engines 8 -trace trace.jsonl -verify
//	conductor-bench -addr 10.0.0.7:13333 -surface json -policy random -requests 2000
//
// `conductor-bench demo` is the live demo (`make run`, demo.go): it starts a
// conductor binary and a small mixed fleet publishing to it, and prints a
// summary every second until Ctrl-C.
//
// Exit status: 0 on success, 1 on a failed run or a ground-truth mismatch, 2
// on bad flags.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/seed-c7a81618/conductor/bench/sim"
	"github.com/seed-c7a81618/conductor/hash"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

type flags struct {
	addr, spawn, spawnArgs string
	serverPID              int
	engines, ranks         int
	dialects               string
	model                  string
	blockSize              int
	profile, seedText      string
	engineHash             string
	device, host, disk     int
	store, clearEvery      int
	policy                 string
	trace                  string
	traceLimit, requests   int
	duration               time.Duration
	ingestRate             float64
	surface                string
	queryAddr              string
	concurrency            int
	qps                    float64
	queryOnly              time.Duration
	verify                 bool
	verifyEvery, verifyN   int
	sweep                  string
	sweepTime              time.Duration
	jsonOut, mdOut, svgOut string
	quiet                  bool
	seed                   uint64

	// Faults and accuracy.
	engineReplay                  bool
	lossEngines, lossStore        float64
	faultSeed                     uint64
	restarts, crashAt, snapshotAt int
	snapshotInterval              time.Duration
	replica                       bool
	natsServer                    string
	gapPolicy                     string
	gapExpireAfter                time.Duration
	minExactAnswers               float64
	minExact, maxOver, maxUnder   string
	thresholds                    sim.Thresholds
	replayRing                    int
	expectLargeStore              int
}

func parse(args []string, stderr io.Writer) (*flags, error) {
	f := &flags{}
	fs := flag.NewFlagSet("conductor-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		io.WriteString(stderr, "Usage: conductor-bench [flags]\n       conductor-bench demo [flags] [-- conductor flags]   (the live demo: conductor-bench demo -h)\n\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&f.addr, "addr", "127.0.0.1:13333", "indexer HTTP address (host:port)")
	fs.StringVar(&f.spawn, "spawn", "", "start this conductor binary on a free loopback port instead of using -addr (its CPU is measured)")
	fs.StringVar(&f.spawnArgs, "spawn-args", "", "extra arguments for the spawned conductor (space-separated)")
	fs.IntVar(&f.serverPID, "server-pid", 0, "pid of a local server whose CPU time to read from /proc (with -addr)")
	fs.IntVar(&f.engines, "engines", 8, "simulated engine instances")
	fs.IntVar(&f.ranks, "ranks", 1, "dp ranks per engine (one publisher each)")
	fs.StringVar(&f.dialects, "dialects", "vllm-map,vllm-array", "engine dialects, cycled over the engines: vllm-map, vllm-array, sglang-map, sglang-array, standard")
	fs.StringVar(&f.model, "model", "bench", "model name of the context")
	fs.IntVar(&f.blockSize, "block-size", 16, "tokens per block (the trace's 512-token blocks are re-blocked to it)")
	fs.StringVar(&f.profile, "profile", "sha256_cbor", "hash scheme: sha256_cbor | sha256 | xxhash | xxhash_cbor (vLLM, seed -python-hash-seed), sglang (sha256_raw), xxh3 (RFC #1527)")
	fs.StringVar(&f.seedText, "python-hash-seed", "0", "vLLM PYTHONHASHSEED text")
	fs.StringVar(&f.engineHash, "engine-hash", "", "with -profile xxh3: the hash vLLM/SGLang engines publish (sha256_cbor, sha256, xxhash, xxhash_cbor, sglang); conductor re-hashes their token_ids, as for engines registered without a hash_profile")
	fs.IntVar(&f.device, "device", 16384, "device blocks per rank")
	fs.IntVar(&f.host, "host", 0, "host (cpu_local) blocks per rank; 0 = no host tier")
	fs.IntVar(&f.disk, "disk", 0, "disk blocks per rank; 0 = no disk tier")
	fs.IntVar(&f.store, "store", 0, "shared Mooncake store blocks (cpu_share); 0 = none")
	fs.IntVar(&f.clearEvery, "clear-every", 0, "each rank resets its cache (AllBlocksCleared) every N requests it serves; 0 = never")
	fs.StringVar(&f.policy, "policy", "cache-aware", "routing: cache-aware, round-robin, random")
	fs.StringVar(&f.trace, "trace", "", "Mooncake-format JSONL trace to replay (default: the built-in synthetic workload)")
	fs.IntVar(&f.traceLimit, "trace-limit", 0, "read at most this many trace records (0 = all)")
	fs.IntVar(&f.requests, "requests", 0, "requests to replay (default: the whole trace, or 2000 synthetic)")
	fs.DurationVar(&f.duration, "duration", 0, "stop replaying after this long (0 = no limit)")
	fs.Float64Var(&f.ingestRate, "ingest-rate", 0, "requests per second (0 = as fast as possible)")
	fs.StringVar(&f.surface, "surface", "msgpack", "query surface: "+strings.Join(sim.Surfaces, ", "))
	fs.StringVar(&f.queryAddr, "query-addr", "", "host:port of the query surface when it is not -addr (the rpc surface's port; -spawn sets it)")
	fs.IntVar(&f.concurrency, "concurrency", 4, "query connections")
	fs.Float64Var(&f.qps, "qps", 0, "open-loop query rate in total (0 = closed loop)")
	fs.DurationVar(&f.queryOnly, "query-only", 3*time.Second, "query-only phase on the quiescent index (0 = skip)")
	fs.BoolVar(&f.verify, "verify", false, "compare answers with the simulator's ground truth; any mismatch fails the run")
	fs.IntVar(&f.verifyEvery, "verify-every", 0, "also verify at a quiescent point every N requests")
	fs.IntVar(&f.verifyN, "verify-sample", 64, "prompts checked per quiescent point")
	fs.StringVar(&f.sweep, "sweep", "", "comma-separated open-loop q/s rates for the latency/throughput curve")
	fs.DurationVar(&f.sweepTime, "sweep-time", 2*time.Second, "duration of each sweep rate")
	fs.StringVar(&f.jsonOut, "json", "", "write the report as JSON to this file")
	fs.StringVar(&f.mdOut, "md", "", "write the report as Markdown to this file (always printed to stdout)")
	fs.StringVar(&f.svgOut, "svg", "", "write the sweep's latency/throughput plot (SVG) to this file")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress lines")
	fs.Uint64Var(&f.seed, "seed", 1, "random seed (routing, synthetic workload, query choice)")
	fs.IntVar(&f.replayRing, "replay-ring", 0, "messages each engine rank keeps for replay (vLLM's buffer_steps; 0: the harness's default, 256)")
	fs.IntVar(&f.expectLargeStore, "expect-large-store", 0, "fail unless at least this many store messages exceeded 1 MiB (a run meant to exercise large store flushes checks that it did)")
	fs.BoolVar(&f.engineReplay, "engine-replay", true, "engines publish with a replay endpoint (false: registered without one, so a lost message is a gap that cannot be replayed)")
	fs.Float64Var(&f.lossEngines, "loss-engines", 0, "probability that an engine message is lost (its sequence consumed, never sent; sentinels never)")
	fs.Float64Var(&f.lossStore, "loss-store", 0, "probability that a store master message is lost (its sequence consumed, never sent; sentinels never)")
	fs.Uint64Var(&f.faultSeed, "fault-seed", 1, "seed of the losses, the restart schedule and the ranks restarted (logged)")
	fs.IntVar(&f.restarts, "restarts", 0, "restart this many engine ranks at random points of the replay (emptied cache, publisher back on the same endpoints with sequence 0)")
	fs.IntVar(&f.crashAt, "crash-at", 0, "with -spawn: SIGKILL conductor after this many requests, restart it on the same ports and state directory, measure the accuracy at once, and continue")
	fs.DurationVar(&f.snapshotInterval, "snapshot-interval", 0, "with -spawn: conductor's --snapshot-interval (0: conductor's default, 5m; with -snapshot-at: 0, snapshots only at shutdown)")
	fs.IntVar(&f.snapshotAt, "snapshot-at", 0, "with -spawn and -crash-at: stop conductor gracefully after this many requests (it writes its snapshot) and start it again, so the crash restarts from the state of that moment (conductor then runs with --snapshot-interval 0: no other snapshot)")
	fs.BoolVar(&f.replica, "replica", false, "with -spawn: start a nats-server, a relay conductor (--nats-publish) the engines register with, and a query replica (--nats-consume); queries, quiescing and verification go to the replica")
	fs.StringVar(&f.natsServer, "nats-server", "", "nats-server binary for -replica (default: nats-server beside the -spawn binary, else on PATH)")
	fs.StringVar(&f.gapPolicy, "gap-policy", "", "with -spawn: conductor's --gap-policy (clear, keep, expire); clear on a conductor without that flag passes nothing (clear is its behaviour)")
	fs.DurationVar(&f.gapExpireAfter, "gap-expire-after", 0, "with -spawn and -gap-policy expire: conductor's --gap-expire-after")
	fs.Float64Var(&f.minExactAnswers, "min-exact-answers", -1, "with -verify: fail when fewer answers than this fraction have no difference (any threshold flag replaces \"any mismatch fails\")")
	fs.StringVar(&f.minExact, "min-exact", "", "with -verify: minimum fraction of exact (instance row, tier) pairs: one number for every tier, or tier=value,... (device, cpu_local, cpu_share, disk)")
	fs.StringVar(&f.maxOver, "max-over-tokens-mean", "", "with -verify: maximum mean over-reported tokens per (instance row, tier) pair, as -min-exact")
	fs.StringVar(&f.maxUnder, "max-under-tokens-mean", "", "with -verify: maximum mean under-reported tokens per (instance row, tier) pair, as -min-exact")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return f, f.check()
}

// check validates the fault and threshold flags and fills f.thresholds.
func (f *flags) check() error {
	var errs []error
	for _, p := range []struct {
		name string
		v    float64
	}{{"-loss-engines", f.lossEngines}, {"-loss-store", f.lossStore}} {
		if p.v < 0 || p.v >= 1 {
			errs = append(errs, fmt.Errorf("%s %v: want a probability in [0, 1)", p.name, p.v))
		}
	}
	if f.restarts < 0 || f.crashAt < 0 {
		errs = append(errs, errors.New("-restarts and -crash-at: want ≥ 0"))
	}
	if f.spawn == "" {
		for name, set := range map[string]bool{"-crash-at": f.crashAt > 0, "-snapshot-interval": f.snapshotInterval != 0, "-snapshot-at": f.snapshotAt > 0,
			"-replica": f.replica, "-gap-policy": f.gapPolicy != "", "-gap-expire-after": f.gapExpireAfter != 0} {
			if set {
				errs = append(errs, fmt.Errorf("%s needs -spawn", name))
			}
		}
	}
	if f.snapshotAt < 0 || (f.snapshotAt > 0 && (f.crashAt <= f.snapshotAt || f.snapshotInterval != 0)) {
		errs = append(errs, errors.New("-snapshot-at: want it before -crash-at, and no -snapshot-interval"))
	}
	if f.replayRing < 0 {
		errs = append(errs, fmt.Errorf("-replay-ring %d: want ≥ 0", f.replayRing))
	}
	if f.expectLargeStore > 0 && f.store <= 0 {
		errs = append(errs, errors.New("-expect-large-store needs a store (-store)"))
	}
	if f.gapExpireAfter != 0 && f.gapPolicy != "expire" {
		errs = append(errs, errors.New("-gap-expire-after needs -gap-policy expire"))
	}
	t := &f.thresholds
	if f.minExactAnswers >= 0 {
		t.MinExactAnswers = sim.Limit{Set: true, Value: f.minExactAnswers}
	}
	for _, p := range []struct {
		name, text string
		dst        *[4]sim.Limit
	}{{"-min-exact", f.minExact, &t.MinExact}, {"-max-over-tokens-mean", f.maxOver, &t.MaxOverMean},
		{"-max-under-tokens-mean", f.maxUnder, &t.MaxUnderMean}} {
		l, err := sim.ParseTierLimits(p.text)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.name, err))
		}
		*p.dst = l
	}
	if err := t.Validate(); err != nil {
		errs = append(errs, err)
	}
	if t.Any() && !f.verify {
		errs = append(errs, errors.New("threshold flags need -verify"))
	}
	return errors.Join(errs...)
}

func profileSpec(name, seed string) (hash.Spec, error) {
	switch name {
	case "sha256_cbor", "sha256", "xxhash", "xxhash_cbor":
		return hash.Spec{Strategy: "vllm_v1", Algorithm: name, PythonHashSeed: seed, IndexProjection: "low64_be"}, nil
	case "sglang":
		return hash.Spec{Strategy: "sglang", Algorithm: "sha256_raw", PythonHashSeed: "0", IndexProjection: "first64_be"}, nil
	case "xxh3":
		return hash.Spec{Strategy: "xxh3"}, nil
	}
	return hash.Spec{}, fmt.Errorf("-profile %q: want sha256_cbor, sha256, xxhash, xxhash_cbor, sglang or xxh3", name)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "demo" {
		return runDemo(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "gaps" {
		return runGaps(ctx, args[1:], stdout, stderr)
	}
	f, err := parse(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "conductor-bench:", err)
		return 2
	}
	_, code, _ := runBench(ctx, f, stdout, stderr)
	return code
}

// runBench runs the harness as f says and writes the report; it returns the
// report (nil when the run did not start), the exit status and the error
// that set it.
func runBench(ctx context.Context, f *flags, stdout, stderr io.Writer) (*sim.Report, int, error) {
	fail := func(rep *sim.Report, code int, err error) (*sim.Report, int, error) {
		fmt.Fprintln(stderr, "conductor-bench:", err)
		return rep, code, err
	}
	if f.surface == "dynamo" && f.profile != "xxh3" {
		return fail(nil, 2, fmt.Errorf("-surface dynamo needs -profile xxh3: Dynamo workers hash with the RFC #1527 standard"))
	}
	spec, err := profileSpec(f.profile, f.seedText)
	if err != nil {
		return fail(nil, 2, err)
	}
	var engineSpec hash.Spec
	if f.engineHash != "" {
		if engineSpec, err = profileSpec(f.engineHash, f.seedText); err != nil {
			return fail(nil, 2, fmt.Errorf("-engine-hash: %w", err))
		}
	}
	policy, err := sim.ParsePolicy(f.policy)
	if err != nil {
		return fail(nil, 2, err)
	}
	var dialects []sim.Dialect
	for _, d := range strings.Split(f.dialects, ",") {
		dd, err := sim.ParseDialect(strings.TrimSpace(d))
		if err != nil {
			return fail(nil, 2, err)
		}
		dialects = append(dialects, dd)
	}
	var rates []float64
	for _, r := range strings.Split(f.sweep, ",") {
		if r = strings.TrimSpace(r); r == "" {
			continue
		}
		v, err := strconv.ParseFloat(r, 64)
		if err != nil || v <= 0 {
			return fail(nil, 2, fmt.Errorf("-sweep: bad rate %q", r))
		}
		rates = append(rates, v)
	}

	var src sim.Source
	requests := f.requests
	if f.trace != "" {
		fh, err := os.Open(f.trace)
		if err != nil {
			return fail(nil, 1, err)
		}
		recs, err := sim.ReadTrace(fh, f.traceLimit)
		fh.Close()
		if err != nil {
			return fail(nil, 1, err)
		}
		src = &sim.TraceSource{Records: recs}
		if requests <= 0 || requests > len(recs) {
			requests = len(recs)
		}
	} else {
		src = sim.SyntheticSource{Synthetic: sim.NewSynthetic(sim.SyntheticOptions{Seed: f.seed})}
		if requests <= 0 && f.duration <= 0 {
			requests = 2000
		}
	}

	engines := make([]sim.EngineConfig, f.engines)
	for i := range engines {
		d := dialects[i%len(dialects)]
		id := fmt.Sprintf("%s-%02d", strings.SplitN(d.String(), "-", 2)[0], i)
		if f.surface == "dynamo" {
			id = strconv.Itoa(i + 1) // Dynamo instance ids are numbers
		}
		engines[i] = sim.EngineConfig{ID: id, Dialect: d,
			Ranks: f.ranks, Device: f.device, Host: f.host, Disk: f.disk, ClearEvery: f.clearEvery,
			NoReplay: !f.engineReplay, Loss: f.lossEngines}
	}
	g, err := sim.NewGroup(sim.GroupConfig{Model: f.model, BlockSize: f.blockSize, Profile: spec, Engines: engines,
		StoreBlocks: f.store, Policy: policy, Seed: f.seed, EngineProfile: engineSpec, StoreLoss: f.lossStore, FaultSeed: f.faultSeed, ReplayRing: f.replayRing})
	if err != nil {
		return fail(nil, 2, err)
	}
	defer g.Close()

	o := sim.RunOptions{Addr: f.addr, QueryAddr: f.queryAddr, Surface: f.surface, Groups: []*sim.Group{g}, Source: src, Requests: requests,
		Duration: f.duration, IngestRate: f.ingestRate, Concurrency: f.concurrency, QueryRate: f.qps,
		QueryOnly: f.queryOnly, Verify: f.verify, VerifyEvery: f.verifyEvery, VerifySample: f.verifyN,
		SweepRates: rates, SweepTime: f.sweepTime, ServerPID: f.serverPID, Seed: f.seed,
		Thresholds: f.thresholds, Restarts: f.restarts, FaultSeed: f.faultSeed, CrashAt: f.crashAt, SnapshotAt: f.snapshotAt}
	if f.spawn != "" {
		fl, err := startFleet(ctx, f, stderr)
		if err != nil {
			return fail(nil, 1, err)
		}
		defer fl.stop() // before g.Close: the servers stop before their publishers vanish
		fl.wire(&o)
	}
	if o.QueryOnly == 0 {
		o.QueryOnly = -1
	}
	if !f.quiet {
		o.Progress = stderr
	}
	fmt.Fprintf(stderr, "conductor-bench: %d engines (%s) × %d ranks into %s, %d requests, policy %s, surface %s, verify %v\n",
		f.engines, f.dialects, f.ranks, o.Addr, requests, policy, f.surface, f.verify)
	if f.lossEngines > 0 || f.lossStore > 0 || f.restarts > 0 || f.crashAt > 0 || !f.engineReplay {
		fmt.Fprintf(stderr, "conductor-bench: faults: seed %d, engine replay %v, loss engines %v store %v, %d rank restarts, snapshot after request %d, crash after request %d\n",
			f.faultSeed, f.engineReplay, f.lossEngines, f.lossStore, f.restarts, f.snapshotAt, f.crashAt)
	}
	rep, err := sim.Run(ctx, o)
	if rep != nil {
		if err := writeReport(rep, f, stdout); err != nil {
			return fail(rep, 1, err)
		}
	}
	if err != nil {
		return fail(rep, 1, err)
	}
	if over := g.Stats.StoreOverMiB; over < int64(f.expectLargeStore) {
		return fail(rep, 1, fmt.Errorf("%d store messages exceeded 1 MiB, -expect-large-store wants %d: the run does not exercise large flushes",
			over, f.expectLargeStore))
	}
	return rep, 0, nil
}

func writeReport(rep *sim.Report, f *flags, stdout io.Writer) error {
	if err := rep.WriteMarkdown(stdout); err != nil {
		return err
	}
	if f.mdOut != "" {
		fh, err := os.Create(f.mdOut)
		if err != nil {
			return err
		}
		err = rep.WriteMarkdown(fh)
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	if f.jsonOut != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(f.jsonOut, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if f.svgOut != "" && len(rep.Sweep) > 0 {
		fh, err := os.Create(f.svgOut)
		if err != nil {
			return err
		}
		title := fmt.Sprintf("conductor /query (%s), %d engines, %s, %d CPUs", rep.Surface, len(rep.Groups[0].Engines), rep.Date[:10], rep.Machine.NumCPU)
		err = rep.PlotSVG(fh, title)
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		return err
	}
	return nil
}
