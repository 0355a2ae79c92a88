package hash

import (
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/zeebo/xxh3"
)

// Benchmarks behind the DESIGN.md budget (sha256_cbor chain <= 130 ns/block at B=16,
// XXH3 chain >= 5 GB/s of token bytes) and behind pickBackend's rule. Run with
//
//	go test -run='^$' -bench=. -benchtime=1s -count=1 ./hash/
//
// Every chain benchmark walks benchBlocks blocks per op and reports ns/block.

const benchBlocks = 64

// benchTokens draws n token ids with a fixed seed from a rough mix of real
// tokenizer output (15% < 256, 60% in [256, 32256), 25% in [32000, 152000)), so the
// encoders' width switches see realistic, unpredictable widths.
func benchTokens(n int) []int32 {
	r := rand.New(rand.NewPCG(1, 2))
	out := make([]int32, n)
	for i := range out {
		switch x := r.IntN(100); {
		case x < 15:
			out[i] = int32(r.IntN(256))
		case x < 75:
			out[i] = int32(256 + r.IntN(32000))
		default:
			out[i] = int32(32000 + r.IntN(120000))
		}
	}
	return out
}

var benchBlockSizes = []int{16, 64, 512}

// reportPerBlock reports wall ns/block and, from cpu0 (processCPU before the
// loop), process CPU ns/block: on a shared machine the latter is the steadier.
func reportPerBlock(b *testing.B, blocks int, cpu0 time.Duration) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(blocks), "ns/block")
	if cpu0 != 0 {
		b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N)/float64(blocks), "cpu-ns/block")
	}
}

// BenchmarkVLLMChain: a full lazy walk (Reset + At(0..n-1)) per op, per algorithm,
// block size and SHA-256 backend (xxhash* have one hasher, XXH3-128), with a
// one-shot baseline that hashes pre-encoded blocks of the same sizes with
// crypto/sha256 or xxh3.Hash128 (the floor: hashing alone, no encoding or
// dispatch).
func BenchmarkVLLMChain(b *testing.B) {
	defer SetBackend("auto")
	for _, algo := range []string{"sha256_cbor", "sha256", "xxhash_cbor", "xxhash"} {
		p := mustResolve(b, Spec{"vllm_v1", algo, "0", "low64_be"})
		xx := p.Algorithm.xxhash()
		hashers, baseline := backends, "baseline_stdlib_sum256"
		if xx {
			hashers, baseline = []string{"xxh3_128"}, "baseline_xxh3_hash128"
		}
		for _, bs := range benchBlockSizes {
			tokens := benchTokens(benchBlocks * bs)
			for _, be := range hashers {
				b.Run(fmt.Sprintf("%s/B=%d/%s", algo, bs, be), func(b *testing.B) {
					if !xx {
						if err := SetBackend(be); err != nil {
							b.Fatal(err)
						}
					}
					var c Chain
					b.ReportAllocs()
					b.SetBytes(int64(4 * len(tokens)))
					cpu0 := processCPU()
					for b.Loop() {
						_ = c.Reset(&p, tokens, bs, nil, nil)
						for i := 0; i < benchBlocks; i++ {
							c.At(i)
						}
					}
					reportPerBlock(b, benchBlocks, cpu0)
				})
			}
			b.Run(fmt.Sprintf("%s/B=%d/%s", algo, bs, baseline), func(b *testing.B) {
				enc := make([][]byte, benchBlocks)
				parent := p.RootDigest[:p.Algorithm.DigestSize()]
				for i := range enc {
					blk := tokens[i*bs : (i+1)*bs]
					if p.Algorithm.cbor() {
						enc[i] = AppendCBORBlock(nil, parent, blk, nil)
					} else {
						enc[i] = AppendPickleBlock(nil, parent, blk, nil)
					}
					if xx {
						parent = xxh128Digest(enc[i])
					} else {
						parent = sha256Digest(enc[i])
					}
				}
				b.ReportAllocs()
				b.SetBytes(int64(4 * len(tokens)))
				cpu0 := processCPU()
				var sink uint64
				for b.Loop() {
					for _, e := range enc {
						if xx {
							sink += xxh3.Hash128(e).Lo
						} else {
							d := sha256.Sum256(e)
							sink += uint64(d[0])
						}
					}
				}
				reportPerBlock(b, benchBlocks, cpu0)
				_ = sink
			})
		}
	}
}

// BenchmarkSGLangChain: the SGLang chains (raw u32le blocks), per backend.
func BenchmarkSGLangChain(b *testing.B) {
	defer SetBackend("auto")
	for _, strat := range []string{"sglang", "sglang_bigram"} {
		p := mustResolve(b, Spec{strat, "sha256_raw", "0", "first64_be"})
		for _, bs := range benchBlockSizes[:2] {
			tokens := benchTokens(benchBlocks*bs + 1)
			for _, be := range backends {
				b.Run(fmt.Sprintf("%s/B=%d/%s", strat, bs, be), func(b *testing.B) {
					if err := SetBackend(be); err != nil {
						b.Fatal(err)
					}
					var c Chain
					b.ReportAllocs()
					cpu0 := processCPU()
					for b.Loop() {
						_ = c.Reset(&p, tokens, bs, nil, nil)
						for i := 0; i < benchBlocks; i++ {
							c.At(i)
						}
					}
					reportPerBlock(b, benchBlocks, cpu0)
				})
			}
		}
	}
}

// BenchmarkXXH3Chain reports MB/s of token bytes: the eager AppendXXH3Chain and the
// lazy Chain walk under the default profile.
func BenchmarkXXH3Chain(b *testing.B) {
	p := DefaultProfile()
	for _, bs := range benchBlockSizes {
		tokens := benchTokens(benchBlocks * bs)
		b.Run(fmt.Sprintf("append/B=%d", bs), func(b *testing.B) {
			dst := make([]uint64, 0, benchBlocks)
			b.ReportAllocs()
			b.SetBytes(int64(4 * len(tokens)))
			cpu0 := processCPU()
			for b.Loop() {
				dst = AppendXXH3Chain(dst[:0], 1337, 0, false, tokens, bs)
			}
			reportPerBlock(b, benchBlocks, cpu0)
		})
		b.Run(fmt.Sprintf("chain/B=%d", bs), func(b *testing.B) {
			var c Chain
			b.ReportAllocs()
			b.SetBytes(int64(4 * len(tokens)))
			cpu0 := processCPU()
			for b.Loop() {
				_ = c.Reset(&p, tokens, bs, nil, nil)
				for i := 0; i < benchBlocks; i++ {
					c.At(i)
				}
			}
			reportPerBlock(b, benchBlocks, cpu0)
		})
	}
}

// BenchmarkSum256 is the single-message measurement pickBackend's rule rests
// on, at the message sizes of vLLM blocks (41 B at B=4, ~85-110 B at B=16,
// ~200 B at B=48).
func BenchmarkSum256(b *testing.B) {
	for _, n := range []int{41, 85, 120, 200, 2100} {
		msg := make([]byte, n, n+sha256PadMax) // room for shani to pad in place
		for _, be := range []backendID{backendStdlib, backendSIMD, backendSHANI} {
			if be == backendSHANI && !haveSHANI {
				continue
			}
			b.Run(fmt.Sprintf("%d/%s", n, be), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(n))
				var d [32]byte
				cpu0 := processCPU()
				for b.Loop() {
					d = sum256(be, msg)
					msg[0] = d[0]
				}
				if cpu0 != 0 {
					b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
				}
			})
		}
	}
}

// BenchmarkEncode: the encoders alone for one B=16 block with LoRA and salt.
func BenchmarkEncode(b *testing.B) {
	tokens := benchTokens(16)
	parent := make([]byte, 32)
	extras := [][]byte{[]byte("adapter-A"), []byte("tenant-salt")}
	buf := make([]byte, 0, 512)
	b.Run("cbor/B=16", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf = AppendCBORBlock(buf[:0], parent, tokens, extras)
		}
	})
	b.Run("pickle/B=16", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf = AppendPickleBlock(buf[:0], parent, tokens, extras)
		}
	})
}

// BenchmarkMemoChain: a full lazy walk of a prompt under each memo-served
// profile (and the xxhash ones, which the memo leaves alone), without the memo, with it on a repeated prompt (every block a hit),
// with it on always-new prompts (every block a miss: the memo's overhead), and
// with recent prompts on a repeated prompt (every block served from it).
// memoBenchBytes sizes the benchmark memo (the production default).
var memoBenchBytes = DefaultMemoBytes

func BenchmarkMemoChain(b *testing.B) {
	const bs = 16
	for _, sp := range []Spec{
		{"vllm_v1", "sha256_cbor", "0", "low64_be"},
		{"sglang", "sha256_raw", "0", "first64_be"},
		// Not served (memoServes): every mode costs what "off" does.
		{"vllm_v1", "xxhash_cbor", "0", "low64_be"},
		{"vllm_v1", "xxhash", "0", "low64_be"},
	} {
		p := mustResolve(b, sp)
		tokens := benchTokens(benchBlocks * bs)
		for _, mode := range []string{"off", "hit", "miss", "prompt"} {
			b.Run(fmt.Sprintf("%s/B=%d/%s", sp.Algorithm, bs, mode), func(b *testing.B) {
				var c Chain
				switch mode {
				case "hit", "miss":
					c.SetMemo(NewMemo(memoBenchBytes))
				case "prompt":
					c.SetMemo(NewMemoWithPrompts(memoBenchBytes, DefaultMemoPromptBytes))
				}
				toks := slices.Clone(tokens)
				b.ReportAllocs()
				b.SetBytes(int64(4 * len(tokens)))
				cpu0 := processCPU()
				for b.Loop() {
					if mode == "miss" {
						toks[0]++ // a new first block makes every key new
					}
					_ = c.Reset(&p, toks, bs, nil, nil)
					for i := 0; i < benchBlocks; i++ {
						c.At(i)
					}
				}
				reportPerBlock(b, benchBlocks, cpu0)
			})
		}
	}
}

// BenchmarkMemoSlot: the digest table alone, no hashing. "get" probes for a
// present key (a hit's cost); "put" stores a new key in a full table (a
// miss's cost after the SHA-256: the bucket scan, the claim, the seven
// atomic stores of the publication and an eviction). 1 MiB table, so both
// measure the protocol rather than cache misses.
func BenchmarkMemoSlot(b *testing.B) {
	m := newMemoSeed(1<<20, 1)
	r := rand.New(rand.NewPCG(3, 4))
	keys := make([]xxh3.Uint128, 4096)
	var d [32]byte
	for i := range keys {
		keys[i] = xxh3.Uint128{Lo: r.Uint64(), Hi: r.Uint64()}
		m.put(keys[i], &d, 0)
	}
	for i := range m.slots { // fill every way, so that every put evicts
		if m.slots[i].seq.Load() == 0 {
			m.slots[i].seq.Store(2)
		}
	}
	b.Run("get", func(b *testing.B) {
		b.ReportAllocs()
		cpu0 := processCPU()
		i := 0
		for b.Loop() {
			m.get(keys[i&(len(keys)-1)], &d)
			i++
		}
		reportPerBlock(b, 1, cpu0)
	})
	b.Run("put", func(b *testing.B) {
		b.ReportAllocs()
		cpu0 := processCPU()
		i := uint64(0)
		for b.Loop() {
			i++
			m.put(xxh3.Uint128{Lo: i * 0x9e3779b97f4a7c15, Hi: i}, &d, uint32(i))
		}
		reportPerBlock(b, 1, cpu0)
	})
}

// BenchmarkEncodeTokens: the token-array encoders alone over 32768 tokens, on
// the mixed-width benchTokens (unpredictable widths) and on a run of 3-byte ids
// (a predictable width), by path (scalar, avx, avx512: those this CPU has).
// Reports ns per token.
func BenchmarkEncodeTokens(b *testing.B) {
	defer restoreIntsPaths()()
	mixed := benchTokens(32768)
	same := make([]int32, len(mixed))
	for i := range same {
		same[i] = int32(1000 + i)
	}
	out := make([]byte, 5*len(mixed)+cborIntSlack)
	for _, tc := range []struct {
		name   string
		tokens []int32
	}{{"mixed", mixed}, {"same-width", same}} {
		for _, enc := range []struct {
			name string
			put  func([]byte, []int32) int
		}{{"cbor", putCBORInts}, {"pickle", putPickleInts}} {
			for _, p := range intsPaths {
				if !p.have {
					continue
				}
				b.Run(enc.name+"/"+tc.name+"/"+p.name, func(b *testing.B) {
					useIntsAVX512, useIntsAVX = p.avx512, p.avx
					b.ReportAllocs()
					cpu0 := processCPU()
					for b.Loop() {
						enc.put(out, tc.tokens)
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(tc.tokens)), "ns/token")
					b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N)/float64(len(tc.tokens)), "cpu-ns/token")
				})
			}
		}
	}
}
