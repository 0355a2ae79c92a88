package core

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/seed-c7a81618/conductor/hash"
)

// QueryRequest selects a context and a prompt. Strings and slices are only
// read during the call, so callers may pass zero-copy views of request buffers.
type QueryRequest struct {
	TenantID  string // "" means "default"
	Model     string
	LoraName  string
	BlockSize int
	// Tokens is the prompt; with ByHash, Hashes are precomputed prefix keys
	// instead and longest_matched = block_size × matched blocks.
	Tokens []int32
	Hashes []uint64
	ByHash bool
	// CacheSalt selects the salt namespace under the xxh3 profile (for
	// Tokens and Hashes alike); engine profiles hash it into the chain.
	CacheSalt []byte
	// Instance filters to one instance when non-empty.
	Instance string
	// PerMedium also computes the per-medium prefixes (RankResult.Media,
	// InstanceResult.Media); without it they are zero and the walk does a
	// little less work per (block, rank). The JSON dialect sets it.
	PerMedium bool
}

// RankResult is one dp rank's tier boundaries in tokens.
type RankResult struct {
	Rank                             int32
	Device, CPULocal, CPUShare, Disk int64
	// Media are independent longest prefixes per medium class (seed 000's
	// "matched prefix tokens available on each medium"): a block counts for
	// a class only when this rank (or a shared pool) holds it in that class.
	Media [NumMedia]int64
}

// InstanceResult is one instance row: tier boundaries are maxima over its
// ranks, LongestMatched is the disk boundary. Ranks is ascending by rank.
type InstanceResult struct {
	ID                                               string
	LongestMatched, Device, CPULocal, CPUShare, Disk int64
	// Media are the per-medium prefixes, each the maximum over the ranks.
	Media [NumMedia]int64
	Ranks []RankResult
}

// Medium is a class of tiers for the per-medium (non-cumulative) prefixes.
type Medium uint8

const (
	// MediumDevice is G1: TierDevice.
	MediumDevice Medium = iota
	// MediumHost is G2: TierCPULocal ∪ TierCPUShare.
	MediumHost
	// MediumDisk is G3: TierDisk.
	MediumDisk
	NumMedia // number of medium classes
)

// mediumTiers are the tier bits of each medium class.
var mediumTiers = [NumMedia]uint8{
	MediumDevice: 1 << TierDevice,
	MediumHost:   1<<TierCPULocal | 1<<TierCPUShare,
	MediumDisk:   1 << TierDisk,
}

// mediaHeld maps a set of tier bits to the set of medium-class bits it covers.
var mediaHeld = func() (t [1 << NumTiers]uint8) {
	for held := range t {
		for m := range NumMedia {
			if uint8(held)&mediumTiers[m] != 0 {
				t[held] |= 1 << m
			}
		}
	}
	return t
}()

// QueryResult is written by Query. Reuse one per goroutine: Query truncates
// and re-extends its slices, so steady-state queries do not allocate. The
// slices are valid until the next Query into the same result.
type QueryResult struct {
	Instances []InstanceResult // sorted by ID
	// ContextFound is false when the context does not exist.
	ContextFound bool

	chain   hash.Chain
	cursors []cursor
	ranks   []RankResult
}

// cursor walks one (instance, rank) through the tiers.
type cursor struct {
	phase uint8
	done  bool
	// min is the fastest tier this rank holds for the current block; epoch is
	// the block index+1 it was computed for.
	min uint8
	// mask is the set of tiers (bits) this rank holds for the current block.
	mask  uint8
	epoch int32
	bound [NumTiers]int32 // blocks accepted up to the end of each phase
	// media: run end per medium class, valid once the bit is set in mdone.
	media [NumMedia]int32
	mdone uint8
}

const noTier = uint8(NumTiers)

// Query answers, per instance and rank, how many prompt tokens are cached in
// each tier. Rules (reference §6.3, four-tier cumulative variant): one cursor
// per (instance, rank) walks the prompt's blocks with phases device →
// cpu_local → cpu_share → disk; phase k accepts a block held in tier k or any
// faster tier (rank-owned tiers only for this rank, shared tiers for every
// rank); the walk never returns to a faster phase; the boundary of each phase
// is where the next began or the walk stopped. Hashes are computed lazily and
// stop at the furthest block any cursor reaches.
//
// A context with several partitions (one per hash profile, partition.go) is
// answered partition by partition, each with its own profile's chain, and the
// rows are merged (mergeRows). With one partition the query costs what an
// unpartitioned index would.
//
// An unknown context yields no rows and creates no state.
func (ix *Index) Query(req *QueryRequest, res *QueryResult) error {
	ix.queries.Add(1) // the applier steps aside while queries run (applyrun.go)
	defer ix.queries.Add(-1)
	res.Instances = res.Instances[:0]
	res.ContextFound = false
	tenant := req.TenantID
	if tenant == "" {
		tenant = "default"
	}
	c := ix.lookupContext(ContextKey{TenantID: tenant, ModelName: req.Model, LoraName: req.LoraName, BlockSize: req.BlockSize})
	if c == nil {
		return nil
	}
	res.ContextFound = true
	if c.next.Load() == nil {
		_, err := ix.queryPartition(c, req, res, tenant, 0)
		return err
	}
	return ix.queryPartitions(c, req, res, tenant)
}

// queryPartitions answers a key with several partitions, the first being
// head. A partition whose chain cannot hash the prompt (say a cache_salt
// that is not UTF-8 under vllm_v1) contributes no rows, so one identity's
// profile cannot fail the queries of another's; the error is returned only
// when no partition could answer.
func (ix *Index) queryPartitions(head *context, req *QueryRequest, res *QueryResult, tenant string) error {
	var first error
	answered := false
	base, parts := 0, 0
	for c := head; c != nil; c = c.next.Load() {
		n := len(res.Instances)
		used, err := ix.queryPartition(c, req, res, tenant, base)
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		answered = true
		base += used
		if len(res.Instances) > n {
			parts++
		}
	}
	if !answered {
		return first
	}
	if parts > 1 {
		res.mergeRows(base)
	}
	return nil
}

// queryPartition appends the rows of partition c, sorted by instance, to
// res.Instances; their ranks go to res.ranks[base:] (rows already there keep
// theirs). It returns the number of ranks written.
func (ix *Index) queryPartition(c *context, req *QueryRequest, res *QueryResult, tenant string, base int) (int, error) {
	m := c.snapshot()
	lo, hi := 0, len(m.slots)
	spans := m.instances
	if req.Instance != "" {
		i := sort.Search(len(spans), func(i int) bool { return spans[i].id >= req.Instance })
		if i == len(spans) || spans[i].id != req.Instance {
			return 0, nil
		}
		spans = spans[i : i+1]
		lo, hi = spans[0].lo, spans[0].hi
	}
	if lo == hi {
		return 0, nil
	}

	nBlocks := len(req.Hashes)
	prof := c.profile()
	ns := saltNamespace(prof, req.CacheSalt)
	if !req.ByHash {
		// Under xxh3 the chain is the plain standard formula (no LoRA, no
		// salt: the LoRA is in the context key, the salt picks ns).
		res.chain.SetMemo(ix.opts.HashMemo)
		lora, salt := c.lora, req.CacheSalt
		if prof.Strategy == hash.StrategyXXH3 {
			lora, salt = nil, nil
		}
		if err := res.chain.Reset(prof, req.Tokens, c.key.BlockSize, lora, salt); err != nil {
			return 0, fmt.Errorf("query %s/%s: %w: %w", tenant, req.Model, ErrInvalid, err)
		}
		nBlocks = res.chain.Blocks()
	}

	cur := growCursors(res.cursors, hi-lo)
	res.cursors = cur
	end := walk(c, m, lo, cur, nBlocks, req, &res.chain, ns)
	res.chain.FlushMemoStats()

	// Convert block boundaries to tokens and assemble rows.
	bs := int64(c.key.BlockSize)
	tokens := func(blocks int32) int64 {
		if req.ByHash {
			// Saturate: a registration's block_size may be up to 2^63-1.
			if blocks > 0 && bs > math.MaxInt64/int64(blocks) {
				return math.MaxInt64
			}
			return int64(blocks) * bs
		}
		return int64(res.chain.MatchedTokens(int(blocks)))
	}
	need := base + hi - lo
	if cap(res.ranks) < need {
		// Rows already assembled keep the old array.
		res.ranks = make([]RankResult, need)
	}
	ranks := res.ranks[base:need]
	for i := range cur {
		cu := &cur[i]
		if !cu.done {
			for k := cu.phase; k < uint8(NumTiers); k++ {
				cu.bound[k] = end
			}
		}
		for k := range NumMedia {
			if cu.mdone&(1<<k) == 0 {
				cu.media[k] = end
			}
		}
		ranks[i] = RankResult{
			Rank:     m.slots[lo+i].rank,
			Device:   tokens(cu.bound[TierDevice]),
			CPULocal: tokens(cu.bound[TierCPULocal]),
			CPUShare: tokens(cu.bound[TierCPUShare]),
			Disk:     tokens(cu.bound[TierDisk]),
		}
		if req.PerMedium {
			for k := range NumMedia {
				ranks[i].Media[k] = tokens(cu.media[k])
			}
		}
	}
	for _, sp := range spans {
		row := InstanceResult{ID: sp.id, Ranks: ranks[sp.lo-lo : sp.hi-lo]}
		row.aggregate()
		res.Instances = append(res.Instances, row)
	}
	return hi - lo, nil
}

// aggregate sets the row's tier boundaries and media to the maxima over its
// ranks, and LongestMatched to the disk boundary.
func (row *InstanceResult) aggregate() {
	for _, r := range row.Ranks {
		row.Device = max(row.Device, r.Device)
		row.CPULocal = max(row.CPULocal, r.CPULocal)
		row.CPUShare = max(row.CPUShare, r.CPUShare)
		row.Disk = max(row.Disk, r.Disk)
		for k := range NumMedia {
			row.Media[k] = max(row.Media[k], r.Media[k])
		}
	}
	row.LongestMatched = row.Disk
}

// mergeRows merges the rows of several partitions (each run sorted by
// instance) into one list sorted by instance. An instance in several
// partitions (one identity's ranks registered under two profiles, or the
// admin reusing an instance id) gets one row with the union of its ranks;
// a (instance, rank) in several partitions gets, per tier and medium, the
// largest of its boundaries: each partition's answer is a prefix the rank
// holds. Maxima keep device ≤ cpu_local ≤ cpu_share ≤ disk. Merged ranks
// are written to res.ranks[base:]; no allocation once res.ranks has grown.
func (res *QueryResult) mergeRows(base int) {
	rows := res.Instances
	slices.SortStableFunc(rows, func(a, b InstanceResult) int { return strings.Compare(a.ID, b.ID) })
	out := rows[:0]
	for i := 0; i < len(rows); {
		j := i + 1
		for j < len(rows) && rows[j].ID == rows[i].ID {
			j++
		}
		if j == i+1 {
			out = append(out, rows[i])
			i = j
			continue
		}
		start := base
		for _, r := range rows[i:j] {
			for _, rk := range r.Ranks {
				base = res.mergeRank(start, base, rk)
			}
		}
		row := InstanceResult{ID: rows[i].ID, Ranks: res.ranks[start:base]}
		row.aggregate()
		out = append(out, row) // len(out) ≤ i: rows[i:j] were read above
		i = j
	}
	res.Instances = out
}

// mergeRank inserts rk into res.ranks[start:end], kept ascending by rank,
// taking the maxima when the rank is there already. It returns the new end.
func (res *QueryResult) mergeRank(start, end int, rk RankResult) int {
	rs := res.ranks[start:end]
	p := 0
	for p < len(rs) && rs[p].Rank < rk.Rank {
		p++
	}
	if p < len(rs) && rs[p].Rank == rk.Rank {
		r := &rs[p]
		r.Device, r.CPULocal = max(r.Device, rk.Device), max(r.CPULocal, rk.CPULocal)
		r.CPUShare, r.Disk = max(r.CPUShare, rk.CPUShare), max(r.Disk, rk.Disk)
		for k := range NumMedia {
			r.Media[k] = max(r.Media[k], rk.Media[k])
		}
		return end
	}
	res.ranks = append(res.ranks[:end], RankResult{})
	copy(res.ranks[start+p+1:end+1], res.ranks[start+p:end])
	res.ranks[start+p] = rk
	return end + 1
}

func growCursors(cur []cursor, n int) []cursor {
	if cap(cur) < n {
		cur = make([]cursor, n)
	}
	cur = cur[:n]
	for i := range cur {
		cur[i] = cursor{}
	}
	return cur
}

// walkAhead is the most blocks walk looks up ahead of the block it is at.
const walkAhead = 16

// walk advances every cursor over the prompt's blocks and returns the block
// index where the walk ended (for cursors still running).
func walk(c *context, m *ctxMeta, lo int, cur []cursor, nBlocks int, req *QueryRequest, chain *hash.Chain, ns namespace) int32 {
	active := len(cur)
	hi := lo + len(cur)
	owners := m.owners
	perMedium := req.PerMedium
	var prev *holdings // the last block's owner set that moved the cursors
	// Blocks are looked up a window ahead of the walk: the lookups do not
	// depend on each other, so their cache misses overlap (a block of a
	// large index is a random bucket and a random entry). The window
	// doubles from 1 to walkAhead as the walk goes on, so a walk that ends
	// early hashed and looked up at most as many blocks past its end as it
	// walked.
	var (
		keys      [walkAhead]uint64
		ahead     [walkAhead]blockVal
		base, got int
		win       = 1
	)
	var i int
	for i = 0; i < nBlocks && active > 0; i++ {
		if i == base+got {
			base, got = i, min(win, nBlocks-i)
			for j := range got {
				if req.ByHash {
					keys[j] = req.Hashes[i+j]
				} else {
					keys[j] = chain.At(i + j)
				}
				if ns.tag != 0 {
					keys[j] = ns.key(keys[j])
				}
			}
			for j := range got {
				ahead[j], _ = c.blocks.Load(keys[j])
			}
			win = min(2*win, walkAhead)
		}
		v := ahead[i-base]
		if v.h == nil {
			break
		}
		// A block held by exactly the words of the block before moves no
		// cursor: each cursor it would meet already stands at the tier
		// those words give (a popular prompt: every block held by the same
		// thousand owners costs one compare, not a thousand updates).
		h := v.h
		if h.same(prev) {
			continue
		}
		prev = h
		epoch := int32(i + 1)
		shared := noTier
		var sharedMask uint8
		// Inline owner scan (no closures on the hot path).
		for j, n := -1, len(h.rest); j < n; j++ {
			w := h.w0
			if j >= 0 {
				w = h.rest[j]
			}
			id := wordOwner(w)
			if int(id) >= len(owners) {
				continue // owner newer than this snapshot
			}
			o := &owners[id]
			if o.gen != wordGen(w) {
				continue // the id was released and reused after this snapshot
			}
			t := uint8(wordTier(w))
			if o.shared {
				if o.live {
					if t < shared {
						shared = t
					}
					sharedMask |= 1 << t
				}
				continue
			}
			if o.slot < int32(lo) || o.slot >= int32(hi) {
				continue
			}
			cu := &cur[o.slot-int32(lo)]
			if cu.epoch != epoch {
				cu.epoch, cu.min, cu.mask = epoch, t, 1<<t
			} else {
				if t < cu.min {
					cu.min = t
				}
				if perMedium {
					cu.mask |= 1 << t
				}
			}
		}
		for k := range cur {
			cu := &cur[k]
			if cu.done {
				continue
			}
			t := shared
			if cu.epoch == epoch && cu.min < t {
				t = cu.min
			}
			if perMedium {
				// Media runs end at the first block the rank cannot use in
				// that medium: one table lookup per cursor and block.
				held := sharedMask
				if cu.epoch == epoch {
					held |= cu.mask
				}
				if ended := ^mediaHeld[held&0xf] & ^cu.mdone & (1<<NumMedia - 1); ended != 0 {
					for m := range NumMedia {
						if ended&(1<<m) != 0 {
							cu.media[m] = int32(i)
						}
					}
					cu.mdone |= ended
				}
			}
			if t == noTier {
				cu.done = true
				for p := cu.phase; p < uint8(NumTiers); p++ {
					cu.bound[p] = int32(i)
				}
				active--
				continue
			}
			for cu.phase < t {
				cu.bound[cu.phase] = int32(i)
				cu.phase++
			}
		}
	}
	return int32(i)
}
