package main

import (
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/dynamo"
	"github.com/seed-c7a81618/conductor/httpd/server"
	"github.com/seed-c7a81618/conductor/replica"
)

// Scale-out on NATS JetStream (package replica): --nats-publish makes this
// conductor a relay (what its ZMQ subscriptions apply goes to the stream),
// --nats-consume a query replica (its index is built from the stream; no ZMQ
// subscriptions, no state directory, no configuration-file services). With
// neither flag nothing here runs and no NATS is needed.

type natsSettings struct {
	url              string
	publish, consume bool
	opts             replica.Options
}

func addNATSFlags(fs *flag.FlagSet, s *natsSettings) {
	o := &s.opts
	fs.StringVar(&s.url, "nats-url", "", "NATS server URL(s), comma-separated (with --nats-publish or --nats-consume)")
	fs.BoolVar(&s.publish, "nats-publish", false, "relay: publish what the ZMQ subscriptions apply, and the registrations, to the JetStream stream")
	fs.BoolVar(&s.consume, "nats-consume", false, "replica: build the index from the JetStream stream (no ZMQ subscriptions of its own)")
	fs.StringVar(&o.Stream, "nats-stream", "CONDUCTOR", "JetStream stream name")
	fs.StringVar(&o.SubjectPrefix, "nats-subject-prefix", "conductor.events", "subject prefix: messages go to PREFIX.<tenant>.<model>")
	fs.IntVar(&o.Replicas, "nats-replicas", 1, "relay: the stream's replication factor in a NATS cluster")
	fs.DurationVar(&o.MaxAge, "nats-max-age", 24*time.Hour, "relay: how long the stream keeps a message")
	fs.Int64Var(&o.MaxBytes, "nats-max-bytes", -1, "relay: the stream's size bound in bytes (-1: none)")
	fs.DurationVar(&o.Duplicates, "nats-dedup-window", 2*time.Minute, "relay: JetStream's message-id deduplication window (relay failover)")
	fs.Int64Var(&o.BufferBytes, "nats-buffer-bytes", 64<<20, "relay: bytes of messages held while NATS is slow or down (past it: dropped, counted)")
	fs.StringVar(&o.FilterTenant, "nats-filter-tenant", "", "replica: consume only this tenant's registrations (a shard)")
	fs.StringVar(&o.FilterModel, "nats-filter-model", "", "replica: with --nats-filter-tenant, only this model")
	fs.Uint64Var(&o.MaxLag, "nats-max-lag", 1000, "replica: /health is not ready while more stream messages than this are unapplied")
	fs.DurationVar(&o.MaxStale, "nats-max-stale", 30*time.Second, "replica: /health is not ready once NATS has been unreachable this long")
	fs.DurationVar(&o.SnapshotInterval, "nats-snapshot-interval", 0, "replica: write an index snapshot to the JetStream object store this often (0: never)")
	fs.IntVar(&o.SnapshotKeep, "nats-snapshot-keep", 3, "replica: snapshots of one shard kept in the object store")
	fs.StringVar(&o.Bucket, "nats-snapshot-bucket", "conductor-snapshots", "object store bucket of snapshots")
	fs.BoolVar(&o.NoSnapshotLoad, "nats-no-snapshot-load", false, "replica: consume the stream from its start even if a snapshot exists")
}

func (s *natsSettings) validate() error {
	if !s.publish && !s.consume {
		return nil
	}
	if s.publish && s.consume {
		return fmt.Errorf("--nats-publish and --nats-consume: choose one (a relay or a replica)")
	}
	s.opts.URL = s.url
	if err := s.opts.Validate(); err != nil {
		return fmt.Errorf("--nats-*: %w", err)
	}
	return nil
}

// natsPart is the relay or the replica of this process (nil fields: off).
type natsPart struct {
	relay *replica.Relay
	rep   *replica.Replica
	log   *slog.Logger
	dyn   *dynamo.Server // set once the Dynamo surface exists (before start)
}

// newNATSRelay returns the relay for --nats-publish (nil without): it must
// exist before the index, whose observer it is.
func newNATSRelay(s *natsSettings, log *slog.Logger) (*replica.Relay, error) {
	if !s.publish {
		return nil, nil
	}
	o := s.opts
	o.Logger = log
	return replica.NewRelay(o)
}

// observer is the relay as the index's observer (nil interface when off).
func observerOf(r *replica.Relay) core.Observer {
	if r == nil {
		return nil
	}
	return r
}

// attach builds the replica for --nats-consume over ix.
func (p *natsPart) attach(s *natsSettings, ix *core.Index) error {
	if !s.consume {
		return nil
	}
	o := s.opts
	o.Logger = p.log
	rep, err := replica.NewReplica(ix, o, p.registered)
	if err != nil {
		return err
	}
	p.rep = rep
	return nil
}

// registered: Dynamo workers' indexers exist on the replica as on the relay,
// so the Dynamo surface answers their model and group.
func (p *natsPart) registered(reg core.Registration) {
	if reg.Origin != dynamo.Origin || p.dyn == nil {
		return
	}
	if err := p.dyn.AddIndexer(reg.ModelName, reg.TenantID, reg.BlockSize); err != nil {
		p.log.Warn("replica: Dynamo indexer not added", "model", reg.ModelName, "group", reg.TenantID, "err", err)
	}
}

func (p *natsPart) metrics() []*metrics.Set {
	var out []*metrics.Set
	if p.relay != nil {
		out = append(out, p.relay.Metrics())
	}
	if p.rep != nil {
		out = append(out, p.rep.Metrics())
	}
	return out
}

// ready is server.Options.Ready: a replica is ready once caught up.
func (p *natsPart) ready() error {
	if p.rep == nil {
		return nil
	}
	return p.rep.Ready()
}

func (p *natsPart) start(a *app) {
	if p.relay != nil {
		p.relay.Start(a.ix)
	}
	if p.rep != nil {
		p.rep.Start()
	}
}

func (p *natsPart) stop(drain time.Duration) {
	if p.relay != nil {
		p.relay.Close(drain)
	}
	if p.rep != nil {
		p.rep.Close()
	}
}

// errReplicaRegistration answers /register and /unregister (every surface:
// HTTP, RPC, Dynamo) on a query replica with 403: its registrations come from
// the stream, and one made here would exist on this replica only.
var errReplicaRegistration = fmt.Errorf("%w: this conductor is a NATS query replica (--nats-consume): "+
	"register and unregister engines on the relay", server.ErrForbidden)

// replicaRegistrar is a query replica's server.Registrar: it refuses.
type replicaRegistrar struct{}

func (replicaRegistrar) Register(core.Registration) (bool, error) {
	return false, errReplicaRegistration
}

func (replicaRegistrar) Unregister(core.ServiceKey) (core.Registration, error) {
	return core.Registration{}, errReplicaRegistration
}
