package server

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/seed-c7a81618/conductor/core"
)

// Options configure a Core and the surfaces built over it. The zero value is
// valid: EnsureDefaults fills every zero field with the default its comment
// gives. A surface with limits of its own (the Dynamo listener's body limit
// and timeouts) overrides the fields it names (HostOptions).
type Options struct {
	// MaxBodyBytes bounds a request body; a larger body (declared, or as it
	// arrives when chunked) is answered 413 with reason limit_exceeded. The
	// largest legitimate request is a 1M-token JSON query (about 8 MiB with
	// 6-digit token ids, 11 MiB with 10-digit ones). Default 16 MiB.
	MaxBodyBytes int
	// MaxQueryTokens bounds token_ids (and seq_hashes) elements per query; more
	// is 400 out_of_range naming the field. Default 1<<20.
	MaxQueryTokens int

	// ReadTimeout bounds reading one request (headers and body); the
	// Limiter also cuts a body slower than its MinBodyRate. Default 30s.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing one response. Default 30s.
	WriteTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long. Default 60s.
	IdleTimeout time.Duration
	// Concurrency bounds concurrently served connections inside fasthttp.
	// Default 256 * 1024 (fasthttp's default); Limiter is the real cap.
	Concurrency int
	// ReadBufferBytes is each connection's read buffer (fasthttp
	// ReadBufferSize), which also bounds the request head. Default 64 KiB: a
	// query body up to ~60 KB (8k tokens in any form) then arrives with its
	// head in one read syscall instead of 3-4 with fasthttp's 4 KiB (the
	// streamed body's 8 KiB prefetch and the rest each refill it), about 3 µs of
	// server CPU per 8k-token /query. Held per connection while it is open.
	ReadBufferBytes int
	// Limiter bounds open connections and request-body bytes in flight; share
	// one across every server of a process. Default: a Limiter of its own with
	// DefaultMaxConns and DefaultMaxInflightBodyBytes.
	Limiter *Limiter

	// Access decides who may call what (bearer tokens). Default nil: every
	// endpoint open, every caller the admin.
	Access *Access
	// Gate is the door registrations go through (endpoint policy, ownership,
	// durable state); share one across every surface of a process. Default: a
	// Gate over the registrar with no endpoint policy.
	Gate *Gate

	// Version is reported by the Mooncake surface's /health. Default "dev".
	Version string
	// Logger receives request errors (debug) and failures (error). Default slog.Default().
	Logger *slog.Logger
	// ExtraMetrics are written on the Mooncake surface's /metrics after the
	// Core's own set (e.g. the ZMQ ingester's counters). Default none.
	ExtraMetrics []*metrics.Set
	// Ready, when set, is asked by the Mooncake surface's /health: an error
	// answers 503 with status "not_ready", the error envelope (the error's
	// text as "error", reason "not_ready") and the build info (a NATS replica
	// catching up). Default nil: always ready.
	Ready func() error
	// DisableProcessMetrics drops the go_* and process_* metrics from the
	// Mooncake surface's /metrics. Default false (they are exposed).
	DisableProcessMetrics bool
	// Connections, when set, reports how each registration's subscriber
	// stands (the ZMQ ingester's listeners), for the Mooncake surface's
	// /services. Called once per request. Default nil: /services shows
	// "Connection": null.
	Connections func() map[core.ServiceKey]Connection
}

// Connection is how one registration's subscriber stands, as /services
// shows it.
type Connection struct {
	// State is "pending" (not connected to the publisher yet, or
	// reconnecting), "active", "failed" (its sockets failed; retried) or
	// "paused".
	State string
	// LastError says why it is not active, or the last failure ("" when
	// there is none).
	LastError string
	// Events counts the events applied from it; LastSeq is the sequence
	// number of the last batch received (0 before the first).
	Events, LastSeq uint64
}

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = 16 << 20
	}
	if o.MaxQueryTokens == 0 {
		o.MaxQueryTokens = 1 << 20
	}
	if o.ReadTimeout == 0 {
		o.ReadTimeout = 30 * time.Second
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = 30 * time.Second
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = 60 * time.Second
	}
	if o.Concurrency == 0 {
		o.Concurrency = 256 * 1024
	}
	if o.ReadBufferBytes == 0 {
		o.ReadBufferBytes = DefaultReadBufferBytes
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// DefaultReadBufferBytes is Options.ReadBufferBytes' default.
const DefaultReadBufferBytes = 64 << 10

// ErrInvalidOptions is wrapped by every Validate failure.
var ErrInvalidOptions = errors.New("conductor: invalid httpd options")

// Validate reports every bad field.
func (o *Options) Validate() error {
	var errs []error
	bad := func(field string, v any, want string) {
		errs = append(errs, fmt.Errorf("%s=%v: %s: %w", field, v, want, ErrInvalidOptions))
	}
	if o.ReadBufferBytes < 0 {
		bad("ReadBufferBytes", o.ReadBufferBytes, "must be > 0")
	}
	if o.MaxBodyBytes < 0 {
		bad("MaxBodyBytes", o.MaxBodyBytes, "must be > 0")
	}
	if o.MaxQueryTokens < 0 {
		bad("MaxQueryTokens", o.MaxQueryTokens, "must be > 0")
	}
	if o.ReadTimeout < 0 {
		bad("ReadTimeout", o.ReadTimeout, "must be > 0")
	}
	if o.WriteTimeout < 0 {
		bad("WriteTimeout", o.WriteTimeout, "must be > 0")
	}
	if o.IdleTimeout < 0 {
		bad("IdleTimeout", o.IdleTimeout, "must be > 0")
	}
	if o.Concurrency < 0 {
		bad("Concurrency", o.Concurrency, "must be > 0")
	}
	for i, s := range o.ExtraMetrics {
		if s == nil {
			bad(fmt.Sprintf("ExtraMetrics[%d]", i), nil, "must not be nil")
		}
	}
	return errors.Join(errs...)
}
