package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/seed-c7a81618/conductor/httpd/dynamo"
	"github.com/seed-c7a81618/conductor/wire/dump"
	"github.com/seed-c7a81618/conductor/wire/ingest"
)

// The Dynamo standalone-indexer surface of the process: flags, the second
// listener, --workers, the startup gates and peer recovery.
//
// Flags (seeds/dynamo-standalone-indexer.md "CLI"):
//
//	--dynamo-port N            serve the Dynamo dialect on N (off unless set; Dynamo's default is 8090)
//	--block-size N             block size of --workers (required with --workers)
//	--workers "id[:rank]=addr,..." initial Dynamo workers (dp_rank defaults to 0)
//	--model-name, --routing-group  indexer of --workers (default "default")
//	--peers url,...            recover from the first reachable peer's /dump at start
//	--threads N                accepted (default 4); see dynamo.Options.Threads
//	--access-log FILE          one JSON line per Dynamo request; reopened on POST /reopen_logs
//	--trace-id-header H        header copied into trace_id (default x-trace-id)
//	--access-log-local-time    local instead of UTC timestamps
//	--tenant-id                accepted and ignored (Dynamo's hidden flag)
//
// DYN_ROUTER_MIN_INITIAL_WORKERS=n (n > 0) keeps the apply gate closed until
// n Dynamo workers are registered (--workers and POST /register).
//
// Start-up order with --peers: the apply gate is closed before anything
// subscribes; --workers and the configuration file's services register (their
// listeners connect and queue); after the slow-joiner delay (1 s) the first
// reachable peer's /dump is restored; then the gate opens and the listeners
// drain, each skipping what the dump already held.
type dynamoSettings struct {
	port        int
	dynamoPort  int // Dynamo's own --port (see dynamoMode)
	blockSize   int
	workers     string
	model       string
	group       string
	peers       string
	threads     int
	accessLog   string
	traceHeader string
	localTime   bool
	tenantID    string
	joinDelay   time.Duration
}

func addDynamoFlags(fs *flag.FlagSet, s *dynamoSettings) {
	fs.IntVar(&s.port, "dynamo-port", -1, "serve the Dynamo standalone-indexer API on this port (off unless set; 0 = ephemeral)")
	fs.IntVar(&s.dynamoPort, "port", -1, "Dynamo's own flag: run as a Dynamo standalone indexer, its API on this port; "+
		"the Mooncake HTTP API then takes an ephemeral port, the RPC port and durable state are off, unless --http-port, --rpc-port or --state-dir say otherwise")
	fs.IntVar(&s.blockSize, "block-size", 0, "KV block size of --workers (required with --workers)")
	fs.StringVar(&s.workers, "workers", "", `initial Dynamo workers: "instance_id[:dp_rank]=zmq_address,..."`)
	fs.StringVar(&s.model, "model-name", "default", "model name of --workers")
	fs.StringVar(&s.group, "routing-group", "default", "routing group of --workers")
	fs.StringVar(&s.peers, "peers", "", "comma-separated peer URLs: recover from the first reachable peer's /dump at start")
	fs.IntVar(&s.threads, "threads", 4, "accepted for Dynamo compatibility; conductor applies each stream on its own goroutine")
	fs.StringVar(&s.accessLog, "access-log", "", "Dynamo listener: write one JSON access-log line per request to this file")
	fs.StringVar(&s.traceHeader, "trace-id-header", "x-trace-id", "request header copied into each access-log line's trace_id")
	fs.BoolVar(&s.localTime, "access-log-local-time", false, "access-log timestamps in local time instead of UTC")
	fs.StringVar(&s.tenantID, "tenant-id", "", "accepted and ignored (Dynamo compatibility)")
	fs.DurationVar(&s.joinDelay, "peer-join-delay", time.Second, "wait this long after subscribing before fetching a peer's /dump (slow-joiner window)")
}

// dynamoMode applies Dynamo's --port: a command line written for Dynamo's
// `python -m dynamo.indexer` runs with only the binary name changed, two of
// them on one host included (the seed's peer-recovery example). So --port is
// --dynamo-port, and the surfaces Dynamo's indexer does not have stay out of
// the way unless their own flags are given: the Mooncake HTTP API on an
// ephemeral port, no RPC port, no durable state (a Dynamo indexer recovers
// from --peers). set holds the names of the flags given.
func (s *settings) dynamoMode(set map[string]bool) error {
	if !set["port"] {
		return nil
	}
	if set["dynamo-port"] && s.dynamo.port != s.dynamo.dynamoPort {
		return fmt.Errorf("--port=%d and --dynamo-port=%d name the same listener", s.dynamo.dynamoPort, s.dynamo.port)
	}
	if s.dynamo.dynamoPort < 0 || s.dynamo.dynamoPort > 65535 {
		return fmt.Errorf("--port=%d: want 0..65535", s.dynamo.dynamoPort)
	}
	s.dynamo.port = s.dynamo.dynamoPort
	if !set["http-port"] {
		s.httpPort = 0
	}
	if !set["rpc-port"] {
		s.rpcPort = 0
	}
	if !set["state-dir"] {
		s.stateDir = ""
	}
	return nil
}

func (s *dynamoSettings) validate() error {
	if s.port > 65535 || s.port < -1 {
		return fmt.Errorf("--dynamo-port=%d: want 0..65535", s.port)
	}
	if s.workers != "" && s.blockSize <= 0 {
		return fmt.Errorf("--block-size is required (> 0) with --workers")
	}
	if s.threads < 1 {
		return fmt.Errorf("--threads=%d: want >= 1", s.threads)
	}
	if _, err := parseWorkers(s.workers, s.blockSize, s.model, s.group); err != nil {
		return err
	}
	return nil
}

// parseWorkers parses --workers "instance_id[:dp_rank]=zmq_address,...".
func parseWorkers(spec string, blockSize int, model, group string) ([]dynamo.Worker, error) {
	var out []dynamo.Worker
	if strings.TrimSpace(spec) == "" {
		return nil, nil
	}
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		id, addr, ok := strings.Cut(item, "=")
		if !ok || addr == "" {
			return nil, fmt.Errorf("--workers: %q: want instance_id[:dp_rank]=zmq_address", item)
		}
		inst, rank, hasRank := strings.Cut(id, ":")
		w := dynamo.Worker{Endpoint: addr, ModelName: model, RoutingGroup: group, BlockSize: blockSize}
		v, err := strconv.ParseUint(inst, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("--workers: %q: instance_id must be an unsigned integer", item)
		}
		w.InstanceID = v
		if hasRank {
			r, err := strconv.ParseUint(rank, 10, 31)
			if err != nil {
				return nil, fmt.Errorf("--workers: %q: dp_rank must be a non-negative integer", item)
			}
			w.DPRank = uint32(r)
		}
		out = append(out, w)
	}
	return out, nil
}

func splitPeers(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// minInitialWorkers reads DYN_ROUTER_MIN_INITIAL_WORKERS (unset, empty or 0:
// no gate).
func minInitialWorkers(env func(string) (string, bool)) (int, error) {
	v, ok := env("DYN_ROUTER_MIN_INITIAL_WORKERS")
	if !ok || strings.TrimSpace(v) == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("DYN_ROUTER_MIN_INITIAL_WORKERS=%q: want a non-negative integer", v)
	}
	return n, nil
}

// dynamoPart is the Dynamo half of a running app.
type dynamoPart struct {
	set     dynamoSettings
	dyn     *dynamo.Server
	ln      net.Listener // nil when --dynamo-port is off
	workers []dynamo.Worker
	peers   []string
	token   string // admin token presented to peers ("" = none)
	// gates held on the index: recovery and the minimum-workers gate.
	mu        sync.Mutex
	releases  []func()
	recovery  dump.Stats
	recovered bool // peer recovery finished (or failed part-way)
}

// ready is part of server.Options.Ready: not ready while --peers recovery
// runs.
func (p *dynamoPart) ready() error {
	if p == nil || len(p.peers) == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.recovered {
		return errors.New("recovering the index from --peers")
	}
	return nil
}

// newDynamoPart builds the Dynamo surface and closes the gates that start-up
// needs (before anything registers).
// adminToken, when set, is presented to peers on recovery (their /dump needs
// the admin token).
func newDynamoPart(a *app, s dynamoSettings, env func(string) (string, bool), listen, adminToken string) (*dynamoPart, error) {
	workers, err := parseWorkers(s.workers, s.blockSize, s.model, s.group)
	if err != nil {
		return nil, err
	}
	minW, err := minInitialWorkers(env)
	if err != nil {
		return nil, err
	}
	p := &dynamoPart{set: s, workers: workers, peers: splitPeers(s.peers), token: adminToken}
	ing := a.ing
	dyn, err := dynamo.New(a.httpCore, dynamo.Options{
		Listeners:          func() []dynamo.ListenerInfo { return listenerInfos(ing, a.ix.Gated()) },
		AccessLog:          s.accessLog,
		TraceIDHeader:      s.traceHeader,
		AccessLogLocalTime: s.localTime,
		Peers:              p.peers,
		Threads:            s.threads,
		Logger:             a.log,
		ExtraMetrics:       []*metrics.Set{ing.Metrics()},
	})
	if err != nil {
		return nil, err
	}
	p.dyn = dyn
	if len(p.peers) > 0 {
		p.releases = append(p.releases, a.ix.HoldApplies())
	}
	if minW > 0 {
		release := a.ix.HoldApplies()
		p.releases = append(p.releases, release)
		a.log.Info("waiting for Dynamo workers before applying events", "DYN_ROUTER_MIN_INITIAL_WORKERS", minW)
		var once sync.Once
		dyn.SetRegisterHook(func(n int) {
			if n >= minW {
				once.Do(func() {
					a.log.Info("minimum initial workers registered; applying events", "workers", n)
					release()
				})
			}
		})
	}
	if s.port >= 0 {
		addr := net.JoinHostPort(listen, strconv.Itoa(s.port))
		if p.ln, err = net.Listen("tcp", addr); err != nil {
			for _, r := range p.releases {
				r()
			}
			_ = dyn.Shutdown(context.Background())
			if errors.Is(err, syscall.EADDRINUSE) {
				err = fmt.Errorf("%w (the port is in use; choose another with --dynamo-port, or --port on Dynamo's command line)", err)
			}
			return nil, fmt.Errorf("dynamo listener %s: %w", addr, err)
		}
	}
	return p, nil
}

// listenerInfos reports the ingester's listeners for /workers. While the
// apply gate is closed (peer recovery, the minimum-workers gate) a connected
// listener is still "pending", as in Dynamo: it queues but applies nothing.
func listenerInfos(ing *ingest.Ingester, gated bool) []dynamo.ListenerInfo {
	ls := ing.Listeners()
	out := make([]dynamo.ListenerInfo, len(ls))
	for i, l := range ls {
		out[i] = dynamo.ListenerInfo{Key: l.Key, State: l.State.String(), LastError: l.LastError}
		if l.State == ingest.ListenerActive {
			out[i].LastError = ""
			if gated {
				out[i].State = ingest.ListenerPending.String()
			}
		}
	}
	return out
}

// start registers --workers and runs peer recovery (then opens the recovery
// gate). It runs after the static services registered.
func (p *dynamoPart) start(ctx context.Context, a *app) {
	for _, w := range p.workers {
		if err := p.dyn.Register(w); err != nil {
			a.log.Error("--workers registration failed", "instance", w.InstanceID, "dp_rank", w.DPRank, "endpoint", w.Endpoint, "err", err)
			continue
		}
		a.log.Info("--workers registered", "instance", w.InstanceID, "dp_rank", w.DPRank, "endpoint", w.Endpoint)
	}
	if len(p.peers) == 0 {
		return
	}
	release := p.releases[0]
	defer release()
	select {
	case <-ctx.Done():
		return
	case <-time.After(p.set.joinDelay):
	}
	st, _, err := dump.Recover(ctx, a.ix, p.peers, dump.RecoverOptions{Indexers: p.dyn, Logger: a.log, Token: p.token})
	if err != nil {
		a.log.Error("peer recovery failed part-way; continuing with live events", "err", err)
	}
	p.mu.Lock()
	p.recovery, p.recovered = st, true
	p.mu.Unlock()
}

// releaseAll opens every gate (shutdown: listeners blocked on the gate must
// be able to stop).
func (p *dynamoPart) releaseAll() {
	for _, r := range p.releases {
		r()
	}
}
