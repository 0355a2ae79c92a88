package core

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/seed-c7a81618/conductor/endpoint"
	"github.com/seed-c7a81618/conductor/hash"
)

// PublisherType selects the event dialect of a subscription and how its media
// are filed.
type PublisherType uint8

const (
	PublisherVLLM PublisherType = iota + 1
	PublisherSGLang
	PublisherMooncake
	PublisherStandard
)

var publisherNames = [...]string{"", "vLLM", "SGLang", "Mooncake", "standard"}

func (p PublisherType) String() string {
	if int(p) < len(publisherNames) && p != 0 {
		return publisherNames[p]
	}
	return "unknown"
}

// ParsePublisherType accepts the registered names exactly ("vLLM", "SGLang",
// "Mooncake", "standard").
func ParsePublisherType(s string) (PublisherType, error) {
	for i, n := range publisherNames {
		if i > 0 && s == n {
			return PublisherType(i), nil
		}
	}
	return 0, fmt.Errorf("publisher type %q (want vLLM, SGLang, Mooncake or standard): %w", s, ErrInvalid)
}

// pool reports whether the publisher is a shared pool (its blocks are shared
// owners and it is not a query instance).
func (p PublisherType) pool() bool { return p == PublisherMooncake }

// ServiceKey identifies one subscription: (instance_id, tenant_id, dp_rank).
type ServiceKey struct {
	InstanceID string
	TenantID   string
	DPRank     int32
}

// String renders the key as the seed API does: "instance|tenant|rank".
func (k ServiceKey) String() string {
	return k.InstanceID + "|" + k.TenantID + "|" + strconv.Itoa(int(k.DPRank))
}

// Registration is one subscription's configuration.
type Registration struct {
	Endpoint       string
	ReplayEndpoint string
	Type           PublisherType
	ModelName      string
	LoraName       string
	TenantID       string // "" is normalised to "default"
	InstanceID     string
	BlockSize      int
	DPRank         int32
	// AdditionalSalt separates hash namespaces under the xxh3 profile: blocks
	// re-hashed from this publisher's tokens use it as their salt.
	AdditionalSalt string
	// CacheGroup: nil = not given; otherwise must be 0.
	CacheGroup *int64
	// Profile is the resolved hash profile; ProfileExplicit is false when the
	// registration named none and the xxh3 default applies.
	Profile         hash.Profile
	ProfileExplicit bool
	// Origin names the surface whose own registry holds the registration
	// besides the index ("dynamo" for the Dynamo dialect's workers, "" for
	// the Mooncake API, RPC and configuration files), so a restored
	// registration goes back into that registry (package statedir).
	Origin string
	// Owner is the identity that made the registration (the bearer token's
	// name; "admin" for the admin token and on an open surface, "config" for
	// configuration files). Only the owner or the admin may unregister it
	// (httpd.Gate); two registrations differing only in Owner conflict. It
	// also decides whether a contradicting hash profile is a conflict or a
	// partition of its own (partition.go; Options.OperatorOwners).
	Owner string
	// GapPolicy is what the subscription does with events lost for good
	// (gap.go); GapDefault: Options.GapPolicy.
	GapPolicy GapPolicy
	// MaxBlocks bounds the (owner, block) pairs the subscription holds: past
	// it the oldest are evicted (gap.go, evictOver). 0: the default
	// (Options.MaxBlocksPerRegistration); negative: no bound.
	MaxBlocks int
	// AdaptersFromEvents files a vLLM or SGLang stored event that names a
	// LoRA adapter (lora_name) under the context of that adapter (the home
	// context's tenant, model and block size, LoraName = the event's),
	// created on first use, instead of dropping it as wrong_lora; removes
	// and clears reach every context so made (adapter.go). It is how Dynamo
	// keeps adapters: one indexer per (model, group) whose workers publish
	// every adapter's blocks, each found by a query naming its lora_name.
	// The home context must be the base model's (LoraName ""); at most
	// Options.MaxAdaptersPerRegistration adapters at a time. Set by the
	// Dynamo surface (httpd/dynamo), which makes its registrations again on
	// restore; false for every other registration.
	AdaptersFromEvents bool
}

// Key returns the registration's service key.
func (r *Registration) Key() ServiceKey {
	return ServiceKey{InstanceID: r.InstanceID, TenantID: r.TenantID, DPRank: r.DPRank}
}

// ContextKey returns the registration's home context.
func (r *Registration) ContextKey() ContextKey {
	return ContextKey{TenantID: r.TenantID, ModelName: r.ModelName, LoraName: r.LoraName, BlockSize: r.BlockSize}
}

// Normalize applies defaults (tenant "default", xxh3 profile when none).
func (r *Registration) Normalize() {
	if r.TenantID == "" {
		r.TenantID = "default"
	}
	if !r.ProfileExplicit && r.Profile == (hash.Profile{}) {
		r.Profile = hash.DefaultProfile()
	}
}

// Identity limits: every identity string of a registration (instance id,
// model, LoRA, tenant, salt) is at most MaxIdentityBytes, every endpoint at
// most MaxEndpointBytes (a 253-byte DNS name with scheme and port fits). They
// bound what a client can make conductor keep per registration and the size
// of every metric label derived from one (a registration with a 1 MB instance
// id is refused, not stored).
const (
	MaxIdentityBytes = 256
	MaxEndpointBytes = 512
)

// checkLengths reports the first field over its limit as a *FieldError
// wrapping ErrInvalid.
func (r *Registration) checkLengths() error {
	for _, f := range [...]struct {
		name, v string
		max     int
	}{
		{"endpoint", r.Endpoint, MaxEndpointBytes}, {"replay_endpoint", r.ReplayEndpoint, MaxEndpointBytes},
		{"modelname", r.ModelName, MaxIdentityBytes}, {"instance_id", r.InstanceID, MaxIdentityBytes},
		{"lora_name", r.LoraName, MaxIdentityBytes}, {"tenant_id", r.TenantID, MaxIdentityBytes},
		{"additionalsalt", r.AdditionalSalt, MaxIdentityBytes},
	} {
		if len(f.v) > f.max {
			return &FieldError{Field: f.name, Err: fmt.Errorf("register: %s is %d bytes, longer than the limit of %d: %w",
				f.name, len(f.v), f.max, ErrInvalid)}
		}
	}
	return nil
}

// checkText reports the first identity (instance id, model, LoRA, tenant)
// that is not printable text as a *FieldError wrapping ErrInvalid: invalid
// UTF-8, or a C0 or C1 control character or DEL. Identities become metric
// labels, log fields and lines of /services; a NUL or an ESC there reaches
// whoever reads them.
func (r *Registration) checkText() error {
	for _, f := range [...]struct{ name, v string }{
		{"instance_id", r.InstanceID}, {"modelname", r.ModelName}, {"lora_name", r.LoraName}, {"tenant_id", r.TenantID},
	} {
		if why := notText(f.v); why != "" {
			return &FieldError{Field: f.name, Err: fmt.Errorf("register: %s %s: %w", f.name, why, ErrInvalid)}
		}
	}
	return nil
}

// notText says why s is not printable text ("" when it is).
func notText(s string) string {
	for i, c := range s {
		switch {
		case c == utf8.RuneError:
			if _, n := utf8.DecodeRuneInString(s[i:]); n == 1 {
				return fmt.Sprintf("is not valid UTF-8 (byte 0x%02x at offset %d)", s[i], i)
			}
		case c < 0x20 || (c >= 0x7f && c <= 0x9f):
			return fmt.Sprintf("holds the control character U+%04X at offset %d", c, i)
		}
	}
	return ""
}

// Validate checks the registration's fields.
func (r *Registration) Validate() error {
	if err := r.checkLengths(); err != nil {
		return err
	}
	if err := r.checkText(); err != nil {
		return err
	}
	switch {
	case r.Endpoint == "":
		return fmt.Errorf("register: endpoint is required: %w", ErrInvalid)
	case r.Type < PublisherVLLM || r.Type > PublisherStandard:
		return fmt.Errorf("register: unknown publisher type %d: %w", r.Type, ErrInvalid)
	case r.ModelName == "":
		return fmt.Errorf("register: model name is required: %w", ErrInvalid)
	case r.InstanceID == "":
		return fmt.Errorf("register: instance_id is required: %w", ErrInvalid)
	case r.BlockSize <= 0:
		return fmt.Errorf("register: block_size=%d must be > 0: %w", r.BlockSize, ErrInvalid)
	case r.DPRank < 0:
		return fmt.Errorf("register: dp_rank=%d must be >= 0: %w", r.DPRank, ErrInvalid)
	case r.CacheGroup != nil && *r.CacheGroup != 0:
		return fmt.Errorf("register: cache_group=%d: only cache group zero is supported: %w", *r.CacheGroup, ErrInvalid)
	case r.TenantID == "":
		return fmt.Errorf("register: tenant_id is empty: %w", ErrInvalid)
	case r.GapPolicy >= numGapPolicies:
		return &FieldError{Field: "gap_policy", Err: fmt.Errorf("register: gap_policy %d: %w", r.GapPolicy, ErrInvalid)}
	case r.AdditionalSalt != "" && r.ProfileExplicit && r.Profile.Strategy != hash.StrategyXXH3:
		// saltNamespace has no namespace for it: accepted, it would change
		// nothing, and a query's cache_salt would not find what it names.
		return &FieldError{Field: "additionalsalt", Err: fmt.Errorf(
			"register: additionalsalt %q: salt namespaces exist under the xxh3 hash profile only; under %s the engine hashes each request's cache_salt into its own chain: omit additionalsalt: %w",
			r.AdditionalSalt, r.Profile.Spec.Describe(), ErrInvalid)}
	case r.AdaptersFromEvents && r.LoraName != "":
		// Adapter contexts are the home context's with another LoraName:
		// from an adapter's own context, a base-model block has nowhere to go.
		return &FieldError{Field: "lora_name", Err: fmt.Errorf(
			"register: lora_name %q: a registration that files adapters from its events has the base model's context (no lora_name): %w",
			r.LoraName, ErrInvalid)}
	case r.AdaptersFromEvents && r.Type != PublisherVLLM && r.Type != PublisherSGLang:
		return fmt.Errorf("register: adapters from events need a vLLM or SGLang publisher, not %s: %w", r.Type, ErrInvalid)
	}
	return nil
}

func sameConfig(a, b *Registration) bool {
	if (a.CacheGroup == nil) != (b.CacheGroup == nil) ||
		(a.CacheGroup != nil && *a.CacheGroup != *b.CacheGroup) {
		return false
	}
	ac, bc := *a, *b
	ac.CacheGroup, bc.CacheGroup = nil, nil
	return ac == bc
}

// Register adds a subscription, or returns the existing one unchanged when an
// identical registration exists (created=false). A conflicting registration for
// the same key, an endpoint that may reach the publisher socket of another
// key's (endpoint.Keys: another spelling of it, another address of this host
// on its port; a *FieldError on "endpoint" naming that key), or a hash profile that
// differs from the profile of a partition of the context bound by the same
// identity (Owner; partition.go) is refused with ErrConflict and no state
// change. A profile that differs only from other identities' partitions gets
// a partition of its own.
func (ix *Index) Register(r Registration) (sub *Subscription, created bool, err error) {
	sub, created, early, err := ix.register(r)
	if len(early) > 0 {
		ix.rebindEarly(sub.home, early)
	}
	if o := ix.opts.Observer; created && o != nil {
		// Outside ix.mu: an observer may list Services meanwhile.
		o.Registered(&sub.reg)
	}
	return sub, created, err
}

// register is Register under ix.mu; early are the subscriptions of the
// pool-only partition r bound (rebindEarly).
func (ix *Index) register(r Registration) (sub *Subscription, created bool, early []*Subscription, err error) {
	r.Normalize()
	if err := r.Validate(); err != nil {
		return nil, false, nil, err
	}
	key := r.Key()
	keys := endpoint.Keys(r.Endpoint) // outside the lock: it reads this host's interfaces
	var replayKeys []string
	if r.ReplayEndpoint != "" {
		replayKeys = endpoint.Keys(r.ReplayEndpoint)
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if old, ok := ix.subs[key]; ok {
		if old.unregistering {
			return nil, false, nil, fmt.Errorf("register %s: service is being unregistered: %w", key, ErrConflict)
		}
		if sameConfig(&old.reg, &r) {
			return old, false, nil, nil
		}
		return nil, false, nil, &ConflictError{Holder: key, Msg: fmt.Sprintf("register %s: conflicting registration for service key", key)}
	}
	for _, k := range keys {
		if other, ok := ix.endpoints[k]; ok {
			return nil, false, nil, ix.endpointConflictLocked(key, &r, other, k)
		}
	}
	if len(ix.subs) >= ix.opts.MaxRegistrations {
		return nil, false, nil, fmt.Errorf("register %s: %d registrations: %w", key, len(ix.subs), ErrLimit)
	}
	bind := !r.Type.pool() || r.ProfileExplicit
	c, early, err := ix.acquireContextLocked(&r, bind)
	if err != nil {
		return nil, false, nil, err
	}
	ix.nextSub++
	sub = &Subscription{ix: ix, id: ix.nextSub, reg: r, home: c, closing: make(chan struct{})}
	if ix.opts.QueryPriority {
		sub.run.queries = &ix.queries
	}
	sub.run.noYield = ix.opts.ApplyNoYield
	if r.AdditionalSalt != "" {
		sub.regSalt = []byte(r.AdditionalSalt)
	}
	sub.state = make(map[*context]*subCtx)
	sub.state[c] = sub.newSubCtx(c)
	c.addEarly(sub)
	ix.subs[key] = sub
	sub.endpointKeys, sub.replayKeys = keys, replayKeys
	for _, k := range keys {
		ix.endpoints[k] = key
	}
	for _, k := range replayKeys {
		ix.replays[k] = append(ix.replays[k], key)
	}
	if !r.Type.pool() {
		c.addRegSlot(slot{r.InstanceID, r.DPRank}, 1)
	}
	return sub, true, early, nil
}

// endpointConflictLocked is the refusal of r (key) whose endpoint shares
// the publisher key k with the registration other: a *FieldError on
// "endpoint" wrapping ErrConflict, naming other and, when the endpoints
// differ, how they meet. Caller holds ix.mu.
func (ix *Index) endpointConflictLocked(key ServiceKey, r *Registration, other ServiceKey, k string) error {
	held := ix.subs[other].reg.Endpoint
	msg := fmt.Sprintf("register %s: endpoint %s is used by %s", key, r.Endpoint, other)
	if held != r.Endpoint {
		how := "the same publisher"
		if host, port, ok := strings.Cut(strings.TrimPrefix(k, "tcp://"), ":"); ok && host == endpoint.ThisHost {
			how = "port " + port + " of this host, which is one publisher whatever address of this host names it"
		}
		msg = fmt.Sprintf("register %s: endpoint %s reaches %s, which %s is registered at as %s", key, r.Endpoint, how, other, held)
	}
	return &FieldError{Field: "endpoint", Err: &ConflictError{Holder: other, Msg: msg}}
}

// EndpointHolder returns the registration whose endpoint may reach the same
// publisher socket as ep (endpoint.Keys), if there is one.
func (ix *Index) EndpointHolder(ep string) (Registration, bool) {
	keys := endpoint.Keys(ep)
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for _, k := range keys {
		if other, ok := ix.endpoints[k]; ok {
			return ix.subs[other].reg, true
		}
	}
	return Registration{}, false
}

// SocketHolders returns the registrations whose endpoint or
// replay_endpoint may reach the same socket as ep (endpoint.Keys): who
// already subscribes to it, or asks it for replays.
func (ix *Index) SocketHolders(ep string) []Registration {
	keys := endpoint.Keys(ep)
	ix.mu.Lock()
	defer ix.mu.Unlock()
	var out []Registration
	for _, k := range keys {
		if other, ok := ix.endpoints[k]; ok {
			out = append(out, ix.subs[other].reg)
		}
		for _, other := range ix.replays[k] {
			out = append(out, ix.subs[other].reg)
		}
	}
	return out
}

// Lookup returns the subscription registered under k.
func (ix *Index) Lookup(k ServiceKey) (*Subscription, bool) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	s, ok := ix.subs[k]
	return s, ok
}

// Unregister removes the subscription k and exactly its contributions. It
// first closes the handle (waiting for an Apply in progress), so no event of
// that subscription can resurrect a block afterwards.
func (ix *Index) Unregister(k ServiceKey) (Registration, error) {
	reg, err := ix.unregister(k)
	if o := ix.opts.Observer; err == nil && o != nil {
		o.Unregistered(&reg)
	}
	return reg, err
}

func (ix *Index) unregister(k ServiceKey) (Registration, error) {
	if k.TenantID == "" {
		k.TenantID = "default"
	}
	ix.mu.Lock()
	sub, ok := ix.subs[k]
	if ok && sub.unregistering {
		ix.mu.Unlock()
		return Registration{}, fmt.Errorf("unregister %s: already being unregistered: %w", k, ErrNotFound)
	}
	if ok {
		sub.unregistering = true
	}
	ix.mu.Unlock()
	if !ok {
		return Registration{}, fmt.Errorf("unregister %s: service not found: %w", k, ErrNotFound)
	}

	sub.close() // waits for an in-flight Apply; later Applies are no-ops

	for c, sc := range sub.state {
		n := 0
		for id, keys := range sc.keys {
			n += c.dropOwnerKeys(id, keys, &ix.holdings)
		}
		ix.counters.ClearedBlocks.Add(uint64(n))
		c.releaseOwners(sub.id)
	}

	ix.mu.Lock()
	defer ix.mu.Unlock()
	delete(ix.subs, k)
	for _, ek := range sub.endpointKeys {
		delete(ix.endpoints, ek)
	}
	for _, rk := range sub.replayKeys {
		held := slices.DeleteFunc(ix.replays[rk], func(h ServiceKey) bool { return h == k })
		if len(held) == 0 {
			delete(ix.replays, rk)
		} else {
			ix.replays[rk] = held
		}
	}
	if !sub.reg.Type.pool() {
		sub.home.addRegSlot(slot{sub.reg.InstanceID, sub.reg.DPRank}, -1)
	}
	for c := range sub.state {
		c.dropEarly(sub)
		ix.releaseContextLocked(c)
	}
	return sub.reg, nil
}

// Services lists every registration, sorted by service key.
func (ix *Index) Services() []Registration {
	ix.mu.Lock()
	out := make([]Registration, 0, len(ix.subs))
	for _, s := range ix.subs {
		out = append(out, s.reg)
	}
	ix.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return keyLess(out[i].Key(), out[j].Key()) })
	return out
}

func keyLess(a, b ServiceKey) bool {
	if a.InstanceID != b.InstanceID {
		return a.InstanceID < b.InstanceID
	}
	if a.TenantID != b.TenantID {
		return a.TenantID < b.TenantID
	}
	return a.DPRank < b.DPRank
}

// Subscription is the handle of one registration. Its Apply, Clear and
// FlushHeld are called by one goroutine (the subscription's single writer);
// Unregister may run concurrently from another goroutine.
type Subscription struct {
	ix   *Index
	id   uint32
	reg  Registration
	home *context
	// endpointKeys are the keys of the publisher sockets reg.Endpoint may
	// reach (endpoint.Keys), held in Index.endpoints while registered;
	// replayKeys likewise of reg.ReplayEndpoint, in Index.replays.
	endpointKeys, replayKeys []string
	// regSalt is reg.AdditionalSalt as bytes (nil when empty): the default
	// salt namespace of the subscription's blocks.
	regSalt []byte

	// mu is held for the whole of each Apply/Clear so that close() waits for
	// an in-flight batch; it is uncontended in steady state (one writer).
	mu            sync.Mutex
	closed        bool
	closing       chan struct{} // closed with closed (wakes gate waiters)
	closeOnce     sync.Once
	unregistering bool // guarded by ix.mu

	// state per context this subscription has touched (single writer; read by
	// Unregister only after close()).
	state map[*context]*subCtx
	// adapters are the adapter contexts' states of an AdaptersFromEvents
	// registration by LoRA name, adapterList the same in the order they
	// were made (single writer; adapter.go). rebinds are pool-only
	// partitions the writer bound, for runRebinds once s.mu is released
	// (guarded by mu); hasRebinds says there are some, without the lock.
	adapters    map[string]*subCtx
	adapterList []*subCtx
	rebinds     []pendingRebind
	hasRebinds  atomic.Bool
	// ranks are the publisher-named dp ranks admitted so far (admitRank).
	ranks map[int32]struct{}
	// rfc holds RFC #1527 per-stream event_id cursors (at most
	// Options.MaxStreamsPerSubscription); rfcClock orders their use for
	// eviction; heldTotal counts events held across them.
	rfc       map[streamKey]*rfcStream
	rfcClock  uint64
	heldTotal int
	// pubLast is the last event_id applied on any stream (publishers that
	// number all their events with one counter; nextInPublisher).
	pubLast    uint64
	hasPubLast bool
	// perStreamIDs: the publisher numbers each stream on its own
	// (nextInPublisher); forgotten with the cursors.
	perStreamIDs bool
	// scratch reused across events.
	seqScratch, keyScratch, mapScratch []uint64
	// Stream watermark (stream.go): the sequence of the last batch applied,
	// and, after RestoreStream, the dumped watermark at or below which
	// batches are skipped.
	lastSeq, skipThrough uint64
	hasSeq, skipping     bool
	// prior: the restored dump predates the transport's messages
	// (StreamInfo.Prior) and FirstLive has not been called since.
	prior bool
	// clearDeferred: a Clear arrived while skipping; recvSeq is the sequence
	// of the last batch received, skipped or not (stream.go recoveredSkip).
	clearDeferred bool
	recvSeq       uint64
	hasRecv       bool
	// Operands of the bound map-update functions addFn/removeFn (single writer).
	opID            ownerRef
	opTier          Tier
	opChanged       bool
	opNew           bool // addOne gave the owner its first holding in the block
	opHeld          bool // addOne found the owner holding the block already
	opGone          bool // removeOne dropped the owner's last holding in the block
	opCopies        uint32
	opHoldings      int64
	addFn, removeFn func(blockVal, bool) (blockVal, bool)
	// heldKeys is the total of the subscription's owner key sets: the
	// (owner, block) pairs it holds, which Registration.MaxBlocks bounds.
	heldKeys int
	// marks are the pending expiries of GapExpire, oldest first, and markSeq
	// the last mark id (gap.go).
	marks   []gapMark
	markSeq uint64
	// nextExpiry is marks[0].at in Unix nanoseconds (0: none), for
	// NextExpiry without the lock.
	nextExpiry atomic.Int64
	// expiryWake, when set, is called when nextExpiry becomes earlier
	// (SetExpiryWake).
	expiryWake atomic.Pointer[func()]
	// evictLogNext rate-limits the eviction warning; evictedQuiet counts
	// what was evicted since the last one.
	evictLogNext time.Time
	evictedQuiet int
	// run bounds the applier's uninterrupted runs (applyrun.go).
	run applyRun
	// hc is the hash-profile self-check's state (single writer); check is
	// its result, replaced whole on change and read by any goroutine
	// (hashcheck.go).
	hc    hashChecker
	check atomic.Pointer[HashCheck]
}

// Key returns the subscription's service key.
func (s *Subscription) Key() ServiceKey { return s.reg.Key() }

// Registration returns the subscription's configuration.
func (s *Subscription) Registration() Registration { return s.reg }

func (s *Subscription) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.closeOnce.Do(func() { close(s.closing) })
}

// Abort makes every later Apply, Clear and FlushHeld of this subscription a
// no-op (after the one in progress) and wakes one waiting on the apply gate
// (stream.go). The transport calls it before stopping the subscription's
// receiver, which may be blocked on the gate; Unregister then removes the
// subscription's contributions as usual.
func (s *Subscription) Abort() { s.close() }
