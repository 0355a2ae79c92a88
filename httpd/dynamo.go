package httpd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
)

// The Dynamo standalone-indexer dialect (seeds/dynamo-standalone-indexer.md),
// served on its own listener (--dynamo-port) over the same core.Index as the
// Mooncake API.
//
// # Indexers and contexts
//
// Dynamo keeps one indexer per (model_name, routing_group), its block size
// fixed by the first registration. dynamoContext is the one place that maps it
// onto a conductor context: tenant_id = routing_group, model_name =
// model_name, lora_name = "", block_size = the indexer's. So a Dynamo
// registration of model M in group "default" and a Mooncake registration of
// model M, tenant "default", the same block size and no LoRA feed (and query)
// the same context. Dynamo workers are registered with the xxh3 standard
// profile (seed 1337), whose local block hash is Dynamo's LocalBlockHash, so
// /query_by_hash takes Dynamo local block hashes (rolled into conductor's
// prefix keys by dynamoRollHashes).
//
// instance_id is a u64 (a number, or a string holding one); in the index it is
// its decimal text. tenant_id and additional_salt / additionalsalt are accepted
// and ignored, as Dynamo does.

// ListenerInfo is one subscription's receiver state for GET /workers.
type ListenerInfo struct {
	Key       core.ServiceKey
	State     string // pending, active, failed, paused
	LastError string
}

// DynamoOptions configure a Dynamo listener. The zero value is valid.
type DynamoOptions struct {
	// MaxBodyBytes bounds a request body (413 beyond). Default 8 MiB, Dynamo's.
	MaxBodyBytes int
	// MaxQueryTokens bounds token_ids / block_hashes per query. Default 1<<20.
	MaxQueryTokens int
	// Publisher is the event dialect of Dynamo registrations (Dynamo's
	// /register names none; a conductor extension field "type" overrides it
	// per registration). Default core.PublisherVLLM.
	Publisher core.PublisherType
	// Listeners reports receiver states for /workers and the listener gauge.
	// Default: every registration reported pending.
	Listeners func() []ListenerInfo
	// AccessLog is a file receiving one JSON line per request; "" disables.
	AccessLog string
	// TraceIDHeader is copied into each access-log line's trace_id. Default
	// "x-trace-id".
	TraceIDHeader string
	// AccessLogLocalTime writes local instead of UTC timestamps.
	AccessLogLocalTime bool
	// Peers are the initial peer URLs (GET /peers; recovery).
	Peers []string
	// Threads is Dynamo's --threads, accepted for compatibility: conductor
	// applies each subscription's events on its own goroutine and answers
	// queries on the HTTP goroutines, so there is no indexer thread pool; the
	// value caps GOMAXPROCS-independent nothing and is only reported.
	Threads int
	// ReadTimeout, WriteTimeout and IdleTimeout as in Options; WriteTimeout
	// also bounds a /dump. Defaults 30s, 10m, 60s.
	ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// EnsureDefaults fills zero fields.
func (o *DynamoOptions) EnsureDefaults() {
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = 8 << 20
	}
	if o.MaxQueryTokens == 0 {
		o.MaxQueryTokens = 1 << 20
	}
	if o.Publisher == 0 {
		o.Publisher = core.PublisherVLLM
	}
	if o.TraceIDHeader == "" {
		o.TraceIDHeader = "x-trace-id"
	}
	if o.Threads == 0 {
		o.Threads = 4
	}
	if o.ReadTimeout == 0 {
		o.ReadTimeout = 30 * time.Second
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = 10 * time.Minute
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = 60 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate reports every bad field.
func (o *DynamoOptions) Validate() error {
	var errs []error
	if o.MaxBodyBytes < 0 {
		errs = append(errs, fmt.Errorf("MaxBodyBytes=%d: must be >= 0: %w", o.MaxBodyBytes, ErrInvalidOptions))
	}
	if o.MaxQueryTokens < 0 {
		errs = append(errs, fmt.Errorf("MaxQueryTokens=%d: must be >= 0: %w", o.MaxQueryTokens, ErrInvalidOptions))
	}
	if o.Threads < 0 {
		errs = append(errs, fmt.Errorf("Threads=%d: must be >= 0: %w", o.Threads, ErrInvalidOptions))
	}
	if o.Publisher != core.PublisherVLLM && o.Publisher != core.PublisherSGLang {
		errs = append(errs, fmt.Errorf("Publisher=%v: want vLLM or SGLang: %w", o.Publisher, ErrInvalidOptions))
	}
	for _, p := range o.Peers {
		if err := checkPeerURL(p); err != nil {
			errs = append(errs, fmt.Errorf("Peers: %w: %w", err, ErrInvalidOptions))
		}
	}
	return errors.Join(errs...)
}

// dynKey names one Dynamo indexer.
type dynKey struct{ model, group string }

func (k dynKey) String() string { return k.model + ":" + k.group }

// dynamoContext maps a Dynamo indexer onto its conductor context: the one
// documented place (see the file comment).
func dynamoContext(k dynKey, blockSize int) core.ContextKey {
	return core.ContextKey{TenantID: k.group, ModelName: k.model, LoraName: "", BlockSize: blockSize}
}

// dynRank is one registered (instance, dp_rank).
type dynRank struct {
	endpoint, replay string
}

// dynWorker is one Dynamo instance: bound to one indexer.
type dynWorker struct {
	key   dynKey
	ranks map[uint32]dynRank
}

// Dynamo serves the Dynamo dialect. Create it with NewDynamo; safe for
// concurrent use.
type Dynamo struct {
	ix   *core.Index
	reg  Registrar
	opts DynamoOptions
	m    *dynMetrics
	alog *accessLog
	srv  *fasthttp.Server
	pool sync.Pool // *dynState

	// mu guards the Dynamo registry and the peer list. Registrar calls are
	// made under it so that the registry and the index change together.
	mu       sync.Mutex
	indexers map[dynKey]int // block size
	// snap is a copy of indexers for lock-free reads on the query path,
	// republished by setIndexerLocked.
	snap    atomic.Pointer[map[dynKey]int]
	workers map[uint64]*dynWorker
	peers   []string
	// onRegister is called (outside mu) after each successful registration
	// with the number of registered instances (the startup worker gate).
	onRegister func(workers int)
}

type dynState struct {
	reqState
	model []byte // for the access log
}

// NewDynamo returns a Dynamo server over ix registering through reg.
func NewDynamo(ix *core.Index, reg Registrar, opts DynamoOptions) (*Dynamo, error) {
	if ix == nil || reg == nil {
		return nil, fmt.Errorf("httpd.NewDynamo: index and registrar are required: %w", ErrInvalidOptions)
	}
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	d := &Dynamo{ix: ix, reg: reg, opts: opts, indexers: map[dynKey]int{}, workers: map[uint64]*dynWorker{}}
	d.peers = append(d.peers, opts.Peers...)
	d.pool.New = func() any { return new(dynState) }
	if opts.AccessLog != "" {
		loc := time.UTC
		if opts.AccessLogLocalTime {
			loc = time.Local
		}
		al, err := openAccessLog(opts.AccessLog, loc)
		if err != nil {
			return nil, err
		}
		d.alog = al
	}
	d.m = newDynMetrics(d)
	d.srv = &fasthttp.Server{
		Handler:                      d.Handler,
		ErrorHandler:                 d.errorHandler,
		Name:                         "conductor-dynamo",
		MaxRequestBodySize:           opts.MaxBodyBytes,
		ReadTimeout:                  opts.ReadTimeout,
		WriteTimeout:                 opts.WriteTimeout,
		IdleTimeout:                  opts.IdleTimeout,
		CloseOnShutdown:              true,
		DisablePreParseMultipartForm: true,
		NoDefaultServerHeader:        true,
		Logger:                       fastLogger{opts.Logger},
	}
	return d, nil
}

// Serve accepts connections on ln until Shutdown.
func (d *Dynamo) Serve(ln net.Listener) error { return d.srv.Serve(ln) }

// Shutdown stops the listener and closes the access log.
func (d *Dynamo) Shutdown(ctx context.Context) error {
	err := d.srv.ShutdownWithContext(ctx)
	if d.alog != nil {
		d.alog.close()
	}
	return err
}

// SetRegisterHook sets a function called after each successful registration
// with the number of registered instances.
func (d *Dynamo) SetRegisterHook(f func(workers int)) {
	d.mu.Lock()
	d.onRegister = f
	d.mu.Unlock()
}

// Peers returns the current peer URLs.
func (d *Dynamo) Peers() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.peers...)
}

// Dynamo routes.
const (
	dOther = iota
	dHealth
	dMetrics
	dReopenLogs
	dRegister
	dUnregister
	dWorkers
	dQuery
	dQueryByHash
	dDump
	dRegisterPeer
	dDeregisterPeer
	dPeers
	numDynRoutes
)

var dynPaths = [numDynRoutes]string{"other", "/health", "/metrics", "/reopen_logs", "/register", "/unregister",
	"/workers", "/query", "/query_by_hash", "/dump", "/register_peer", "/deregister_peer", "/peers"}

var dynPost = [numDynRoutes]bool{dReopenLogs: true, dRegister: true, dUnregister: true, dQuery: true,
	dQueryByHash: true, dRegisterPeer: true, dDeregisterPeer: true}

func dynRoute(path []byte) int {
	for i := 1; i < numDynRoutes; i++ {
		if string(path) == dynPaths[i] {
			return i
		}
	}
	return dOther
}

// Handler is the fasthttp handler of the Dynamo listener.
func (d *Dynamo) Handler(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	r := dynRoute(ctx.Path())
	st := d.pool.Get().(*dynState)
	st.scratch = st.scratch[:0]
	st.model = st.model[:0]
	switch {
	case r == dOther:
		d.opError(ctx, st, 404, "not found")
	case dynPost[r] && !ctx.IsPost():
		ctx.Response.Header.Set("Allow", "POST")
		d.opError(ctx, st, 405, "method not allowed")
	case !dynPost[r] && !ctx.IsGet() && !ctx.IsHead():
		ctx.Response.Header.Set("Allow", "GET, HEAD")
		d.opError(ctx, st, 405, "method not allowed")
	default:
		switch r {
		case dHealth:
			ctx.SetStatusCode(200)
			ctx.SetContentType("text/plain; charset=utf-8")
			ctx.SetBodyString("OK")
		case dMetrics:
			d.m.write(ctx)
		case dReopenLogs:
			d.handleReopen(ctx, st)
		case dRegister:
			d.handleRegister(ctx, st)
		case dUnregister:
			d.handleUnregister(ctx, st)
		case dWorkers:
			d.handleWorkers(ctx, st)
		case dQuery, dQueryByHash:
			d.handleQuery(ctx, st, r == dQueryByHash)
		case dDump:
			d.handleDump(ctx)
		case dRegisterPeer, dDeregisterPeer:
			d.handlePeer(ctx, st, r == dRegisterPeer)
		case dPeers:
			d.handlePeers(ctx, st)
		}
	}
	d.finish(ctx, r, st, start)
}

func (d *Dynamo) finish(ctx *fasthttp.RequestCtx, r int, st *dynState, start time.Time) {
	status := ctx.Response.StatusCode()
	d.m.observe(r, ctx.Method(), status, start)
	if d.alog != nil {
		d.alog.write(start, ctx.Method(), ctx.Path(), st.model, status, time.Since(start),
			ctx.Request.Header.Peek(d.opts.TraceIDHeader))
	}
	st.reqState.q = core.QueryRequest{}
	st.js = jsonReader{}
	if cap(st.scratch) > retainBytes {
		st.scratch = nil
	}
	if cap(st.enc.buf) > retainBytes {
		st.enc.buf = nil
	}
	if cap(st.tokBuf) > retainTokens {
		st.tokBuf = nil
	}
	if cap(st.hashBuf) > retainHashes {
		st.hashBuf = nil
	}
	d.pool.Put(st)
}

func (d *Dynamo) errorHandler(ctx *fasthttp.RequestCtx, err error) {
	st := d.pool.Get().(*dynState)
	st.model = st.model[:0]
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		d.opError(ctx, st, 413, "request body exceeds "+strconv.Itoa(d.opts.MaxBodyBytes)+" bytes")
	} else {
		d.opError(ctx, st, 400, "malformed HTTP request")
	}
	d.finish(ctx, dOther, st, ctx.Time())
}

// opError answers {"error": msg}.
func (d *Dynamo) opError(ctx *fasthttp.RequestCtx, st *dynState, status int, msg string) {
	e := &st.enc
	e.reset(true)
	e.mapHeader(1)
	e.str("error")
	e.str(msg)
	d.body(ctx, status, e.buf)
}

// reqError answers a field error with the Mooncake envelope
// {"error", "reason", "field"?, "index"?} (Dynamo answers a bare message; the extra keys
// say which field).
func (d *Dynamo) reqError(ctx *fasthttp.RequestCtx, st *dynState, status int, re *RequestError) {
	n := 2
	if re.Field != "" {
		n++
	}
	if re.Index >= 0 {
		n++
	}
	e := &st.enc
	e.reset(true)
	e.mapHeader(n)
	e.str("error")
	e.str(re.Msg)
	e.str("reason")
	e.str(ReasonOf(re))
	if re.Field != "" {
		e.str("field")
		e.str(re.Field)
	}
	if re.Index >= 0 {
		e.str("index")
		e.int(int64(re.Index))
	}
	d.body(ctx, status, e.buf)
}

func (d *Dynamo) body(ctx *fasthttp.RequestCtx, status int, b []byte) {
	ctx.SetStatusCode(status)
	ctx.SetContentType(contentTypeJSON)
	ctx.SetBody(b)
}

func (d *Dynamo) ok(ctx *fasthttp.RequestCtx, st *dynState, status int) {
	e := &st.enc
	e.reset(true)
	e.mapHeader(1)
	e.str("status")
	e.str("ok")
	d.body(ctx, status, e.buf)
}

// jsonBody checks the Content-Type (JSON or absent) and returns a reader.
func (d *Dynamo) jsonBody(ctx *fasthttp.RequestCtx, st *dynState) (reader, bool) {
	if json, rerr := requestDialect(ctx); rerr != nil || !json {
		d.reqError(ctx, st, 415, &RequestError{Err: ErrUnsupportedContentType, Index: noIndex,
			Msg: "Content-Type must be application/json"})
		return nil, false
	}
	return st.reader(ctx.PostBody(), true), true
}

func (d *Dynamo) handleReopen(ctx *fasthttp.RequestCtx, st *dynState) {
	if d.alog != nil {
		if err := d.alog.reopen(); err != nil {
			d.opts.Logger.Error("access log reopen failed", "err", err)
			d.opError(ctx, st, 500, "reopen access log: "+err.Error())
			return
		}
	}
	d.ok(ctx, st, 200)
}

// ---- registry --------------------------------------------------------------

// DynamoWorker is one Dynamo registration (POST /register, --workers).
type DynamoWorker struct {
	InstanceID     uint64
	Endpoint       string
	ReplayEndpoint string
	ModelName      string
	RoutingGroup   string // "" = "default"
	BlockSize      int
	DPRank         uint32
	// Type is the event dialect; 0 = DynamoOptions.Publisher.
	Type core.PublisherType
}

// ErrDynamoConflict wraps the /register conflicts Dynamo answers 409.
var ErrDynamoConflict = errors.New("conductor: dynamo registration conflict")

// registration maps a Dynamo worker onto a conductor registration: the
// indexer's context (dynamoContext), the xxh3 standard profile.
func (d *Dynamo) registration(w *DynamoWorker) core.Registration {
	t := w.Type
	if t == 0 {
		t = d.opts.Publisher
	}
	ck := dynamoContext(dynKey{w.ModelName, w.RoutingGroup}, w.BlockSize)
	return core.Registration{
		Endpoint: w.Endpoint, ReplayEndpoint: w.ReplayEndpoint, Type: t,
		ModelName: ck.ModelName, LoraName: ck.LoraName, TenantID: ck.TenantID, BlockSize: ck.BlockSize,
		InstanceID: strconv.FormatUint(w.InstanceID, 10), DPRank: int32(w.DPRank),
		Profile: hash.DefaultProfile(),
	}
}

// Register registers one worker rank with Dynamo's rules: the indexer's block
// size is fixed by its first registration; an instance belongs to one indexer;
// (instance, dp_rank) registers once. Conflicts wrap ErrDynamoConflict (and
// core.ErrConflict); malformed input core.ErrInvalid.
func (d *Dynamo) Register(w DynamoWorker) error {
	if w.RoutingGroup == "" {
		w.RoutingGroup = "default"
	}
	switch {
	case w.ModelName == "":
		return fmt.Errorf("register: model_name is required: %w", core.ErrInvalid)
	case w.Endpoint == "":
		return fmt.Errorf("register: endpoint is required: %w", core.ErrInvalid)
	case w.BlockSize <= 0:
		return fmt.Errorf("register: block_size must be > 0: %w", core.ErrInvalid)
	case w.DPRank > 1<<31-1:
		return fmt.Errorf("register: dp_rank=%d out of range: %w", w.DPRank, core.ErrInvalid)
	}
	k := dynKey{w.ModelName, w.RoutingGroup}
	d.mu.Lock()
	d.pruneLocked()
	if bs, ok := d.indexers[k]; ok && bs != w.BlockSize {
		d.mu.Unlock()
		return fmt.Errorf("register: indexer %s has block_size %d, not %d: %w: %w", k, bs, w.BlockSize, ErrDynamoConflict, core.ErrConflict)
	}
	if old := d.workers[w.InstanceID]; old != nil {
		if old.key != k {
			d.mu.Unlock()
			return fmt.Errorf("register: instance %d is registered for %s: %w: %w", w.InstanceID, old.key, ErrDynamoConflict, core.ErrConflict)
		}
		if _, dup := old.ranks[w.DPRank]; dup {
			d.mu.Unlock()
			return fmt.Errorf("register: instance %d dp_rank %d is already registered: %w: %w", w.InstanceID, w.DPRank, ErrDynamoConflict, core.ErrConflict)
		}
	}
	reg := d.registration(&w)
	if _, err := d.reg.Register(reg); err != nil {
		d.mu.Unlock()
		return err
	}
	if _, ok := d.indexers[k]; !ok {
		d.setIndexerLocked(k, w.BlockSize)
	}
	wk := d.workers[w.InstanceID]
	if wk == nil {
		wk = &dynWorker{key: k, ranks: map[uint32]dynRank{}}
		d.workers[w.InstanceID] = wk
	}
	wk.ranks[w.DPRank] = dynRank{endpoint: w.Endpoint, replay: w.ReplayEndpoint}
	n, hook := len(d.workers), d.onRegister
	d.mu.Unlock()
	if hook != nil {
		hook(n)
	}
	return nil
}

// pruneLocked forgets ranks whose registration left the index by another way
// (the Mooncake /unregister). Caller holds d.mu.
func (d *Dynamo) pruneLocked() {
	for id, w := range d.workers {
		for r := range w.ranks {
			bs := d.indexers[w.key]
			ck := dynamoContext(w.key, bs)
			sub, ok := d.ix.Lookup(core.ServiceKey{InstanceID: strconv.FormatUint(id, 10), TenantID: ck.TenantID, DPRank: int32(r)})
			if !ok {
				delete(w.ranks, r)
				continue
			}
			if reg := sub.Registration(); reg.ContextKey() != ck {
				delete(w.ranks, r)
			}
		}
		if len(w.ranks) == 0 {
			delete(d.workers, id)
		}
	}
}

// Unregister removes an instance from every group of model (group == ""),
// from one group, or one dp_rank of it (rank != nil). It reports how many
// ranks were removed (0: nothing matched, an error wrapping core.ErrNotFound).
func (d *Dynamo) Unregister(instance uint64, model, group string, rank *uint32) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pruneLocked()
	w := d.workers[instance]
	if w == nil || w.key.model != model || (group != "" && w.key.group != group) {
		return 0, fmt.Errorf("unregister: instance %d not registered for %s: %w", instance, dynKey{model, group}, core.ErrNotFound)
	}
	var ranks []uint32
	for r := range w.ranks {
		if rank == nil || *rank == r {
			ranks = append(ranks, r)
		}
	}
	if len(ranks) == 0 {
		return 0, fmt.Errorf("unregister: instance %d has no dp_rank %d: %w", instance, *rank, core.ErrNotFound)
	}
	sort.Slice(ranks, func(i, j int) bool { return ranks[i] < ranks[j] })
	var errs []error
	n := 0
	for _, r := range ranks {
		k := core.ServiceKey{InstanceID: strconv.FormatUint(instance, 10), TenantID: w.key.group, DPRank: int32(r)}
		if _, err := d.reg.Unregister(k); err != nil && !errors.Is(err, core.ErrNotFound) {
			errs = append(errs, err)
			continue
		}
		delete(w.ranks, r)
		n++
	}
	if len(w.ranks) == 0 {
		delete(d.workers, instance)
	}
	return n, errors.Join(errs...)
}

// registerFields are the /register body keys.
const (
	drInstance = iota
	drEndpoint
	drModel
	drBlockSize
	drGroup
	drRank
	drReplay
	drType
	drIgnored
	numDynReg
)

func dynRegKey(key []byte) (int, bool) {
	switch string(key) {
	case "instance_id":
		return drInstance, false
	case "endpoint":
		return drEndpoint, false
	case "model_name":
		return drModel, false
	case "block_size":
		return drBlockSize, false
	case "routing_group":
		return drGroup, false
	case "dp_rank":
		return drRank, false
	case "replay_endpoint":
		return drReplay, false
	case "type":
		return drType, false
	case "additional_salt", "additionalsalt", "tenant_id":
		return drIgnored, true
	}
	return -1, false
}

// instanceField accepts a u64 as a JSON number or a string of digits.
func instanceField(v *value) (uint64, *RequestError) {
	switch v.kind {
	case kindInt:
		if v.i >= 0 {
			return uint64(v.i), nil
		}
	case kindUint:
		return v.u, nil
	case kindStr:
		if u, err := strconv.ParseUint(string(v.s), 10, 64); err == nil {
			return u, nil
		}
		return 0, reqErr(ErrInvalidValue, "instance_id", "instance_id must be an unsigned 64-bit integer")
	}
	if v.isInt() {
		return 0, reqErr(ErrOutOfRange, "instance_id", "instance_id must be an unsigned 64-bit integer")
	}
	return 0, reqErr(ErrInvalidType, "instance_id", "instance_id must be a number or a string")
}

// decodeDynamoRegister reads a /register body. Unknown keys are ignored (as
// serde does by default); the known ones are checked strictly.
func decodeDynamoRegister(r reader) (DynamoWorker, *RequestError) {
	var vals [numDynReg]value
	var seen [numDynReg]bool
	var w DynamoWorker
	if fe := scanFields(r, "", seen[:], func(key []byte) (int, bool) {
		id, skip := dynRegKey(key)
		return id, skip || id < 0
	}, func(id int, _ []byte) { vals[id] = r.value() }); fe != nil {
		return w, fe
	}
	for _, f := range []struct {
		id   int
		name string
	}{{drInstance, "instance_id"}, {drEndpoint, "endpoint"}, {drModel, "model_name"}, {drBlockSize, "block_size"}} {
		if !seen[f.id] {
			return w, reqErr(ErrMissing, f.name, f.name+" is required")
		}
	}
	var fe *RequestError
	if w.InstanceID, fe = instanceField(&vals[drInstance]); fe != nil {
		return w, fe
	}
	var b []byte
	if b, fe = strField(&vals[drEndpoint], "endpoint"); fe != nil {
		return w, fe
	}
	w.Endpoint = string(b)
	if b, fe = strField(&vals[drModel], "model_name"); fe != nil {
		return w, fe
	}
	w.ModelName = string(b)
	bs, fe := blockSizeField(&vals[drBlockSize], "block_size")
	if fe != nil {
		return w, fe
	}
	if bs > 1<<31-1 {
		return w, reqErr(ErrOutOfRange, "block_size", "block_size is too large")
	}
	w.BlockSize = int(bs)
	if seen[drGroup] {
		if b, fe = optStrField(&vals[drGroup], "routing_group", true); fe != nil {
			return w, fe
		}
		w.RoutingGroup = string(b)
	}
	if seen[drRank] && vals[drRank].kind != kindNil {
		v := &vals[drRank]
		if v.kind != kindInt || v.i < 0 || v.i > 1<<31-1 {
			return w, reqErr(ErrInvalidValue, "dp_rank", "dp_rank must be a non-negative 32-bit integer")
		}
		w.DPRank = uint32(v.i)
	}
	if seen[drReplay] {
		if b, fe = optStrField(&vals[drReplay], "replay_endpoint", true); fe != nil {
			return w, fe
		}
		w.ReplayEndpoint = string(b)
	}
	if seen[drType] && vals[drType].kind != kindNil {
		b, fe = strField(&vals[drType], "type")
		if fe != nil {
			return w, fe
		}
		t, err := core.ParsePublisherType(string(b))
		if err != nil || (t != core.PublisherVLLM && t != core.PublisherSGLang) {
			return w, reqErr(ErrInvalidValue, "type", "type must be vLLM or SGLang")
		}
		w.Type = t
	}
	return w, nil
}

func (d *Dynamo) handleRegister(ctx *fasthttp.RequestCtx, st *dynState) {
	r, ok := d.jsonBody(ctx, st)
	if !ok {
		return
	}
	w, fe := decodeDynamoRegister(r)
	st.model = append(st.model, w.ModelName...)
	if fe != nil {
		d.reqError(ctx, st, 400, fe)
		return
	}
	if err := d.Register(w); err != nil {
		switch {
		case errors.Is(err, core.ErrConflict):
			d.opError(ctx, st, 409, err.Error())
		case errors.Is(err, core.ErrInvalid):
			d.opError(ctx, st, 400, err.Error())
		case errors.Is(err, core.ErrLimit):
			d.opError(ctx, st, 429, err.Error())
		default:
			d.opts.Logger.Error("dynamo register failed", "instance", w.InstanceID, "err", err)
			d.opError(ctx, st, 500, err.Error())
		}
		return
	}
	d.opts.Logger.Info("dynamo worker registered", "instance", w.InstanceID, "dp_rank", w.DPRank,
		"model", w.ModelName, "routing_group", w.RoutingGroup, "endpoint", w.Endpoint)
	d.ok(ctx, st, 201)
}

func (d *Dynamo) handleUnregister(ctx *fasthttp.RequestCtx, st *dynState) {
	r, ok := d.jsonBody(ctx, st)
	if !ok {
		return
	}
	const (
		uI = iota
		uM
		uG
		uR
		uX
		nU
	)
	var vals [nU]value
	var seen [nU]bool
	if fe := scanFields(r, "", seen[:], func(key []byte) (int, bool) {
		switch string(key) {
		case "instance_id":
			return uI, false
		case "model_name":
			return uM, false
		case "routing_group":
			return uG, false
		case "dp_rank":
			return uR, false
		}
		return uX, true
	}, func(id int, _ []byte) { vals[id] = r.value() }); fe != nil {
		d.reqError(ctx, st, 400, fe)
		return
	}
	if !seen[uI] {
		d.reqError(ctx, st, 400, reqErr(ErrMissing, "instance_id", "instance_id is required"))
		return
	}
	if !seen[uM] {
		d.reqError(ctx, st, 400, reqErr(ErrMissing, "model_name", "model_name is required"))
		return
	}
	inst, fe := instanceField(&vals[uI])
	if fe != nil {
		d.reqError(ctx, st, 400, fe)
		return
	}
	model, fe := strField(&vals[uM], "model_name")
	if fe != nil {
		d.reqError(ctx, st, 400, fe)
		return
	}
	st.model = append(st.model, model...)
	var group []byte
	if seen[uG] {
		if group, fe = optStrField(&vals[uG], "routing_group", true); fe != nil {
			d.reqError(ctx, st, 400, fe)
			return
		}
	}
	var rank *uint32
	if seen[uR] && vals[uR].kind != kindNil {
		v := &vals[uR]
		if v.kind != kindInt || v.i < 0 || v.i > 1<<31-1 {
			d.reqError(ctx, st, 400, reqErr(ErrInvalidValue, "dp_rank", "dp_rank must be a non-negative 32-bit integer"))
			return
		}
		r := uint32(v.i)
		rank = &r
	}
	if _, err := d.Unregister(inst, string(model), string(group), rank); err != nil {
		if errors.Is(err, core.ErrNotFound) {
			d.opError(ctx, st, 404, err.Error())
			return
		}
		d.opts.Logger.Error("dynamo unregister failed", "instance", inst, "err", err)
		d.opError(ctx, st, 500, err.Error())
		return
	}
	d.opts.Logger.Info("dynamo worker unregistered", "instance", inst, "model", string(model), "routing_group", string(group))
	d.ok(ctx, st, 200)
}

// statusRank orders listener states for aggregation: failed > pending >
// active > paused.
func statusRank(s string) int {
	switch s {
	case "failed":
		return 3
	case "pending":
		return 2
	case "active":
		return 1
	}
	return 0
}

func (d *Dynamo) listenerStates() map[core.ServiceKey]ListenerInfo {
	out := map[core.ServiceKey]ListenerInfo{}
	if d.opts.Listeners != nil {
		for _, l := range d.opts.Listeners() {
			out[l.Key] = l
		}
	}
	return out
}

func (d *Dynamo) handleWorkers(ctx *fasthttp.RequestCtx, st *dynState) {
	args := ctx.QueryArgs()
	model, group := args.Peek("model_name"), args.Peek("routing_group")
	hasModel, hasGroup := args.Has("model_name"), args.Has("routing_group")
	st.model = append(st.model, model...)
	states := d.listenerStates()
	type row struct {
		id uint64
		w  *dynWorker
		bs int
	}
	d.mu.Lock()
	d.pruneLocked()
	var rows []row
	for id, w := range d.workers {
		if (hasModel && w.key.model != string(model)) || (hasGroup && w.key.group != string(group)) {
			continue
		}
		cp := &dynWorker{key: w.key, ranks: make(map[uint32]dynRank, len(w.ranks))}
		for r, v := range w.ranks {
			cp.ranks[r] = v
		}
		rows = append(rows, row{id, cp, d.indexers[w.key]})
	}
	d.mu.Unlock()
	sort.Slice(rows, func(i, j int) bool { return rows[i].id < rows[j].id })
	e := &st.enc
	e.reset(true)
	e.arrayHeader(len(rows))
	for _, rw := range rows {
		ranks := make([]uint32, 0, len(rw.w.ranks))
		for r := range rw.w.ranks {
			ranks = append(ranks, r)
		}
		sort.Slice(ranks, func(i, j int) bool { return ranks[i] < ranks[j] })
		agg := ""
		infos := make([]ListenerInfo, len(ranks))
		for i, r := range ranks {
			li, ok := states[core.ServiceKey{InstanceID: strconv.FormatUint(rw.id, 10), TenantID: rw.w.key.group, DPRank: int32(r)}]
			if !ok {
				li.State = "pending"
			}
			infos[i] = li
			if agg == "" || statusRank(li.State) > statusRank(agg) {
				agg = li.State
			}
		}
		e.mapHeader(8)
		e.str("instance_id")
		e.uint(rw.id)
		e.str("source")
		e.str("zmq")
		e.str("status")
		e.str(agg)
		e.str("model_name")
		e.str(rw.w.key.model)
		e.str("routing_group")
		e.str(rw.w.key.group)
		e.str("block_size")
		e.int(int64(rw.bs))
		e.str("endpoints")
		e.mapHeader(len(ranks))
		for _, r := range ranks {
			e.decKey(int64(r))
			e.str(rw.w.ranks[r].endpoint)
		}
		e.str("listeners")
		e.mapHeader(len(ranks))
		for i, r := range ranks {
			e.decKey(int64(r))
			n := 2
			if infos[i].LastError != "" {
				n++
			}
			e.mapHeader(n)
			e.str("endpoint")
			e.str(rw.w.ranks[r].endpoint)
			e.str("status")
			e.str(infos[i].State)
			if infos[i].LastError != "" {
				e.str("last_error")
				e.str(infos[i].LastError)
			}
		}
	}
	d.body(ctx, 200, e.buf)
}

// counts returns the number of indexers, instances and listeners per state.
func (d *Dynamo) counts() (models, workers int, listeners map[string]int) {
	states := d.listenerStates()
	listeners = map[string]int{"pending": 0, "active": 0, "paused": 0, "failed": 0}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pruneLocked()
	for id, w := range d.workers {
		for r := range w.ranks {
			li, ok := states[core.ServiceKey{InstanceID: strconv.FormatUint(id, 10), TenantID: w.key.group, DPRank: int32(r)}]
			if !ok {
				li.State = "pending"
			}
			listeners[li.State]++
		}
	}
	return len(d.indexers), len(d.workers), listeners
}

// indexer returns the block size of an indexer, lock-free. k may hold
// views of a request body: the map lookup does not retain it.
func (d *Dynamo) indexer(k dynKey) (int, bool) {
	m := d.snap.Load()
	if m == nil {
		return 0, false
	}
	bs, ok := (*m)[k]
	return bs, ok
}

// AddIndexer records an indexer's block size (from a peer's dump) unless it
// exists; it reports a conflicting block size as an error.
func (d *Dynamo) AddIndexer(model, group string, blockSize int) error {
	if group == "" {
		group = "default"
	}
	k := dynKey{model, group}
	d.mu.Lock()
	defer d.mu.Unlock()
	if bs, ok := d.indexers[k]; ok && bs != blockSize {
		return fmt.Errorf("indexer %s has block_size %d, dump says %d: %w", k, bs, blockSize, core.ErrConflict)
	}
	d.setIndexerLocked(k, blockSize)
	return nil
}

// setIndexerLocked records an indexer and republishes the read snapshot.
// Caller holds d.mu.
func (d *Dynamo) setIndexerLocked(k dynKey, blockSize int) {
	d.indexers[k] = blockSize
	m := make(map[dynKey]int, len(d.indexers))
	for k, v := range d.indexers {
		m[k] = v
	}
	d.snap.Store(&m)
}

// ---- peers ------------------------------------------------------------------

func checkPeerURL(u string) error {
	if len(u) < 8 || (u[:7] != "http://" && (len(u) < 9 || u[:8] != "https://")) {
		return fmt.Errorf("peer %q: want an http:// or https:// URL", u)
	}
	return nil
}

func (d *Dynamo) handlePeer(ctx *fasthttp.RequestCtx, st *dynState, add bool) {
	r, ok := d.jsonBody(ctx, st)
	if !ok {
		return
	}
	var v value
	var seen [1]bool
	if fe := scanFields(r, "", seen[:], func(key []byte) (int, bool) {
		if string(key) == "url" {
			return 0, false
		}
		return -1, true
	}, func(int, []byte) { v = r.value() }); fe != nil {
		d.reqError(ctx, st, 400, fe)
		return
	}
	if !seen[0] {
		d.reqError(ctx, st, 400, reqErr(ErrMissing, "url", "url is required"))
		return
	}
	b, fe := strField(&v, "url")
	if fe != nil {
		d.reqError(ctx, st, 400, fe)
		return
	}
	u := string(b)
	if err := checkPeerURL(u); err != nil {
		d.reqError(ctx, st, 400, reqErr(ErrInvalidValue, "url", err.Error()))
		return
	}
	d.mu.Lock()
	idx := -1
	for i, p := range d.peers {
		if p == u {
			idx = i
		}
	}
	switch {
	case add && idx < 0:
		d.peers = append(d.peers, u)
	case !add && idx >= 0:
		d.peers = append(d.peers[:idx], d.peers[idx+1:]...)
	case !add:
		d.mu.Unlock()
		d.opError(ctx, st, 404, "peer not registered: "+u)
		return
	}
	d.mu.Unlock()
	if add {
		d.ok(ctx, st, 201)
	} else {
		d.ok(ctx, st, 200)
	}
}

func (d *Dynamo) handlePeers(ctx *fasthttp.RequestCtx, st *dynState) {
	peers := d.Peers()
	e := &st.enc
	e.reset(true)
	e.arrayHeader(len(peers))
	for _, p := range peers {
		e.str(p)
	}
	d.body(ctx, 200, e.buf)
}
