package core

import (
	"fmt"
	"testing"

	"github.com/seed-c7a81618/conductor/hash"
)

// Test helpers: build registrations and batches through the public API only.

const testBS = 16

// bothApplies runs f as two subtests: "direct", and "prefetch" with
// prefetchMin 0, so that appliers look their batches' keys up first however
// small the test's index is.
func bothApplies(t *testing.T, f func(t *testing.T)) {
	t.Run("direct", f)
	t.Run("prefetch", func(t *testing.T) {
		old := prefetchMin
		prefetchMin = 0
		t.Cleanup(func() { prefetchMin = old })
		f(t)
	})
}

func cborProfile(t testing.TB) hash.Profile {
	t.Helper()
	p, err := hash.Resolve(hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256_cbor", PythonHashSeed: "0", IndexProjection: "low64_be"})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func engineReg(t testing.TB, inst string, rank int32, p hash.Profile) Registration {
	return Registration{
		Endpoint: fmt.Sprintf("tcp://127.0.0.1:1/%s/%d", inst, rank), Type: PublisherVLLM,
		ModelName: "m", InstanceID: inst, BlockSize: testBS, DPRank: rank,
		Profile: p, ProfileExplicit: true,
	}
}

func poolReg(inst string) Registration {
	return Registration{
		Endpoint: "tcp://127.0.0.1:2/" + inst, Type: PublisherMooncake,
		ModelName: "m", InstanceID: inst, BlockSize: testBS,
	}
}

func mustRegister(t testing.TB, ix *Index, r Registration) *Subscription {
	t.Helper()
	s, _, err := ix.Register(r)
	if err != nil {
		t.Fatalf("register %+v: %v", r, err)
	}
	return s
}

// store / remove build one-event batches.
func stored(medium string, hashes ...uint64) *Batch {
	b := &Batch{}
	e := b.NextEvent()
	e.Kind = EventStored
	e.Hashes = append(e.Hashes, hashes...)
	if medium != "" {
		e.Medium = []byte(medium)
	}
	e.BlockSize = testBS
	return b
}

func removed(medium string, hashes ...uint64) *Batch {
	b := stored(medium, hashes...)
	b.Events[0].Kind = EventRemoved
	b.Events[0].BlockSize = 0
	return b
}

func cleared() *Batch {
	b := &Batch{}
	b.NextEvent().Kind = EventCleared
	return b
}

// poolStored is a Mooncake master event: one object per block.
func poolStored(medium, backend string, hashes ...uint64) *Batch {
	b := stored(medium, hashes...)
	e := &b.Events[0]
	e.BackendID = []byte(backend)
	e.TenantID = []byte("default")
	return b
}

func queryHashes(t testing.TB, ix *Index, inst string, hashes ...uint64) *QueryResult {
	t.Helper()
	res := &QueryResult{}
	req := &QueryRequest{Model: "m", BlockSize: testBS, Hashes: hashes, ByHash: true, Instance: inst, PerMedium: true}
	if err := ix.Query(req, res); err != nil {
		t.Fatal(err)
	}
	return res
}

func seq(n int) []uint64 {
	h := make([]uint64, n)
	for i := range h {
		h[i] = uint64(1000 + i)
	}
	return h
}

func row(res *QueryResult, inst string) *InstanceResult {
	for i := range res.Instances {
		if res.Instances[i].ID == inst {
			return &res.Instances[i]
		}
	}
	return nil
}

// checkInvariants asserts the ordering every row must satisfy.
func checkInvariants(t testing.TB, res *QueryResult, limit int64) {
	t.Helper()
	for _, r := range res.Instances {
		if !(0 <= r.Device && r.Device <= r.CPULocal && r.CPULocal <= r.CPUShare && r.CPUShare <= r.Disk && r.Disk <= limit) {
			t.Fatalf("row %s violates device ≤ cpu_local ≤ cpu_share ≤ disk ≤ %d: %+v", r.ID, limit, r)
		}
		if r.LongestMatched != r.Disk {
			t.Fatalf("row %s: longest_matched %d != disk %d", r.ID, r.LongestMatched, r.Disk)
		}
		for m, v := range r.Media {
			if v < 0 || v > r.Disk {
				t.Fatalf("row %s: medium %d prefix %d outside 0..disk %d", r.ID, m, v, r.Disk)
			}
		}
		for _, rk := range r.Ranks {
			if !(0 <= rk.Device && rk.Device <= rk.CPULocal && rk.CPULocal <= rk.CPUShare && rk.CPUShare <= rk.Disk && rk.Disk <= limit) {
				t.Fatalf("row %s rank %d violates ordering: %+v", r.ID, rk.Rank, rk)
			}
		}
	}
}
