package sim

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"

	"github.com/seed-c7a81618/conductor/bench"
	"github.com/seed-c7a81618/conductor/hash"
)

// EngineConfig describes one simulated engine instance. Zero fields take the
// defaults named.
type EngineConfig struct {
	ID      string
	Dialect Dialect
	// Ranks is the number of data-parallel ranks (default 1); each rank is a
	// publisher of its own, as each vLLM DP engine core is.
	Ranks int
	// Device, Host, Disk are each rank's pool capacities in blocks: Device
	// default 4096; Host and Disk 0 mean the tier is absent. Blocks evicted
	// from the device are offloaded to host, then to disk.
	Device, Host, Disk int
	// ClearEvery > 0: before every ClearEvery-th request a rank serves, it
	// resets its prefix cache and publishes AllBlocksCleared (vLLM's
	// reset_prefix_cache, an SGLang flush); indexers drop everything that
	// stream published, on every tier, and so does the simulator.
	ClearEvery int
	// NoReplay: each rank publishes without a replay socket and registers
	// without a replay endpoint, so a lost message is a gap the indexer
	// cannot replay (default false: vLLM's replay ROUTER per rank).
	NoReplay bool
	// Loss is the probability (0 ≤ Loss < 1) that a regular message of a
	// rank is lost: the publisher consumes its sequence number but does not
	// send it (bench.Publisher.PublishHidden; a rank with replay still keeps
	// it in its ring, so the indexer can heal the gap). Quiesce sentinels are
	// never lost. Draws come from the group's FaultSeed. Default 0.
	Loss float64
}

func (c *EngineConfig) ensureDefaults() {
	if c.Ranks <= 0 {
		c.Ranks = 1
	}
	if c.Device <= 0 {
		c.Device = 4096
	}
}

// Engine is one simulated instance. Not safe for concurrent use: one driver
// goroutine serves requests and quiesces.
type Engine struct {
	cfg   EngineConfig
	g     *Group
	ranks []*rankState
}

type rankState struct {
	rank  int
	pub   *bench.Publisher
	loss  *rand.Rand     // draws for EngineConfig.Loss
	tiers [numTiers]*lru // device, host, disk (share is the Group's Store); nil when absent
	enc   encoder
	evs   []event
	buf   []byte
	evict []uint64

	served int
	// native maps a block's context key to the hash the engine publishes for
	// it, when the group's engines hash differently (re-hash mode); nil else.
	native      map[uint64]uint64
	sentinel    uint64 // key of the sentinel block now stored on device
	hasSentinel bool
	sentTokens  []int32
}

func newEngine(g *Group, cfg EngineConfig) (*Engine, error) {
	cfg.ensureDefaults()
	e := &Engine{cfg: cfg, g: g}
	for r := 0; r < cfg.Ranks; r++ {
		pub, err := e.newPublisher("", "")
		if err != nil {
			e.close()
			return nil, fmt.Errorf("sim: engine %s rank %d: %w", cfg.ID, r, err)
		}
		rs := &rankState{rank: r, pub: pub, loss: rand.New(rand.NewPCG(g.cfg.FaultSeed, streamSeed(cfg.ID, r)))}
		e.reset(rs)
		e.ranks = append(e.ranks, rs)
	}
	return e, nil
}

// newPublisher starts a rank's publisher on endpoint and replay ("": free
// ports). A rank without replay keeps a ring of one message: nothing reads it.
func (e *Engine) newPublisher(endpoint, replay string) (*bench.Publisher, error) {
	o := bench.PublisherOptions{Endpoint: endpoint, ReplayEndpoint: replay, ReplyFrames: replyFrames(e.cfg.Dialect),
		Ring: e.g.cfg.ReplayRing, NoReplay: e.cfg.NoReplay}
	if o.NoReplay {
		o.Ring = 1
	}
	return bench.NewPublisher(o)
}

// reset gives rs empty pools, a fresh encoder and no sentinel: the state of a
// rank that has just started.
func (e *Engine) reset(rs *rankState) {
	rs.enc = encoder{d: e.cfg.Dialect, model: e.g.cfg.Model, blockSize: e.g.cfg.BlockSize, rank: rs.rank}
	rs.tiers = [numTiers]*lru{}
	rs.tiers[tierDevice] = newLRU(e.cfg.Device)
	if e.cfg.Host > 0 {
		rs.tiers[tierHost] = newLRU(e.cfg.Host)
	}
	if e.cfg.Disk > 0 {
		rs.tiers[tierDisk] = newLRU(e.cfg.Disk)
	}
	rs.native = nil
	if e.g.native != nil {
		rs.native = make(map[uint64]uint64)
	}
	rs.evs = rs.evs[:0]
	rs.hasSentinel = false
	rs.served = 0
}

// restart restarts rank rs as a restarting engine process does: its pools
// are empty (the new process holds nothing; no event says so), and its
// publisher comes back on the same endpoints as a new incarnation whose
// sequence starts at 0. The old publisher's ring goes with it.
func (e *Engine) restart(rs *rankState) error {
	ep, replay := rs.pub.Endpoint(), rs.pub.ReplayEndpoint()
	if err := rs.pub.Close(); err != nil {
		return fmt.Errorf("sim: restart %s rank %d: %w", e.cfg.ID, rs.rank, err)
	}
	pub, err := e.newPublisher(ep, replay)
	if err != nil {
		return fmt.Errorf("sim: restart %s rank %d: %w", e.cfg.ID, rs.rank, err)
	}
	rs.pub = pub
	e.reset(rs)
	return nil
}

// streamSeed derives a stream's fault-draw seed from its instance id and rank.
func streamSeed(id string, rank int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64() ^ uint64(rank)<<56
}

// replyFrames: vLLM after PR #45177 answers replays in 4 frames, SGLang in 3.
func replyFrames(d Dialect) int {
	if d == SGLangArray || d == SGLangMap || d == VLLMArray {
		return 3
	}
	return 4
}

func (e *Engine) close() {
	for _, rs := range e.ranks {
		_ = rs.pub.Close()
	}
}

// ID is the instance id.
func (e *Engine) ID() string { return e.cfg.ID }

// Ranks is the number of dp ranks.
func (e *Engine) Ranks() int { return len(e.ranks) }

// ServeStats describe one served request.
type ServeStats struct {
	Blocks      int // complete prompt blocks
	DeviceHit   int // leading blocks already on the rank's device
	CachedHit   int // leading blocks already on any tier reachable by the rank
	Stored      int // blocks stored (device loads/computes and offloads)
	Removed     int // blocks removed (evictions)
	Messages    int // ZMQ messages published (sequence numbers consumed, lost ones included)
	Lost        int // of which lost (EngineConfig.Loss): never sent live
	MaxBytes    int // the largest message's payload bytes
	StoreStored int // blocks put into the shared store
	Cleared     int // AllBlocksCleared events
}

// serve runs a prompt on rank r: blocks already on the device are reused,
// others are loaded (from host, disk or the shared store) or computed; each
// needs a device slot, so the least recently used unpinned blocks are evicted
// and offloaded down the chain. keys are the prompt's complete-block keys.
// Events are published in steps of stepBlocks blocks (one ZMQ message per
// scheduler step, as chunked prefill does).
// native holds the engine's own hashes of the same blocks (== keys unless the
// group is in re-hash mode).
func (e *Engine) serve(r int, keys, native []uint64, tokens []int32, stepBlocks int) (ServeStats, error) {
	rs := e.ranks[r]
	st := ServeStats{Blocks: len(keys)}
	rs.evs = rs.evs[:0]
	if rs.served++; e.cfg.ClearEvery > 0 && rs.served%e.cfg.ClearEvery == 0 {
		e.clear(rs)
		st.Cleared++
	}
	for _, k := range keys {
		if !rs.tiers[tierDevice].has(k) {
			break
		}
		st.DeviceHit++
	}
	for _, k := range keys {
		if !e.reachable(rs, k) {
			break
		}
		st.CachedHit++
	}
	for _, t := range rs.tiers {
		if t != nil {
			t.startRequest()
		}
	}
	store := e.g.store
	if store != nil {
		store.pool.startRequest()
	}
	bs := e.g.cfg.BlockSize
	run := -1 // index in rs.evs of the pending device store (a contiguous run of new blocks)
	for i, k := range keys {
		if rs.tiers[tierDevice].touch(k) {
			run = -1
			continue
		}
		var ok bool
		rs.evict, ok = rs.tiers[tierDevice].add(k, rs.evict[:0])
		if !ok {
			break // every device block is held by this request
		}
		for _, v := range rs.evict {
			e.evictTo(rs, tierDevice, v, &st)
		}
		for _, t := range []int{tierHost, tierDisk} {
			if rs.tiers[t] != nil {
				rs.tiers[t].touch(k)
			}
		}
		if run < 0 {
			run = len(rs.evs)
			rs.evs = append(rs.evs, event{kind: evStored, tier: tierDevice})
			if i > 0 {
				rs.evs[run].parent, rs.evs[run].hasPar = native[i-1], true
			}
		}
		ev := &rs.evs[run]
		ev.hashes = append(ev.hashes, native[i])
		if rs.native != nil {
			rs.native[k] = native[i]
		}
		ev.tokens = append(ev.tokens, tokens[i*bs:(i+1)*bs]...)
		st.Stored++
		if store != nil && !store.pool.touch(k) {
			store.put(k)
			st.StoreStored++
		}
		if (i+1)%stepBlocks == 0 {
			if err := e.flush(rs, &st, true); err != nil {
				return st, err
			}
			run = -1
		}
	}
	if store != nil {
		if err := store.flush(true); err != nil {
			return st, err
		}
	}
	return st, e.flush(rs, &st, true)
}

// clear empties the rank's pools (and forgets its sentinel) and queues an
// AllBlocksCleared; a standardized publisher clears each of its medium
// streams with a `cleared` of its own (seed 000: a cleared purges exactly its
// stream's dimensions, medium included).
func (e *Engine) clear(rs *rankState) {
	for t, l := range rs.tiers {
		if l != nil {
			rs.tiers[t] = newLRU(l.cap)
			if e.cfg.Dialect == Standard {
				rs.evs = append(rs.evs, event{kind: evCleared, tier: t})
			}
		}
	}
	rs.hasSentinel = false
	if rs.native != nil {
		rs.native = make(map[uint64]uint64)
	}
	if e.cfg.Dialect != Standard {
		rs.evs = append(rs.evs, event{kind: evCleared, tier: tierDevice})
	}
}

// reachable: the rank holds k on any rank-owned tier, or the shared store does.
func (e *Engine) reachable(rs *rankState, k uint64) bool {
	for _, t := range rs.tiers {
		if t != nil && t.has(k) {
			return true
		}
	}
	return e.g.store != nil && e.g.store.pool.has(k)
}

// evictTo publishes v's eviction from tier t (already done in the pool),
// offloading it first to the next rank-owned tier below, cascading evictions
// there. The offload store precedes the removal, as an offloading engine
// copies a block out before it frees it: an indexer that re-hashes (no tokens
// in offload events) can then still resolve the engine hash.
func (e *Engine) evictTo(rs *rankState, t int, v uint64, st *ServeStats) {
	h := v
	if rs.native != nil {
		h = rs.native[v]
		defer func() {
			if !e.holds(rs, v) {
				delete(rs.native, v)
			}
		}()
	}
	defer func() {
		rs.evs = append(rs.evs, event{kind: evRemoved, tier: t, hashes: []uint64{h}})
		st.Removed++
	}()
	next := -1
	for n := t + 1; n < numTiers; n++ {
		if n != tierShare && rs.tiers[n] != nil {
			next = n
			break
		}
	}
	if next < 0 || rs.tiers[next].touch(v) {
		return
	}
	evicted, ok := rs.tiers[next].add(v, nil)
	if !ok {
		return
	}
	// Offloaded blocks are published without tokens (indexers key them by hash).
	rs.evs = append(rs.evs, event{kind: evStored, tier: next, hashes: []uint64{h}})
	st.Stored++
	for _, w := range evicted {
		e.evictTo(rs, next, w, st)
	}
}

// holds reports whether any of the rank's own tiers holds k.
func (e *Engine) holds(rs *rankState, k uint64) bool {
	for _, l := range rs.tiers {
		if l != nil && l.has(k) {
			return true
		}
	}
	return false
}

// flush publishes the pending events as one message; a regular one (not a
// sentinel) is lost with probability EngineConfig.Loss.
func (e *Engine) flush(rs *rankState, st *ServeStats, regular bool) error {
	if len(rs.evs) == 0 {
		return nil
	}
	rs.buf = rs.enc.append(rs.buf[:0], rs.evs)
	// The publisher keeps the payload for replay: hand it its own copy.
	publish := rs.pub.Publish
	if regular && e.cfg.Loss > 0 && rs.loss.Float64() < e.cfg.Loss {
		publish = rs.pub.PublishHidden
		st.Lost++
	}
	if _, err := publish(append([]byte(nil), rs.buf...)); err != nil {
		return err
	}
	st.MaxBytes = max(st.MaxBytes, len(rs.buf))
	rs.evs = rs.evs[:0]
	st.Messages++
	return nil
}

// publishSentinel replaces the rank's sentinel block with a new one (fresh
// tokens from rng) on the device tier, outside the LRU pool: it is not part
// of any workload prompt, so it changes no workload answer.
func (e *Engine) publishSentinel(rs *rankState, rng *rand.Rand) error {
	p := &e.g.profile
	bs := e.g.cfg.BlockSize
	rs.evs = rs.evs[:0]
	if rs.hasSentinel {
		rs.evs = append(rs.evs, event{kind: evRemoved, tier: tierDevice, hashes: []uint64{rs.sentinel}})
	}
	rs.sentTokens = randomTokens(rs.sentTokens[:0], bs, rng)
	if e.g.native != nil {
		p = e.g.native // the engine publishes its own hash; the indexer re-hashes the tokens
	}
	keys, err := hash.AppendChain(nil, p, rs.sentTokens, bs, nil, nil)
	if err != nil || len(keys) != 1 {
		return fmt.Errorf("sim: sentinel hash: %v", err)
	}
	rs.sentinel, rs.hasSentinel = keys[0], true
	rs.evs = append(rs.evs, event{kind: evStored, tier: tierDevice, hashes: keys, tokens: rs.sentTokens})
	var st ServeStats
	return e.flush(rs, &st, false)
}

func randomTokens(dst []int32, n int, rng *rand.Rand) []int32 {
	for i := 0; i < n; i++ {
		dst = append(dst, int32(rng.IntN(Vocab)))
	}
	return dst
}
