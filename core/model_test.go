package core

import (
	"fmt"
	"math/rand"
	"testing"
	"time"
)

// modelHolding is one holding in the naive reference model.
type modelHolding struct {
	inst   string // "" for the pool
	rank   int32
	tier   Tier
	shared bool
}

// modelQuery is a deliberately naive second implementation of the tiered
// query rules, written from the prose of reference §6.3: for each rank, the
// phase starts at device; at each block the fastest tier this rank can use is
// found by scanning every holding; a block nobody usable holds ends the walk.
func modelQuery(blocks [][]modelHolding, inst string, rank int32) [NumTiers]int64 {
	var bound [NumTiers]int64
	phase := TierDevice
	i := 0
	for ; i < len(blocks); i++ {
		best := NumTiers
		for _, h := range blocks[i] {
			if h.shared || (h.inst == inst && h.rank == rank) {
				if h.tier < best {
					best = h.tier
				}
			}
		}
		if best == NumTiers {
			break
		}
		for phase < best {
			bound[phase] = int64(i * testBS)
			phase++
		}
	}
	for p := phase; p < NumTiers; p++ {
		bound[p] = int64(i * testBS)
	}
	return bound
}

// modelMedia is the naive model of the per-medium prefixes: for each medium
// class, the number of leading blocks the rank (or the pool) holds in a tier
// of that class, independently of the other classes.
func modelMedia(blocks [][]modelHolding, inst string, rank int32) [NumMedia]int64 {
	class := func(t Tier) Medium {
		switch t {
		case TierDevice:
			return MediumDevice
		case TierCPULocal, TierCPUShare:
			return MediumHost
		}
		return MediumDisk
	}
	var out [NumMedia]int64
	for m := range NumMedia {
		i := 0
	blocks:
		for ; i < len(blocks); i++ {
			for _, h := range blocks[i] {
				if (h.shared || (h.inst == inst && h.rank == rank)) && class(h.tier) == m {
					continue blocks
				}
			}
			break
		}
		out[m] = int64(i * testBS)
	}
	return out
}

// TestQueryAgreesWithModel compares Query with the naive model on random
// holdings across instances, ranks and the shared pool.
func TestQueryAgreesWithModel(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	p := cborProfile(t)
	insts := []string{"a", "b", "c"}
	media := map[Tier]string{TierDevice: "GPU", TierCPULocal: "CPU", TierDisk: "DISK"}
	for iter := 0; iter < 300; iter++ {
		ix := New(Options{})
		subs := map[string]*Subscription{}
		for _, in := range insts {
			for r := int32(0); r < 2; r++ {
				subs[fmt.Sprintf("%s/%d", in, r)] = mustRegister(t, ix, engineReg(t, in, r, p))
			}
		}
		pool := mustRegister(t, ix, poolReg("pool"))
		n := 1 + rng.Intn(8)
		keys := seq(n)
		blocks := make([][]modelHolding, n)
		for i := range blocks {
			for k := rng.Intn(4); k > 0; k-- {
				switch x := rng.Intn(5); {
				case x < 3:
					in, r := insts[rng.Intn(3)], int32(rng.Intn(2))
					tier := []Tier{TierDevice, TierCPULocal, TierDisk}[rng.Intn(3)]
					subs[fmt.Sprintf("%s/%d", in, r)].Apply(stored(media[tier], keys[i]))
					blocks[i] = append(blocks[i], modelHolding{inst: in, rank: r, tier: tier})
				case x == 3:
					pool.Apply(poolStored("cpu", "s", keys[i]))
					blocks[i] = append(blocks[i], modelHolding{tier: TierCPUShare, shared: true})
				default:
					pool.Apply(poolStored("disk", "s", keys[i]))
					blocks[i] = append(blocks[i], modelHolding{tier: TierDisk, shared: true})
				}
			}
		}
		res := queryHashes(t, ix, "", keys...)
		checkInvariants(t, res, int64(n*testBS))
		for _, in := range insts {
			r := row(res, in)
			if r == nil || len(r.Ranks) != 2 {
				t.Fatalf("iter %d: row %s: %+v", iter, in, r)
			}
			var rowMax [NumTiers]int64
			var mediaMax [NumMedia]int64
			for _, rk := range r.Ranks {
				want := modelQuery(blocks, in, rk.Rank)
				got := [NumTiers]int64{rk.Device, rk.CPULocal, rk.CPUShare, rk.Disk}
				if got != want {
					t.Fatalf("iter %d %s/%d: got %v want %v; blocks %+v", iter, in, rk.Rank, got, want, blocks)
				}
				for k := range rowMax {
					rowMax[k] = max(rowMax[k], want[k])
				}
				if wm := modelMedia(blocks, in, rk.Rank); rk.Media != wm {
					t.Fatalf("iter %d %s/%d: media %v want %v; blocks %+v", iter, in, rk.Rank, rk.Media, wm, blocks)
				}
				for k := range mediaMax {
					mediaMax[k] = max(mediaMax[k], rk.Media[k])
				}
			}
			if [NumTiers]int64{r.Device, r.CPULocal, r.CPUShare, r.Disk} != rowMax {
				t.Fatalf("iter %d %s: row is not the per-tier max of ranks: %+v", iter, in, r)
			}
			if r.Media != mediaMax {
				t.Fatalf("iter %d %s: row media %v are not the max over ranks %v", iter, in, r.Media, mediaMax)
			}
		}
	}
}
