package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd"
	"github.com/seed-c7a81618/conductor/wire"
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
	listen          string
	logLevel        string
	logFormat       string
	showVersion     bool
	maxBodyBytes    int
	maxQueryTokens  int
	maxRegistration int
	contextSizeHint int
	shutdownTimeout time.Duration
	dynamo          dynamoSettings // dynamo.go
}

func parseFlags(args []string, stderr io.Writer) (settings, error) {
	var s settings
	fs := flag.NewFlagSet("conductor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&s.configPath, "config", "", "configuration file (default $CONDUCTOR_CONFIG_PATH, else ~/.mooncake/conductor_config.json)")
	fs.IntVar(&s.httpPort, "http-port", -1, "HTTP port, overrides http_server_port (0 = ephemeral)")
	fs.StringVar(&s.listen, "listen", "0.0.0.0", "HTTP bind address")
	fs.StringVar(&s.logLevel, "log-level", "", "DEBUG, INFO, WARN or ERROR (default $CONDUCTOR_LOG_LEVEL, else INFO)")
	fs.StringVar(&s.logFormat, "log-format", "text", "log format: text or json")
	fs.BoolVar(&s.showVersion, "version", false, "print the version and exit")
	fs.IntVar(&s.maxBodyBytes, "max-body-bytes", 0, "largest request body in bytes (default 64 MiB; larger → 413)")
	fs.IntVar(&s.maxQueryTokens, "max-query-tokens", 0, "most token_ids / seq_hashes per query (default 1048576)")
	fs.IntVar(&s.maxRegistration, "max-registrations", 0, "most registrations (default 4096)")
	fs.IntVar(&s.contextSizeHint, "context-size-hint", 0, "presize each context's block map for this many blocks (~13 B each; default 0 = grow on demand)")
	fs.DurationVar(&s.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long shutdown waits for in-flight requests")
	addDynamoFlags(fs, &s.dynamo)
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	if fs.NArg() > 0 {
		return s, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if s.httpPort > 65535 || s.httpPort < -1 {
		return s, fmt.Errorf("--http-port=%d: want 0..65535", s.httpPort)
	}
	if s.logFormat != "text" && s.logFormat != "json" {
		return s, fmt.Errorf("--log-format=%q: want text or json", s.logFormat)
	}
	if err := s.dynamo.validate(); err != nil {
		return s, err
	}
	return s, nil
}

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
	ing             *wire.Ingester
	srv             *httpd.Server
	ln              net.Listener
	static          []staticEntry
	shutdownTimeout time.Duration
	dp              *dynamoPart // dynamo.go
}

// run is the whole process: it returns the exit status. It serves until ctx
// is cancelled, then shuts down gracefully.
func run(ctx context.Context, args []string, env func(string) (string, bool), stdout, stderr io.Writer) int {
	a, code := newApp(args, env, stdout, stderr)
	if a == nil {
		return code
	}
	return a.serve(ctx)
}

// newApp parses flags and configuration, builds the index, ingester and HTTP
// server, and binds the listener. A nil app comes with the exit status.
func newApp(args []string, env func(string) (string, bool), stdout, stderr io.Writer) (*app, int) {
	s, err := parseFlags(args, stderr)
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

	path, emptyEnv := configPath(s.configPath, env)
	if emptyEnv {
		log.Warn("CONDUCTOR_CONFIG_PATH is set but empty; using the default path", "path", path)
	}
	cfg, readErr, err := loadConfig(path)
	if err != nil {
		log.Error("cannot use configuration file", "path", path, "err", err)
		return nil, 1
	}
	if readErr != nil {
		log.Warn("configuration file not readable, starting with no static services", "path", path, "err", readErr)
	} else {
		log.Info("configuration loaded", "path", path, "static_services", len(cfg.Static), "skipped", len(cfg.Skipped))
	}
	for _, k := range cfg.Unknown {
		log.Warn("unknown configuration key ignored", "key", k)
	}
	for _, sk := range cfg.Skipped {
		log.Warn("invalid static service skipped", "entry", sk.Source, "err", sk.Err)
	}
	if cfg.HasRPC {
		log.Warn("rpc_server_port is not served: the coro_rpc protocol of the C++ conductor is not implemented; use the HTTP API",
			"rpc_server_port", cfg.RPCPort)
	}
	port := cfg.HTTPPort
	if s.httpPort >= 0 {
		port = s.httpPort
	}

	ixOpts := core.Options{MaxRegistrations: s.maxRegistration, ContextSizeHint: s.contextSizeHint, Logger: log}
	if err := ixOpts.Validate(); err != nil {
		log.Error("invalid index options", "err", err)
		return nil, 2
	}
	ix := core.New(ixOpts)
	ing, err := wire.NewIngester(ix, wire.IngestOptions{Logger: log})
	if err != nil {
		log.Error("cannot start the ingester", "err", err)
		return nil, 1
	}
	ver := buildVersion()
	srv, err := httpd.New(ix, ing, httpd.Options{
		MaxBodyBytes:   s.maxBodyBytes,
		MaxQueryTokens: s.maxQueryTokens,
		Version:        ver,
		Logger:         log,
		ExtraMetrics:   []*metrics.Set{ing.Metrics(), listenerMetrics(ing)},
	})
	if err != nil {
		ing.Close()
		log.Error("invalid HTTP options", "err", err)
		return nil, 2
	}
	addr := net.JoinHostPort(s.listen, strconv.Itoa(port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		ing.Close()
		log.Error("cannot listen", "addr", addr, "err", err)
		return nil, 1
	}
	a := &app{log: log, ix: ix, ing: ing, srv: srv, ln: ln, static: cfg.Static, shutdownTimeout: s.shutdownTimeout}
	if a.dp, err = newDynamoPart(a, s.dynamo, env, s.listen); err != nil {
		_ = ln.Close()
		ing.Close()
		log.Error("cannot start the Dynamo surface", "err", err)
		return nil, 1
	}
	log.Info("conductor starting", "version", ver, "config", path)
	return a, 0
}

// listenerMetrics exposes conductor_listeners{state=…}: subscriptions per
// receiver state, read from the ingester at scrape time.
func listenerMetrics(ing *wire.Ingester) *metrics.Set {
	set := metrics.NewSet()
	set.RegisterMetricsWriter(func(w io.Writer) {
		states := []wire.ListenerState{wire.ListenerPending, wire.ListenerActive, wire.ListenerFailed, wire.ListenerPaused}
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
	a.log.Info("HTTP server listening", "addr", a.Addr())
	serveErr := make(chan error, 2)
	go func() { serveErr <- a.srv.Serve(a.ln) }()
	if a.dp.ln != nil {
		a.log.Info("Dynamo HTTP server listening", "addr", a.dp.ln.Addr().String())
		go func() { serveErr <- a.dp.dyn.Serve(a.dp.ln) }()
	}

	staticCtx, cancelStatic := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.registerStatic(staticCtx)
		a.dp.start(staticCtx, a)
	}()

	code := 0
	select {
	case <-ctx.Done():
		a.log.Info("shutting down", "reason", context.Cause(ctx))
	case err := <-serveErr:
		a.log.Error("HTTP server failed", "err", err)
		code = 1
	}
	cancelStatic()
	a.dp.releaseAll()
	sctx, cancel := context.WithTimeout(context.Background(), a.shutdownTimeout)
	defer cancel()
	if err := a.srv.Shutdown(sctx); err != nil {
		a.log.Warn("HTTP shutdown did not drain in time", "err", err)
	}
	if err := a.dp.dyn.Shutdown(sctx); err != nil {
		a.log.Warn("Dynamo HTTP shutdown did not drain in time", "err", err)
	}
	wg.Wait()
	a.ing.Close()
	a.log.Info("conductor stopped")
	return code
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
		if _, err := a.ing.Register(r); err != nil {
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
