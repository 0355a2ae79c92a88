package core

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/puzpuzpuz/xsync/v3"

	"github.com/seed-c7a81618/conductor/hash"
)

// Sentinel errors; wrap with context and test with errors.Is.
var (
	// ErrInvalid: a registration or request is semantically invalid.
	ErrInvalid = errors.New("conductor: invalid")
	// ErrConflict: a registration conflicts with existing state (service key,
	// endpoint, or a hash profile that contradicts the partition its own
	// identity bound in the context; partition.go). No state was changed.
	ErrConflict = errors.New("conductor: conflict")
	// ErrNotFound: no such registration.
	ErrNotFound = errors.New("conductor: not found")
	// ErrLimit: a configured limit would be exceeded.
	ErrLimit = errors.New("conductor: limit exceeded")
)

// FieldError attributes an error to one field of a registration or request
// (for the API's {reason, field} envelope). It wraps its cause.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// ConflictError is a registration refused because another registration
// holds its service key or its endpoint: Holder is that one's key, so a
// caller can say where it came from. It wraps ErrConflict.
type ConflictError struct {
	Holder ServiceKey
	Msg    string
}

func (e *ConflictError) Error() string { return e.Msg + ": " + ErrConflict.Error() }
func (e *ConflictError) Unwrap() error { return ErrConflict }

// Options configure an Index. The zero value is valid: every field has a
// documented default applied by EnsureDefaults.
type Options struct {
	// EngineMedia files media of engine publishers (vLLM, SGLang, standard).
	// Default: DefaultEngineMedia().
	EngineMedia MediumMap
	// PoolMedia files media of pool publishers (Mooncake). Default: DefaultPoolMedia().
	PoolMedia MediumMap
	// MaxRegistrations bounds the registry. Default 4096.
	MaxRegistrations int
	// MaxHeldEvents bounds out-of-order RFC #1527 events held per stream while
	// waiting for a missing event_id; beyond it (or when the stream goes idle)
	// the gap cannot heal: the stream's blocks are cleared (counted, logged)
	// and the held events are applied in order. Default 256.
	MaxHeldEvents int
	// MaxRanksPerSubscription bounds the distinct dp ranks (besides the
	// registered one) that a publisher may name in its batches. Default 1024.
	MaxRanksPerSubscription int
	// MaxStreamsPerSubscription bounds the RFC #1527 stream cursors (event_id
	// order state) one subscription keeps. A new stream beyond it evicts the
	// least recently used stream without held events; when every stream
	// holds events the new stream's event is dropped. Default 256.
	MaxStreamsPerSubscription int
	// MaxHeldPerSubscription bounds out-of-order events held across all the
	// subscription's streams; beyond it the gap of the stream receiving the
	// event is resolved (cleared). Default 4 × MaxHeldEvents.
	MaxHeldPerSubscription int
	// DropLogInterval is the minimum time between two WARN lines for one
	// drop reason. Default DropLogInterval (10s).
	DropLogInterval time.Duration
	// ContextSizeHint presizes each context's block map for this many blocks,
	// avoiding incremental resizes while a large index warms up (17–34 B of
	// bucket memory per hinted block: xsync rounds each shard's table up to a
	// power of two at a load of 0.75). Default 0: start small and grow.
	ContextSizeHint int
	// QueryPriority makes appliers step aside while queries are in flight
	// (ApplyDeferMax per slice of ApplySliceBlocks updates): query tail
	// latency over ingest throughput when the two compete for CPU.
	QueryPriority bool
	// ApplyNoYield stops appliers from calling runtime.Gosched between slices
	// of ApplySliceBlocks updates (they still time the slices and, with
	// QueryPriority, step aside). For appliers that run on OS threads of their
	// own at a lower kernel priority (ingest.IngestOptions.ListenerNice): there
	// the kernel already runs the query threads first, a spare P keeps one
	// free for them, and a yield of a goroutine locked to its thread costs two
	// thread hand-offs. Default false.
	ApplyNoYield bool
	// Logger receives rare, noteworthy events (drops, gaps). Default slog.Default().
	Logger *slog.Logger
	// HashMemo memoises block digests of vllm_v1 and sglang prompt chains for
	// queries (see hash.Memo); shared by every context, safe for concurrent use.
	// Default nil: off, every query hashes every block it walks.
	HashMemo *hash.Memo
	// Observer sees every change the transport makes to a subscription, in
	// the order it is made (observer.go). Default nil: none.
	Observer Observer
	// GapPolicy is what a subscription whose registration names no policy
	// does with events lost for good (gap.go). Default DefaultGapPolicy.
	GapPolicy GapPolicy
	// GapExpireAfter is how long GapExpire keeps the blocks a stream held at
	// a gap before dropping those it did not announce again. Default
	// DefaultGapExpireAfter (1m).
	GapExpireAfter time.Duration
	// MaxBlocksPerRegistration bounds the (owner, block) pairs one
	// subscription holds when its registration sets no MaxBlocks: past it
	// the oldest are evicted, counted and logged, so that a publisher that
	// never removes blocks cannot take the fleet's memory. Default
	// DefaultMaxBlocksPerRegistration (16M); negative: no bound.
	MaxBlocksPerRegistration int
	// OperatorOwners are the Registration.Owner values of the operator: the
	// admin token's ("admin", httpd.AdminPrincipal) and the configuration
	// file's ("config", cmd/conductor). For hash-profile binding they are
	// one identity, so the operator's registrations of a context must agree
	// on its profile as one client's must (partition.go). Default (nil):
	// "admin" and "config".
	OperatorOwners []string
	// MaxAdaptersPerRegistration bounds the LoRA adapter contexts one
	// registration with Registration.AdaptersFromEvents files blocks in
	// besides its home context. At the bound an adapter context the
	// registration holds nothing in is given up for the new adapter; when
	// none is empty, the new adapter's events are dropped (adapter_limit).
	// Default DefaultMaxAdaptersPerRegistration (64).
	MaxAdaptersPerRegistration int
}

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.EngineMedia == nil {
		o.EngineMedia = DefaultEngineMedia()
	}
	if o.PoolMedia == nil {
		o.PoolMedia = DefaultPoolMedia()
	}
	if o.MaxRegistrations == 0 {
		o.MaxRegistrations = 4096
	}
	if o.MaxHeldEvents == 0 {
		o.MaxHeldEvents = 256
	}
	if o.MaxRanksPerSubscription == 0 {
		o.MaxRanksPerSubscription = 1024
	}
	if o.MaxStreamsPerSubscription == 0 {
		o.MaxStreamsPerSubscription = 256
	}
	if o.MaxHeldPerSubscription == 0 {
		o.MaxHeldPerSubscription = 4 * o.MaxHeldEvents
	}
	if o.DropLogInterval == 0 {
		o.DropLogInterval = DropLogInterval
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.OperatorOwners == nil {
		o.OperatorOwners = []string{"admin", "config"}
	}
	if o.GapPolicy == GapDefault {
		o.GapPolicy = DefaultGapPolicy
	}
	if o.GapExpireAfter == 0 {
		o.GapExpireAfter = DefaultGapExpireAfter
	}
	if o.MaxBlocksPerRegistration == 0 {
		o.MaxBlocksPerRegistration = DefaultMaxBlocksPerRegistration
	}
	if o.MaxAdaptersPerRegistration == 0 {
		o.MaxAdaptersPerRegistration = DefaultMaxAdaptersPerRegistration
	}
}

// Validate reports every bad field.
func (o *Options) Validate() error {
	var errs []error
	if o.MaxRegistrations < 0 {
		errs = append(errs, fmt.Errorf("MaxRegistrations=%d: must be >= 0: %w", o.MaxRegistrations, ErrInvalid))
	}
	if o.MaxRanksPerSubscription < 0 {
		errs = append(errs, fmt.Errorf("MaxRanksPerSubscription=%d: must be >= 0: %w", o.MaxRanksPerSubscription, ErrInvalid))
	}
	if o.ContextSizeHint < 0 {
		errs = append(errs, fmt.Errorf("ContextSizeHint=%d: must be >= 0: %w", o.ContextSizeHint, ErrInvalid))
	}
	if o.MaxStreamsPerSubscription < 0 {
		errs = append(errs, fmt.Errorf("MaxStreamsPerSubscription=%d: must be >= 0: %w", o.MaxStreamsPerSubscription, ErrInvalid))
	}
	if o.MaxHeldPerSubscription < 0 {
		errs = append(errs, fmt.Errorf("MaxHeldPerSubscription=%d: must be >= 0: %w", o.MaxHeldPerSubscription, ErrInvalid))
	}
	if o.MaxHeldEvents < 0 {
		errs = append(errs, fmt.Errorf("MaxHeldEvents=%d: must be >= 0: %w", o.MaxHeldEvents, ErrInvalid))
	}
	if o.GapPolicy >= numGapPolicies {
		errs = append(errs, fmt.Errorf("GapPolicy=%d: must be one of %v: %w", o.GapPolicy, GapPolicyNames(), ErrInvalid))
	}
	if o.MaxAdaptersPerRegistration < 0 {
		errs = append(errs, fmt.Errorf("MaxAdaptersPerRegistration=%d: must be >= 0: %w", o.MaxAdaptersPerRegistration, ErrInvalid))
	}
	if o.GapExpireAfter < 0 {
		errs = append(errs, fmt.Errorf("GapExpireAfter=%v: must be > 0: %w", o.GapExpireAfter, ErrInvalid))
	}
	return errors.Join(errs...)
}

// padU64 and padI64 are counters alone on a cache line (64 bytes): every
// subscription's applier writes them from its own goroutine, and contiguous
// atomics would make the appliers on different cores invalidate each
// other's line on every batch (STYLE rule 7; xsync's padded counter).
type padU64 struct {
	atomic.Uint64
	_ [56]byte
}

type padI64 struct {
	atomic.Int64
	_ [56]byte
}

// Counters are index-wide event counters (monotonic), each on a cache line
// of its own.
type Counters struct {
	Events, Stored, Removed, Cleared padU64
	BlocksStored, BlocksRemoved      padU64
	// Dropped counts events not applied: unknown medium, wrong block size or
	// LoRA, non-main attention group, unknown context, unresolvable parent...
	Dropped        padU64
	UnknownMedia   padU64
	PartialBlocks  padU64
	UnknownParents padU64
	DuplicateIDs   padU64
	EventIDGaps    padU64
	ClearedBlocks  padU64
	// RankRejects counts events dropped for a publisher-named dp rank that is
	// out of range or beyond MaxRanksPerSubscription.
	RankRejects padU64
	// StreamGapClears counts RFC streams cleared because an event_id gap
	// could not be healed (the missing events never arrived).
	StreamGapClears padU64
	// StreamEvictions counts idle RFC stream cursors evicted at
	// MaxStreamsPerSubscription.
	StreamEvictions padU64
	// DroppedBy counts dropped events per reason (DropReason).
	DroppedBy dropCounts
	// RecoveredSkips counts batches skipped because a restored peer dump
	// already held them (stream.go).
	RecoveredSkips padU64
	// RecoveryGaps counts restored streams whose first live batch came after
	// a gap above the dump's watermark (the gap policy applied to them).
	RecoveryGaps padU64
	// GapKeeps, GapClears and GapMarks count the gaps (transport, event_id
	// and recovery gaps) each gap policy handled; ExpiredBlocks the block
	// entries GapExpire dropped.
	GapKeeps, GapClears, GapMarks, ExpiredBlocks padU64
	// EvictedBlocks counts (owner, block) pairs evicted because their
	// subscription was over its block bound (Options.MaxBlocksPerRegistration).
	EvictedBlocks padU64
	// RebindClears counts subscription contexts whose blocks filed under
	// keys of the xxh3 default were cleared when their pool-only partition
	// was bound to another profile (rebind.go; the blocks count in
	// ClearedBlocks).
	RebindClears padU64
}

// Index is the whole prefix index: the registry of subscriptions and the
// contexts they feed. Safe for concurrent use.
type Index struct {
	opts Options
	// queries counts Query calls in flight (applyrun.go).
	queries atomic.Int64

	// contexts maps a context key to its first partition (the others follow
	// through context.next; partition.go). Read lock-free by queries;
	// written under mu.
	contexts *xsync.MapOf[ContextKey, *context]

	// mu guards the registry maps below and context creation/reclaim. Lock
	// order: Subscription.mu → Index.mu → context.mu; never the reverse.
	mu        sync.Mutex
	subs      map[ServiceKey]*Subscription
	endpoints map[string]ServiceKey
	// replays are the registrations by the keys of the replay sockets
	// their replay_endpoint may reach (several may share one: the ranks of
	// one engine behind one replay socket).
	replays map[string][]ServiceKey
	nextSub uint32

	counters Counters
	// holdings counts (block, owner) holdings per tier, kept as blocks change
	// so that metrics need not walk the index.
	holdings [NumTiers]padI64
	// drops rate-limits drop warnings; fixed size (one slot per reason).
	drops dropLog
	// loras are the (lora_id → lora_name) pairs engines published (lora.go).
	loras *xsync.MapOf[loraKey, loraEntry]

	// gate holds appliers while a peer dump is restored (stream.go).
	gate   atomic.Pointer[chan struct{}]
	gateMu sync.Mutex
	gateN  int
}

// New returns an empty index.
func New(opts Options) *Index {
	opts.EnsureDefaults()
	return &Index{
		opts:      opts,
		contexts:  xsync.NewMapOf[ContextKey, *context](),
		loras:     xsync.NewMapOf[loraKey, loraEntry](),
		subs:      make(map[ServiceKey]*Subscription),
		endpoints: make(map[string]ServiceKey),
		replays:   make(map[string][]ServiceKey),
	}
}

// Counters exposes the index-wide event counters.
func (ix *Index) Counters() *Counters { return &ix.counters }

// lookupContext returns the first partition of k (nil when none).
func (ix *Index) lookupContext(k ContextKey) *context {
	c, _ := ix.contexts.Load(k)
	return c
}
