package sim

import (
	"fmt"
	"strings"

	"github.com/seed-c7a81618/conductor/hash"
)

// Answer is a tiered query answer in the cumulative form every surface can
// report: per instance, per dp rank, the token boundaries of device ≤
// cpu_local ≤ cpu_share ≤ disk.
type Answer struct {
	Rows []Row // ascending by Instance
	// Coarse marks an answer of a surface that reports less than the four
	// cumulative tiers per rank (the Dynamo dialect: gpu, cpu = through
	// cpu_local, disk = through every tier, and the device boundary per
	// rank): Diff then compares only those.
	Coarse bool
}

// Row is one instance. Tiers are maxima over its ranks and Longest is the
// disk boundary (longest_matched).
type Row struct {
	Instance string
	Longest  int64
	Tiers    [numTiers]int64
	Ranks    []RankRow // ascending by Rank
}

// RankRow is one dp rank's boundaries.
type RankRow struct {
	Rank  int32
	Tiers [numTiers]int64
}

// Reset empties a for reuse.
func (a *Answer) Reset() { a.Rows = a.Rows[:0] }

// Row returns the row of instance id, or nil.
func (a *Answer) Row(id string) *Row {
	for i := range a.Rows {
		if a.Rows[i].Instance == id {
			return &a.Rows[i]
		}
	}
	return nil
}

// Diff describes how got differs from want, or returns "" when they agree
// exactly (instances, ranks, every tier boundary, longest_matched).
func Diff(want, got *Answer) string {
	if got.Coarse {
		want = coarsen(want)
	}
	var b strings.Builder
	for i := range want.Rows {
		w := &want.Rows[i]
		g := got.Row(w.Instance)
		if g == nil {
			fmt.Fprintf(&b, "instance %s: missing (want %v)\n", w.Instance, w.Tiers)
			continue
		}
		if g.Longest != w.Longest || g.Tiers != w.Tiers {
			fmt.Fprintf(&b, "instance %s: longest %d tiers %v, want longest %d tiers %v\n", w.Instance, g.Longest, g.Tiers, w.Longest, w.Tiers)
		}
		if len(g.Ranks) != len(w.Ranks) {
			fmt.Fprintf(&b, "instance %s: %d ranks, want %d\n", w.Instance, len(g.Ranks), len(w.Ranks))
			continue
		}
		for j := range w.Ranks {
			if g.Ranks[j] != w.Ranks[j] {
				fmt.Fprintf(&b, "instance %s rank %d: %v, want rank %d: %v\n", w.Instance, g.Ranks[j].Rank, g.Ranks[j].Tiers, w.Ranks[j].Rank, w.Ranks[j].Tiers)
			}
		}
	}
	for i := range got.Rows {
		if want.Row(got.Rows[i].Instance) == nil {
			fmt.Fprintf(&b, "instance %s: unexpected row %v\n", got.Rows[i].Instance, got.Rows[i].Tiers)
		}
	}
	return b.String()
}

// Expect computes, from the simulator's ground truth, the answer an indexer
// must give for tokens in g's context once every published event is applied.
// This is a second implementation of the four-tier cumulative rules of
// reference §6.3, deliberately not core's cursor walk: boundary k of a rank is
// the first block whose fastest tier reachable by that rank (its own device,
// host and disk pools, and the shared store) is slower than tier k, or that
// no tier holds. Sentinel blocks are not included (no prompt contains them).
func (g *Group) Expect(tokens []int32, a *Answer) error {
	a.Reset()
	keys, err := hash.AppendChain(g.keyScratch[:0], &g.profile, tokens, g.cfg.BlockSize, nil, nil)
	if err != nil {
		return err
	}
	g.keyScratch = keys
	for _, e := range g.engines {
		row := Row{Instance: e.cfg.ID}
		for _, rs := range e.ranks {
			rr := RankRow{Rank: int32(rs.rank)}
			k := 0 // current tier boundary being extended
			for i := 0; i < len(keys) && k < numTiers; i++ {
				t := g.fastestTier(rs, keys[i])
				for k < numTiers && t > k {
					rr.Tiers[k] = g.matched(i, len(tokens))
					k++
				}
			}
			for ; k < numTiers; k++ {
				rr.Tiers[k] = g.matched(len(keys), len(tokens))
			}
			for t := range rr.Tiers {
				row.Tiers[t] = max(row.Tiers[t], rr.Tiers[t])
			}
			row.Ranks = append(row.Ranks, rr)
		}
		row.Longest = row.Tiers[tierDisk]
		a.Rows = append(a.Rows, row)
	}
	return nil
}

// fastestTier returns the fastest tier holding k for rs, or numTiers+1.
func (g *Group) fastestTier(rs *rankState, k uint64) int {
	for t := 0; t < numTiers; t++ {
		if t == tierShare {
			if g.store != nil && g.store.pool.has(k) {
				return t
			}
			continue
		}
		if rs.tiers[t] != nil && rs.tiers[t].has(k) {
			return t
		}
	}
	return numTiers + 1
}

// matched is how many prompt tokens n blocks cover: the sglang chain's last
// block may be partial.
func (g *Group) matched(n, promptLen int) int64 {
	c := int64(n) * int64(g.cfg.BlockSize)
	if g.profile.Strategy == hash.StrategySGLang {
		c = min(c, int64(promptLen))
	}
	return c
}

// coarsen projects a full answer onto what a coarse surface reports (see
// Answer.Coarse): cpu_share folds into disk, and ranks keep only their device
// boundary. The Dynamo client fills its rows the same way.
func coarsen(a *Answer) *Answer {
	c := &Answer{Coarse: true, Rows: make([]Row, len(a.Rows))}
	for i, r := range a.Rows {
		r.Tiers[tierShare] = r.Tiers[tierDisk]
		ranks := make([]RankRow, len(r.Ranks))
		for j, rr := range r.Ranks {
			ranks[j] = RankRow{Rank: rr.Rank}
			ranks[j].Tiers[tierDevice] = rr.Tiers[tierDevice]
		}
		r.Ranks = ranks
		c.Rows[i] = r
	}
	return c
}
