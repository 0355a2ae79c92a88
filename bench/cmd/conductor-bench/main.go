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
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
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
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return f, nil
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
	f, err := parse(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "conductor-bench:", err)
		return 2
	}
	fail := func(code int, err error) int {
		fmt.Fprintln(stderr, "conductor-bench:", err)
		return code
	}
	if f.surface == "dynamo" && f.profile != "xxh3" {
		return fail(2, fmt.Errorf("-surface dynamo needs -profile xxh3: Dynamo workers hash with the RFC #1527 standard"))
	}
	spec, err := profileSpec(f.profile, f.seedText)
	if err != nil {
		return fail(2, err)
	}
	var engineSpec hash.Spec
	if f.engineHash != "" {
		if engineSpec, err = profileSpec(f.engineHash, f.seedText); err != nil {
			return fail(2, fmt.Errorf("-engine-hash: %w", err))
		}
	}
	policy, err := sim.ParsePolicy(f.policy)
	if err != nil {
		return fail(2, err)
	}
	var dialects []sim.Dialect
	for _, d := range strings.Split(f.dialects, ",") {
		dd, err := sim.ParseDialect(strings.TrimSpace(d))
		if err != nil {
			return fail(2, err)
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
			return fail(2, fmt.Errorf("-sweep: bad rate %q", r))
		}
		rates = append(rates, v)
	}

	var src sim.Source
	requests := f.requests
	if f.trace != "" {
		fh, err := os.Open(f.trace)
		if err != nil {
			return fail(1, err)
		}
		recs, err := sim.ReadTrace(fh, f.traceLimit)
		fh.Close()
		if err != nil {
			return fail(1, err)
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
			Ranks: f.ranks, Device: f.device, Host: f.host, Disk: f.disk, ClearEvery: f.clearEvery}
	}
	g, err := sim.NewGroup(sim.GroupConfig{Model: f.model, BlockSize: f.blockSize, Profile: spec, Engines: engines,
		StoreBlocks: f.store, Policy: policy, Seed: f.seed, EngineProfile: engineSpec})
	if err != nil {
		return fail(2, err)
	}
	defer g.Close()

	addr, pid, qaddr := f.addr, f.serverPID, f.queryAddr
	if f.spawn != "" {
		srv, err := spawn(ctx, f.spawn, strings.Fields(f.spawnArgs), f.surface, stderr)
		if err != nil {
			return fail(1, err)
		}
		defer srv.stop() // before g.Close: the server stops before its publishers vanish
		addr, pid = srv.addr, srv.cmd.Process.Pid
		if srv.queryAddr != "" {
			qaddr = srv.queryAddr
		}
	}

	o := sim.RunOptions{Addr: addr, QueryAddr: qaddr, Surface: f.surface, Groups: []*sim.Group{g}, Source: src, Requests: requests,
		Duration: f.duration, IngestRate: f.ingestRate, Concurrency: f.concurrency, QueryRate: f.qps,
		QueryOnly: f.queryOnly, Verify: f.verify, VerifyEvery: f.verifyEvery, VerifySample: f.verifyN,
		SweepRates: rates, SweepTime: f.sweepTime, ServerPID: pid, Seed: f.seed}
	if o.QueryOnly == 0 {
		o.QueryOnly = -1
	}
	if !f.quiet {
		o.Progress = stderr
	}
	fmt.Fprintf(stderr, "conductor-bench: %d engines (%s) × %d ranks into %s, %d requests, policy %s, surface %s, verify %v\n",
		f.engines, f.dialects, f.ranks, addr, requests, policy, f.surface, f.verify)
	rep, runErr := sim.Run(ctx, o)
	if rep != nil {
		if err := writeReport(rep, f, stdout); err != nil {
			return fail(1, err)
		}
	}
	if runErr != nil {
		return fail(1, runErr)
	}
	return 0
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

// server is a spawned conductor.
type server struct {
	cmd       *exec.Cmd
	addr      string
	queryAddr string // the RPC or Dynamo surface, when spawned with one
	done      chan struct{}
	dir       string // removed when the server stops ("" for none)
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// spawn starts bin on a free loopback port with an empty configuration file
// and durable state in a directory of its own, and waits until /health
// answers.
func spawn(ctx context.Context, bin string, extra []string, surface string, stderr io.Writer) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	rpcPort, dynPort := 0, 0
	switch surface {
	case "rpc":
		if rpcPort, err = freePort(); err != nil {
			return nil, err
		}
	case "dynamo":
		if dynPort, err = freePort(); err != nil {
			return nil, err
		}
		extra = append([]string{"--dynamo-port", strconv.Itoa(dynPort)}, extra...)
	}
	dir, err := os.MkdirTemp("", "conductor-bench")
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "conductor.json")
	if err := os.WriteFile(cfg, []byte("{}\n"), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	// RPC (or Dynamo) on a free port of its own when that surface is queried,
	// RPC off otherwise.
	args := append([]string{"--config", cfg, "--listen", "127.0.0.1", "--http-port", strconv.Itoa(port), "--log-level", "WARN",
		"--rpc-port", strconv.Itoa(rpcPort), "--state-dir", filepath.Join(dir, "state")}, extra...)
	s := &server{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir}
	if p := max(rpcPort, dynPort); p != 0 {
		s.queryAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	if err := s.start(ctx, bin, args, stderr, stderr); err != nil {
		return nil, err
	}
	return s, nil
}

// start runs bin with args, its output to stdout and stderr, and waits until
// s.addr answers /health. The process has a process group of its own, so a
// terminal's Ctrl-C reaches only this harness, which then stops it in order.
func (s *server) start(ctx context.Context, bin string, args []string, stdout, stderr io.Writer) error {
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	ownProcessGroup(cmd)
	if err := cmd.Start(); err != nil {
		s.removeDir()
		return err
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get("http://" + s.addr + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		select {
		case <-s.done:
			s.removeDir()
			return fmt.Errorf("%s exited before serving (%v)", bin, cmd.ProcessState)
		case <-ctx.Done():
			s.stop()
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return fmt.Errorf("%s did not answer /health on %s within 15s", bin, s.addr)
		}
	}
}

// stop sends SIGTERM (conductor drains and exits) and kills after 10s; it
// returns the process's exit code.
func (s *server) stop() int {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.removeDir()
	return s.cmd.ProcessState.ExitCode()
}

func (s *server) removeDir() {
	if s.dir != "" {
		os.RemoveAll(s.dir)
	}
}
