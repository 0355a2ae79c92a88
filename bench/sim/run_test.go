package sim

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/hash"
)

// smokeGroups is a small fleet of every dialect, tiers small enough that the
// workload evicts and offloads all the way down, and a shared store.
func smokeGroups(t *testing.T) []*Group {
	t.Helper()
	cfgs := []GroupConfig{
		{Model: "smoke-vllm", Policy: CacheAware, StoreBlocks: 600, StepTokens: 512, Engines: []EngineConfig{
			{ID: "vllm-a", Dialect: VLLMMap, Ranks: 2, Device: 160, Host: 160, Disk: 320},
			{ID: "vllm-b", Dialect: VLLMArray, Device: 200, Disk: 200, ClearEvery: 25},
		}},
		{Model: "smoke-vllm-pickle", BlockSize: 64, Policy: Random, Profile: hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256", PythonHashSeed: "42", IndexProjection: "low64_be"},
			Engines: []EngineConfig{{ID: "vllm-c", Dialect: VLLMMap, Device: 60, Host: 60}}},
		{Model: "smoke-vllm-xxhash", Policy: CacheAware, Profile: hash.Spec{Strategy: "vllm_v1", Algorithm: "xxhash", PythonHashSeed: "0", IndexProjection: "low64_be"},
			Engines: []EngineConfig{{ID: "vllm-x", Dialect: VLLMArray, Device: 120, Host: 120}}},
		{Model: "smoke-vllm-xxhash-cbor", BlockSize: 32, Policy: Random, Profile: hash.Spec{Strategy: "vllm_v1", Algorithm: "xxhash_cbor", PythonHashSeed: "7", IndexProjection: "low64_be"},
			Engines: []EngineConfig{{ID: "vllm-y", Dialect: VLLMMap, Device: 100, Disk: 100}}},
		{Model: "smoke-sglang", Policy: RoundRobin, Profile: hash.Spec{Strategy: "sglang", Algorithm: "sha256_raw", PythonHashSeed: "0", IndexProjection: "first64_be"},
			Engines: []EngineConfig{{ID: "sgl-a", Dialect: SGLangMap, Device: 200, Host: 200}, {ID: "sgl-b", Dialect: SGLangArray, Device: 200, Disk: 100, ClearEvery: 20}}},
		// Re-hash mode: vLLM engines registered without a hash_profile (xxh3
		// context) publish their sha256_cbor hashes; conductor re-hashes.
		{Model: "smoke-rehash", Policy: CacheAware, StoreBlocks: 400, Profile: hash.Spec{Strategy: "xxh3"}, EngineProfile: cborSpec,
			Engines: []EngineConfig{{ID: "rh-a", Dialect: VLLMMap, Ranks: 2, Device: 150, Host: 150, Disk: 200, ClearEvery: 30},
				{ID: "rh-b", Dialect: VLLMArray, Device: 200, Disk: 150}}},
		{Model: "smoke-std", Policy: CacheAware, Profile: hash.Spec{Strategy: "xxh3"},
			Engines: []EngineConfig{{ID: "std-a", Dialect: Standard, Ranks: 2, Device: 200, Host: 100, Disk: 100, ClearEvery: 15}}},
	}
	var gs []*Group
	for i, c := range cfgs {
		c.Seed = uint64(i)
		g, err := NewGroup(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(g.Close)
		gs = append(gs, g)
	}
	return gs
}

func smokeSource() Source {
	return SyntheticSource{NewSynthetic(SyntheticOptions{Seed: 7, SystemPrompts: 4, SystemTokens: 512, Conversations: 12,
		TurnTokens: 128, AnswerTokens: 64})}
}

// TestRunVerifySmoke is the harness smoke run of `make test`: every dialect
// into a real (in-process) conductor over ZMQ, queries during ingest, and
// every checked answer equal to the simulator's ground truth.
func TestRunVerifySmoke(t *testing.T) {
	addr := startConductor(t)
	groups := smokeGroups(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, RunOptions{Addr: addr, Groups: groups, Source: smokeSource(), Requests: 120,
		Concurrency: 2, QueryOnly: 500 * time.Millisecond, Verify: true, VerifyEvery: 40, VerifySample: 24,
		QuiesceTimeout: 20 * time.Second})
	if err != nil {
		if rep != nil {
			t.Logf("verify: %+v", rep.Verify)
		}
		t.Fatal(err)
	}
	if rep.Verify.Checked < 4*24*5 || rep.Verify.Mismatches != 0 || rep.Verify.Points != 4 {
		t.Fatalf("verify = %+v", rep.Verify)
	}
	if rep.Mixed.Requests == 0 || rep.Mixed.Errors != 0 || rep.QueryOnly.Requests == 0 || rep.QueryOnly.Errors != 0 {
		t.Fatalf("query phases: mixed %+v, query-only %+v", rep.Mixed.LoadResult, rep.QueryOnly.LoadResult)
	}
	// The workload exercised every tier: something was evicted and offloaded.
	var tiers [numTiers]int
	var removed, cleared int64
	for _, g := range groups {
		for i, n := range g.TierBlocks() {
			tiers[i] += n
		}
		removed += g.Stats.Removed
		cleared += g.Stats.Cleared
	}
	if cleared == 0 {
		t.Error("no AllBlocksCleared: the smoke run does not exercise clears")
	}
	for i, n := range tiers {
		if n == 0 {
			t.Errorf("tier %s holds nothing at the end", TierNames[i])
		}
	}
	if removed == 0 {
		t.Error("no evictions: the smoke run does not exercise removals")
	}
	var md strings.Builder
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	t.Log(md.String())
}

// TestVerifyDetectsDisagreement changes the simulator's truth behind the
// indexer's back (a device block dropped without a removed event): verify
// mode must then report the request and fail the run.
func TestVerifyDetectsDisagreement(t *testing.T) {
	addr := startConductor(t)
	g, err := NewGroup(GroupConfig{Model: "tamper", Engines: []EngineConfig{{ID: "e", Dialect: VLLMMap, Device: 1000}}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	src := &tamperSource{inner: smokeSource(), g: g, at: 30}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := Run(ctx, RunOptions{Addr: addr, Groups: []*Group{g}, Source: src, Requests: 30, Concurrency: 1,
		QueryOnly: -1, Verify: true, VerifySample: 32, QuiesceTimeout: 20 * time.Second})
	if !errors.Is(err, ErrMismatch) {
		t.Fatalf("err = %v, want ErrMismatch", err)
	}
	if rep.Verify.Mismatches == 0 || len(rep.Verify.Examples) == 0 || !strings.Contains(rep.Verify.Examples[0], "instance e") {
		t.Fatalf("verify = %+v", rep.Verify)
	}
}

// tamperSource, before the last request (at), makes the simulator forget
// every device block without publishing removals: the indexer still holds
// them, so answers for earlier prompts disagree with the truth.
type tamperSource struct {
	inner Source
	g     *Group
	at, n int
}

func (s *tamperSource) Next() ([]int32, bool) {
	s.n++
	if s.n == s.at {
		dev := s.g.engines[0].ranks[0].tiers[tierDevice]
		for _, k := range dev.keys(nil) {
			dev.remove(k)
		}
	}
	return s.inner.Next()
}

// verifySurface runs a short verified workload of cfg against the surface at
// qaddr (addr for registrations and quiescing) and asserts 100% agreement.
func verifySurface(t *testing.T, addr, qaddr, surface string, cfg GroupConfig) {
	t.Helper()
	g, err := NewGroup(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := Run(ctx, RunOptions{Addr: addr, QueryAddr: qaddr, Surface: surface, Groups: []*Group{g}, Source: smokeSource(),
		Requests: 60, Concurrency: 2, QueryRate: 500, QueryOnly: 300 * time.Millisecond, Verify: true, VerifyEvery: 30,
		VerifySample: 16, QuiesceTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Verify.Mismatches != 0 || rep.Verify.Checked < 3*16 || rep.QueryOnly.Requests == 0 || rep.QueryOnly.Errors != 0 {
		t.Fatalf("verify %+v, query-only %+v", rep.Verify, rep.QueryOnly.LoadResult)
	}
}

// TestRunVerifyJSONSurface: the same check through the JSON dialect (its
// cumulative lowercase fields), with the load in open loop.
func TestRunVerifyJSONSurface(t *testing.T) {
	addr := startConductor(t)
	verifySurface(t, addr, "", "json", GroupConfig{Model: "smoke-json", Policy: CacheAware, StoreBlocks: 300, Engines: []EngineConfig{
		{ID: "j-a", Dialect: SGLangArray, Ranks: 2, Device: 120, Host: 120}, {ID: "j-b", Dialect: SGLangMap, Device: 100, Disk: 100}},
		Profile: hash.Spec{Strategy: "sglang", Algorithm: "sha256_raw", PythonHashSeed: "0", IndexProjection: "first64_be"}})
}

// TestRunVerifyRPCSurface: the same exact checks through the Python client's
// RPC surface (msgpack request, {"ret", "hits"} answer).
func TestRunVerifyRPCSurface(t *testing.T) {
	addr, rpcAddr := startConductorRPC(t)
	verifySurface(t, addr, rpcAddr, "rpc", GroupConfig{Model: "smoke-rpc", Policy: RoundRobin, Engines: []EngineConfig{
		{ID: "r-a", Dialect: VLLMMap, Ranks: 2, Device: 120, Host: 120}, {ID: "r-b", Dialect: VLLMArray, Device: 100, Disk: 100}},
		Profile: hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256_cbor", PythonHashSeed: "0", IndexProjection: "low64_be"}})
}

// TestRunVerifyDynamoSurface: workers registered through the Dynamo port
// (numeric ids, xxh3) and every answer of its /query checked against the
// ground truth projected onto what Dynamo reports (gpu, cpu, disk, dp).
func TestRunVerifyDynamoSurface(t *testing.T) {
	addr, dynAddr := startConductorDynamo(t)
	verifySurface(t, addr, dynAddr, "dynamo", GroupConfig{Model: "smoke-dyn", Policy: RoundRobin, Engines: []EngineConfig{
		{ID: "11", Dialect: VLLMMap, Ranks: 2, Device: 120, Host: 120}, {ID: "12", Dialect: VLLMArray, Device: 100, Disk: 100}},
		Profile: hash.Spec{Strategy: "xxh3"}})
}
