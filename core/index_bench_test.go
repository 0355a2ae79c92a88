package core

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/seed-c7a81618/conductor/hash"
)

// BenchmarkApply measures single-writer apply throughput with 16-block
// batches. "store" files fresh hashes (the index grows; it is rebuilt every 1M
// blocks); "store+remove" keeps ~64k blocks resident by removing each batch
// 4096 batches later and counts both kinds of block update (the mixed row: the
// apply target of ≥ 10 M block updates/s is set against it). "hot64k/store" and
// "hot64k/remove" split that mixed workload into its halves over the same
// 64k-key hot set, each timing one kind of update only (see benchApplyHot).
func BenchmarkApply(b *testing.B) {
	const per = 16
	for _, hint := range []int{0, 1 << 20} {
		b.Run(fmt.Sprintf("store/sizehint=%d", hint), func(b *testing.B) {
			ix := New(Options{ContextSizeHint: hint})
			s := mustRegister(b, ix, engineReg(b, "a", 0, cborProfile(b)))
			st := stored("GPU", seq(per)...)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if i%(1<<16) == 0 && i > 0 {
					b.StopTimer()
					ix = New(Options{ContextSizeHint: hint})
					s = mustRegister(b, ix, engineReg(b, "a", 0, cborProfile(b)))
					b.StartTimer()
				}
				h := st.Events[0].Hashes
				for j := range h {
					h[j] = uint64(i*per+j)*0x9E3779B97F4A7C15 + 1
				}
				s.Apply(st)
			}
			b.ReportMetric(float64(b.N*per)/b.Elapsed().Seconds(), "blocks/s")
		})
	}
	b.Run("store+remove", func(b *testing.B) {
		ix := New(Options{})
		s := mustRegister(b, ix, engineReg(b, "a", 0, cborProfile(b)))
		st, rm := stored("GPU", seq(per)...), removed("GPU", seq(per)...)
		b.ReportAllocs()
		ops := 0
		for i := 0; i < b.N; i++ {
			base := uint64(i%4096) * per
			h := st.Events[0].Hashes
			for j := range h {
				h[j] = base + uint64(j)
			}
			if i >= 4096 {
				r := rm.Events[0].Hashes
				copy(r, h)
				s.Apply(rm)
				ops += per
			}
			s.Apply(st)
			ops += per
		}
		b.ReportMetric(float64(ops)/b.Elapsed().Seconds(), "block-updates/s")
	})
	b.Run("hot64k/store", func(b *testing.B) { benchApplyHot(b, true) })
	b.Run("hot64k/remove", func(b *testing.B) { benchApplyHot(b, false) })
}

// benchApplyHot times one kind of block update over store+remove's hot set:
// 4096 batches of 16 blocks (65,536 keys) that cycle through the index. With
// timeStores, each op stores one batch whose keys are absent, and after every
// 4096 ops the whole window is removed with the timer stopped; otherwise each
// op removes one resident batch and the window is re-stored untimed. A window
// is stored and removed once before timing, so the context map has reached
// its 64k size (maps are grow-only) as in the mixed run's steady state.
// Reports blocks/s of the timed kind.
func benchApplyHot(b *testing.B, timeStores bool) {
	const per, window = 16, 4096
	ix := New(Options{})
	s := mustRegister(b, ix, engineReg(b, "a", 0, cborProfile(b)))
	st, rm := stored("GPU", seq(per)...), removed("GPU", seq(per)...)
	fill := func(ev *Batch, w int) {
		h := ev.Events[0].Hashes
		for j := range h {
			h[j] = uint64(w*per+j) + 1
		}
	}
	all := func(ev *Batch) { // the whole window, untimed
		for w := 0; w < window; w++ {
			fill(ev, w)
			s.Apply(ev)
		}
	}
	all(st)
	if timeStores {
		all(rm)
	}
	timed, other := rm, st
	if timeStores {
		timed, other = st, rm
	}
	b.ReportAllocs()
	b.ResetTimer()
	changed := 0
	for i := 0; i < b.N; i++ {
		w := i % window
		if w == 0 && i > 0 {
			b.StopTimer()
			all(other)
			b.StartTimer()
		}
		fill(timed, w)
		changed += s.Apply(timed).Blocks
	}
	b.StopTimer()
	if changed != b.N*per { // every timed update must store an absent key or remove a held one
		b.Fatalf("%d of %d block updates changed the index", changed, b.N*per)
	}
	b.ReportMetric(float64(b.N*per)/b.Elapsed().Seconds(), "blocks/s")
}

// BenchmarkApplyMutexMap is the baseline: a plain map under one mutex with
// the same owner-word updates.
func BenchmarkApplyMutexMap(b *testing.B) {
	var mu sync.Mutex
	m := make(map[uint64]blockVal)
	const per = 16
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		base := uint64(i%4096) * per
		mu.Lock()
		for j := uint64(0); j < per; j++ {
			m[base+j], _ = m[base+j].withAdded(1, TierDevice, 1)
		}
		mu.Unlock()
	}
	b.ReportMetric(float64(b.N*per)/b.Elapsed().Seconds(), "blocks/s")
}

func benchIndex(b testing.TB, p hash.Profile, instances, hitBlocks int, tokens []int32) *Index {
	ix := New(Options{})
	var keys []uint64
	var err error
	if p.Strategy == hash.StrategyXXH3 {
		keys = hash.AppendXXH3Chain(nil, hash.XXH3NamespaceSeed(p.XXH3Seed, nil, nil), 0, false, tokens, testBS)
	} else if keys, err = hash.AppendChain(nil, &p, tokens, testBS, nil, nil); err != nil {
		b.Fatal(err)
	}
	if hitBlocks > len(keys) {
		hitBlocks = len(keys)
	}
	for i := 0; i < instances; i++ {
		r := engineReg(b, fmt.Sprintf("inst-%03d", i), 0, p)
		r.ProfileExplicit = p.Strategy != hash.StrategyXXH3
		if p.Strategy == hash.StrategyXXH3 {
			r.Type = PublisherStandard // events carry standard seq hashes
		}
		s := mustRegister(b, ix, r)
		for lo := 0; lo < hitBlocks; lo += 256 {
			s.Apply(stored("GPU", keys[lo:min(lo+256, hitBlocks)]...))
		}
	}
	return ix
}

// BenchmarkQuery: full-hit token queries (131k: first 512 blocks hit) per
// profile and instance count; reports ns per matched block.
func BenchmarkQuery(b *testing.B) {
	cbor, _ := hash.Resolve(hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256_cbor", PythonHashSeed: "0", IndexProjection: "low64_be"})
	for _, prof := range []struct {
		name string
		p    hash.Profile
	}{{"xxh3", hash.DefaultProfile()}, {"sha256_cbor", cbor}} {
		for _, n := range []int{1024, 8192, 131072} {
			tokens := make([]int32, n)
			for i := range tokens {
				tokens[i] = int32(i*31 + 7)
			}
			hit := n / testBS
			if n == 131072 {
				hit = 512
			}
			for _, inst := range []int{1, 8, 64, 1000} {
				b.Run(fmt.Sprintf("%s/tokens=%d/instances=%d", prof.name, n, inst), func(b *testing.B) {
					ix := benchIndex(b, prof.p, inst, hit, tokens)
					res := &QueryResult{}
					req := &QueryRequest{Model: "m", BlockSize: testBS, Tokens: tokens}
					if err := ix.Query(req, res); err != nil || len(res.Instances) != inst || res.Instances[0].Device != int64(hit*testBS) {
						b.Fatalf("setup: %v %+v", err, res.Instances[:min(1, len(res.Instances))])
					}
					b.ReportAllocs()
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						_ = ix.Query(req, res)
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*hit), "ns/block")
				})
			}
		}
	}
}

// BenchmarkMemoryPerHolding reports live heap bytes per block after
// inserting N blocks of one engine. profile=cbor: a vLLM engine whose hashes
// are the index keys; profile=xxh3: a vLLM engine under the default profile,
// whose blocks are re-hashed from their tokens, so its context also keeps
// the engine map (engine hash → key); salted: the same with a registration
// salt, so every block is filed in a salted namespace; tiers=2: every block
// is also stored on CPU (an offloading engine: two holdings per block, and
// the engine hash counted twice). Run with -benchtime=1x:
//
//	go test -run '^$' -bench BenchmarkMemoryPerHolding -benchtime 1x ./core/
func BenchmarkMemoryPerHolding(b *testing.B) {
	for _, c := range []struct {
		prof  string
		tiers int
	}{{"cbor", 1}, {"xxh3", 1}, {"xxh3", 2}, {"salted", 1}} {
		for _, n := range []int{1 << 20, 10 << 20} {
			b.Run(fmt.Sprintf("profile=%s/tiers=%d/blocks=%d", c.prof, c.tiers, n), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					var before, after runtime.MemStats
					runtime.GC()
					runtime.ReadMemStats(&before)
					ix := New(Options{})
					p := cborProfile(b)
					if c.prof != "cbor" {
						p = hash.DefaultProfile()
					}
					r := engineReg(b, "a", 0, p)
					if c.prof == "salted" {
						r.AdditionalSalt = "tenant-a"
					}
					s := mustRegister(b, ix, r)
					batch := stored("GPU", seq(256)...)
					ev := &batch.Events[0]
					h := ev.Hashes
					for lo := 0; lo < n; lo += 256 {
						for j := range h {
							h[j] = uint64(lo+j)*0x9E3779B97F4A7C15 + 1
						}
						if c.prof != "cbor" {
							ev.Tokens, ev.HasTokens = ev.Tokens[:0], true
							for t := 0; t < 256*testBS; t++ {
								ev.Tokens = append(ev.Tokens, int32(lo*testBS+t))
							}
						}
						ev.Medium = []byte("GPU")
						s.Apply(batch)
						if c.tiers == 2 {
							ev.Medium = []byte("CPU")
							s.Apply(batch)
						}
					}
					runtime.GC()
					runtime.ReadMemStats(&after)
					if tb := ix.TierBlocks(); tb[TierDevice] != n || c.tiers == 2 && tb[TierCPULocal] != n {
						b.Fatalf("index holds %v blocks per tier, want %d on %d tiers", tb, n, c.tiers)
					}
					b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "B/block")
					runtime.KeepAlive(ix)
				}
			})
		}
	}
}

// benchContextBlocks is the context size of the benchmarks that take one:
// $CONDUCTOR_BENCH_CONTEXT_BLOCKS, default 1M.
func benchContextBlocks(b *testing.B) int {
	v := os.Getenv("CONDUCTOR_BENCH_CONTEXT_BLOCKS")
	if v == "" {
		return 1 << 20
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// BenchmarkClearOwner measures one engine reset (AllBlocksCleared) of a
// subscription holding 1k blocks in a context that other owners fill with
// CONDUCTOR_BENCH_CONTEXT_BLOCKS blocks (default 1M; the figure in
// BENCHMARKS.md was also taken at 10M). Each iteration stores the 1k blocks
// (timer stopped) and clears them (timed): the clear visits the owner's own
// key set, so its cost does not grow with the context.
func BenchmarkClearOwner(b *testing.B) {
	n := benchContextBlocks(b)
	ix := New(Options{ContextSizeHint: n + 4096})
	big := mustRegister(b, ix, engineReg(b, "big", 0, cborProfile(b)))
	const per = 1024
	st := stored("GPU", seq(per)...)
	for i := 0; i < n; i += per {
		h := st.Events[0].Hashes
		for j := range h {
			h[j] = uint64(i+j)*0x9E3779B97F4A7C15 + 1
		}
		big.Apply(st)
	}
	small := mustRegister(b, ix, engineReg(b, "small", 0, cborProfile(b)))
	mine := stored("GPU", seq(per)...)
	for j := range mine.Events[0].Hashes {
		mine.Events[0].Hashes[j] = uint64(j) | 1<<63
	}
	clr := cleared()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		small.Apply(mine)
		b.StartTimer()
		if st := small.Apply(clr); st.Cleared != 1 {
			b.Fatalf("clear: %+v", st)
		}
	}
	b.StopTimer()
	if got := ix.contexts.Size(); got != 1 {
		b.Fatalf("contexts %d", got)
	}
	res := queryHashes(b, ix, "small", mine.Events[0].Hashes[0])
	if r := row(res, "small"); r == nil || r.LongestMatched != 0 {
		b.Fatalf("small still holds blocks: %+v", r)
	}
	b.ReportMetric(float64(n), "context-blocks")
}

// holdingCounter is a StreamVisitor that counts holdings.
type holdingCounter struct{ n int }

func (c *holdingCounter) Stream(*StreamInfo) error    { return nil }
func (c *holdingCounter) Holding(*Holding) error      { c.n++; return nil }
func (c *holdingCounter) Engine(*EngineEntry) error   { return nil }
func (c *holdingCounter) EndStream(*StreamInfo) error { return nil }

// BenchmarkDumpWalk compares the two ways of writing a section
// (dumpSection.byKeys), a walk of every block of the context or lookups of
// the owners' key sets, for one context of n blocks
// (CONDUCTOR_BENCH_CONTEXT_BLOCKS, default 1M) held by 1, 2 and 256
// engines, each its own share: time per holding of the whole dump, with no
// JSON (a counting visitor).
func BenchmarkDumpWalk(b *testing.B) {
	n := benchContextBlocks(b)
	for _, k := range []int{1, 2, 256} {
		ix := New(Options{ContextSizeHint: n})
		const per = 1024
		st := stored("GPU", seq(per)...)
		h := uint64(0)
		for e := range k {
			s := mustRegister(b, ix, engineReg(b, fmt.Sprintf("e%d", e), 0, cborProfile(b)))
			for i := 0; i < n/k; i += per {
				hs := st.Events[0].Hashes[:min(per, n/k-i)]
				for j := range hs {
					h++
					hs[j] = h * 0x9E3779B97F4A7C15
				}
				st.Events[0].Hashes = hs
				s.Apply(st)
				st.Events[0].Hashes = st.Events[0].Hashes[:per]
			}
		}
		for _, walk := range []struct {
			name string
			w    int
		}{{"range", dumpWalkRange}, {"keys", dumpWalkKeys}} {
			b.Run(fmt.Sprintf("streams=%d/walk=%s", k, walk.name), func(b *testing.B) {
				defer func(w int) { dumpWalk = w }(dumpWalk)
				dumpWalk = walk.w
				var c holdingCounter
				b.ResetTimer()
				for range b.N {
					c.n = 0
					if err := ix.DumpStreams(nil, &c); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				if c.n != n/k*k {
					b.Fatalf("%d holdings, want %d", c.n, n/k*k)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(c.n), "ns/holding")
			})
		}
	}
}
