package sim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/seed-c7a81618/conductor/hash"
)

// Policy routes a request to one (engine, rank) of a group.
type Policy uint8

const (
	RoundRobin Policy = iota + 1
	Random
	// CacheAware asks the indexer (through the group's Client) and picks the
	// rank with the longest device prefix, then cpu_local, cpu_share, disk,
	// among the ranks not overloaded: a rank that got more than 1.5× its fair
	// share of the last 4×ranks requests is skipped (a shared system prompt
	// would otherwise send everything to one engine). Ties go round-robin.
	CacheAware
)

var policyNames = [...]string{"", "round-robin", "random", "cache-aware"}

func (p Policy) String() string { return policyNames[p] }

// ParsePolicy accepts round-robin (rr), random, cache-aware (aware).
func ParsePolicy(s string) (Policy, error) {
	switch strings.ToLower(s) {
	case "round-robin", "rr":
		return RoundRobin, nil
	case "random":
		return Random, nil
	case "cache-aware", "aware":
		return CacheAware, nil
	}
	return 0, fmt.Errorf("sim: unknown policy %q (want round-robin, random or cache-aware)", s)
}

// GroupConfig is one context (model, block size, hash profile) and the engines
// serving it.
type GroupConfig struct {
	Model     string
	BlockSize int       // default 16
	Profile   hash.Spec // default vllm_v1 sha256_cbor seed "0"
	Engines   []EngineConfig
	// StoreBlocks > 0 adds a shared Mooncake store of that many blocks.
	StoreBlocks int
	Policy      Policy // default RoundRobin
	// StepTokens is the prefill chunk: events are published per step of this
	// many tokens (vLLM's max_num_batched_tokens; default 8192).
	StepTokens int
	// EngineProfile, when set, is the hash the engines compute and publish
	// while the context uses Profile (which must then be xxh3): the indexer
	// re-hashes stored blocks from their token_ids and resolves later
	// removals and parents through the engine hashes (what a vLLM or SGLang
	// engine registered without a hash_profile gets). Engine dialects only.
	EngineProfile hash.Spec
	// ReplayRing is how many messages each publisher keeps for replay
	// (vLLM's buffer_steps; default 256: the harness's messages are whole
	// prefill steps, tens of KiB each, and every publisher keeps its own).
	ReplayRing int
	// StoreLoss is the probability (0 ≤ StoreLoss < 1) that a regular
	// message of the Store is lost: its sequence number is consumed but it is
	// never sent, a gap the indexer cannot replay (the master has no replay
	// endpoint). Quiesce sentinels are never lost. Default 0.
	StoreLoss float64
	Seed      uint64
	// FaultSeed seeds the loss draws (EngineConfig.Loss, StoreLoss), one
	// stream of draws per publisher, so a run's losses depend only on the
	// seed and the workload. Default 0.
	FaultSeed uint64
}

// Group is a running context: its engines, store and router. One driver
// goroutine calls Serve, Quiesce and Expect.
type Group struct {
	cfg           GroupConfig
	profile       hash.Profile
	native        *hash.Profile // EngineProfile, resolved; nil when engines hash with profile
	engines       []*Engine     // ascending by ID (the indexer's row order)
	store         *Store
	rng           *rand.Rand
	rr            int
	recent        []int // CacheAware: the last targets chosen (a ring), and
	recentN       []int // how many times each target appears in it
	recentAt      int
	keyScratch    []uint64
	nativeScratch []uint64
	ans           Answer

	Stats GroupStats
}

// GroupStats accumulate over served requests. Hit ratios are token-weighted.
type GroupStats struct {
	Requests, Blocks, DeviceHit, CachedHit int64
	Stored, Removed, Messages, StoreStored int64
	Cleared, RouteErrors                   int64
	// Lost engine messages (EngineConfig.Loss; counted in Messages) and the
	// largest engine message's payload bytes.
	Lost, MaxMessageBytes int64
	// The Store's regular messages (one per request that changed its pool),
	// how many were lost (StoreLoss), the largest one's payload bytes and how
	// many exceeded 1 MiB.
	StoreMessages, StoreLost, StoreMaxBytes, StoreOverMiB int64
	// Restarts counts rank restarts (RestartRank).
	Restarts int64
}

// DeviceHitRatio is the fraction of prompt blocks already on the chosen rank's device.
func (s *GroupStats) DeviceHitRatio() float64 { return ratio(s.DeviceHit, s.Blocks) }

// CachedHitRatio is the fraction of prompt blocks reachable on any tier of the chosen rank.
func (s *GroupStats) CachedHitRatio() float64 { return ratio(s.CachedHit, s.Blocks) }

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// NewGroup starts the group's publishers (nothing is registered yet).
func NewGroup(cfg GroupConfig) (*Group, error) {
	if cfg.Model == "" || len(cfg.Engines) == 0 {
		return nil, errors.New("sim: a group needs a model and engines")
	}
	if cfg.BlockSize <= 0 {
		cfg.BlockSize = 16
	}
	if cfg.Profile == (hash.Spec{}) {
		cfg.Profile = hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256_cbor", PythonHashSeed: "0", IndexProjection: "low64_be"}
	}
	if cfg.Policy == 0 {
		cfg.Policy = RoundRobin
	}
	if cfg.StepTokens <= 0 {
		cfg.StepTokens = 8192
	}
	if cfg.ReplayRing <= 0 {
		cfg.ReplayRing = 256
	}
	if cfg.StoreLoss < 0 || cfg.StoreLoss >= 1 {
		return nil, fmt.Errorf("sim: StoreLoss %v: want 0 ≤ p < 1", cfg.StoreLoss)
	}
	for _, ec := range cfg.Engines {
		if ec.Loss < 0 || ec.Loss >= 1 {
			return nil, fmt.Errorf("sim: engine %s: Loss %v: want 0 ≤ p < 1", ec.ID, ec.Loss)
		}
	}
	p, err := hash.Resolve(cfg.Profile)
	if err != nil {
		return nil, err
	}
	if p.Strategy == hash.StrategySGLangBigram {
		return nil, errors.New("sim: the sglang_bigram strategy is not simulated")
	}
	g := &Group{cfg: cfg, profile: p, rng: rand.New(rand.NewPCG(cfg.Seed, 0x67726f7570))}
	if cfg.EngineProfile != (hash.Spec{}) {
		np, err := hash.Resolve(cfg.EngineProfile)
		if err != nil {
			return nil, err
		}
		if p.Strategy != hash.StrategyXXH3 || np.Strategy == hash.StrategySGLangBigram {
			return nil, errors.New("sim: EngineProfile needs an xxh3 context (re-hash mode) and a vllm_v1 or sglang engine profile")
		}
		for _, ec := range cfg.Engines {
			if ec.Dialect == Standard {
				return nil, errors.New("sim: EngineProfile applies to vLLM and SGLang engines, not standard publishers")
			}
		}
		g.native = &np
	}
	for _, ec := range cfg.Engines {
		e, err := newEngine(g, ec)
		if err != nil {
			g.Close()
			return nil, err
		}
		g.engines = append(g.engines, e)
	}
	slices.SortFunc(g.engines, func(a, b *Engine) int { return strings.Compare(a.cfg.ID, b.cfg.ID) })
	for i := 1; i < len(g.engines); i++ {
		if g.engines[i].cfg.ID == g.engines[i-1].cfg.ID {
			g.Close()
			return nil, fmt.Errorf("sim: duplicate engine id %q", g.engines[i].cfg.ID)
		}
	}
	if cfg.StoreBlocks > 0 {
		if g.store, err = newStore(g, cfg.StoreBlocks); err != nil {
			g.Close()
			return nil, err
		}
	}
	return g, nil
}

// Close closes every publisher.
func (g *Group) Close() {
	for _, e := range g.engines {
		e.close()
	}
	if g.store != nil {
		_ = g.store.pub.Close()
	}
}

// Model is the group's model name; BlockSize its block size.
func (g *Group) Model() string  { return g.cfg.Model }
func (g *Group) BlockSize() int { return g.cfg.BlockSize }

// Policy is the group's routing policy.
func (g *Group) Policy() Policy { return g.cfg.Policy }

// Engines lists the engines in row order.
func (g *Group) Engines() []*Engine { return g.engines }

// Registrations returns the /register requests for every stream of the group.
func (g *Group) Registrations() []Registration {
	var out []Registration
	spec := &g.cfg.Profile
	for _, e := range g.engines {
		for _, rs := range e.ranks {
			r := Registration{Endpoint: rs.pub.Endpoint(), ReplayEndpoint: rs.pub.ReplayEndpoint(),
				Type: e.cfg.Dialect.PublisherType(), ModelName: g.cfg.Model, InstanceID: e.cfg.ID,
				BlockSize: g.cfg.BlockSize, DPRank: rs.rank}
			if g.profile.Strategy != hash.StrategyXXH3 {
				r.HashProfile = &HashProfile{spec.Strategy, spec.Algorithm, spec.PythonHashSeed, spec.IndexProjection}
			}
			out = append(out, r)
		}
	}
	if s := g.store; s != nil {
		out = append(out, Registration{Endpoint: s.pub.Endpoint(), Type: "Mooncake", ModelName: g.cfg.Model,
			InstanceID: s.id, BlockSize: g.cfg.BlockSize})
	}
	return out
}

// TierBlocks counts the blocks held per tier (device, host, share, disk)
// across the group: the ground truth's size.
func (g *Group) TierBlocks() [numTiers]int {
	var n [numTiers]int
	for _, e := range g.engines {
		for _, rs := range e.ranks {
			for t, l := range rs.tiers {
				if l != nil {
					n[t] += l.len()
				}
			}
		}
	}
	if g.store != nil {
		n[tierShare] = g.store.pool.len()
	}
	return n
}

// target is one routable (engine, rank).
type target struct{ e, r int }

func (g *Group) targets() []target {
	var ts []target
	for i, e := range g.engines {
		for r := range e.ranks {
			ts = append(ts, target{i, r})
		}
	}
	return ts
}

// Serve routes one prompt (client is used by CacheAware; it may be nil for
// the other policies) and runs it on the chosen rank.
func (g *Group) Serve(tokens []int32, client Client) (ServeStats, error) {
	keys, err := hash.AppendChain(g.keyScratch[:0], &g.profile, tokens, g.cfg.BlockSize, nil, nil)
	if err != nil {
		return ServeStats{}, err
	}
	g.keyScratch = keys
	full := len(tokens) / g.cfg.BlockSize // engines cache complete blocks only
	keys = keys[:min(full, len(keys))]
	ts := g.targets()
	var t target
	switch g.cfg.Policy {
	case Random:
		t = ts[g.rng.IntN(len(ts))]
	case CacheAware:
		t = g.awareTarget(tokens, client, ts)
	default:
		t = ts[g.rr%len(ts)]
		g.rr++
	}
	native := keys
	if g.native != nil {
		native, err = hash.AppendChain(g.nativeScratch[:0], g.native, tokens, g.cfg.BlockSize, nil, nil)
		if err != nil {
			return ServeStats{}, err
		}
		g.nativeScratch = native
		native = native[:len(keys)]
	}
	st, err := g.engines[t.e].serve(t.r, keys, native, tokens, max(1, g.cfg.StepTokens/g.cfg.BlockSize))
	s := &g.Stats
	s.Requests++
	s.Blocks += int64(st.Blocks)
	s.DeviceHit += int64(st.DeviceHit)
	s.CachedHit += int64(st.CachedHit)
	s.Stored += int64(st.Stored)
	s.Removed += int64(st.Removed)
	s.Messages += int64(st.Messages)
	s.StoreStored += int64(st.StoreStored)
	s.Cleared += int64(st.Cleared)
	s.Lost += int64(st.Lost)
	s.MaxMessageBytes = max(s.MaxMessageBytes, int64(st.MaxBytes))
	return st, err
}

// Rank names one publisher of a group: engine index (row order) and rank.
type Rank struct{ Engine, Rank int }

// Ranks lists every (engine, rank) of the group in row order.
func (g *Group) Ranks() []Rank {
	var out []Rank
	for _, t := range g.targets() {
		out = append(out, Rank{t.e, t.r})
	}
	return out
}

// PublishedSeq is the sequence number the next message of r gets: how many
// its current publisher incarnation has published.
func (g *Group) PublishedSeq(r Rank) uint64 { return g.engines[r.Engine].ranks[r.Rank].pub.NextSeq() }

// RestartRank restarts one rank as a restarting engine process does: the
// ground truth forgets everything the rank held (no event says so), and its
// publisher comes back on the same endpoints, a new incarnation whose
// sequence starts at 0 and whose replay ring is empty. The indexer sees the
// sequence go back and clears the stream (the next Quiesce proves it has
// reconnected and done so).
func (g *Group) RestartRank(r Rank) error {
	if r.Engine < 0 || r.Engine >= len(g.engines) || r.Rank < 0 || r.Rank >= len(g.engines[r.Engine].ranks) {
		return fmt.Errorf("sim: restart: no rank %+v", r)
	}
	e := g.engines[r.Engine]
	if err := e.restart(e.ranks[r.Rank]); err != nil {
		return err
	}
	g.Stats.Restarts++
	return nil
}

func (g *Group) awareTarget(tokens []int32, client Client, ts []target) target {
	start := g.rr % len(ts)
	g.rr++
	if client == nil {
		g.Stats.RouteErrors++
		return ts[start]
	}
	err := client.Query(&Query{Model: g.cfg.Model, BlockSize: g.cfg.BlockSize, Tokens: tokens}, &g.ans)
	if err != nil {
		g.Stats.RouteErrors++
		return ts[start]
	}
	if g.recentN == nil {
		g.recentN = make([]int, len(ts))
	}
	window := 4 * len(ts)
	limit := (3*window/len(ts) + 1) / 2 // 1.5 × the fair share
	best, bestJ, bestScore := -1, start, [numTiers]int64{-1}
	for j := range ts {
		i := (start + j) % len(ts)
		if g.recentN[i] >= limit {
			continue
		}
		score := [numTiers]int64{}
		if row := g.ans.Row(g.engines[ts[i].e].cfg.ID); row != nil {
			for _, rr := range row.Ranks {
				if int(rr.Rank) == g.engines[ts[i].e].ranks[ts[i].r].rank {
					score = rr.Tiers
				}
			}
		}
		if slices.Compare(score[:], bestScore[:]) > 0 {
			best, bestJ, bestScore = i, i, score
		}
	}
	if best < 0 {
		best = bestJ
	}
	if len(g.recent) < window {
		g.recent = append(g.recent, best)
	} else {
		g.recentN[g.recent[g.recentAt]]--
		g.recent[g.recentAt] = best
		g.recentAt = (g.recentAt + 1) % window
	}
	g.recentN[best]++
	return ts[best]
}

// Registration is one /register request (JSON field names).
type Registration struct {
	Endpoint       string       `json:"endpoint"`
	ReplayEndpoint string       `json:"replay_endpoint,omitempty"`
	Type           string       `json:"type"`
	ModelName      string       `json:"modelname"`
	InstanceID     string       `json:"instance_id"`
	BlockSize      int          `json:"block_size"`
	DPRank         int          `json:"dp_rank"`
	HashProfile    *HashProfile `json:"hash_profile,omitempty"`
}

// HashProfile is /register's hash_profile object.
type HashProfile struct {
	Strategy        string `json:"strategy"`
	Algorithm       string `json:"algorithm"`
	PythonHashSeed  string `json:"python_hash_seed"`
	IndexProjection string `json:"index_projection"`
}

// Quiesce publishes a fresh sentinel block on every stream of the group and
// waits (polling with client) until the indexer reports all of them: each
// stream is applied in order, so every event published before the sentinel
// has then been applied and answers can be compared with Expect. Streams
// whose sentinel is not visible within retry are re-sent a new sentinel (a
// subscriber that connected late misses what was published before).
func (g *Group) Quiesce(client Client, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	const retry = 500 * time.Millisecond
	type pending struct {
		e      *Engine
		rs     *rankState
		tokens []int32
		sent   time.Time
	}
	var todo []pending
	send := func(p *pending) error {
		p.sent = time.Now()
		if p.e == nil {
			toks, err := g.store.publishSentinel(g.rng)
			p.tokens = toks
			return err
		}
		if err := p.e.publishSentinel(p.rs, g.rng); err != nil {
			return err
		}
		p.tokens = p.rs.sentTokens
		return nil
	}
	for _, e := range g.engines {
		for _, rs := range e.ranks {
			todo = append(todo, pending{e: e, rs: rs})
		}
	}
	if g.store != nil {
		todo = append(todo, pending{})
	}
	for i := range todo {
		if err := send(&todo[i]); err != nil {
			return err
		}
	}
	var a Answer
	for len(todo) > 0 {
		p := &todo[0]
		if err := client.Query(&Query{Model: g.cfg.Model, BlockSize: g.cfg.BlockSize, Tokens: p.tokens}, &a); err != nil {
			return fmt.Errorf("sim: quiesce %s: %w", g.cfg.Model, err)
		}
		if sentinelVisible(&a, p.e, p.rs, int64(g.cfg.BlockSize)) {
			todo = todo[1:]
			continue
		}
		now := time.Now()
		if now.After(deadline) {
			name := "store"
			if p.e != nil {
				name = fmt.Sprintf("%s rank %d", p.e.cfg.ID, p.rs.rank)
			}
			return fmt.Errorf("sim: quiesce %s: sentinel of %s not visible after %v", g.cfg.Model, name, timeout)
		}
		if now.Sub(p.sent) > retry {
			if err := send(p); err != nil {
				return err
			}
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// sentinelVisible: an engine sentinel is on that rank's device; the store's is
// a cpu_share block every rank sees (checked on any row).
func sentinelVisible(a *Answer, e *Engine, rs *rankState, bs int64) bool {
	if e == nil {
		for _, row := range a.Rows {
			if row.Tiers[tierShare] >= bs {
				return true
			}
		}
		return false
	}
	row := a.Row(e.cfg.ID)
	if row == nil {
		return false
	}
	for _, rr := range row.Ranks {
		if int(rr.Rank) == rs.rank {
			return rr.Tiers[tierDevice] >= bs
		}
	}
	return false
}
