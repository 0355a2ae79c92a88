package dynamo

import (
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
	"github.com/seed-c7a81618/conductor/httpd/server"
)

// The Dynamo registry: indexers (block size per (model, group)) and workers
// (instance → indexer and ranks), kept beside the index.

// Worker is one Dynamo registration (POST /register, --workers).
type Worker struct {
	InstanceID     uint64
	Endpoint       string
	ReplayEndpoint string
	ModelName      string
	RoutingGroup   string // "" = "default"
	BlockSize      int
	DPRank         uint32
	// Type is the event dialect; 0 = Options.Publisher.
	Type core.PublisherType
}

// ErrConflict wraps the /register conflicts Dynamo answers 409.
var ErrConflict = errors.New("conductor: dynamo registration conflict")

// registration maps a Dynamo worker onto a conductor registration: the
// indexer's context (dynamoContext), the xxh3 standard profile, and its
// engine's LoRA adapters filed from its events (AdaptersFromEvents: a
// stored event's lora_name selects the adapter's context, as a /query's
// does; doc.go). Restore makes a restored worker's registration here again,
// so the flag, which the durable state does not record, comes back with it.
func (d *Server) registration(w *Worker) core.Registration {
	t := w.Type
	if t == 0 {
		t = d.opts.Publisher
	}
	ck := dynamoContext(dynKey{w.ModelName, w.RoutingGroup}, w.BlockSize)
	return core.Registration{
		Endpoint: w.Endpoint, ReplayEndpoint: w.ReplayEndpoint, Type: t,
		ModelName: ck.ModelName, LoraName: ck.LoraName, TenantID: ck.TenantID, BlockSize: ck.BlockSize,
		InstanceID: strconv.FormatUint(w.InstanceID, 10), DPRank: int32(w.DPRank),
		Profile: hash.DefaultProfile(), Origin: Origin, AdaptersFromEvents: true,
	}
}

// Origin is core.Registration.Origin of Dynamo workers.
const Origin = "dynamo"

// Restore registers again, on behalf of who, a worker registration this
// surface made before a restart (its Origin is Origin; from the durable state
// file), rebuilding the Dynamo registry with it.
func (d *Server) Restore(who server.Principal, r core.Registration) error {
	id, err := strconv.ParseUint(r.InstanceID, 10, 64)
	if err != nil || r.DPRank < 0 {
		return fmt.Errorf("restore: %s is not a Dynamo worker key: %w", r.Key(), core.ErrInvalid)
	}
	return d.register(who, Worker{InstanceID: id, Endpoint: r.Endpoint, ReplayEndpoint: r.ReplayEndpoint,
		ModelName: r.ModelName, RoutingGroup: r.TenantID, BlockSize: r.BlockSize, DPRank: uint32(r.DPRank), Type: r.Type})
}

// Register registers one worker rank with Dynamo's rules: the indexer's block
// size is fixed by its first registration; an instance belongs to one indexer;
// (instance, dp_rank) registers once. Conflicts wrap ErrConflict (and
// core.ErrConflict); malformed input core.ErrInvalid.
func (d *Server) Register(w Worker) error { return d.register(server.AdminPrincipal, w) }

// register is Register on behalf of who, through the Core's Gate (endpoint
// policy, ownership, durable state).
func (d *Server) register(who server.Principal, w Worker) error {
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
	// Endpoints are resolved before d.mu: a name that resolves slowly must
	// not hold up /metrics, /workers and the other registrations, which all
	// take d.mu (TestDynamoSlowNameHoldsNothing).
	reg := d.registration(&w)
	if err := d.gate.Resolve(&reg); err != nil {
		return err
	}
	d.mu.Lock()
	d.pruneLocked()
	if bs, ok := d.indexers[k]; ok && bs != w.BlockSize {
		d.mu.Unlock()
		return fmt.Errorf("register: indexer %s has block_size %d, not %d: %w: %w", k, bs, w.BlockSize, ErrConflict, core.ErrConflict)
	}
	if old := d.workers[w.InstanceID]; old != nil {
		if old.key != k {
			d.mu.Unlock()
			return fmt.Errorf("register: instance %d is registered for %s: %w: %w", w.InstanceID, old.key, ErrConflict, core.ErrConflict)
		}
		if _, dup := old.ranks[w.DPRank]; dup {
			d.mu.Unlock()
			return fmt.Errorf("register: instance %d dp_rank %d is already registered: %w: %w", w.InstanceID, w.DPRank, ErrConflict, core.ErrConflict)
		}
	}
	if _, err := d.gate.Register(who, reg); err != nil {
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
func (d *Server) pruneLocked() {
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
func (d *Server) Unregister(instance uint64, model, group string, rank *uint32) (int, error) {
	return d.unregister(server.AdminPrincipal, instance, model, group, rank)
}

// unregister is Unregister on behalf of who, through the Core's Gate (only
// the owner of a registration or the admin may remove it).
func (d *Server) unregister(who server.Principal, instance uint64, model, group string, rank *uint32) (int, error) {
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
		if _, err := d.gate.Unregister(who, k); err != nil && !errors.Is(err, core.ErrNotFound) {
			errs = append(errs, err)
			continue
		}
		delete(w.ranks, r)
		n++
	}
	if len(w.ranks) == 0 {
		delete(d.workers, instance)
		// The indexer goes with its last worker: its block size was the
		// first registration's, and must not bind the next, perhaps
		// another identity's, for the life of the process
		// (TestDynamoIndexerGoesWithItsLastWorker); a query then answers
		// 404, as for a pair no worker registered.
		if !d.hasWorkerLocked(w.key) {
			d.dropIndexerLocked(w.key)
		}
	}
	return n, errors.Join(errs...)
}

// hasWorkerLocked reports whether an instance is registered for k. Caller
// holds d.mu.
func (d *Server) hasWorkerLocked(k dynKey) bool {
	for _, w := range d.workers {
		if w.key == k {
			return true
		}
	}
	return false
}

// counts returns the number of indexers, instances and listeners per state.
func (d *Server) counts() (models, workers int, listeners map[string]int) {
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
func (d *Server) indexer(k dynKey) (int, bool) {
	m := d.snap.Load()
	if m == nil {
		return 0, false
	}
	bs, ok := (*m)[k]
	return bs, ok
}

// AddIndexer records an indexer's block size (from a peer's dump) unless it
// exists; it reports a conflicting block size as an error.
func (d *Server) AddIndexer(model, group string, blockSize int) error {
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
func (d *Server) setIndexerLocked(k dynKey, blockSize int) {
	d.indexers[k] = blockSize
	d.publishIndexersLocked()
}

// dropIndexerLocked forgets an indexer. Caller holds d.mu.
func (d *Server) dropIndexerLocked(k dynKey) {
	delete(d.indexers, k)
	d.publishIndexersLocked()
}

// publishIndexersLocked republishes the read snapshot of the indexers.
// Caller holds d.mu.
func (d *Server) publishIndexersLocked() {
	m := make(map[dynKey]int, len(d.indexers))
	for k, v := range d.indexers {
		m[k] = v
	}
	d.snap.Store(&m)
}
