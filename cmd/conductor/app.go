package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/seed-c7a81618/conductor/codec"
	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
	"github.com/seed-c7a81618/conductor/httpd/dynamo"
	"github.com/seed-c7a81618/conductor/httpd/mooncake"
	"github.com/seed-c7a81618/conductor/httpd/rpc"
	"github.com/seed-c7a81618/conductor/httpd/server"
	"github.com/seed-c7a81618/conductor/statedir"
	"github.com/seed-c7a81618/conductor/wire/ingest"
)

// version is set at build time with -ldflags "-X main.version=…"; otherwise
// the module version and VCS revision from the build info are used.
var version = ""

func buildVersion() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	v := bi.Main.Version
	if v == "" || v == "(devel)" {
		v = "dev"
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += "+" + s.Value[:12]
		}
	}
	return v
}

// settings are the command line.
type settings struct {
	configPath      string
	httpPort        int // -1: from the file
	rpcPort         int // -1: from the file
	listen          string
	insecure        bool
	logLevel        string
	logFormat       string
	showVersion     bool
	maxBodyBytes    int
	maxQueryTokens  int
	maxRegistration int
	// perClient: --max-registrations-per-client (0: an equal share; -1: none)
	perClient       int
	maxConns        int
	maxInflightBody int64
	rxQueueBytes    int
	rxQueuedBytes   int64
	maxMessageBytes int64
	gapPolicy       string
	gapExpireAfter  time.Duration
	maxBlocksPerReg int
	contextSizeHint int
	shutdownTimeout time.Duration

	stateDir        string
	snapInterval    time.Duration
	adminToken      string
	adminTokenFile  string
	queryToken      string
	queryTokenFile  string
	clientTokens    string
	protectMetrics  bool
	allowEndpoints  string
	allowSource     bool // --allow-source-endpoints
	allowSourceSet  bool // given on the command line (it then overrides the file)
	sha256Backend   string
	hashMemoBytes   int
	hashPromptBytes int
	pprofAddr       string
	dynamo          dynamoSettings // dynamo.go
	memoryLimit     string         // gcpolicy.go
	gogc            string
	gcHeapFloor     string
	gc              gcPolicy
	queryPriority   bool
	ingestNice      int          // schedpolicy.go
	nats            natsSettings // nats.go
	kube            kubeSettings // kube.go

	// noStateHome: --state-dir was left to its default, which is off because
	// neither XDG_STATE_HOME nor HOME is set (warned at start).
	noStateHome bool
}

// parseFlags parses the command line; --help writes the grouped flag list to
// help and returns flag.ErrHelp, and any other parse error is one line.
func parseFlags(args []string, help io.Writer) (settings, error) {
	var s settings
	fs := defineFlags(&s)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			writeHelp(help, fs)
			return s, err
		}
		return s, flagError(err, fs)
	}
	return s, s.check(fs)
}

// defineFlags defines every flag on a new set, bound to s.
func defineFlags(s *settings) *flag.FlagSet {
	fs := flag.NewFlagSet("conductor", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned as one line, help is writeHelp
	fs.Usage = func() {}
	fs.StringVar(&s.configPath, "config", "", "configuration file (default $CONDUCTOR_CONFIG_PATH, else ~/.mooncake/conductor_config.json)")
	fs.IntVar(&s.httpPort, "http-port", -1, "HTTP port of the Mooncake API (default: the config file's http_server_port, else 13333; 0 = ephemeral)")
	fs.IntVar(&s.rpcPort, "rpc-port", -1, "Python client RPC port (default: the config file's rpc_server_port, else 50052; 0 = off)")
	fs.StringVar(&s.listen, "listen", "127.0.0.1", "bind address of every listener (loopback by default; 0.0.0.0 to serve other hosts, which needs an admin token or --insecure)")
	fs.BoolVar(&s.insecure, "insecure", false, "serve without an admin token on a --listen address that is not loopback (every endpoint open to anyone who reaches the port)")
	fs.StringVar(&s.logLevel, "log-level", "", "DEBUG, INFO, WARN or ERROR (default $CONDUCTOR_LOG_LEVEL, else INFO)")
	fs.StringVar(&s.logFormat, "log-format", "text", "log format: text or json")
	fs.BoolVar(&s.showVersion, "version", false, "print the version and exit")
	fs.IntVar(&s.maxBodyBytes, "max-body-bytes", 0, "largest request body in bytes (default 16 MiB; larger → 413)")
	fs.Int64Var(&s.maxInflightBody, "max-inflight-body-bytes", server.DefaultMaxInflightBodyBytes,
		"request-body buffer bytes all connections may hold at once, charged as bytes arrive (bodies ≤ 64 KiB keep ⅛ of it; a larger body waits up to 2 s, then 503)")
	fs.IntVar(&s.maxConns, "max-connections", server.DefaultMaxConns, "most open HTTP connections over every surface (at the cap the heaviest client's longest-idle connection is closed for room; a few kept for /health and /metrics; else 503 and close)")
	fs.IntVar(&s.maxQueryTokens, "max-query-tokens", 0, "most token_ids / seq_hashes per query (default 1048576)")
	fs.IntVar(&s.maxRegistration, "max-registrations", defaultMaxRegistrations,
		fmt.Sprintf("most registrations, at most %d (past it → 400 limit_exceeded)", ingest.MaxListenersLimit))
	fs.IntVar(&s.perClient, "max-registrations-per-client", 0,
		"most registrations one client identity (--client-tokens-file) holds at once; past it → 400 limit_exceeded (0: an equal share, --max-registrations ÷ the number of client identities; -1: no bound of its own)")
	fs.IntVar(&s.rxQueueBytes, "receive-queue-bytes", ingest.DefaultReceiveQueueBytes,
		"bytes each queue of one registration may hold: its receive queue during a replay (past it: dropped, counted, healed as a gap) and libzmq's SUB and replay queues, sized at this ÷ the stream's largest message so far (at least 1 MiB) messages")
	fs.Int64Var(&s.rxQueuedBytes, "max-queued-bytes", ingest.DefaultMaxQueuedBytes, "bytes all receive queues together may hold")
	fs.Int64Var(&s.maxMessageBytes, "max-message-bytes", ingest.DefaultMaxMessageBytes,
		"largest ZMQ message applied: a larger one is dropped whole, counted and logged, and the messages after it apply as usual (a single frame above 4× this ends the connection in libzmq)")
	fs.IntVar(&s.contextSizeHint, "context-size-hint", 0, "presize each context's block map for this many blocks (17–34 B of table per hinted block in each context that stores any; no table doublings up to it; default 0 = grow on demand)")
	fs.DurationVar(&s.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long shutdown waits for in-flight requests")
	fs.StringVar(&s.gapPolicy, "gap-policy", core.DefaultGapPolicy.String(),
		"what a registration keeps of its blocks when events are lost for good (a gap without a replay endpoint, or past the engine's ring): keep, clear or expire; a registration's gap_policy wins (docs/operations.md)")
	fs.DurationVar(&s.gapExpireAfter, "gap-expire-after", core.DefaultGapExpireAfter,
		"with --gap-policy expire: how long the blocks held at a gap stay unless announced again")
	fs.IntVar(&s.maxBlocksPerReg, "max-blocks-per-registration", core.DefaultMaxBlocksPerRegistration,
		"most (owner, block) pairs one registration holds; past it its oldest are evicted, counted and logged; a registration's max_blocks wins (-1: no bound)")
	fs.DurationVar(&s.snapInterval, "snapshot-interval", statedir.DefaultSnapshotInterval,
		"with --state-dir: write an index snapshot this often (spaced out to 9× the last write's duration when that is longer) and at shutdown, restored at start; a SIGKILL loses what streams without a replay ring announced since (0: only at shutdown; negative: never written, one already there still restored)")
	fs.StringVar(&s.stateDir, "state-dir", defaultStateDir(),
		`directory for durable registrations ("" = off; default $XDG_STATE_HOME/conductor, else ~/.local/state/conductor)`)
	fs.StringVar(&s.adminToken, "admin-token", "", "bearer token for mutating and introspection endpoints (visible in process lists: prefer --admin-token-file or $CONDUCTOR_ADMIN_TOKEN)")
	fs.StringVar(&s.adminTokenFile, "admin-token-file", "", "file holding the admin token")
	fs.StringVar(&s.queryToken, "query-token", "", "bearer token required on /query (default none: queries open; prefer --query-token-file or $CONDUCTOR_QUERY_TOKEN)")
	fs.StringVar(&s.queryTokenFile, "query-token-file", "", "file holding the query token")
	fs.StringVar(&s.clientTokens, "client-tokens-file", "", `file of "identity token" lines: identities that may register and unregister their own registrations`)
	fs.StringVar(&s.sha256Backend, "sha256-backend", "", "SHA-256 implementation: auto, stdlib, simd or shani (default $CONDUCTOR_SHA256_BACKEND, else auto: picked from CPU features)")
	fs.BoolVar(&s.protectMetrics, "protect-metrics", false, "require the admin token on /metrics too")
	fs.StringVar(&s.allowEndpoints, "allow-endpoints", server.DefaultEndpointRules,
		"comma-separated endpoint patterns a registration may name (tcp://HOST|CIDR|*.suffix:PORT|N-M|*, ipc://GLOB, inproc://GLOB)")
	fs.BoolVar(&s.allowSource, "allow-source-endpoints", false,
		"let registrations use libzmq's source-address form tcp://SOURCE;HOST:PORT, which makes conductor bind SOURCE (default: the config file's allow_source_endpoints, else off)")
	fs.IntVar(&s.hashMemoBytes, "hash-memo-bytes", 0,
		"memory for the block-digest memo of vllm_v1/sglang queries, e.g. 67108864 (64 MiB, about 1M digests); it pays only where the same prompts come back soon (docs/performance.md) (default 0 = off)")
	fs.IntVar(&s.hashPromptBytes, "hash-memo-prompt-bytes", hash.DefaultMemoPromptBytes,
		"memory for the memo's recent prompts: repeated prompts are served by a token compare (0 = off; needs the memo)")
	fs.StringVar(&s.pprofAddr, "pprof-addr", "", "serve net/http/pprof on this loopback host:port (default off)")
	addDynamoFlags(fs, &s.dynamo)
	addNATSFlags(fs, &s.nats)
	addKubeFlags(fs, &s.kube)
	fs.StringVar(&s.memoryLimit, "memory-limit", "", "soft memory limit for the Go runtime, e.g. 8GiB (default $GOMEMLIMIT, else none; 0 = none; docs/performance.md)")
	fs.BoolVar(&s.queryPriority, "query-priority", true, "ingest steps aside (up to 0.2 ms per 256 block updates) while queries are in flight: lower query tail latency, slower ingest under query load")
	addSchedFlags(fs, &s.ingestNice)
	fs.StringVar(&s.gogc, "gogc", "", "GC target percentage, or off (needs --memory-limit or $GOMEMLIMIT) (default $GOGC, else 100)")
	fs.StringVar(&s.gcHeapFloor, "gc-heap-floor", DefaultGCHeapFloor, "heap size the GC counts as live from the start, so that no cycle runs until the heap is (1 + GOGC/100) times it; adds no resident memory but counts toward --memory-limit (0 = none, at most 4GiB; docs/performance.md)")
	return fs
}

// check validates the parsed flags and derives what depends on several.
func (s *settings) check(fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	s.allowSourceSet = set["allow-source-endpoints"]
	s.noStateHome = !set["state-dir"] && s.stateDir == "" && !set["port"] // --port turns it off by design
	if err := s.dynamoMode(set); err != nil {
		return err
	}
	if s.httpPort > 65535 || s.httpPort < -1 {
		return fmt.Errorf("--http-port=%d: want 0..65535", s.httpPort)
	}
	if s.maxRegistration > ingest.MaxListenersLimit {
		return fmt.Errorf("--max-registrations=%d: at most %d", s.maxRegistration, ingest.MaxListenersLimit)
	}
	if s.ingestNice > 0 && s.maxRegistration > ingest.MaxNiceListeners {
		return fmt.Errorf("--max-registrations=%d: at most %d with --ingest-nice (each registration then runs on a thread of its own)",
			s.maxRegistration, ingest.MaxNiceListeners)
	}
	if s.perClient < -1 {
		return fmt.Errorf("--max-registrations-per-client=%d: want > 0, 0 (an equal share) or -1 (no bound)", s.perClient)
	}
	if s.rxQueueBytes <= 0 || s.rxQueuedBytes <= 0 || s.maxMessageBytes <= 0 {
		return fmt.Errorf("--receive-queue-bytes, --max-queued-bytes and --max-message-bytes must be > 0")
	}
	if s.maxConns <= 0 || s.maxInflightBody <= 0 || s.maxRegistration <= 0 || s.maxBodyBytes < 0 || s.maxQueryTokens < 0 {
		return fmt.Errorf("--max-connections, --max-inflight-body-bytes and --max-registrations must be > 0, " +
			"--max-body-bytes and --max-query-tokens >= 0 (0 = default)")
	}
	if s.rpcPort > 65535 || s.rpcPort < -1 {
		return fmt.Errorf("--rpc-port=%d: want 0..65535", s.rpcPort)
	}
	if s.hashMemoBytes < 0 {
		return fmt.Errorf("--hash-memo-bytes=%d: want >= 0 (0 = off)", s.hashMemoBytes)
	}
	if p, err := core.ParseGapPolicy(s.gapPolicy); err != nil || p == core.GapDefault {
		return fmt.Errorf("--gap-policy=%q: want one of %s", s.gapPolicy, strings.Join(core.GapPolicyNames(), ", "))
	}
	if s.gapExpireAfter <= 0 {
		return fmt.Errorf("--gap-expire-after=%v: want > 0", s.gapExpireAfter)
	}
	if s.maxBlocksPerReg == 0 || s.maxBlocksPerReg < -1 {
		return fmt.Errorf("--max-blocks-per-registration=%d: want > 0, or -1 for no bound", s.maxBlocksPerReg)
	}
	if s.hashPromptBytes < 0 {
		return fmt.Errorf("--hash-memo-prompt-bytes=%d: want >= 0 (0 = off)", s.hashPromptBytes)
	}
	if set["hash-memo-prompt-bytes"] && s.hashPromptBytes > 0 && s.hashMemoBytes == 0 {
		return fmt.Errorf("--hash-memo-prompt-bytes=%d needs the memo: --hash-memo-bytes > 0 (e.g. 67108864; the memo is off by default)", s.hashPromptBytes)
	}
	if s.logFormat != "text" && s.logFormat != "json" {
		return fmt.Errorf("--log-format=%q: want text or json", s.logFormat)
	}
	if err := s.dynamo.validate(); err != nil {
		return err
	}
	if err := validateIngestNice(s.ingestNice); err != nil {
		return err
	}
	if err := s.nats.validate(); err != nil {
		return err
	}
	if err := s.kube.validate(set); err != nil {
		return err
	}
	if s.kube.mode != "" && s.nats.consume {
		return errors.New("--discover-kubernetes and --nats-consume: a replica's registrations come from the stream")
	}
	gc, err := resolveGCPolicy(s.memoryLimit, s.gogc, s.gcHeapFloor)
	if err != nil {
		return err
	}
	s.gc = gc
	return nil
}

// defaultStateDir is --state-dir's default: $XDG_STATE_HOME/conductor, else
// $HOME/.local/state/conductor, else "" (off) when neither is set.
func defaultStateDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "conductor")
	}
	if h := os.Getenv("HOME"); h != "" {
		return filepath.Join(h, ".local", "state", "conductor")
	}
	return ""
}

// secret resolves a token from its flag, then its file, then its environment
// variable; a file's surrounding whitespace is trimmed, and a file with
// nothing else is an error.
func secret(flagVal, file, envName string, env func(string) (string, bool)) (string, error) {
	if flagVal != "" {
		return flagVal, nil
	}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", err
		}
		v := strings.TrimSpace(string(b))
		if v == "" {
			// An empty token is no token: a file that lost its contents (an
			// empty Secret key) must not open what it was meant to guard.
			return "", fmt.Errorf("%s is empty: it must hold the token", file)
		}
		return v, nil
	}
	v, _ := env(envName)
	return v, nil
}

// clientQuota is the Gate's ClientQuota for --max-registrations-per-client
// flag, given the registry's bound and the number of client identities:
// flag when > 0; 0 (the default) shares the registry equally among them
// (at least 1 each), so no client token can take what another's share
// needs; -1, or no client identities, no bound of its own.
func clientQuota(flag, registrations, clients int) int {
	switch {
	case flag > 0:
		return flag
	case flag < 0 || clients == 0:
		return 0
	}
	return max(registrations/clients, 1)
}

// defaultMaxRegistrations is --max-registrations' default.
const defaultMaxRegistrations = 4096

// parseLevel maps DEBUG | INFO | WARN (WARNING) | ERROR, in any case.
func parseLevel(s string) (slog.Level, bool) {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "DEBUG":
		return slog.LevelDebug, true
	case "INFO", "":
		return slog.LevelInfo, true
	case "WARN", "WARNING":
		return slog.LevelWarn, true
	case "ERROR":
		return slog.LevelError, true
	}
	return slog.LevelInfo, false
}

// configPath resolves the configuration file: flag, then
// CONDUCTOR_CONFIG_PATH, then $HOME/.mooncake/conductor_config.json (literally
// ~/.mooncake/… when HOME is unset or empty). emptyEnv reports a
// CONDUCTOR_CONFIG_PATH that is set but empty (treated as unset, with a warning).
func configPath(flagPath string, env func(string) (string, bool)) (path string, emptyEnv bool) {
	p, set := env("CONDUCTOR_CONFIG_PATH")
	emptyEnv = set && p == "" && flagPath == ""
	switch {
	case flagPath != "":
		return flagPath, false
	case p != "":
		return p, false
	}
	home, _ := env("HOME")
	if home == "" {
		return "~/.mooncake/conductor_config.json", emptyEnv
	}
	return filepath.Join(home, ".mooncake", "conductor_config.json"), emptyEnv
}

// app is one running conductor.
type app struct {
	log             *slog.Logger
	ix              *core.Index
	ing             *ingest.Ingester
	httpCore        *server.Core // what every HTTP surface shares
	srv             *mooncake.Server
	ln              net.Listener
	gate            *server.Gate
	state           *statedir.Store     // nil: no state directory
	snap            *statedir.Snapshots // nil: no snapshots
	rpc             *rpc.Server         // nil when the RPC port is 0
	rpcLn           net.Listener
	static          []staticEntry
	shutdownTimeout time.Duration
	pprof           *http.Server // nil unless --pprof-addr
	dp              *dynamoPart  // dynamo.go
	np              *natsPart    // nats.go
	kp              *kubePart    // kube.go; nil when off
}

// run is the whole process: it returns the exit status. It serves until ctx
// is cancelled, then shuts down gracefully; `conductor probe` runs the probe
// instead, and `conductor healthcheck` the readiness check.
func run(ctx context.Context, args []string, env func(string) (string, bool), stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "probe" {
		return runProbe(ctx, args[1:], stdout, stderr) // probecmd.go
	}
	if len(args) > 0 && args[0] == "healthcheck" {
		return runHealthcheck(ctx, args[1:], stdout, stderr) // healthcheck.go
	}
	a, code := newApp(args, env, stdout, stderr)
	if a == nil {
		return code
	}
	return a.serve(ctx)
}

// newApp parses flags and configuration, builds the index, ingester and HTTP
// server, and binds the listeners. A nil app comes with the exit status.
func newApp(args []string, env func(string) (string, bool), stdout, stderr io.Writer) (*app, int) {
	s, err := parseFlags(args, stdout)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, 0
		}
		fmt.Fprintln(stderr, "conductor:", err)
		return nil, 2
	}
	if s.showVersion {
		fmt.Fprintln(stdout, "conductor", buildVersion())
		return nil, 0
	}
	log := newLogger(&s, env, stderr)
	s.gc.apply(log)
	applySchedPolicy(s.ingestNice, env, log)
	b := &builder{s: &s, env: env, log: log}
	a, code := b.build()
	if a == nil {
		b.unwind()
	}
	return a, code
}

// newLogger is the process's logger: --log-format, and the level from
// --log-level, else $CONDUCTOR_LOG_LEVEL (an invalid one is a warning and
// INFO).
func newLogger(s *settings, env func(string) (string, bool), stderr io.Writer) *slog.Logger {
	levelText, levelSrc := s.logLevel, "--log-level"
	if levelText == "" {
		levelText, _ = env("CONDUCTOR_LOG_LEVEL")
		levelSrc = "CONDUCTOR_LOG_LEVEL"
	}
	level, levelOK := parseLevel(levelText)
	hopts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(stderr, hopts)
	if s.logFormat == "json" {
		h = slog.NewJSONHandler(stderr, hopts)
	}
	log := slog.New(h)
	if !levelOK {
		log.Warn("invalid log level, using INFO", "source", levelSrc, "value", levelText)
	}
	return log
}

// builder assembles an app step by step; what a step opened is closed by
// unwind, last first, when a later step fails.
type builder struct {
	s       *settings
	env     func(string) (string, bool)
	log     *slog.Logger
	closers []func()
}

func (b *builder) onFailure(close func()) { b.closers = append(b.closers, close) }

func (b *builder) unwind() {
	for i := len(b.closers) - 1; i >= 0; i-- {
		b.closers[i]()
	}
}

// build runs the steps; a nil app comes with the exit status.
func (b *builder) build() (*app, int) {
	s, log := b.s, b.log
	cfg, path, code := b.config()
	if code != 0 {
		return nil, code
	}
	if code := b.sha256Backend(); code != 0 {
		return nil, code
	}
	fds := b.fdBudget()
	memo := hash.NewMemoWithPrompts(s.hashMemoBytes, s.hashPromptBytes)
	log.Info("hash memo", "bytes", memo.Stats().Bytes, "digests", memo.Stats().Slots, "prompt_bytes", memo.Stats().PromptLimit)
	np := &natsPart{log: log}
	var err error
	if np.relay, err = newNATSRelay(&s.nats, log); err != nil {
		log.Error("invalid NATS options", "err", err)
		return nil, 2
	}
	if s.nats.consume {
		// A replica's registrations come from the stream.
		s.stateDir, cfg.Static, s.dynamo.workers = "", nil, ""
	}
	gapPolicy, _ := core.ParseGapPolicy(s.gapPolicy) // checked by parseFlags
	ixOpts := core.Options{Observer: observerOf(np.relay), MaxRegistrations: fds.registrations, ContextSizeHint: s.contextSizeHint, Logger: log, QueryPriority: s.queryPriority,
		GapPolicy: gapPolicy, GapExpireAfter: s.gapExpireAfter, MaxBlocksPerRegistration: s.maxBlocksPerReg,
		OperatorOwners: []string{server.AdminPrincipal.Name, configOwner},
		ApplyNoYield:   s.ingestNice > 0,
		EngineMedia:    cfg.EngineMedia, PoolMedia: cfg.PoolMedia, HashMemo: memo}
	if err := ixOpts.Validate(); err != nil {
		log.Error("invalid index options", "err", err)
		return nil, 2
	}
	ix := core.New(ixOpts)
	if err := np.attach(&s.nats, ix); err != nil {
		log.Error("invalid NATS options", "err", err)
		return nil, 2
	}
	// One listener per registration: the Ingester's limit follows the index's
	// (ingest.MaxListenersLimit caps both; above it NewIngester refuses to start).
	ing, err := ingest.NewIngester(ix, ingest.IngestOptions{Logger: log, MaxListeners: fds.registrations,
		ReceiveQueueBytes: s.rxQueueBytes, MaxQueuedBytes: s.rxQueuedBytes, MaxMessageBytes: s.maxMessageBytes,
		ListenerNice: s.ingestNice})
	if err != nil {
		log.Error("cannot start the ingester", "err", err)
		return nil, 1
	}
	b.onFailure(ing.Close)
	access, policy, code := b.access()
	if code != 0 {
		return nil, code
	}
	policy.AllowSourceAddresses(s.allowSource || (!s.allowSourceSet && cfg.AllowSourceEndpoints))
	var registrar server.Registrar = ing
	if s.nats.consume {
		registrar = replicaRegistrar{}
	}
	gate := server.NewGate(registrar, ix, policy)
	gate.Logger = log
	gate.ClientQuota = clientQuota(s.perClient, fds.registrations, access.Clients())
	var state *statedir.Store
	if s.stateDir != "" {
		if state, err = statedir.Open(s.stateDir); err != nil {
			log.Error("cannot use the state directory", "err", err)
			return nil, 1
		}
		b.onFailure(state.Close) // its lock
	}
	kp, err := newKubePart(&s.kube, gate, log)
	if err != nil {
		log.Error("cannot start kubernetes discovery", "err", err)
		return nil, 1
	}
	var a *app // Ready reads a.dp once serving
	var snap *statedir.Snapshots
	if state != nil {
		snap = statedir.NewSnapshots(s.stateDir, s.snapInterval, ix, log)
	}
	lim := server.NewLimiter(fds.conns, s.maxInflightBody, log)
	hc, err := server.New(ix, registrar, server.Options{
		MaxBodyBytes:   s.maxBodyBytes,
		MaxQueryTokens: s.maxQueryTokens,
		Version:        buildVersion(),
		Logger:         log,
		Limiter:        lim,
		Access:         access,
		Gate:           gate,
		Ready:          func() error { return errors.Join(np.ready(), kp.ready(), a.dp.ready()) },
		Connections:    func() map[core.ServiceKey]server.Connection { return connectionsOf(ing) },
		ExtraMetrics:   append(append([]*metrics.Set{ing.Metrics(), listenerMetrics(ing), lim.Metrics(), memoMetrics(memo), snap.Metrics()}, np.metrics()...), kp.metrics()...),
	})
	if err != nil {
		log.Error("invalid HTTP options", "err", err)
		return nil, 2
	}
	a = &app{log: log, ix: ix, ing: ing, httpCore: hc, srv: mooncake.New(hc), gate: gate, state: state, static: cfg.Static,
		shutdownTimeout: s.shutdownTimeout, np: np, kp: kp, snap: snap}
	if code := b.listen(a, policy); code != 0 {
		return nil, code
	}
	np.dyn = a.dp.dyn
	log.Info("conductor starting", "version", buildVersion(), "config", path, "listen", s.listen,
		"admin_token", !access.Open(), "query_token", access != nil && s.queryToken != "",
		"allow_endpoints", policy.String(), "state_dir", s.stateDir)
	if s.noStateHome && !s.nats.consume {
		log.Warn("no durable state: --state-dir defaults to $XDG_STATE_HOME/conductor or ~/.local/state/conductor, and neither XDG_STATE_HOME nor HOME is set; registrations will not survive a restart: set --state-dir (or --state-dir \"\" to say so)")
	}
	if !access.Open() {
		log.Info("bearer tokens required on mutating and introspection endpoints",
			"client_identities", access.Clients(), "client_quota", a.gate.ClientQuota)
	} else if !loopbackHost(s.listen) {
		log.Warn("--insecure: listening beyond loopback with no admin token; anyone who reaches the port can register, unregister and read the registry",
			"listen", s.listen)
	}
	return a, 0
}

// config loads the configuration file and logs what it holds; the HTTP and
// RPC ports are the file's unless the flags give them. A file --config names
// must be readable; one $CONDUCTOR_CONFIG_PATH names that is not is a
// warning (the Mooncake conductor's behaviour), and the default path's
// absence a line at INFO.
func (b *builder) config() (cfg fileConfig, path string, code int) {
	s, log := b.s, b.log
	path, emptyEnv := configPath(s.configPath, b.env)
	if emptyEnv {
		log.Warn("CONDUCTOR_CONFIG_PATH is set but empty; using the default path", "path", path)
	}
	cfg, readErr, err := loadConfig(path)
	if err != nil {
		log.Error("cannot use configuration file", "path", path, "err", err)
		return cfg, path, 1
	}
	_, envSet := b.env("CONDUCTOR_CONFIG_PATH")
	switch {
	case readErr != nil && s.configPath != "":
		log.Error("cannot use configuration file: --config names a file that cannot be read", "path", path, "err", readErr)
		return cfg, path, 1
	case readErr != nil && errors.Is(readErr, fs.ErrNotExist) && !(envSet && !emptyEnv):
		log.Info("no configuration file, starting with no static services", "path", path)
	case readErr != nil:
		log.Warn("configuration file not readable, starting with no static services", "path", path, "err", readErr)
	default:
		log.Info("configuration loaded", "path", path, "static_services", len(cfg.Static), "skipped", len(cfg.Skipped))
	}
	for _, sk := range cfg.Skipped {
		log.Warn("invalid static service skipped", "entry", sk.Source, "err", sk.Err)
	}
	if s.httpPort < 0 {
		s.httpPort = cfg.HTTPPort
	}
	if s.rpcPort < 0 {
		s.rpcPort = cfg.RPCPort
	}
	return cfg, path, 0
}

// sha256Backend applies --sha256-backend, else $CONDUCTOR_SHA256_BACKEND.
func (b *builder) sha256Backend() int {
	backend, backendSrc := b.s.sha256Backend, "--sha256-backend"
	if backend == "" {
		backend, _ = b.env("CONDUCTOR_SHA256_BACKEND")
		backendSrc = "CONDUCTOR_SHA256_BACKEND"
	}
	if err := hash.SetBackend(backend); err != nil {
		b.log.Error("invalid SHA-256 backend", "source", backendSrc, "err", err)
		return 2
	}
	bi := hash.Backend()
	b.log.Info("SHA-256 backend", "backend", bi.Name, "auto", bi.Auto, "cpu_features", strings.Join(bi.Features, ","),
		"json_tokens", codec.JSONTokenPath())
	return 0
}

// fdBudget raises the descriptor limit and splits it (fdbudget.go).
func (b *builder) fdBudget() fdPlan {
	soft, hard, err := raiseNoFile()
	if err != nil {
		b.log.Warn("cannot read the file descriptor limit; assuming 1024", "err", err)
		soft, hard = 1024, 1024
	}
	fds := planFDs(soft, hard, b.s.maxConns, b.s.maxRegistration)
	for _, n := range fds.notes {
		b.log.Warn("file descriptor budget: "+n, "fd_limit", fds.limit, "fd_hard_limit", fds.hard)
	}
	b.log.Info("file descriptor budget", "fd_limit", fds.limit, "fd_hard_limit", fds.hard,
		"http_connections", fds.conns, "registrations", fds.registrations,
		"fds_per_registration", fdsPerRegistration, "reserve", fdReserve)
	return fds
}

// access builds the tokens and the endpoint allowlist, and refuses to serve
// open beyond loopback without --insecure.
func (b *builder) access() (*server.Access, *server.EndpointPolicy, int) {
	s, log := b.s, b.log
	access, policy, err := accessOf(s, b.env)
	if err != nil {
		log.Error("invalid access settings", "err", err)
		return nil, nil, 2
	}
	if access.Open() && !loopbackHost(s.listen) && !s.insecure {
		log.Error("refusing to serve without authentication beyond loopback: anyone who reaches the port could register, "+
			"unregister and read the registry; set an admin token (--admin-token-file or $CONDUCTOR_ADMIN_TOKEN), "+
			"or pass --insecure to serve open anyway", "listen", s.listen)
		return nil, nil, 1
	}
	return access, policy, 0
}

// listen binds the HTTP listener, pprof's, the RPC listener and the Dynamo
// surface, and denies registrations their ports.
func (b *builder) listen(a *app, policy *server.EndpointPolicy) int {
	s, log := b.s, b.log
	addr := net.JoinHostPort(s.listen, strconv.Itoa(s.httpPort))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		listenError(log, "the Mooncake API", addr, "--http-port", "http_server_port", err)
		return 1
	}
	a.ln = ln
	b.onFailure(func() { ln.Close() })
	policy.DenyOwn(ln.Addr().(*net.TCPAddr).Port)
	if s.pprofAddr != "" {
		pprofSrv, pln, err := startPprof(s.pprofAddr, log)
		if err != nil {
			log.Error("cannot serve pprof", "addr", s.pprofAddr, "err", err)
			return 2
		}
		a.pprof = pprofSrv
		b.onFailure(func() { pprofSrv.Close() })
		policy.DenyOwn(pln.Addr().(*net.TCPAddr).Port)
	}
	if s.rpcPort != 0 {
		raddr := net.JoinHostPort(s.listen, strconv.Itoa(s.rpcPort))
		if a.rpcLn, err = net.Listen("tcp", raddr); err != nil {
			listenError(log, "the Python client's RPC port", raddr, "--rpc-port", "rpc_server_port (0 turns it off)", err)
			return 1
		}
		b.onFailure(func() { a.rpcLn.Close() })
		a.rpc = rpc.New(a.httpCore)
		policy.DenyOwn(a.rpcLn.Addr().(*net.TCPAddr).Port)
	}
	if a.dp, err = newDynamoPart(a, s.dynamo, b.env, s.listen, s.adminToken); err != nil {
		log.Error("cannot start the Dynamo surface", "err", err)
		return 1
	}
	if a.dp.ln != nil {
		policy.DenyOwn(a.dp.ln.Addr().(*net.TCPAddr).Port)
	}
	return 0
}

// listenError logs a listener that cannot bind: for a port in use, the
// flag and the configuration key that choose another.
func listenError(log *slog.Logger, what, addr, flag, key string, err error) {
	if errors.Is(err, syscall.EADDRINUSE) {
		log.Error("cannot listen: the port of "+what+" is in use (another conductor?); choose another with "+flag+
			" or "+key+" in the configuration file", "addr", addr, "flag", flag, "err", err)
		return
	}
	log.Error("cannot listen", "addr", addr, "flag", flag, "err", err)
}

// loopbackHost reports whether a --listen host is a loopback address (an IP
// in 127.0.0.0/8 or ::1, or the name localhost); the empty host binds every
// interface.
func loopbackHost(host string) bool {
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	return strings.EqualFold(host, "localhost")
}

// accessOf builds the token policy and the endpoint allowlist from the flags.
func accessOf(s *settings, env func(string) (string, bool)) (*server.Access, *server.EndpointPolicy, error) {
	admin, err := secret(s.adminToken, s.adminTokenFile, "CONDUCTOR_ADMIN_TOKEN", env)
	if err != nil {
		return nil, nil, fmt.Errorf("--admin-token-file: %w", err)
	}
	query, err := secret(s.queryToken, s.queryTokenFile, "CONDUCTOR_QUERY_TOKEN", env)
	if err != nil {
		return nil, nil, fmt.Errorf("--query-token-file: %w", err)
	}
	var clients map[string]string
	if s.clientTokens != "" {
		f, err := os.Open(s.clientTokens)
		if err != nil {
			return nil, nil, fmt.Errorf("--client-tokens-file: %w", err)
		}
		clients, err = server.ParseClientTokens(f)
		f.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("--client-tokens-file %s: %w", s.clientTokens, err)
		}
	}
	if query != "" {
		s.queryToken = query
	}
	// The resolved admin token: peer recovery presents it to peers (which
	// share the replica set's tokens).
	s.adminToken = admin
	access, err := server.NewAccess(server.AccessOptions{AdminToken: admin, QueryToken: query, ClientTokens: clients,
		ProtectMetrics: s.protectMetrics})
	if err != nil {
		return nil, nil, err
	}
	policy, err := server.ParseEndpointPolicy(s.allowEndpoints)
	if err != nil {
		return nil, nil, fmt.Errorf("--allow-endpoints: %w", err)
	}
	return access, policy, nil
}

// connectionsOf is /services' Connection of every registration: its
// listener's state, last error, events and last sequence.
func connectionsOf(ing *ingest.Ingester) map[core.ServiceKey]server.Connection {
	ls := ing.Listeners()
	out := make(map[core.ServiceKey]server.Connection, len(ls))
	for _, l := range ls {
		out[l.Key] = server.Connection{State: l.State.String(), LastError: l.LastError, Events: l.Events, LastSeq: l.LastSeq}
	}
	return out
}

// listenerMetrics exposes conductor_listeners{state=…}: subscriptions per
// receiver state, read from the ingester at scrape time.
func listenerMetrics(ing *ingest.Ingester) *metrics.Set {
	set := metrics.NewSet()
	set.RegisterMetricsWriter(func(w io.Writer) {
		states := []ingest.ListenerState{ingest.ListenerPending, ingest.ListenerActive, ingest.ListenerFailed, ingest.ListenerPaused}
		n := make([]uint64, len(states))
		for _, l := range ing.Listeners() {
			for i, st := range states {
				if l.State == st {
					n[i]++
				}
			}
		}
		for i, st := range states {
			metrics.WriteGaugeUint64(w, fmt.Sprintf(`conductor_listeners{state=%q}`, st.String()), n[i])
		}
	})
	return set
}

// Addr is the bound HTTP address.
func (a *app) Addr() string { return a.ln.Addr().String() }

// serve runs the HTTP server and the static registrations until ctx is done,
// then shuts down: stop accepting, drain in-flight requests, stop subscribers.
func (a *app) serve(ctx context.Context) int {
	restoreSnapshot, haveSnapshot := a.snap.Hold(a.dp.dyn) // holds applies until the snapshot is in
	a.restoreState()
	if haveSnapshot {
		// The snapshot's sections need their registrations: the
		// configuration file's are made now, not in the background.
		a.registerStatic(context.Background())
	}
	restoreSnapshot()
	a.persist()
	a.snap.Start()
	a.np.start(a)
	a.log.Info("HTTP server listening", "addr", a.Addr())
	serveErr := make(chan error, 2)
	go func() { serveErr <- a.srv.Serve(a.ln) }()
	if a.rpc != nil {
		a.log.Info("RPC server listening", "addr", a.rpcLn.Addr().String())
		go func() { serveErr <- a.rpc.Serve(a.rpcLn) }()
	} else {
		a.log.Info("RPC server disabled (rpc_server_port 0)")
	}
	if a.dp.ln != nil {
		a.log.Info("Dynamo HTTP server listening", "addr", a.dp.ln.Addr().String())
		go func() { serveErr <- a.dp.dyn.Serve(a.dp.ln) }()
	}

	staticCtx, cancelStatic := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if !haveSnapshot {
			a.registerStatic(staticCtx)
		}
		a.dp.start(staticCtx, a)
	}()
	a.kp.start(staticCtx)

	code := 0
	select {
	case <-ctx.Done():
		a.log.Info("shutting down", "reason", context.Cause(ctx))
	case err := <-serveErr:
		a.log.Error("HTTP or RPC server failed", "err", err)
		code = 1
	}
	cancelStatic()
	a.dp.releaseAll()
	// Every surface stops accepting at once and drains its requests in
	// progress (those in a handler and those still arriving) within one
	// --shutdown-timeout.
	sctx, cancel := context.WithTimeout(context.Background(), a.shutdownTimeout)
	defer cancel()
	var drain sync.WaitGroup
	shutdown := func(what string, stop func(context.Context) error) {
		drain.Go(func() {
			if err := stop(sctx); err != nil {
				a.log.Warn(what+" shutdown did not drain in time", "err", err)
			}
		})
	}
	shutdown("HTTP", a.srv.Shutdown)
	if a.rpc != nil {
		shutdown("RPC", a.rpc.Shutdown)
	}
	shutdown("Dynamo HTTP", a.dp.dyn.Shutdown)
	drain.Wait()
	wg.Wait()
	if a.pprof != nil {
		a.pprof.Close()
	}
	a.snap.Stop()
	a.ing.Close()
	a.np.stop(a.shutdownTimeout) // after the ingester: the relay publishes what it applied last
	a.state.Close()
	a.log.Info("conductor stopped")
	return code
}

// restoreState registers what the state directory holds, through the gate
// (so the endpoint policy applies), each under its recorded owner; a Dynamo
// worker goes back into the Dynamo registry too (its indexer and worker).
func (a *app) restoreState() {
	if a.state == nil {
		return
	}
	a.gate.Explain = func(k core.ServiceKey) string { return a.state.Explain(k, a.Addr()) }
	a.state.Restore(a.log, func(who server.Principal, origin string, reg core.Registration) error {
		if origin == dynamo.Origin && a.dp != nil && a.dp.dyn != nil {
			return a.dp.dyn.Restore(who, reg)
		}
		_, err := a.gate.Register(who, reg)
		return err
	})
}

// persist turns on durable registrations: from now on every change is
// written before it is answered; the current set is written once now.
func (a *app) persist() {
	if a.state == nil {
		return
	}
	if err := a.state.Save(a.ix.Services()); err != nil {
		a.log.Error("cannot write the registration state; registrations will fail until it can be written",
			"dir", a.state.Dir(), "err", err)
	}
	a.gate.OnChange = a.state.Save
}

// registerStatic subscribes the configuration's static services, one after
// another; failures are logged and skipped.
func (a *app) registerStatic(ctx context.Context) {
	if len(a.static) == 0 {
		a.log.Info("Static KV Event Manager started", "success", 0, "failed", 0)
		return
	}
	ok, failed := 0, 0
	for _, e := range a.static {
		if ctx.Err() != nil {
			break
		}
		r := e.Reg
		if _, err := a.gate.Register(server.Principal{Name: configOwner, Admin: true}, r); err != nil {
			failed++
			a.log.Error("static service failed", "entry", e.Source, "service", r.InstanceID+"|"+r.TenantID+"|"+strconv.Itoa(int(r.DPRank)),
				"endpoint", r.Endpoint, "err", err)
			continue
		}
		ok++
		a.log.Info("static service registered", "entry", e.Source, "service", r.InstanceID+"|"+r.TenantID+"|"+strconv.Itoa(int(r.DPRank)),
			"endpoint", r.Endpoint)
	}
	a.log.Info("Static KV Event Manager started", "success", ok, "failed", failed)
}
