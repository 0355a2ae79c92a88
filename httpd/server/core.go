package server

import (
	"fmt"
	"io"
	"sync"

	"github.com/VictoriaMetrics/metrics"

	"github.com/seed-c7a81618/conductor/core"
)

// Registrar starts and stops event consumption for registrations; the ZMQ
// ingester (ingest.Ingester in wire/ingest) implements it. It must be safe for
// concurrent use.
type Registrar interface {
	// Register subscribes r. created=false means an identical registration
	// already existed (idempotent success). Errors wrapping core.ErrConflict or
	// core.ErrInvalid are answered 400 invalid_registration, core.ErrLimit 400
	// limit_exceeded, anything else 500.
	Register(r core.Registration) (created bool, err error)
	// Unregister stops the subscription k and removes its contributions. An
	// error wrapping core.ErrNotFound is answered 404.
	Unregister(k core.ServiceKey) (core.Registration, error)
}

// Core is what the surfaces of one process share: the index, the
// registration Gate over the Registrar, bearer-token Access, the Limiter of
// connections and body bytes, the Options, the metric set of the main
// port's /metrics and the pool of per-request State. Build one with New,
// then each surface over it (packages mooncake, rpc and dynamo); each serves
// its listener through a Host, whose preamble is the same for all. A Core is
// safe for concurrent use.
type Core struct {
	ix   *core.Index
	reg  Registrar
	opts Options
	lim  *Limiter
	gate *Gate
	m    *queryMetrics
	// missKeys are the context keys behind QueryMiss's reasons.
	missKeys missKeys

	// pool holds *State: per-request scratch (readers, token buffers, the
	// query result, the response encoder), so a query allocates nothing.
	pool sync.Pool
	// big keeps request-body buffers too large for pool's States.
	big bigBufs
}

// New returns the Core over ix that registers publishers through reg (behind
// Options.Gate, or a Gate of its own). Without Options.Limiter it makes a
// Limiter of its own and adds its metrics to Options.ExtraMetrics.
func New(ix *core.Index, reg Registrar, opts Options) (*Core, error) {
	if ix == nil || reg == nil {
		return nil, fmt.Errorf("server.New: index and registrar are required: %w", ErrInvalidOptions)
	}
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	c := &Core{ix: ix, reg: reg, opts: opts, lim: opts.Limiter, gate: opts.Gate}
	if c.gate == nil {
		c.gate = NewGate(reg, ix, nil)
	}
	if c.lim == nil {
		c.lim = NewLimiter(0, 0, opts.Logger)
		c.opts.ExtraMetrics = append(append([]*metrics.Set(nil), opts.ExtraMetrics...), c.lim.Metrics())
	}
	c.pool.New = func() any { return new(State) }
	c.big = newBigBufs(c.opts.MaxQueryTokens)
	c.m = newQueryMetrics(ix)
	c.m.set.RegisterMetricsWriter(c.WriteRegistrationMetrics)
	return c, nil
}

// WriteRegistrationMetrics writes the registration refusals every surface
// counts through the Gate (conductor_registrations_refused_total), for each
// listener's /metrics.
func (c *Core) WriteRegistrationMetrics(w io.Writer) {
	metrics.WriteCounterUint64(w, `conductor_registrations_refused_total{reason="client_quota"}`, c.gate.QuotaRefusals())
}

// Index is the index every surface serves.
func (c *Core) Index() *core.Index { return c.ix }

// Options are the Core's options, with defaults filled in.
func (c *Core) Options() Options { return c.opts }

// Gate is the door every surface's registrations go through.
func (c *Core) Gate() *Gate { return c.gate }

// Limiter bounds the connections and body bytes of every surface.
func (c *Core) Limiter() *Limiter { return c.lim }

// Metrics returns the metric set of the main port's /metrics: the query
// counters, the index gauges read at scrape time, and what the surfaces
// register in it (request counts and latencies per route).
func (c *Core) Metrics() *metrics.Set { return c.m.set }
