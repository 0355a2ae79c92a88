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
func TestQueryAgreesWithModel(t *testing.T) { bothApplies(t, queryAgreesWithModel) }

func queryAgreesWithModel(t *testing.T) {
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
		// Without PerMedium: the same tier boundaries, no media.
		plain := &QueryResult{}
		if err := ix.Query(&QueryRequest{Model: "m", BlockSize: testBS, Hashes: keys, ByHash: true}, plain); err != nil {
			t.Fatal(err)
		}
		for i, r := range plain.Instances {
			w := res.Instances[i]
			if r.Media != ([NumMedia]int64{}) || r.Device != w.Device || r.CPULocal != w.CPULocal || r.CPUShare != w.CPUShare || r.Disk != w.Disk {
				t.Fatalf("iter %d: without PerMedium %+v, with %+v", iter, r, w)
			}
		}
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

// TestStreamsAgreeWithModel drives a standardized publisher with random
// stored / removed / cleared events over streams (backend × medium × rank)
// and compares every rank's tier boundaries and per-medium prefixes with a
// naive model that keeps copies per stream and purges exactly a stream on
// `cleared` (seed: "all blocks for the event stream dimensions are purged").
// Shared-pool streams (medium external) are keyed by (backend, medium): a
// pool is visible to every rank and owned by none.
func TestStreamsAgreeWithModel(t *testing.T) { bothApplies(t, streamsAgreeWithModel) }

func streamsAgreeWithModel(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	type streamID struct {
		backend, medium string
		rank            int32 // -1 for shared streams
	}
	tierOf := map[string]Tier{"gpu": TierDevice, "cpu": TierCPULocal, "disk": TierDisk, "external": TierCPUShare}
	keys := seq(6)
	for iter := 0; iter < 200; iter++ {
		ix := New(Options{})
		s := mustRegister(t, ix, stdReg("a", "", ""))
		model := map[streamID]map[uint64]int{}
		for n := 40 + rng.Intn(60); n > 0; n-- {
			backend := []string{"w0", "w1"}[rng.Intn(2)]
			medium := []string{"gpu", "cpu", "disk", "external"}[rng.Intn(4)]
			rank := int32(rng.Intn(2))
			id := streamID{backend, medium, rank}
			if medium == "external" {
				id.rank = -1
			}
			lo := rng.Intn(len(keys))
			hs := keys[lo : lo+1+rng.Intn(len(keys)-lo)]
			kind := []EventKind{EventStored, EventStored, EventStored, EventRemoved, EventCleared}[rng.Intn(5)]
			e := rfcEv(kind, 0, backend, medium, uint32(rank), hs...)
			e.Events[0].HasEventID = false
			if kind == EventCleared {
				e.Events[0].Hashes = e.Events[0].Hashes[:0]
			}
			s.Apply(e)
			if model[id] == nil {
				model[id] = map[uint64]int{}
			}
			switch kind {
			case EventStored:
				for _, h := range hs {
					model[id][h]++
				}
			case EventRemoved:
				for _, h := range hs {
					if model[id][h] > 0 {
						model[id][h]--
					}
				}
			case EventCleared:
				model[id] = map[uint64]int{}
			}
		}
		blocks := make([][]modelHolding, len(keys))
		for i, k := range keys {
			for id, held := range model {
				if held[k] > 0 {
					blocks[i] = append(blocks[i], modelHolding{inst: "a", rank: id.rank, tier: tierOf[id.medium], shared: id.rank < 0})
				}
			}
		}
		res := queryHashes(t, ix, "a", keys...)
		checkInvariants(t, res, int64(len(keys)*testBS))
		r := row(res, "a")
		for _, rk := range r.Ranks {
			want := modelQuery(blocks, "a", rk.Rank)
			if got := [NumTiers]int64{rk.Device, rk.CPULocal, rk.CPUShare, rk.Disk}; got != want {
				t.Fatalf("iter %d rank %d: tiers %v want %v; model %v", iter, rk.Rank, got, want, model)
			}
			if wm := modelMedia(blocks, "a", rk.Rank); rk.Media != wm {
				t.Fatalf("iter %d rank %d: media %v want %v; model %v", iter, rk.Rank, rk.Media, wm, model)
			}
		}
		checkKeySets(t, s)
	}
}
