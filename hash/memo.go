package hash

import (
	"crypto/rand"
	"encoding/binary"
	"math/bits"
	"sync/atomic"

	"github.com/zeebo/xxh3"
)

// DefaultMemoBytes is the memory bound of a Memo when the caller has no better
// figure: 64 MiB, about one million block digests (16 M prompt tokens at B = 16).
// conductor runs without a memo unless --hash-memo-bytes asks for one: behind a
// large index a probe costs about what the SHA-256 it saves does.
const DefaultMemoBytes = 64 << 20

// Memo geometry: a slot is one 64-byte cache line; a bucket is memoWays slots.
const (
	memoWays     = 4
	memoSlotSize = 64
	// MinMemoBytes is the smallest useful bound: one bucket.
	MinMemoBytes = memoWays * memoSlotSize
)

// memoTagDomain separates memo tag inputs from anything else the seed hashes.
const memoTagDomain = "conductor.hash.memo.v1\x00"

// Memo is a bounded, shared cache of SHA-256 block digests for the vllm_v1
// (sha256, sha256_cbor) and sglang profiles. A repeated prompt prefix then
// costs one XXH3-128 and a table probe per block instead of an encode and a
// SHA-256. Chains under xxh3 and the vllm_v1 xxhash algorithms never use it:
// their per-block hash is cheaper than a probe and a store (memoServes).
//
// # Keys
//
// The key of block i of a prompt is a rolling, keyed 128-bit hash of the whole
// prefix up to and including block i:
//
//	k_tag = XXH3-128_s(domain, strategy, algorithm, root digest, seed text, B, lora, salt)
//	k_i   = XXH3-128_s(k_{i-1} || u32le tokens of block i)      (k_{-1} = k_tag)
//
// where s is a per-process random seed from crypto/rand, so nobody can search for
// colliding prompts offline. The tag covers everything a digest depends on
// besides the tokens (the context's namespace: profile, root digest and its seed
// text, block size, LoRA, salt), the token bytes are hashed verbatim (a partial
// final block is shorter, and XXH3 mixes the length), and the chain makes k_i
// depend on every earlier block, exactly as digest_i does. Keys never depend on
// memoised values, so a wrong digest can only come from a 128-bit collision of
// the keyed hash, not from a torn or stale entry.
//
// # Table and concurrency protocol
//
// The table is set-associative: 2^n buckets of memoWays slots, one cache line
// each, bucket = low bits of the key. Each slot holds the full 128-bit key and
// the 32-byte digest as typed atomics, guarded by a per-slot sequence number
// (a seqlock without a lock: nobody ever waits). seq == 0: empty; odd: a writer
// is filling the slot; even > 0: valid. seq only grows.
//
// put publishes a digest in four steps:
//
//  1. Load seq; if it is odd, give up: another writer owns the slot.
//  2. CompareAndSwap seq from even to odd. This claims the slot; on failure
//     give up (another writer claimed it first; a memo may drop an insert).
//  3. Store the key words, then the digest words.
//  4. Store seq+2: the slot is valid again, now holding the new entry.
//
// get reads a slot in four steps:
//
//  1. Load seq; skip the slot if it is 0 or odd.
//  2. Load the key words; skip the slot if they are not the key sought.
//  3. Load the digest words.
//  4. Load seq again: equal to step 1's value means a hit, anything else a
//     miss (the slot was claimed meanwhile; no retry).
//
// get's loads and put's steps 1 and 2 are sync/atomic operations; steps 3
// and 4 are memoFill. On amd64 memoFill is seven plain stores in one assembly
// routine (memofill_amd64.go states why that is a correct publication there:
// stores are ordered by the hardware and the compiler cannot move them); on
// other architectures it is seven atomic stores (memofill_other.go), which
// the Go memory model orders. Either way a reader whose two seq loads return
// the same even value s saw no writer's step 2 between them (seq would have
// moved past s and never returns), so the words it loaded are those stored
// before the step 4 that wrote s, all of one entry: key and digest belong
// together. A torn read is reported as a miss, never returned. Every build
// runs the same code, -race included: TestMemoConcurrentExact and
// TestMemoSlotProtocol check the protocol under the race detector.
//
// Cost: get's atomic loads are plain MOVs on amd64; put pays one LOCK
// CMPXCHG. Atomic stores in step 3 would add a full fence (XCHG) per word,
// about 45 ns a put on a 2-vCPU Xeon (BenchmarkMemoSlot/put), which is why
// amd64 stores plainly.
//
// Replacement is random within the bucket: an empty slot if any, else the
// way a caller-supplied hint picks; replacing a valid entry counts as an
// eviction. The bound is exact: the table is allocated once and never grows.
//
// Counters (hits, misses, evictions) are batched per Chain and added once per
// query, so the hot path touches no shared counter line.
//
// A Memo is safe for concurrent use. A nil *Memo means "off".
type Memo struct {
	seed  uint64
	mask  uint64 // buckets - 1
	slots []memoSlot
	// sec holds XXH3's default-secret words 0..11 with the seed added (even
	// words) or subtracted (odd words), as XXH3-128 applies it to inputs of
	// 17-128 bytes: memoRoll16's precomputed secret.
	sec [12]uint64

	hits      paddedCounter
	misses    paddedCounter
	evictions paddedCounter

	prompts *promptCache // the recent-prompt level (memoprompt.go); nil when off
}

// memoSlot is one cache line: seq, key, digest (7 words) and padding.
type memoSlot struct {
	seq atomic.Uint64
	k   [2]atomic.Uint64
	d   [4]atomic.Uint64
	_   [8]byte
}

// paddedCounter keeps each counter on its own cache line.
type paddedCounter struct {
	atomic.Uint64
	_ [56]byte
}

// MemoStats is a snapshot of a Memo's counters (monotonic since NewMemo).
// Hits counts blocks answered without SHA-256 (from the digest table or a
// recent prompt), Misses blocks hashed, Evictions digests replaced.
type MemoStats struct {
	Hits, Misses, Evictions uint64
	Slots                   int // capacity in block digests
	Bytes                   int // table memory

	// The recent-prompt level (all zero when it is off): PromptHits is the
	// part of Hits served from a stored prompt; PromptAdmissions and
	// PromptEvictions count entries stored and dropped; PromptBytes is the
	// memory of the stored prompts, at most PromptLimit.
	PromptHits, PromptAdmissions, PromptEvictions uint64
	PromptBytes, PromptLimit                      int
}

// NewMemo returns a memo whose table takes at most maxBytes (rounded down to a
// power-of-two number of buckets, at least MinMemoBytes), or nil when maxBytes
// <= 0 (memo off). The table is allocated and committed at once (huge pages
// where Linux grants them). The per-process key comes from crypto/rand. It has
// no recent-prompt level; see NewMemoWithPrompts.
func NewMemo(maxBytes int) *Memo { return NewMemoWithPrompts(maxBytes, 0) }

// NewMemoWithPrompts is NewMemo plus a recent-prompt level of at most
// promptBytes (0 or less: none; see promptCache): repeated prompts are then
// served by comparing their tokens with a stored copy instead of probing the
// table per block. The level needs the table: nil when maxBytes <= 0.
func NewMemoWithPrompts(maxBytes, promptBytes int) *Memo {
	if maxBytes <= 0 {
		return nil
	}
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails on supported platforms (Go 1.24+ crashes instead)
	m := newMemoSeed(maxBytes, binary.LittleEndian.Uint64(b[:]))
	m.prompts = newPromptCache(promptBytes)
	return m
}

func newMemoSeed(maxBytes int, seed uint64) *Memo {
	buckets := floorPow2(max(maxBytes/(memoWays*memoSlotSize), 1))
	m := &Memo{
		seed:  seed,
		mask:  uint64(buckets - 1),
		slots: make([]memoSlot, buckets*memoWays),
	}
	for i, k := range xxh3Secret {
		if i%2 == 0 {
			m.sec[i] = k + seed
		} else {
			m.sec[i] = k - seed
		}
	}
	adviseHuge(m.slots)
	// Commit the table now, one store per 4 KiB page, so that the first
	// queries do not pay a page fault per new bucket (the bound is the
	// resident size from the start, not a ceiling reached later).
	for i := 0; i < len(m.slots); i += 4096 / memoSlotSize {
		m.slots[i].seq.Store(0)
	}
	return m
}

// Stats returns the counters. Counts of queries in flight are added when they end.
func (m *Memo) Stats() MemoStats {
	if m == nil {
		return MemoStats{}
	}
	st := MemoStats{
		Hits:      m.hits.Load(),
		Misses:    m.misses.Load(),
		Evictions: m.evictions.Load(),
		Slots:     len(m.slots),
		Bytes:     len(m.slots) * memoSlotSize,
	}
	if pc := m.prompts; pc != nil {
		st.PromptHits, st.PromptAdmissions, st.PromptEvictions = pc.hits.Load(), pc.admissions.Load(), pc.evictions.Load()
		st.PromptBytes, st.PromptLimit = int(pc.used.Load()), int(pc.budget)
	}
	return st
}

func (m *Memo) addStats(hits, misses, evictions uint32) {
	if hits != 0 {
		m.hits.Add(uint64(hits))
	}
	if misses != 0 {
		m.misses.Add(uint64(misses))
	}
	if evictions != 0 {
		m.evictions.Add(uint64(evictions))
	}
}

// bucket returns the memoWays slots key k maps to.
func (m *Memo) bucket(k xxh3.Uint128) []memoSlot {
	i := (k.Lo & m.mask) * memoWays
	return m.slots[i : i+memoWays : i+memoWays]
}

// get copies the digest stored under k into *dst and reports whether it was
// there; on a miss *dst is unchanged.
func (m *Memo) get(k xxh3.Uint128, dst *[32]byte) bool {
	b := m.bucket(k)
	for w := range b {
		// The read steps of Memo's protocol: 1 and 2 (seq, key), 3
		// (digest), 4 (seq again).
		s := &b[w]
		seq := s.seq.Load()
		if seq == 0 || seq&1 != 0 || s.k[0].Load() != k.Lo || s.k[1].Load() != k.Hi {
			continue
		}
		d0, d1, d2, d3 := s.d[0].Load(), s.d[1].Load(), s.d[2].Load(), s.d[3].Load()
		if s.seq.Load() != seq {
			return false // claimed while we read: a miss
		}
		binary.LittleEndian.PutUint64(dst[0:], d0)
		binary.LittleEndian.PutUint64(dst[8:], d1)
		binary.LittleEndian.PutUint64(dst[16:], d2)
		binary.LittleEndian.PutUint64(dst[24:], d3)
		return true
	}
	return false
}

// put stores d under k, replacing an empty slot or the way hint selects. It
// reports whether a valid entry was evicted. A slot being written by another
// goroutine is left alone (the insert is dropped).
func (m *Memo) put(k xxh3.Uint128, d *[32]byte, hint uint32) (evicted bool) {
	b := m.bucket(k)
	victim := -1
	for w := range b {
		seq := b[w].seq.Load()
		if seq == 0 {
			if victim < 0 {
				victim = w
			}
			continue
		}
		if seq&1 == 0 && b[w].k[0].Load() == k.Lo && b[w].k[1].Load() == k.Hi {
			return false // a concurrent query stored it already
		}
	}
	if victim < 0 {
		victim = int(hint % memoWays)
	}
	// The publication steps of Memo's protocol: 1 and 2 claim the slot.
	s := &b[victim]
	seq := s.seq.Load()
	if seq&1 != 0 || !s.seq.CompareAndSwap(seq, seq+1) {
		return false
	}
	// 3 and 4: the key, then the digest, then publish.
	memoFill(s, k.Lo, k.Hi, binary.LittleEndian.Uint64(d[0:]), binary.LittleEndian.Uint64(d[8:]),
		binary.LittleEndian.Uint64(d[16:]), binary.LittleEndian.Uint64(d[24:]), seq+2)
	return seq != 0
}

// appendMemoTag appends the tag input of a chain: everything a block digest
// depends on besides the prompt's tokens. Variable fields are length-prefixed.
func appendMemoTag(dst []byte, p *Profile, blockSize int, lora, salt []byte) []byte {
	dst = append(dst, memoTagDomain...)
	dst = append(dst, byte(p.Strategy), byte(p.Algorithm), byte(p.Projection))
	dst = append(dst, p.RootDigest[:]...)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(blockSize))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(len(p.Spec.PythonHashSeed)))
	dst = append(dst, p.Spec.PythonHashSeed...)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(len(lora)))
	dst = append(dst, lora...)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(len(salt)))
	return append(dst, salt...)
}

// memoRoll returns the key after prev for a block of tokens: XXH3-128 of the
// previous key (16 bytes LE) and the tokens as u32le, seeded with m.seed. A
// block of 16 tokens (80 bytes, vLLM's default block size) goes through
// memoRoll16 without building the input; other sizes are built in scratch (which
// must have room for 16+4*len(tokens) bytes; Reset sizes the chain's buffer).
func memoRoll(scratch []byte, m *Memo, prev xxh3.Uint128, tokens []int32) xxh3.Uint128 {
	if len(tokens) == 16 {
		return memoRoll16(m, prev, (*[16]int32)(tokens))
	}
	n := 16 + 4*len(tokens)
	b := scratch[:n:n]
	binary.LittleEndian.PutUint64(b[0:], prev.Lo)
	binary.LittleEndian.PutUint64(b[8:], prev.Hi)
	if nativeLE {
		copy(b[16:], tokenBytes(tokens))
	} else {
		appendU32LE(b[16:16], tokens)
	}
	return xxh3.Hash128Seed(b, m.seed)
}

// xxh3Secret is the first 96 bytes of XXH3's default secret (kSecret in the
// XXH3 specification) as little-endian words: all an input of 65-96 bytes reads.
var xxh3Secret = [12]uint64{
	0xbe4ba423396cfeb8, 0x1cad21f72c81017c, 0xdb979083e96dd4de, 0x1f67b3b7a4a44072,
	0x78e5c0cc4ee679cb, 0x2172ffcc7dd05a82, 0x8e2443f7744608b8, 0x4c263a81e69035e0,
	0xcb00c391bb52283c, 0xa32e531b8b65d088, 0x4ef90da297486471, 0xd8acdea946ef1938,
}

// XXH3 primes used by the 17-128-byte path.
const (
	xxPrime1 = 11400714785074694791
	xxPrime2 = 14029467366897019727
	xxPrime4 = 9650029242287828579
)

// memoRoll16 is xxh3.Hash128Seed(le(prev) || u32le(tokens), m.seed) for 16
// tokens, computed from the words in place: XXH3-128's 17-128-byte path
// unrolled for an 80-byte input (three 32-byte mixing rounds over word pairs
// taken from both ends), reading the tokens two per 64-bit word and the
// seeded secret from m.sec. It saves building the 80-byte input and the
// length dispatch. TestMemoRoll16 checks it against xxh3.Hash128Seed.
func memoRoll16(m *Memo, prev xxh3.Uint128, t *[16]int32) xxh3.Uint128 {
	w := func(i int) uint64 { return uint64(uint32(t[2*i])) | uint64(uint32(t[2*i+1]))<<32 }
	// Input words: i0, i1 = prev; token words w0..w7 are input words 2..9.
	i0, i1 := prev.Lo, prev.Hi
	w0, w1, w2, w3, w4, w5, w6, w7 := w(0), w(1), w(2), w(3), w(4), w(5), w(6), w(7)
	sec := &m.sec
	const n = 80 // input length
	lo, hi := uint64(xxPrime1), uint64(0)
	lo *= n
	// len > 64: input words 4, 5 and, from the end, 4, 5 (bytes 32-47 both).
	hi += mulFold(w2^sec[10], w3^sec[11])
	hi ^= w2 + w3
	lo += mulFold(w2^sec[8], w3^sec[9])
	lo ^= w2 + w3
	// len > 32: words 2, 3 and, from the end, bytes 48-63.
	hi += mulFold(w4^sec[6], w5^sec[7])
	hi ^= w0 + w1
	lo += mulFold(w0^sec[4], w1^sec[5])
	lo ^= w4 + w5
	// Words 0, 1 and the last 16 bytes.
	hi += mulFold(w6^sec[2], w7^sec[3])
	hi ^= i0 + i1
	lo += mulFold(i0^sec[0], i1^sec[1])
	lo ^= w6 + w7
	hi, lo = lo*xxPrime1+hi*xxPrime4+(n-m.seed)*xxPrime2, hi+lo
	return xxh3.Uint128{Hi: -xxAvalanche(hi), Lo: xxAvalanche(lo)}
}

// floorPow2 rounds n >= 1 down to a power of two (the memo's bucket counts).
func floorPow2(n int) int { return 1 << (bits.Len(uint(n)) - 1) }

func mulFold(x, y uint64) uint64 {
	hi, lo := bits.Mul64(x, y)
	return hi ^ lo
}

func xxAvalanche(x uint64) uint64 {
	x ^= x >> 37
	x *= 0x165667919e3779f9
	return x ^ x>>32
}
