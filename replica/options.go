package replica

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// ErrInvalidOptions: Options.Validate rejected a field.
var ErrInvalidOptions = errors.New("conductor: invalid replication options")

// Options configure a Relay or a Replica. The zero value (with URL set) is
// valid: EnsureDefaults fills every zero field with the default its comment
// gives.
type Options struct {
	// URL of the NATS server(s), comma-separated (nats://host:4222). Required.
	URL string
	// Stream is the JetStream stream's name. Default "CONDUCTOR".
	Stream string
	// SubjectPrefix heads every subject (<prefix>.<tenant>.<model>); the
	// stream holds <prefix>.>. Default "conductor.events".
	SubjectPrefix string

	// Stream configuration, applied by the relay when it creates or updates
	// the stream (replicas only read it).
	//
	// Replicas is the stream's replication factor in a NATS cluster. Default 1.
	Replicas int
	// MaxAge is how long the stream keeps a message. Default 24h.
	MaxAge time.Duration
	// MaxBytes bounds the stream's size (oldest messages go first). Default
	// -1: unbounded (MaxAge only).
	MaxBytes int64
	// Duplicates is JetStream's deduplication window for message ids (two
	// relays publishing the same engines' batches). Default 2m.
	Duplicates time.Duration
	// MemoryStorage keeps the stream in memory instead of files. Default false.
	MemoryStorage bool

	// Relay.
	//
	// BufferBytes bounds the messages a relay holds that NATS has not
	// acknowledged (NATS down or slow); past it new messages are dropped and
	// counted. Default 64 MiB.
	BufferBytes int64
	// MaxPending is how many publishes a relay has in flight. Default 1024.
	MaxPending int
	// RegistrationInterval: the relay publishes its whole registration set
	// again this often (and on every reconnection), so a replica that starts
	// after the stream's retention dropped the original messages still learns
	// them. Default 5m.
	RegistrationInterval time.Duration

	// Replica.
	//
	// FilterTenant and FilterModel restrict a replica to one tenant (and
	// model) when set: a shard. Default "": everything.
	FilterTenant, FilterModel string
	// MaxLag is how many stream messages a replica may be behind and still
	// report ready. Default 1000.
	MaxLag uint64
	// MaxStale is how long a replica may be cut off from NATS and still
	// report ready (it keeps serving its index either way). Default 30s.
	MaxStale time.Duration
	// SnapshotInterval: a replica writes its index to the object store this
	// often (0: never). Default 0.
	SnapshotInterval time.Duration
	// SnapshotKeep is how many snapshots of one shard the object store keeps
	// (older ones are deleted after each write). Default 3.
	SnapshotKeep int
	// Bucket is the object store bucket of snapshots. Default
	// "conductor-snapshots".
	Bucket string
	// NoSnapshotLoad starts a replica from the stream's first message even if
	// a snapshot exists. Default false.
	NoSnapshotLoad bool
	// RestartThreshold: a batch whose ZMQ sequence is more than this below
	// the last one a replica applied for its subscription is an engine that
	// restarted (numbering from 0 again) while no relay saw its old sequence
	// (a relay that restarted without state): the replica clears the
	// subscription and applies it. Within it, the batch is an old duplicate
	// and is skipped. Default 10000, the ingest listener's default
	// (vLLM's and SGLang's replay ring: a late duplicate is within one ring
	// of the newest).
	RestartThreshold uint64

	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.Stream == "" {
		o.Stream = "CONDUCTOR"
	}
	if o.SubjectPrefix == "" {
		o.SubjectPrefix = "conductor.events"
	}
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.MaxAge == 0 {
		o.MaxAge = 24 * time.Hour
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = -1
	}
	if o.Duplicates == 0 {
		o.Duplicates = 2 * time.Minute
	}
	if o.BufferBytes == 0 {
		o.BufferBytes = 64 << 20
	}
	if o.MaxPending == 0 {
		o.MaxPending = 1024
	}
	if o.RegistrationInterval == 0 {
		o.RegistrationInterval = 5 * time.Minute
	}
	if o.MaxLag == 0 {
		o.MaxLag = 1000
	}
	if o.MaxStale == 0 {
		o.MaxStale = 30 * time.Second
	}
	if o.SnapshotKeep == 0 {
		o.SnapshotKeep = 3
	}
	if o.RestartThreshold == 0 {
		o.RestartThreshold = 10000
	}
	if o.Bucket == "" {
		o.Bucket = "conductor-snapshots"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate reports every bad field.
func (o *Options) Validate() error {
	var errs []error
	bad := func(f string, a ...any) { errs = append(errs, fmt.Errorf(f, a...)) }
	if o.URL == "" {
		bad("URL is required")
	}
	for _, c := range o.Stream {
		if c == '.' || c == '*' || c == '>' || c == ' ' || c == '/' || c == '\\' {
			bad("Stream=%q: no '.', '*', '>', '/', '\\' or space", o.Stream)
			break
		}
	}
	if o.SubjectPrefix == "" || strings.ContainsAny(o.SubjectPrefix, "*> \t") || strings.HasPrefix(o.SubjectPrefix, ".") ||
		strings.HasSuffix(o.SubjectPrefix, ".") || strings.Contains(o.SubjectPrefix, "..") {
		bad("SubjectPrefix=%q: want dot-separated tokens without wildcards", o.SubjectPrefix)
	}
	if o.Replicas < 1 || o.Replicas > 5 {
		bad("Replicas=%d: want 1..5", o.Replicas)
	}
	if o.MaxAge < 0 || o.Duplicates < 0 || o.RegistrationInterval < 0 || o.MaxStale < 0 || o.SnapshotInterval < 0 {
		bad("durations must be >= 0")
	}
	if o.MaxBytes < -1 || o.BufferBytes < 0 || o.MaxPending < 0 || o.SnapshotKeep < 0 {
		bad("MaxBytes >= -1, BufferBytes, MaxPending and SnapshotKeep >= 0")
	}
	if o.FilterModel != "" && o.FilterTenant == "" {
		bad("FilterModel needs FilterTenant")
	}
	for _, c := range o.Bucket {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			bad("Bucket=%q: letters, digits, '-' and '_' only", o.Bucket)
			break
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidOptions, errors.Join(errs...))
	}
	return nil
}
